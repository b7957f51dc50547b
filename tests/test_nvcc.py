"""What nvcc makes of the CUDA kernels, checked without a GPU: PTX and ptxas's report for sm_90.

The first run compiles every kernels/*.cu file (in parallel, about a minute);
later runs read .build/nvcc/ and take seconds.
"""
from __future__ import annotations

import os
import re
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from helpers import env, nvcc

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(env.nvcc_path() is None, reason="needs nvcc, the CUDA compiler (no GPU needed)"),
]

CU_FILES = sorted(path.name for path in env.KERNELS_DIR.glob("*.cu"))
CHECKED_FOR_SPILLS = ("selu_naive.cu", "selu_vectorized.cu")

# The C++ name of each dtype in the kernels' names, and the 16-byte access ptxas
# should see for it: 4 floats, 2 doubles, or 8 halves moved as 4 32-bit words.
VECTOR_FORMS = {
    "float": r"v4\.f32",
    "double": r"v2\.f64",
    "c10::Half": r"v4\.[ub]32",
    "c10::BFloat16": r"v4\.[ub]32",
}
VECTORS_PER_THREAD = (1, 2, 4, 8)


@pytest.fixture(scope="session")
def compiled() -> dict[str, Future]:
    """Every kernels/*.cu compiled once per session, the files in parallel.

    Futures, not results: a file that fails to compile fails its own tests only.
    """
    with ThreadPoolExecutor(max_workers=max(1, min(len(CU_FILES), os.cpu_count() or 1))) as pool:
        return {name: pool.submit(nvcc.compile_kernel, name) for name in CU_FILES}


def ptx_of(compiled, filename: str) -> str:
    return compiled[filename].result().ptx


@pytest.mark.parametrize("filename", CU_FILES)
def test_compiles_to_ptx_for_sm_90(compiled, filename):
    result = compiled[filename].result()
    assert result.arch == "sm_90"
    assert re.search(r"^\.target sm_90\b", result.ptx, re.MULTILINE)
    assert nvcc.kernels(result.ptx), f"{filename} compiled to PTX without a single kernel"


def test_results_are_cached(compiled):
    first = compiled["selu_naive.cu"].result()
    again = nvcc.compile_kernel("selu_naive.cu")
    assert again.cached and again.ptx == first.ptx and again.directory == first.directory


@pytest.mark.parametrize("ctype", VECTOR_FORMS)
@pytest.mark.parametrize("vectors", VECTORS_PER_THREAD)
def test_vectorized_kernel_moves_16_bytes_per_access(compiled, ctype, vectors):
    ptx = ptx_of(compiled, "selu_vectorized.cu")
    kernel = f"selu_vectorized_kernel<{ctype}, {vectors}>"
    form = VECTOR_FORMS[ctype]
    loads = nvcc.vector_loads(ptx, kernel)
    stores = nvcc.vector_stores(ptx, kernel)
    # Exactly one 16-byte load and store per vector a thread handles, and the
    # loads through the read-only path (ld.global.nc), as __ldg asks.
    assert set(loads) and all(re.fullmatch(rf"ld\.global\.nc\.{form}", op) for op in loads), loads
    assert sum(loads.values()) == vectors, loads
    assert set(stores) and all(re.fullmatch(rf"st\.global\.{form}", op) for op in stores), stores
    assert sum(stores.values()) == vectors, stores


def test_naive_kernel_has_no_vector_loads(compiled):
    # What tells the two apart in the PTX: the naive kernel moves 4 bytes per instruction.
    ptx = ptx_of(compiled, "selu_naive.cu")
    assert nvcc.vector_loads(ptx) == {}
    assert nvcc.vector_stores(ptx) == {}
    assert re.search(r"\bld\.global\.f32\b", ptx)


def test_naive_kernel_index_is_64_bit(compiled):
    # blockIdx.x * blockDim.x widened to 64 bits (mul.wide.u32 / mad.wide.u32)
    # rather than multiplied in 32 bits (mad.lo.s32 / mul.lo.s32), which would
    # wrap past 2^32 elements.
    for name, body in nvcc.kernels(ptx_of(compiled, "selu_naive.cu")).items():
        block = re.search(r"mov\.u32\s+(%r\d+),\s*%ctaid\.x;", body)[1]
        width = re.search(r"mov\.u32\s+(%r\d+),\s*%ntid\.x;", body)[1]
        operands = rf"({re.escape(block)},\s*{re.escape(width)}|{re.escape(width)},\s*{re.escape(block)})"
        assert re.search(rf"m(?:ul|ad)\.wide\.u32\s+%rd\d+,\s*{operands}", body), name
        assert not re.search(rf"m(?:ul|ad)\.lo\.[su]32\s+%r\d+,\s*{operands}", body), name


