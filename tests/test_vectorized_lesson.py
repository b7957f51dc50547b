"""Notebook 03's lesson kernels, from the sources its cells hold (cells tagged ``sources``).

The notebook writes its first vectorized kernels in cells: ``selu_float4`` (whole vectors at
aligned addresses only), then the tail (``selu_float4_tail``) and misaligned views
(``selu_float4_views``). These tests guard what the lesson says of them: every access of the
aligned path is 16 bytes wide, a misaligned input is read narrower but still written 16 bytes
at a time, each step refuses what it cannot do with a clear error, and what it accepts is right
by the course's check. On a CPU the kernels run through the notebook's CPU source, with the
same checks; on a GPU through the CUDA source.
"""
from __future__ import annotations

import nbformat
import pytest
import torch

from helpers import bench, check, env, nvcc

NOTEBOOK = env.NOTEBOOKS_DIR / "03_vectorized_kernels.ipynb"


@pytest.fixture(scope="module")
def lesson() -> dict:
    """What the notebook's source cells define: the kernel sources and ``build_inline``."""
    namespace: dict = {}
    for cell in nbformat.read(NOTEBOOK, as_version=4).cells:
        if cell.cell_type == "code" and "sources" in cell.metadata.get("tags", []):
            exec(cell.source, namespace)
    return namespace


@pytest.fixture(scope="module")
def kernels(lesson):
    """The three steps, built as the notebook builds them (so a run of either reuses the build)."""
    build_inline = lesson["build_inline"]
    first = build_inline("selu_float4", lesson["PROLOGUE"] + lesson["SELU_FLOAT4"], ["selu_float4"])
    steps = build_inline("selu_float4_steps", lesson["PROLOGUE"] + lesson["SELU_FLOAT4_TAIL"] + lesson["SELU_FLOAT4_VIEWS"],
                         ["selu_float4_tail", "selu_float4_views"])
    return first.selu_float4, steps.selu_float4_tail, steps.selu_float4_views


@pytest.mark.nvcc
def test_every_aligned_access_is_16_bytes_and_a_misaligned_input_is_read_narrower(lesson):
    source = lesson["PROLOGUE"] + lesson["SELU_FLOAT4"] + lesson["SELU_FLOAT4_TAIL"] + lesson["SELU_FLOAT4_VIEWS"]
    ptx = nvcc.compile_source(source, "lesson_03").ptx
    for kernel in ("selu_float4_kernel", "selu_float4_tail_kernel", "selu_float4_views_kernel<true>"):
        assert nvcc.vector_loads(ptx, kernel) == {"ld.global.v4.f32": 1}, kernel
        assert nvcc.vector_stores(ptx, kernel) == {"st.global.v4.f32": 1}, kernel
    assert nvcc.vector_loads(ptx, "selu_float4_views_kernel<false>") == {}
    assert nvcc.vector_stores(ptx, "selu_float4_views_kernel<false>") == {"st.global.v4.f32": 1}


def test_each_step_refuses_what_it_cannot_do(kernels):
    selu_float4, selu_float4_tail, _ = kernels
    x = bench.random_input(1027, device=env.default_device(), seed=0)
    with pytest.raises(RuntimeError, match="multiple of 4"):
        selu_float4(x)
    with pytest.raises(RuntimeError, match="16-byte boundary; it starts 4 bytes past one"):
        selu_float4(x[1:1025])
    with pytest.raises(RuntimeError, match="16-byte boundary; it starts 8 bytes past one"):
        selu_float4_tail(x[2:])
    with pytest.raises(RuntimeError, match="contiguous"):
        selu_float4_tail(x[::2])


def test_what_each_step_accepts_passes_the_check(kernels):
    selu_float4, selu_float4_tail, selu_float4_views = kernels
    device = env.default_device()
    check.check_unary(selu_float4, device=device, sizes=(4, 8, 1024, 4096), include_special=False,
                      include_views=False).assert_ok()
    check.check_unary(selu_float4_tail, device=device, sizes=(*range(1, 18), 1023, 4097),
                      include_views=False).assert_ok()
    check.check_unary(selu_float4_views, device=device, sizes=(*range(1, 18), 1023, 4097)).assert_ok()


@pytest.mark.gpu
def test_a_misaligned_view_and_a_tail_on_the_gpu_at_a_size_of_many_blocks(kernels):
    """Past one block of threads: every vector, the tail and the misaligned reads, checked
    element by element against torch.selu (on a GPU both compute in float with expm1f)."""
    _, selu_float4_tail, selu_float4_views = kernels
    x = bench.random_input((1 << 22) + 7, device="cuda", seed=1)
    for fn, view in ((selu_float4_tail, x), (selu_float4_views, x[1:]), (selu_float4_views, x[3:-2])):
        assert check.agreement(fn(view), torch.selu(view)).within(1)
