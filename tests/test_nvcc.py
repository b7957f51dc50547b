"""What nvcc makes of the CUDA kernels, checked without a GPU: PTX and ptxas's report for sm_90.

Every kernels/*.cu file (selu_naive.cu, selu_vectorized.cu, mistakes.cu) must compile;
the vectorized kernel must move 16 bytes per access, through the read-only path
(ld.global.nc) only in the instantiation for an x that is not also written, since the
out= variant may be given x itself; no kernel may promise the compiler that x and out
never alias (no __restrict__); no kernel spills.

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
# The files that hold the one-thread-per-element kernel (selu_naive.cuh): its own
# operator's, and the first drafts of notebook 02 that launch it with wrong math.
NAIVE_FILES = ("selu_naive.cu", "mistakes.cu")

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


@pytest.mark.parametrize("in_place", [False, True], ids=["x-read-only", "in-place"])
@pytest.mark.parametrize("ctype", VECTOR_FORMS)
@pytest.mark.parametrize("vectors", VECTORS_PER_THREAD)
def test_vectorized_kernel_moves_16_bytes_per_access(compiled, ctype, vectors, in_place):
    ptx = ptx_of(compiled, "selu_vectorized.cu")
    kernel = f"selu_vectorized_kernel<{ctype}, {vectors}, {str(in_place).lower()}, true>"
    form = VECTOR_FORMS[ctype]
    loads = nvcc.vector_loads(ptx, kernel)
    stores = nvcc.vector_stores(ptx, kernel)
    # Exactly one 16-byte load and store per vector a thread handles. Where x is
    # only read, through the read-only path (ld.global.nc); where out is x (in
    # place), plain loads: a read-only load of memory the kernel writes is undefined.
    load = rf"ld\.global\.{form}" if in_place else rf"ld\.global\.nc\.{form}"
    assert set(loads) and all(re.fullmatch(load, op) for op in loads), loads
    assert sum(loads.values()) == vectors, loads
    assert set(stores) and all(re.fullmatch(rf"st\.global\.{form}", op) for op in stores), stores
    assert sum(stores.values()) == vectors, stores


# Loads per vector of a misaligned input, fp32 and fp64: element by element.
MISALIGNED_LOADS = {"float": (r"ld\.global\.nc\.[fu]32", 4), "double": (r"ld\.global\.nc\.[fu]64", 2)}


@pytest.mark.parametrize("ctype", MISALIGNED_LOADS)
@pytest.mark.parametrize("vectors", VECTORS_PER_THREAD)
def test_misaligned_input_is_read_narrower_and_written_by_vector(compiled, ctype, vectors):
    # x[1:] into a fresh, aligned out: x cannot be read 16 bytes at a time (that
    # would fault), so it is read in narrower loads, read-only; out still takes
    # one 16-byte store per vector.
    ptx = ptx_of(compiled, "selu_vectorized.cu")
    kernel = f"selu_vectorized_kernel<{ctype}, {vectors}, false, false>"
    body = "".join(nvcc._select(ptx, kernel).values())
    loads = re.findall(r"\bld\.global\.\S+", body)
    assert not nvcc.vector_loads(ptx, kernel), nvcc.vector_loads(ptx, kernel)
    form, per_vector = MISALIGNED_LOADS[ctype]
    element_loads = [op for op in loads if re.fullmatch(form, op)]
    assert len(element_loads) == vectors * per_vector, loads
    assert len(loads) == len(element_loads) + 1, loads  # and the tail's (the head has a launch of its own)
    assert sum(nvcc.vector_stores(ptx, kernel).values()) == vectors


# A misaligned fp16 or bf16 input is realigned in registers (realign.cuh,
# map_realigned_tiles): per vector, one aligned 16-byte load of the lane's own chunk and
# shuffles that pass the next chunk's first words from lane to lane; per tile, one
# more 16-byte load, of the chunk after the warp's run (lane 31's). With one input
# the kernel holds four copies of the loop, one per word offset 0 to 3, which
# shuffle 1, 2, 3 and 4 words per vector; with several (the backward kernel's grad
# and saved tensor) one loop shuffles all four words of each input. Each loop has
# two forms of its tile: the whole tiles' (whole_realigned_tile), with no bounds
# test, and the last tile's, which tests each vector.
REALIGNED_KERNELS = [
    *[("selu_vectorized.cu", f"selu_vectorized_kernel<{{ctype}}, {v}, false, false>", 1, v) for v in VECTORS_PER_THREAD],
    *[("selu_vectorized.cu", f"copy_vectorized_kernel<{v}, false, false, {{ctype}}>", 1, v) for v in VECTORS_PER_THREAD],
    ("selu_backward.cu", "selu_backward_kernel<{ctype}, 4, false,", 2, 4),  # 4 vectors per thread, fixed
]
TILE_FORMS = 2  # whole, and last
every_realigned_kernel = pytest.mark.parametrize(
    "kernel_file, kernel_name, inputs, vectors", REALIGNED_KERNELS,
    ids=[name.split("<")[0] + f"-{v}" for _, name, _, v in REALIGNED_KERNELS])


def loop_copies(inputs: int) -> int:
    """Copies of the realigning loop in a kernel: one per word offset with one input, one with several."""
    return 4 if inputs == 1 else 1


@pytest.mark.parametrize("ctype", ["c10::Half", "c10::BFloat16"])
@every_realigned_kernel
def test_misaligned_16_bit_input_is_realigned_in_registers(compiled, ctype, kernel_file, kernel_name, inputs, vectors):
    ptx = ptx_of(compiled, kernel_file)
    selected = nvcc._select(ptx, kernel_name.format(ctype=ctype))
    for name, body in selected.items():
        copies, shuffled_words = loop_copies(inputs), (1 + 2 + 3 + 4 if inputs == 1 else 4 * inputs)
        loads = nvcc.vector_loads(ptx, name)
        assert loads == {"ld.global.nc.v4.u32": TILE_FORMS * copies * (vectors + 1) * inputs}, (name, loads)
        assert len(re.findall(r"\bshfl\.sync\.idx\.b32\b", body)) == TILE_FORMS * shuffled_words * vectors, name
        narrow = [op for op in re.findall(r"\bld\.global\.\S+", body) if ".v4." not in op]
        assert len(narrow) == copies * inputs, (name, narrow)  # each copy's tail, per input
        assert sum(nvcc.vector_stores(ptx, name).values()) == TILE_FORMS * copies * vectors, name
        assert ".local" not in body, name  # the word selection stays in registers


@pytest.mark.parametrize("ctype", ["c10::Half", "c10::BFloat16"])
@every_realigned_kernel
def test_whole_realigned_tiles_test_no_bounds(compiled, ctype, kernel_file, kernel_name, inputs, vectors):
    # The whole tile's loads, all of them, lie in one basic block: none is tested. (The
    # last tile's form branches around each of its loads; its stores, and those of an op
    # with branches of its own, lie in blocks apart, so the stores are not counted here.)
    ptx = ptx_of(compiled, kernel_file)
    for name, body in nvcc._select(ptx, kernel_name.format(ctype=ctype)).items():
        blocks = re.split(r"^\$L__\w+:\s*$", body, flags=re.MULTILINE)
        untested = [block for block in blocks
                    if len(re.findall(r"\bld\.global\.nc\.v4\.", block)) == (vectors + 1) * inputs]
        assert len(untested) == loop_copies(inputs), (name, len(untested))


def test_roofline_kernels_fit_the_largest_block():
    # selu_vectorized_with_config accepts blocks of up to 1,024 threads, and an SM has
    # 65,536 registers: a kernel of more than 64 registers per thread would fail at
    # launch with "too many resources requested". __launch_bounds__ keeps them within,
    # without spilling.
    for name, resources in nvcc.ptxas_report("selu_vectorized.cu").items():
        if "scalar" not in name:
            assert resources.registers <= 65536 // 1024, (name, resources)
            assert resources.spill_store_bytes == 0 and resources.stack_frame_bytes == 0, (name, resources)


# Arithmetic instructions per element of the 16-bit kernels: the economical
# path (selu_math.cuh) is about 20, where expm1f's is about 33 plus the branch.
ARITHMETIC = re.compile(r"^\s*(fma|mul|add|sub|max|min|selp|setp|shl|and|cvt|ex2|abs|neg)\.", re.M)


@pytest.mark.parametrize("ctype", ["c10::Half", "c10::BFloat16"])
def test_16_bit_kernels_spend_about_20_instructions_per_element(compiled, ctype):
    ptx = ptx_of(compiled, "selu_vectorized.cu")
    body = "".join(nvcc._select(ptx, f"selu_vectorized_kernel<{ctype}, 4, false, true>").values())
    # 4 vectors of 8 elements, plus one tail element
    per_element = len(ARITHMETIC.findall(body)) / (4 * 8 + 1)
    assert 15 <= per_element <= 25, per_element
    assert "ex2.approx" not in body  # no expm1f
    assert len(re.findall(r"\bbra\.uni\b", body)) <= 2  # the tile loop's own jumps at most: no branch per element


def test_scalar_fallback_has_no_vector_loads(compiled):
    # For views that are not 16-byte aligned: a vector access there would fault.
    ptx = ptx_of(compiled, "selu_vectorized.cu")
    for kernel in ("selu_scalar_kernel<", "copy_scalar_kernel<"):
        assert nvcc.vector_loads(ptx, kernel) == {}
        assert nvcc.vector_stores(ptx, kernel) == {}


@pytest.mark.parametrize("ctype", VECTOR_FORMS)
@pytest.mark.parametrize("vectors", VECTORS_PER_THREAD)
def test_copy_kernel_moves_what_the_selu_kernel_moves_and_computes_nothing(compiled, ctype, vectors):
    # copy_vectorized_kernel is the SELU kernel's loop with Identity: the same 16-byte
    # accesses, and no floating-point instruction at all, where any element function would
    # show. (A round trip through float, which nvcc folds away in the PTX but which would
    # change a NaN's payload, is what tests/test_ops.py's test_copy_is_exact_to_the_bit
    # catches on a GPU.) A search by the SELU kernel's template arguments finds the SELU
    # kernel alone (notebook 03 counts its loads so).
    ptx = ptx_of(compiled, "selu_vectorized.cu")
    assert len(nvcc._select(ptx, f"<{ctype}, {vectors}, false, true>")) == 1
    selu = f"selu_vectorized_kernel<{ctype}, {vectors}, false, true>"
    copy = f"copy_vectorized_kernel<{vectors}, false, true, {ctype}>"
    assert nvcc.vector_loads(ptx, copy) == nvcc.vector_loads(ptx, selu)
    assert nvcc.vector_stores(ptx, copy) == nvcc.vector_stores(ptx, selu)
    body = "".join(nvcc._select(ptx, copy).values())
    floating = [op for op in nvcc._instructions(body) if re.search(r"\.(f16|bf16|f32|f64)(x2)?$", op)
                and not op.startswith(("ld.", "st.", "mov."))]
    assert not floating, floating


READ_ONLY_LOAD = re.compile(r"\bld\.global\.nc\b")


def _may_write_what_it_reads(kernel_name: str) -> bool:
    """Every kernel but the vectorized kernel's IN_PLACE = false instantiations and the
    backward kernels (whose grad_in is always a new tensor): the naive and scalar
    kernels serve out= (out may be x), and in-place instantiations are in place by
    definition."""
    return not re.search(r"selu_vectorized_kernel<[^,>]+, \d+, false, (?:true|false)>"
                         r"|copy_vectorized_kernel<\d+, false, (?:true|false), "
                         r"|selu_backward(_scalar)?_kernel<", kernel_name)


@pytest.mark.parametrize("filename", CU_FILES)
def test_no_read_only_loads_where_a_kernel_may_write_what_it_reads(compiled, filename):
    # ld.global.nc reads through the non-coherent cache, which is undefined for
    # memory the same kernel writes: the out= overloads may be called with out=x.
    ptx = ptx_of(compiled, filename)
    offending = [name for name, body in nvcc.kernels(ptx).items()
                 if _may_write_what_it_reads(name) and READ_ONLY_LOAD.search(body)]
    assert not offending, offending


def test_read_only_loads_are_recognised():
    # What the test above looks for, made on purpose: __ldg is a read-only load.
    ldg = INLINE_SOURCE.replace("2.f * x[i]", "2.f * __ldg(&x[i])")
    assert READ_ONLY_LOAD.search(nvcc.compile_source(ldg, "ldg_inline").ptx)


@pytest.mark.parametrize("filename", NAIVE_FILES)
def test_naive_kernel_has_no_vector_loads(compiled, filename):
    # What tells the two apart in the PTX: the naive kernel moves 4 bytes per instruction.
    ptx = ptx_of(compiled, filename)
    assert nvcc.vector_loads(ptx) == {}
    assert nvcc.vector_stores(ptx) == {}
    assert re.search(r"\bld\.global\.f32\b", ptx)


@pytest.mark.parametrize("elements", (1, 2, 4, 8))
def test_unrolled_naive_kernel_issues_every_load_before_the_math(compiled, elements):
    # Notebook 02's control: `elements` plain 4-byte loads per thread, no vector access,
    # and every load issued before the first floating-point instruction uses one.
    (body,) = nvcc._select(ptx_of(compiled, "selu_naive.cu"), f"selu_naive_unrolled_kernel<{elements},").values()
    instructions = list(nvcc._instructions(body))
    loads = [i for i, op in enumerate(instructions) if op.startswith("ld.global")]
    stores = [i for i, op in enumerate(instructions) if op.startswith("st.global")]
    math = [i for i, op in enumerate(instructions) if re.match(r"(fma|mul|add|ex2)\.\w*\.?f32", op)]
    assert {instructions[i] for i in loads} == {"ld.global.f32"} and len(loads) == elements
    assert {instructions[i] for i in stores} == {"st.global.f32"} and len(stores) == elements
    assert math and max(loads) < min(math), (loads, math[:3])


@pytest.mark.parametrize("filename", NAIVE_FILES)
def test_naive_kernel_index_is_64_bit(compiled, filename):
    # blockIdx.x * blockDim.x widened to 64 bits (mul.wide.u32 / mad.wide.u32)
    # rather than multiplied in 32 bits (mad.lo.s32 / mul.lo.s32), which would
    # wrap past 2^32 elements.
    found = nvcc.kernels(ptx_of(compiled, filename))
    found = {name: body for name, body in found.items() if "int32_index_kernel<" not in name}  # the bug, on purpose
    assert found and all("selu_naive_kernel<" in name or "selu_naive_unrolled_kernel<" in name
                         for name in found), list(found)
    for name, body in found.items():
        assert re.search(rf"m(?:ul|ad)\.wide\.u32\s+%rd\d+,\s*{_block_times_width(body)}", body), name
        assert not re.search(rf"m(?:ul|ad)\.lo\.[su]32\s+%r\d+,\s*{_block_times_width(body)}", body), name


def test_the_int32_index_mistake_multiplies_in_32_bits(compiled):
    # Notebook 02's index bug: blockIdx.x * blockDim.x in 32-bit arithmetic, widened only after.
    (body,) = [body for name, body in nvcc.kernels(ptx_of(compiled, "mistakes.cu")).items()
               if "int32_index_kernel<" in name]
    assert re.search(rf"m(?:ul|ad)\.lo\.[su]32\s+%r\d+,\s*{_block_times_width(body)}", body)
    assert not re.search(rf"m(?:ul|ad)\.wide\.u32\s+%rd\d+,\s*{_block_times_width(body)}", body)


def _block_times_width(body: str) -> str:
    """The operands of blockIdx.x * blockDim.x in a kernel's PTX, as a pattern (in either order)."""
    block = re.search(r"mov\.u32\s+(%r\d+),\s*%ctaid\.x;", body)[1]
    width = re.search(r"mov\.u32\s+(%r\d+),\s*%ntid\.x;", body)[1]
    return rf"({re.escape(block)},\s*{re.escape(width)}|{re.escape(width)},\s*{re.escape(block)})"