@pytest.mark.parametrize("filename", CHECKED_FOR_SPILLS)
def test_no_spills_and_no_stack(compiled, filename):
    compiled[filename].result()  # compiled in parallel by the fixture; ptxas itself takes a second
    report = nvcc.ptxas_report(filename)
    assert report, f"ptxas reported no kernels for {filename}"
    for name, resources in report.items():
        assert resources.spill_store_bytes == 0 and resources.spill_load_bytes == 0, (name, resources)
        assert resources.stack_frame_bytes == 0, (name, resources)
        assert 0 < resources.registers <= 255, (name, resources)


def test_ptxas_report_covers_every_kernel(compiled):
    ptx = ptx_of(compiled, "selu_vectorized.cu")
    assert set(nvcc.ptxas_report("selu_vectorized.cu")) == set(nvcc.kernels(ptx))


def test_parse_ptxas_log():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z1kPKfPfl' for 'sm_90'
ptxas info    : Function properties for _Z1kPKfPfl
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers, 380 bytes cmem[0]
ptxas info    : Compile time = 2.387 ms
ptxas info    : Compiling entry function '_Z1gv' for 'sm_90'
ptxas info    : Function properties for _Z1gv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 4 registers, used 0 barriers
"""
    assert nvcc.parse_ptxas_log(log) == {
        "_Z1kPKfPfl": nvcc.KernelResources(registers=40, stack_frame_bytes=16, spill_store_bytes=8, spill_load_bytes=4),
        "_Z1gv": nvcc.KernelResources(registers=4, stack_frame_bytes=0, spill_store_bytes=0, spill_load_bytes=0),
    }


def test_show_ptx_prints_the_matching_lines(compiled, capsys):
    nvcc.show_ptx(ptx_of(compiled, "selu_vectorized.cu"), "selu_vectorized_kernel<float, 4>", r"ld\.global")
    printed = capsys.readouterr().out
    assert "selu_vectorized_kernel<float, 4>" in printed
    assert printed.count("ld.global.nc.v4.f32") == 4


def test_unknown_kernel_name_lists_the_kernels(compiled):
    with pytest.raises(ValueError, match="selu_naive_kernel"):
        nvcc.vector_loads(ptx_of(compiled, "selu_naive.cu"), "no_such_kernel")


def test_compile_error_is_reported():
    with pytest.raises(nvcc.NvccError, match="nvcc failed to compile kernels/selu_naive.cu"):
        nvcc.compile_kernel("selu_naive.cu", extra_flags=("--no-such-flag",))


def test_missing_nvcc_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(env, "nvcc_path", lambda: None)
    with pytest.raises(nvcc.NvccError, match="nvcc .* was not found.*CUDA toolkit"):
        nvcc.nvcc_path()


INLINE_SOURCE = """
__global__ void scale_kernel(const float* x, float* y, long n) {
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.f * x[i];
}
"""


def test_compile_source_compiles_text_and_caches_it():
    first = nvcc.compile_source(INLINE_SOURCE, "scale_inline")
    assert "scale_kernel" in " ".join(nvcc.kernels(first.ptx))
    assert re.search(r"\bld\.global\.f32\b", first.ptx)
    assert first.source.startswith(".build/nvcc/sources/scale_inline_") and first.source.endswith(".cu")
    assert str(env.REPO_ROOT) not in first.source
    again = nvcc.compile_source(INLINE_SOURCE, "scale_inline")
    assert again.cached and again.ptx == first.ptx
    edited = nvcc.compile_source(INLINE_SOURCE.replace("2.f", "3.f"), "scale_inline")
    assert edited.directory != first.directory and edited.ptx != first.ptx


def test_compile_source_reports_errors_and_bad_names():
    with pytest.raises(nvcc.NvccError, match=r"nvcc failed to compile \.build/nvcc/sources/broken_inline_"):
        nvcc.compile_source("this is not CUDA;", "broken_inline")
    with pytest.raises(nvcc.NvccError, match="plain identifier"):
        nvcc.compile_source(INLINE_SOURCE, "../escape")


def test_fast_math_flushes_denormals_in_the_selu_kernel(compiled):
    """Notebook 02's -use_fast_math demonstration starts from this difference: every
    float instruction of the SELU kernel becomes flush-to-zero (.ftz), and the expf
    first draft becomes the hardware approximation ex2.approx."""
    normal = nvcc.kernels(ptx_of(compiled, "selu_naive.cu"))
    fast = nvcc.kernels(nvcc.compile_ptx("selu_naive.cu", extra_flags=("-use_fast_math",)))
    selu = next(name for name in fast if "selu_naive_kernel<selu_course::SeluOp>" in name)
    assert ".ftz." not in normal[selu]
    assert re.search(r"\b(setp|mul|fma\.rn)\.ftz\.f32\b", fast[selu])
    expf_draft = next(name for name in fast if "SeluExpfMinusOneOp>" in name)
    assert "ex2.approx.ftz.f32" in fast[expf_draft]
