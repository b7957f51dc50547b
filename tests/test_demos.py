"""helpers/demos.py, notebook 02's demonstrations: on the CPU, and on a GPU where marked."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from helpers import bench, build, check, demos, env, results

RELU_CPU = r"""
#include <torch/extension.h>

torch::Tensor relu(torch::Tensor x) {
  x = x.contiguous();
  torch::Tensor y = torch::empty_like(x);
  const float* in = x.const_data_ptr<float>();
  float* out = y.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] < 0.f ? 0.f : in[i];
  return y;
}
"""
RELU_DECLARATION = "torch::Tensor relu(torch::Tensor x);"


@pytest.fixture(scope="module")
def operators():
    """selu_naive and the first-draft mistakes, registered (built once, cached in .build/)."""
    build.load("selu_naive")
    build.load("mistakes")


# ----------------------------------------------------------------------------- section 1


def test_inline_sources_picks_the_sources_of_each_machine():
    cuda = demos.inline_sources("CUDA", "DECL", "CPU", cuda=True)
    assert cuda["cuda_sources"] == "CUDA" and cuda["cpp_sources"] == "DECL"
    cpu = demos.inline_sources("CUDA", "DECL", "CPU", cuda=False)
    assert cpu["cpp_sources"] == "CPU" and "cuda_sources" not in cpu


def test_for_this_machine_follows_can_build_cuda():
    assert demos.for_this_machine(cuda="gpu", cpu="cpu") == ("gpu" if env.can_build_cuda() else "cpu")


def test_replace_in_sources_changes_only_the_sources():
    sources = {"cpp_sources": "#include <a.h>", "cuda_sources": "#include <a.h> x", "extra_cflags": ["-O3"]}
    replaced = demos.replace_in_sources(sources, "<a.h>", "<b.h>")
    assert replaced == {"cpp_sources": "#include <b.h>", "cuda_sources": "#include <b.h> x", "extra_cflags": ["-O3"]}
    with pytest.raises(ValueError, match="none of the sources"):
        demos.replace_in_sources(sources, "<c.h>", "<d.h>")


def test_compiler_messages_keeps_the_diagnostics_only():
    error = RuntimeError(
        "Error building extension 'broken_1': [1/2] c++ -MMD -isystem /x -c main.cpp\n"
        "FAILED: main.o\n"
        "c++ -isystem /usr/include -c main.cpp -o main.o\n"
        "\x1b[01mmain.cpp:2:10: fatal error:\x1b[m torch/extention.h: No such file or directory\n"
        "compilation terminated.\n"
        "ninja: build stopped: subcommand failed.\n"
    )
    assert demos.compiler_messages(error) == (
        "Error building extension 'broken_1':\n"
        "main.cpp:2:10: fatal error: torch/extention.h: No such file or directory\n"
        "compilation terminated."
    )


# ----------------------------------------------------------------------------- a function and an operator


def test_attempt_reports_results_and_errors_in_one_line():
    assert demos.attempt(torch.zeros, 3) == (
        "returned a cpu tensor of shape (3,), requires_grad=False, grad_fn=None"
    )

    def fails():
        raise ValueError("first line\nsecond line")

    assert demos.attempt(fails) == "raised ValueError: first line"


def test_attempt_keeps_warnings_out(recwarn):
    def warns():
        import warnings

        warnings.warn("noise")
        return 1

    assert demos.attempt(warns) == "returned int 1"
    assert len(recwarn) == 0


def test_registration_blocks_of_each_device():
    assert "TORCH_LIBRARY_IMPL(selu_course, CUDA, m)" in demos.registration_block("selu_naive.cu")
    cpu = demos.registration_block("selu_cpu.cpp")
    assert cpu.startswith("TORCH_LIBRARY_IMPL(selu_course, CPU, m)") and cpu.endswith("}")
    assert 'm.impl("selu_naive", &selu_naive);' in cpu
    with pytest.raises(ValueError, match="no TORCH_LIBRARY_IMPL"):
        demos.registration_block("selu_math.cuh")


def test_registrations_list_the_kernels_with_relative_paths(operators):
    table = demos.registrations("selu_naive")
    assert table.splitlines()[0] == "selu_course::selu_naive(Tensor x) -> Tensor"
    assert "kernels/selu_cpu.cpp" in table and "Meta" in table and "Autograd" in table
    assert str(env.REPO_ROOT) not in table and "debug" not in table
    if env.can_build_cuda():
        assert "kernels/selu_naive.cu" in table


# ----------------------------------------------------------------------------- section 2: Little's law


def _record(variant, gbps, device="NVIDIA H100 80GB HBM3", numel=2**30, median_ms=1.0):
    return {"variant": variant, "op": "forward", "dtype": "float32", "numel": numel, "gbps": gbps,
            "median_ms": median_ms, "bytes": 8 * numel, "device": device, "date": "2026-01-01", "run": "r"}


def test_littles_law_compares_loads_with_the_load_half_of_the_bandwidth():
    law = demos.littles_law([_record("copy", 3000.0), _record("selu_naive", 2200.0)], device="cpu")
    assert law.gpu.sms == 132 and law.gpu.threads_per_sm == 2048
    assert law.load_bytes_per_s == pytest.approx(1.5e12)  # half of the copy's bytes are loads
    assert law.needed_bytes == pytest.approx(1.5e12 * demos.DRAM_LATENCY_S)
    assert law.most_bytes == 4 * 2048 * 132
    assert law.ratio == pytest.approx(law.most_bytes / law.needed_bytes)
    assert "1.05 MB of loads in flight" in str(law)


def test_littles_law_takes_the_largest_copy_and_assumes_an_h100_for_unknown_gpus():
    law = demos.littles_law([_record("copy", 100.0, numel=2**12), _record("copy", 3000.0)], device="cpu")
    assert law.copy_gbps == 3000.0
    with pytest.raises(ValueError, match="no copy"):
        demos.littles_law([_record("selu_naive", 1.0)], device="cpu")
    unknown = demos.littles_law([_record("copy", 1.0, device="Some Accelerator")], device="cpu")
    assert (unknown.gpu.sms, unknown.gpu.threads_per_sm) == (132, 2048)
    assert "Some Accelerator" in unknown.gpu.name and "assumed" in unknown.gpu.name


def test_littles_law_reads_the_committed_reference():
    reference = [r for r in results.load_reference() if r["numel"] == env.REFERENCE_NUMEL
                 and r["dtype"] == "float32" and r["op"] == "forward"]
    if not reference:
        pytest.skip("no committed H100 records")
    law = demos.littles_law(reference, device="cpu")  # the H100's shape, whatever this machine has
    assert (law.gpu.sms, law.gpu.threads_per_sm) == (132, 2048)
    assert 0.5 < law.ratio < 2


# ----------------------------------------------------------------------------- section 3a: extern "C"


def test_extern_c_declaration_is_an_undefined_symbol_at_import():
    attempt = demos.pybind_attempt("test_demos_extern_c", declarations='extern "C" ' + RELU_DECLARATION,
                                   definitions=RELU_CPU, functions=("relu",), cuda=False)
    assert attempt.module is None
    assert "undefined symbol" in attempt.error and "relu" in attempt.error
    assert 'extern "C" torch::Tensor relu(torch::Tensor x);' in attempt.bindings
    assert attempt.library is not None  # it linked: the mismatch shows only at import
    table = demos.symbol_table(attempt.library, "relu")
    if shutil.which("nm"):
        found = {s.kind: s for s in demos.symbols(attempt.library, "relu")}
        assert found["U"].mangled == "relu"  # what the bindings ask for
        assert found["T"].mangled == "_Z4reluN2at6TensorE"  # what the definition is
        assert "_Z4reluN2at6TensorE" in table
    else:
        assert "nm (GNU binutils) not found" in table


def test_symbol_table_without_a_library():
    assert demos.symbol_table(None, "relu") == "no shared library was linked"


# ----------------------------------------------------------------------------- section 3c: expf(x) - 1


def test_cancellation_near_zero(operators):
    found = demos.cancellation_near_zero(device=env.default_device())
    assert found.x.numel() == found.ulp_expf.numel() == found.ulp_expm1.numel() == 181
    assert found.ulp_expf[0] > 10**6  # x = -1e-10: expf(x) rounds to 1, and every digit cancels
    assert found.ulp_expm1.max() <= check.MAX_ULP[torch.float32]
    assert len(found.table().splitlines()) == 1 + 10
    assert found.figure().axes[0].get_xscale() == "log"


# ----------------------------------------------------------------------------- section 3d: -use_fast_math


@pytest.mark.parametrize(("normal", "fast", "verdict"), [
    ("1.0", "1.0", "nothing"),
    ("1e-45", "0.0", "flushed to +0"),
    ("-3e-45", "-0.0", "flushed to -0"),
    ("1.0", "nan", "NaN made"),
    ("nan", "1.0", "NaN lost"),
    ("1.0", "1.5", "changed"),
])
def test_what_fast_math_did(normal, fast, verdict):
    assert demos.what_fast_math_did(normal, fast) == verdict


@pytest.mark.skipif(env.nvcc_path() is None, reason="needs nvcc")
def test_show_fast_math_ptx_reads_the_naive_kernel(capsys):
    # selu_naive.cu holds more kernels than notebook 02's (the unrolled control): the demo
    # must pick that one by its whole name.
    demos.show_fast_math_ptx()
    out = capsys.readouterr().out
    assert "selu kernel:" in out and "all by .ftz only: True" in out


def test_measure_fast_math_on_the_cpu_changes_nothing(operators, tmp_path, monkeypatch):
    table = demos.measure_fast_math(device="cpu")
    assert len(table["rows"]) == demos.fast_math_probe("cpu").numel()
    assert all(row[4] == "nothing" for row in table["rows"])  # nvcc's flag: the CPU build is the same
    monkeypatch.setenv(results.RESULTS_ENV_VAR, str(tmp_path))
    path = demos.save_fast_math(table, slug="cpu")
    assert path == tmp_path / "cpu" / demos.FAST_MATH_FILE
    assert json.loads(path.read_text()) == table


def test_committed_fast_math_table_shows_flushed_denormals():
    committed = demos.load_fast_math()
    if committed is None:
        pytest.skip("no committed H100 table")
    shown = demos.FastMathTable(committed, "reference")
    assert "flushed to" in shown.summary()
    assert len(str(shown).splitlines()) == 2 + len(committed["rows"]) + 2


def test_fast_math_special_values_without_a_gpu_is_the_committed_table():
    if env.can_build_cuda():
        pytest.skip("a GPU measures it")
    shown = demos.fast_math_special_values()
    assert shown.table == demos.load_fast_math()
    assert "reference" in shown.source or "no committed" in shown.source


def test_compare_fast_math_on_the_cpu(operators):
    text = demos.compare_fast_math(check.harness_input(2048, device="cpu"))
    assert "the two builds vs each other: 100% of 2,048 elements identical" in text
    assert "passed" in text


def test_fast_math_ordinary_inputs_skips_without_a_gpu():
    if env.can_build_cuda():
        pytest.skip("runs on the GPU")
    assert isinstance(demos.fast_math_ordinary_inputs(), demos.Skipped)


# ----------------------------------------------------------------------------- section 3e: 32-bit counts


@pytest.mark.parametrize(("value", "held"), [
    (2**31 - 1, 2**31 - 1), (2**31, -2**31), (2**31 + 2**20, -2**31 + 2**20), (2**32 + 2**20, 2**20), (-1, -1),
])
def test_as_int32_wraps_like_a_c_int(value, held):
    import ctypes

    assert demos.as_int32(value) == held == ctypes.c_int32(value).value


def test_int32_table():
    lines = demos.int32_table().splitlines()
    assert len(lines) == 5 and lines[-1].split()[1] == "1,048,576"


def test_run_int32_count_below_two_to_the_31(operators):
    x = bench.random_input(10_000, device="cpu", seed=0)
    found = demos.run_int32_count(x)
    assert (found.numel, found.unwritten_mistake, found.unwritten_correct) == (10_000, 0, 0)
    assert set(found.worst_ulp) == {0, 5_000, 10_000 - 4096}
    assert max(found.worst_ulp.values()) <= check.MAX_ULP[torch.float32]
    assert "fits an int" in str(found)


def test_int32_count_demo_without_a_gpu_says_what_would_happen():
    if env.can_build_cuda():
        pytest.skip("runs on the GPU")
    skipped = demos.int32_count_demo()
    assert isinstance(skipped, demos.Skipped) and "int n holds 1,048,576" in str(skipped)


@pytest.mark.gpu
def test_int32_count_demo_on_the_gpu(operators):
    numel = 2**31 + 12345  # the count wraps negative: nothing is written
    if not env.fits_on_gpu(numel, torch.float32, tensors=3):
        pytest.skip("not enough free GPU memory")
    found = demos.int32_count_demo(numel)
    assert found.unwritten_mistake == numel and found.unwritten_correct == 0
    assert max(found.worst_ulp.values()) <= check.MAX_ULP[torch.float32]


# ----------------------------------------------------------------------------- section 3f: zeros_like


def test_zeros_like_ratio():
    records = [_record("selu_naive_out_zeros_like", 1.0, median_ms=3.0),
               _record("selu_naive_out_empty_like", 1.0, median_ms=2.0)]
    assert demos.zeros_like_ratio(records) == pytest.approx(1.5)
    assert demos.zeros_like_ratio(records[:1]) is None


# ----------------------------------------------------------------------------- section 3g: streams


def test_stream_race_skips_without_a_gpu():
    if env.can_build_cuda():
        pytest.skip("runs on the GPU")
    assert "streams are a CUDA concept" in str(demos.stream_race())


@pytest.mark.gpu
def test_stream_race_on_the_gpu(operators):
    race = demos.stream_race(numel=2**20)
    assert race.wrong_current == 0
    assert race.wrong_legacy > race.numel // 2  # ran before the copy landed


def test_zeros_like_summary_reads_the_runs_and_the_fill():
    records = [_record("selu_naive_out_zeros_like", 1.0, median_ms=3.0) | {"repeat_medians_ms": [3.0, 3.3]},
               _record("selu_naive_out_empty_like", 1.0, median_ms=2.0) | {"repeat_medians_ms": [2.0, 2.0]}]
    text = demos.zeros_like_summary(records)
    assert "zeros_like / empty_like: 1.50× (1.50–1.65× over 2 runs)" in text
    assert "no record of the zero fill alone" in text
    fill = _record(demos.ZERO_FILL, 1.0, median_ms=1.0)
    text = demos.zeros_like_summary(records + [fill])
    fill_gbps = fill["numel"] * 4 / 1.0 / 1e6
    assert f"the zero fill alone: 1.000 ms, writing {fill_gbps:.0f} GB/s" in text
    assert "empty_like's kernel + the fill alone: 3.000 ms; zeros_like measured: 3.000 ms" in text
    assert demos.zeros_like_summary(records[:1]) == "no records of both allocations"


def test_zeros_like_summary_prints_the_copy_of_every_run():
    records = [_record("selu_naive_out_zeros_like", 1.0, median_ms=3.0) | {"repeat_medians_ms": [3.0, 3.0]},
               _record("selu_naive_out_empty_like", 1.0, median_ms=2.0) | {"repeat_medians_ms": [2.0, 2.0]},
               _record(bench.COPY, 1.0, median_ms=1.5) | {"repeat_medians_ms": [1.75, 1.5]}]
    assert demos.zeros_like_summary(records).endswith("the copy's median in each run: 1.750, 1.500 ms")


def _after_free(copy_ms):
    return {"device": "Test GPU", "device_slug": "test", "numel": 1000, "dtype": "float32",
            "freed_bytes": 34_368_126_976, "copy_ms": copy_ms}


def test_copy_after_free_line_counts_the_slow_copies_at_the_start():
    table = _after_free([5.0, 4.9, 4.95, 4.30, 4.26, 5.0, 4.25, 4.25, 4.24, 4.25])  # 4.30: slower, not slow
    text = demos.copy_after_free_line(table, "measured")
    assert "10 copies of 1,000 float32 elements" in text and "34.4 GB went back to the driver" in text
    assert "the first 3 copies, 15 ms in all: 4.950 ms per copy" in text
    assert "settled: 4.250 ms per copy" in text
    assert text.endswith("slow copies after those first 3: 1")
    settled = demos.copy_after_free_line(_after_free([4.25] * 10), "measured")
    assert "no copy at the start ran more than 5% over the settled time" in settled
    assert demos.copy_after_free_line(None, "needs a GPU").startswith("no copy timed after a free")


def test_copy_after_free_without_a_gpu_is_the_committed_table_or_says_it_needs_one(monkeypatch):
    monkeypatch.setattr(env, "can_build_cuda", lambda: False)
    table, source = demos.copy_after_free()
    assert (table is None and "needs a GPU" in source) or (
        source.startswith("no GPU here; reference") and table["copy_ms"] and table["freed_bytes"] > 30e9)


@pytest.mark.gpu
def test_measure_copy_after_free_times_every_copy():
    table = demos.measure_copy_after_free(numel=2**20, freed_numel=2**28, copies=20)
    assert len(table["copy_ms"]) == 20 and all(t > 0 for t in table["copy_ms"])
    assert table["freed_bytes"] == 2 * 2**28 * 4


# ----------------------------------------------------------------------------- section 2: the latency probe


def test_measure_latency_on_the_cpu(operators):
    build.load("latency_chain", backend="cpu")
    table = demos.measure_latency("cpu", table_bytes=1 << 20, steps=1 << 12)
    assert table["steps"] == 1 << 12 and table["table_bytes"] == 1 << 20
    assert table["latency_ns"] > 0 and table["median_ms"] > table["no_steps_ms"]
    line = demos.latency_line(table, "measured in this run")
    assert line.endswith("measured in this run)") and " ns per dependent load over a " in line
    assert demos.latency_line(None, "needs a GPU").startswith("no latency measured")
    assert not table["l2_flushed"] and "L2" not in line  # a CPU has no L2 flush to miss
    gpu = {**table, "device": "Test GPU", "device_slug": "test"}
    assert "did not flush L2" in demos.latency_line(gpu, "measured") and "did not" not in \
        demos.latency_line({**gpu, "l2_flushed": True}, "measured")
    assert demos.latency_s(table) == pytest.approx(table["latency_ns"] * 1e-9)
    assert demos.latency_s(None) == demos.DRAM_LATENCY_S  # nothing measured: the assumption


def test_latency_without_a_gpu_is_the_committed_table_or_says_it_needs_one(monkeypatch):
    monkeypatch.setattr(env, "can_build_cuda", lambda: False)
    table, source = demos.latency()
    assert (table is None and "needs a GPU" in source) or source.startswith("no GPU here; reference")
    with pytest.raises(ValueError, match="power of two"):
        demos.random_cycle(12)


def test_latency_on_a_gpu_loads_the_probe_before_measuring(monkeypatch, tmp_path):
    # The notebooks call demos.latency() without loading anything: it must load the
    # probe's library itself, or pointer_chase has no CUDA kernel to run.
    calls = []
    monkeypatch.setattr(env, "can_build_cuda", lambda: True)
    monkeypatch.setenv("HELPERS_RESULTS_DIR", str(tmp_path))
    monkeypatch.setattr(build, "load", lambda name, **_: calls.append(("load", name)))
    table = {"device": "a GPU", "device_slug": "gpu", "latency_ns": 600.0}
    monkeypatch.setattr(demos, "measure_latency", lambda: calls.append(("measure",)) or table)
    assert demos.latency()[0] == table
    assert calls == [("load", "latency_chain"), ("measure",)]