@pytest.mark.parametrize("filename", CU_FILES)
def test_no_spills_and_no_stack(compiled, filename):
    compiled[filename].result()  # compiled in parallel by the fixture; ptxas itself takes a second
    report = nvcc.ptxas_report(filename)
    assert report, f"ptxas reported no kernels for {filename}"
    for name, resources in report.items():
        assert resources.spill_store_bytes == 0 and resources.spill_load_bytes == 0, (name, resources)
        assert resources.stack_frame_bytes == 0, (name, resources)
        assert 0 < resources.registers <= 255, (name, resources)


@pytest.mark.parametrize("filename", CU_FILES)
def test_ptxas_report_covers_every_kernel(compiled, filename):
    ptx = ptx_of(compiled, filename)
    assert set(nvcc.ptxas_report(filename)) == set(nvcc.kernels(ptx))


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
    nvcc.show_ptx(ptx_of(compiled, "selu_vectorized.cu"), "selu_vectorized_kernel<float, 4, true, true>", r"ld\.global")
    printed = capsys.readouterr().out
    assert "selu_vectorized_kernel<float, 4, true, true>" in printed
    assert printed.count("ld.global.v4.f32") == 4
    assert "ld.global.nc" not in printed


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
    first draft becomes the hardware approximation ex2.approx. mistakes.cu holds both:
    the first drafts, and the right math launched wrongly (one fast-math compile)."""
    normal = nvcc.kernels(ptx_of(compiled, "mistakes.cu"))
    fast = nvcc.kernels(nvcc.compile_ptx("mistakes.cu", extra_flags=("-use_fast_math",)))
    assert set(fast) == set(normal)
    selu = next(name for name in fast if "selu_naive_kernel<selu_course::SeluOp>" in name)
    assert ".ftz." not in normal[selu]
    assert re.search(r"\b(setp|mul|fma\.rn)\.ftz\.f32\b", fast[selu])
    expf_draft = next(name for name in fast if "ExpfMinusOneOp>" in name)
    assert "ex2.approx.ftz.f32" in fast[expf_draft]


def test_the_latency_probe_loads_one_at_a_time_past_l1(compiled):
    # kernels/latency_chain.cu: every load of the chain skips L1 (ld.global.cg) and takes its
    # address from the load before it; no vector load, nothing read ahead.
    (body,) = nvcc.kernels(ptx_of(compiled, "latency_chain.cu")).values()
    loads = re.findall(r"ld\.global\.(\S+)\s+(%rd\d+), \[(%rd\d+)\];", body)
    assert loads and all(form == "cg.s64" for form, _, _ in loads)
    # Each load's address register is computed from the previous load's value: the chain.
    for (_, previous, _), (_, _, address) in zip(loads, loads[1:]):
        assert re.search(rf"and\.b64\s+%rd\d+, {re.escape(previous)},", body), previous
    assert nvcc.vector_loads(ptx_of(compiled, "latency_chain.cu")) == {}
