"""The build helper (helpers/build.py): backend choice, library naming and caching, the
marked regions of the kernel files, and an error that says what to do for each failure.

The operators' behaviour once loaded is tested in tests/test_ops.py; here, what
``build.load`` does before and around that.
"""
import os
import re
import subprocess
import sys
import time

import pytest
import torch

from helpers import build, env

KERNEL_FILES = sorted(path.name for path in env.KERNELS_DIR.iterdir() if path.suffix in (".cu", ".cpp", ".h", ".cuh"))


def test_auto_backend_follows_the_machine():
    expected = "cuda" if env.can_build_cuda() else "cpu"
    assert build.resolve_backend("auto") == expected
    with pytest.raises(build.BuildError, match="backend must be 'auto', 'cuda' or 'cpu', not 'tpu'"):
        build.load("selu_naive", backend="tpu")


# ----------------------------------------------------------------------------- a missing toolchain


def test_missing_ninja_says_how_to_install_it(monkeypatch):
    import torch.utils.cpp_extension as cpp

    monkeypatch.setattr(cpp, "is_ninja_available", lambda: False)
    with pytest.raises(build.BuildError, match=r"ninja is not installed.*pip install ninja"):
        build.load("selu_naive", backend="cpu")


def test_missing_compiler_says_how_to_install_one(monkeypatch):
    monkeypatch.setattr(env, "cxx_path", lambda: None)
    with pytest.raises(build.BuildError, match=r"No C\+\+ compiler.*apt-get install g\+\+"):
        build.load("selu_naive", backend="cpu")


