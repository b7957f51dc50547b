"""The build helper: backend choice, cache naming, and an error that says what to do for each failure."""
import os
import time

import pytest
import torch

from helpers import build, env


def test_auto_backend_follows_the_machine():
    expected = "cuda" if env.can_build_cuda() else "cpu"
    assert build.resolve_backend("auto") == expected
    with pytest.raises(build.BuildError, match="backend must be"):
        build.resolve_backend("tpu")


def test_missing_ninja_says_how_to_install_it(monkeypatch):
    import torch.utils.cpp_extension as cpp

    monkeypatch.setattr(cpp, "is_ninja_available", lambda: False)
    with pytest.raises(build.BuildError, match=r"ninja is not installed.*pip install ninja"):
        build.build("selu_naive", backend="cpu")


def test_missing_compiler_says_how_to_install_one(monkeypatch):
    monkeypatch.setattr(env, "cxx_path", lambda: None)
    with pytest.raises(build.BuildError, match=r"No C\+\+ compiler.*apt-get install g\+\+"):
        build.build("selu_naive", backend="cpu")


def test_cpu_only_torch_asked_for_cuda(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(build.BuildError, match=r"CPU-only build.*backend='cpu'"):
        build.build("selu_naive", backend="cuda")


def test_missing_nvcc(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(env, "nvcc_path", lambda: None)
    with pytest.raises(build.BuildError, match=r"nvcc .*was not found.*CUDA_HOME"):
        build.build("selu_naive", backend="cuda")


def test_unknown_kernel_lists_the_known_ones():
    with pytest.raises(build.BuildError, match="selu_naive"):
        build.build("selu_fastest")


def test_stale_lock_is_reported_not_waited_on(tmp_path):
    lock = tmp_path / "lock"
    lock.touch()
    build.check_stale_lock(tmp_path)  # a fresh lock: another build may be running
    old = time.time() - 2 * build.STALE_LOCK_SECONDS
    os.utime(lock, (old, old))
    with pytest.raises(build.BuildError, match=r"interrupted.*delete it"):
        build.check_stale_lock(tmp_path)


def test_extension_name_changes_with_every_source():
    bindings = build.binding_source(("selu",))
    base = build.source_hash(bindings, "kernel v1", "flags")
    assert base == build.source_hash(bindings, "kernel v1", "flags")
    assert base != build.source_hash(bindings, "kernel v2", "flags")
    assert base != build.source_hash(bindings, "kernel v1", "-O0")
    assert base != build.source_hash(build.binding_source(("selu", "selu_out")), "kernel v1", "flags")


def test_bindings_use_the_shared_declarations():
    text = build.binding_source(("selu", "selu_out"))
    assert '#include "selu_ops.h"' in text
    assert 'm.def("selu", &selu_course::selu' in text and "&selu_course::selu_out" in text


def test_relative_paths_hide_this_checkout():
    text = f"error in {env.REPO_ROOT}/kernels/selu_naive.cu:12"
    assert build.relative_paths(text) == "error in kernels/selu_naive.cu:12"


def test_cpu_build_imports_and_is_cached():
    first = build.build("selu_naive", backend="cpu")
    assert first.backend == "cpu"
    x = torch.randn(1000)
    torch.testing.assert_close(first.selu(x), torch.selu(x))
    again = build.build("selu_vectorized", backend="cpu")  # one CPU build serves every kernel
    assert again.extension_name == first.extension_name


def test_mismatched_extern_c_declaration_is_an_import_error_with_advice():
    wrong = 'namespace selu_course { extern "C" torch::Tensor selu(const torch::Tensor& x); }'
    with pytest.raises(build.BuildError, match=r"(?s)undefined symbol: selu\b.*same declaration") as info:
        build.build("selu_naive", backend="cpu", declarations=wrong, functions=("selu",))
    assert str(env.REPO_ROOT) not in str(info.value)


def test_compile_error_is_reported_with_relative_paths():
    broken = '#include "selu_ops.h"\nthis is not C++;'
    with pytest.raises(build.BuildError, match=r"failed\. The compiler said") as info:
        build.build("selu_naive", backend="cpu", declarations=broken, functions=("selu",))
    assert str(env.REPO_ROOT) not in str(info.value)
