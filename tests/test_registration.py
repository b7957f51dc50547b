"""A kernel whose C++ signature does not match its schema is reported, not fatal.

The dispatcher checks every registered kernel against its schema while the library
loads, and a failed check ends the process that loaded it. helpers.build therefore
loads each new build in a child process first: the learner's process gets a
BuildError that quotes the dispatcher and keeps the kernels it had.
"""
import shutil

import pytest
import torch

from helpers import build, env, ops


@pytest.fixture
def kernels_copy(tmp_path, monkeypatch):
    shutil.copytree(env.KERNELS_DIR, tmp_path / "kernels")
    monkeypatch.setattr(env, "KERNELS_DIR", tmp_path / "kernels")
    yield tmp_path / "kernels"
    monkeypatch.undo()
    build.load("selu_vectorized", backend="cpu")  # the real kernels again


def test_a_signature_that_does_not_match_its_schema_is_a_build_error(kernels_copy):
    build.load("selu_vectorized", backend="cpu")
    source = kernels_copy / "selu_cpu.cpp"
    source.write_text(source.read_text().replace(
        "at::Tensor selu_vectorized(const at::Tensor& x) {", "at::Tensor selu_vectorized(const at::Tensor& x, int64_t n) {"
    ))
    with pytest.raises(build.BuildError, match=r"(?s)registering its CPU kernels failed.*selu_vectorized"
                                               r".*number of arguments is different.*helpers/schemas\.py") as info:
        build.load("selu_vectorized", backend="cpu")
    assert str(env.REPO_ROOT) not in str(info.value)
    # This process is alive and still runs the kernels it had.
    torch.testing.assert_close(ops.selu_vectorized(torch.ones(3)), torch.selu(torch.ones(3)))


def test_a_compile_error_is_reported_with_the_compilers_words(kernels_copy):
    source = kernels_copy / "selu_cpu.cpp"
    source.write_text(source.read_text().replace("namespace selu_course {", "namespace selu_course {\nnot C++;", 1))
    with pytest.raises(build.BuildError, match=r"(?s)Building kernels/selu_cpu\.cpp for CPU failed.*error"):
        build.load("selu_vectorized", backend="cpu")