def test_cpu_only_torch_asked_for_cuda(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(build.BuildError, match=r"CPU-only build.*backend='cpu'"):
        build.load("selu_naive", backend="cuda")


def test_missing_nvcc(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(env, "nvcc_path", lambda: None)
    with pytest.raises(build.BuildError, match=r"nvcc .*was not found.*CUDA_HOME"):
        build.load("selu_naive", backend="cuda")


def test_no_gpu_asked_for_cuda(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(env, "nvcc_path", lambda: "/usr/local/cuda/bin/nvcc")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(build.BuildError, match=r"torch sees no GPU.*backend='cpu'"):
        build.load("selu_naive", backend="cuda")


def test_unknown_kernel_lists_the_known_ones():
    with pytest.raises(build.BuildError, match="Unknown kernel 'selu_fastest'; known kernels: "
                       + ", ".join(build.KERNELS)):
        build.load("selu_fastest")


# ----------------------------------------------------------------------------- a lock left by a killed build


def test_stale_lock_is_reported_not_waited_on(tmp_path):
    lock = tmp_path / "lock"
    lock.touch()
    build.check_stale_lock(tmp_path)  # a fresh lock: another build may be running
    old = time.time() - 2 * build.STALE_LOCK_SECONDS
    os.utime(lock, (old, old))
    with pytest.raises(build.BuildError, match=r"interrupted.*delete it"):
        build.check_stale_lock(tmp_path)


def test_load_fails_fast_on_a_stale_lock(monkeypatch, tmp_path):
    # torch's builder would wait for the lock forever; load must say so instead.
    lock = tmp_path / "lock"
    lock.touch()
    old = time.time() - 2 * build.STALE_LOCK_SECONDS
    os.utime(lock, (old, old))
    monkeypatch.setattr(build, "build_directory", lambda name: tmp_path)
    monkeypatch.setattr(build, "_LOADED", {})  # as in a fresh process: nothing loaded, so a build is due
    with pytest.raises(build.BuildError, match=r"interrupted.*remove_stale_lock") as info:
        build.load("mistakes", backend="cpu")
    assert str(env.REPO_ROOT) not in str(info.value)


def _fake_child_builds(monkeypatch, tmp_path, seconds: float = 0.3, fail: str | None = None) -> list:
    """Child builds that take ``seconds`` and write the mark (or raise for ``fail``), each
    recorded as (source, start, end); build folders under tmp_path, nothing loaded."""
    spans = []

    def child(source_name, device, directory, options):
        start = time.perf_counter()
        if source_name == fail:
            raise build.BuildError(f"Building kernels/{source_name} for {device.upper()} failed.")
        time.sleep(seconds)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / build.REGISTERED_MARK).write_text(options["name"] + "\n")
        spans.append((source_name, start, time.perf_counter()))

    monkeypatch.setattr(build, "build_directory", lambda name: tmp_path / name)
    monkeypatch.setattr(build, "_LOADED", {})
    monkeypatch.setattr(build, "_build_and_register_in_a_child", child)
    return spans


def test_a_kernels_libraries_build_side_by_side(monkeypatch, tmp_path):
    # A kernel's CPU library and its CUDA one compile at once (the CUDA one is the slow
    # one): the two child builds overlap in time, and each reports its seconds.
    spans = _fake_child_builds(monkeypatch, tmp_path)
    jobs = [("selu_cpu.cpp", "cpu", (), ()), ("selu_backward_cpu.cpp", "cpu", (), ())]
    seconds = build._build_side_by_side(jobs, verbose=False)
    assert set(seconds) == {"selu_cpu.cpp", "selu_backward_cpu.cpp"} and min(seconds.values()) >= 0.3
    (_, start_a, end_a), (_, start_b, end_b) = spans
    assert max(start_a, start_b) < min(end_a, end_b), f"the builds ran one after the other: {spans}"
    # Built now (the marks): a second call builds nothing.
    assert build._build_side_by_side(jobs, verbose=False) == {"selu_cpu.cpp": 0.0, "selu_backward_cpu.cpp": 0.0}
    assert len(spans) == 2


def test_a_failed_side_by_side_build_is_reported(monkeypatch, tmp_path):
    _fake_child_builds(monkeypatch, tmp_path, fail="selu_backward_cpu.cpp")
    jobs = [("selu_cpu.cpp", "cpu", (), ()), ("selu_backward_cpu.cpp", "cpu", (), ())]
    with pytest.raises(build.BuildError, match=r"kernels/selu_backward_cpu.cpp for CPU failed"):
        build._build_side_by_side(jobs, verbose=False)


def test_remove_stale_lock(monkeypatch, tmp_path):
    monkeypatch.setattr(build, "EXTENSIONS_DIR", tmp_path)
    (tmp_path / "some_extension").mkdir()
    (tmp_path / "some_extension" / "lock").touch()
    assert build.remove_stale_lock("some_extension") is True
    assert not (tmp_path / "some_extension" / "lock").exists()
    assert build.remove_stale_lock("some_extension") is False


# ----------------------------------------------------------------------------- names, paths, caching


def test_hash_changes_with_every_part():
    base = build.source_hash("kernel v1", "headers", "-O3")
    assert base == build.source_hash("kernel v1", "headers", "-O3")
    assert re.fullmatch(r"[0-9a-f]{12}", base)
    assert base != build.source_hash("kernel v2", "headers", "-O3")
    assert base != build.source_hash("kernel v1", "headers!", "-O3")
    assert base != build.source_hash("kernel v1", "headers", "-O0")
    # The parts are separated: moving text from one part to the next is a change.
    assert build.source_hash("ab", "c") != build.source_hash("a", "bc")


def test_every_header_goes_into_the_hash():
    # A kernel may include any header of kernels/, so all of them are hashed: editing
    # selu_math.cuh rebuilds every kernel.
    headers = {path.name for path in build.kernel_headers()}
    assert headers == {path.name for path in env.KERNELS_DIR.iterdir() if path.suffix in (".h", ".cuh", ".hpp")}
    assert {"selu_math.cuh", "elementwise.h", "selu_checks.h"} <= headers


def test_relative_paths_hide_this_checkout():
    text = f"error in {env.REPO_ROOT}/kernels/selu_naive.cu:12 (built in {env.REPO_ROOT})"
    assert build.relative_paths(text) == "error in kernels/selu_naive.cu:12 (built in .)"


def test_every_kernel_names_existing_sources_and_operators():
    from helpers import ops

    for kernel, spec in build.KERNELS.items():
        sources = [s for s in (spec.cpu_source, spec.cuda_source) if s is not None]
        assert all((env.KERNELS_DIR / s).is_file() for s in sources), kernel
        assert set(spec.operators) <= set(ops.SCHEMAS), kernel
        for source in sources:
            text = (env.KERNELS_DIR / source).read_text()
            for operator in spec.operators:
                assert f'm.impl("{operator}"' in text, (source, operator)
    # Every operator is implemented by some kernel, on both devices.
    assert {op for spec in build.KERNELS.values() for op in spec.operators} == set(ops.SCHEMAS)
    assert all(spec.cuda_source is not None for spec in build.KERNELS.values())


def test_cpu_load_registers_the_operators_and_is_cached():
    first = build.load("selu_naive", backend="cpu")
    assert first.kernel == "selu_naive" and first.operators == build.KERNELS["selu_naive"].operators
    assert first.devices == ["cpu"]
    library = first.libraries[0]
    assert re.fullmatch(r"selu_cpu_cpu_[0-9a-f]{12}", library.name)
    assert library.path.is_file() and env.BUILD_DIR in library.path.parents
    for operator in first.operators:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"selu_course::{operator}", "CPU"), operator
    x = torch.randn(1000)
    torch.testing.assert_close(torch.ops.selu_course.selu_naive(x), torch.selu(x))
    # One CPU library serves the naive and the vectorized kernels: the second load
    # neither rebuilds nor reloads it.
    again = build.load("selu_vectorized", backend="cpu")
    assert again.libraries[0].name == library.name
    assert again.build_seconds == 0
    assert "CPU from kernels/selu_cpu.cpp" in str(again) and "selu_course::selu_vectorized.out" in str(again)


# ----------------------------------------------------------------------------- regions of the kernel files


@pytest.mark.parametrize("filename", KERNEL_FILES)
def test_every_region_is_closed(filename):
    lines = [line.strip() for line in (env.KERNELS_DIR / filename).read_text().splitlines()]
    opened = [line.removeprefix("// region:").strip() for line in lines if line.startswith("// region:")]
    closed = [line for line in lines if line == "// endregion"]
    # A region without its endregion would swallow the next one; a name used twice
    # would hide the first. Either shows as fewer regions than markers.
    assert len(closed) == len(opened), (opened, len(closed))
    assert list(build.regions(filename)) == opened
    assert len(set(opened)) == len(opened), opened
    for name, body in build.regions(filename).items():
        assert body.strip(), f"region {name!r} of {filename} is empty"
        assert "// region:" not in body, f"region {name!r} of {filename} contains another"


def test_source_region_of_an_unknown_region_lists_the_regions():
    with pytest.raises(KeyError, match=r"kernels/selu_naive\.cuh has no region 'no_such_region'; its regions: kernel"):
        build.source_region("selu_naive.cuh", "no_such_region")
    assert build.source_region("selu_naive.cuh") == (env.KERNELS_DIR / "selu_naive.cuh").read_text()


def test_show_source_prints_outside_jupyter(capsys):
    build.show_source("selu_naive.cuh", "kernel", "launch")
    printed = capsys.readouterr().out
    assert printed.startswith("// kernels/selu_naive.cuh\n")
    assert "__global__ void selu_naive_kernel" in printed and "void launch_naive" in printed
    assert "// region:" not in printed and "// endregion" not in printed
    build.show_source("selu_math.cuh")
    assert capsys.readouterr().out.rstrip().endswith("}  // namespace selu_course")


@pytest.mark.gpu
def test_a_rebuilt_cuda_library_can_replace_the_loaded_one_again_and_again():
    """selu_vectorized.cu rebuilt with another flag and swapped in and out twice (build.loaded), in a
    fresh process so that the first CUDA library loaded is the one swapped out. The launch-table
    operators are CUDA-only; their first kernel's C++ signature, which the dispatcher compares every
    later one with, must not belong to a library that is unloaded (kernels/selu_cpu.cpp anchors it).
    Before that, the process died in the dispatcher when the first library was loaded again."""
    script = ("import torch\n"
              "from helpers import build, ops\n"
              "build.load('selu_vectorized')\n"
              "x = torch.randn(4099, device='cuda')\n"
              "for _ in range(2):\n"
              "    with build.loaded('selu_vectorized', extra_cuda_cflags=('-DSELU_COURSE_FRESH_BUILD',)):\n"
              "        assert torch.equal(ops.selu_vectorized(x), torch.selu(x))\n"
              "    assert torch.equal(ops.selu_vectorized(x), torch.selu(x))\n"
              "print('alive', ops.launch_config('cuda', torch.float32), flush=True)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=env.REPO_ROOT, capture_output=True, text=True,
                          timeout=900, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              filter(None, [str(env.REPO_ROOT), os.environ.get("PYTHONPATH")]))})
    assert done.returncode == 0 and "alive" in done.stdout, done.stderr[-3000:]
