"""helpers.report: notebook 03's tables, checks and measurements.

Tables are read from records built here, in the new format (``run``, ``config``)
and in the old one (launch configurations in variant names, no run); the
functions that compute run on the CPU through the course's operators; and the
measuring path that notebook 03 takes on a GPU runs here on the CPU, with
``env.can_build_cuda`` patched to say yes, so that its code is exercised before
it meets an H100. Every file goes to a temporary folder.
"""
from __future__ import annotations

import json

import pytest
import torch
from matplotlib.figure import Figure

from helpers import bench, build, check, env, report, results

COPY = bench.COPY
REF = env.REFERENCE_NUMEL


@pytest.fixture(autouse=True)
def results_in_tmp(monkeypatch, tmp_path):
    """A test never writes results/."""
    monkeypatch.setenv("HELPERS_RESULTS_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture(scope="module")
def kernels():
    build.load("selu_vectorized")
    build.load("selu_naive")


def rec(variant, numel, ms, *, dtype="float32", run="run-1", config=None, repeats=None, slug="h100"):
    """A record as bench.measure makes it, with a chosen median time."""
    timing = bench.Timing(ms, ms * 0.99, ms * 1.01, 10, "test")
    r = bench._record(variant, "forward", bench._as_dtype(dtype), numel, timing, torch.device("cpu"), run, config)
    r.update(device="Test GPU 80GB", device_slug=slug, date="2026-11-20")
    if repeats is not None:
        r["repeat_medians_ms"] = repeats
    return r


def cfg(threads, vectors, cap=0):
    return bench.launch_config(threads, vectors, cap)


def as_records(rows, measured=False, source="reference: Test GPU 80GB, 2026-11-20"):
    return results.Records(rows, source=source, measured=measured)


# --------------------------------------------------------------------------- small pieces


@pytest.mark.parametrize("registers, threads_per_block, expected", [
    (11, 256, 2048), (32, 256, 2048), (36, 256, 1536), (56, 256, 1024), (64, 256, 1024), (255, 256, 256),
    (40, 128, 1536),
])
def test_resident_threads_follow_the_register_file(registers, threads_per_block, expected):
    assert report.resident_threads(registers, threads_per_block) == expected


def test_loaded_bytes_counts_vector_scalar_and_read_only_loads_but_not_stores():
    body = """
        ld.global.v4.f32 	{%f1, %f2, %f3, %f4}, [%rd1];
        ld.global.nc.v2.f64 	{%fd1, %fd2}, [%rd2];
        @%p1 ld.global.u16 	%rs1, [%rd3];
        ld.param.u64 	%rd4, [param_0];
        st.global.v4.f32 	[%rd5], {%f1, %f2, %f3, %f4};
    """
    assert report.loaded_bytes(body) == 16 + 16 + 2


def test_launch_configs_are_twenty_distinct_configurations_of_one_variant():
    configs = report.launch_configs()
    assert len(configs) == len(report.VECTORS) * len(report.THREADS) + len(report.CAPS) == 20
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == 20
    variants = report.launch_variants()
    assert {v.name for v in variants.values()} == {"selu_vectorized"}
    assert [v.config for v in variants.values()] == configs


def test_headline_variants_add_the_naive_kernel_to_fp32_and_eager_shape_to_half_types(monkeypatch, kernels):
    monkeypatch.setattr(bench, "peers", lambda dtype, device=None: {"torch_eager": torch.selu})
    fp32 = report.headline_variants(torch.float32)
    assert list(fp32) == ["torch_eager", "selu_vectorized", "copy_vectorized", "selu_naive"]
    for dtype in (torch.float16, torch.bfloat16):
        extra = [v for v in report.headline_variants(dtype).values() if isinstance(v, bench.Variant)]
        assert [(v.name, v.config) for v in extra] == [("selu_vectorized", cfg(128, 1, 0))]
    assert "selu_naive" not in report.headline_variants(torch.float64)


# --------------------------------------------------------------------------- tables from records


@pytest.fixture
def launch_records():
    """One run: the copy at 4 ms and every launch configuration, 4 ms x (1 + its index / 100)."""
    rows = [rec(COPY, REF, 4.0, run="launch")]
    for i, config in enumerate(report.launch_configs()):
        rows.append(rec("selu_vectorized", REF, 4.0 * (1 + i / 100), run="launch", config=config))
    return as_records(rows)


def test_vectors_threads_table_reads_the_config_field(launch_records):
    text = str(report.vectors_threads_table(launch_records))
    assert "reference: Test GPU" in text
    # 1 vector x 128 threads is the first configuration: the copy's time, 100%.
    row_1 = next(line for line in text.splitlines() if line.startswith("| 1 | 16 B"))
    assert row_1 == f"| 1 | 16 B | 100.0% | {100 / 1.01:.1f}% | {100 / 1.02:.1f}% |"
    assert "fastest: 128 threads × 1 vectors, one-shot grid at 100.0% of the copy" in text
    # the default launch, (128, 2, 0), is the fourth configuration: 4 ms x 1.03
    assert f"the default launch, 128 threads × 2 vectors, one-shot grid: {100 / 1.03:.1f}%" in text


def test_grid_table_has_a_row_per_grid_and_compares_with_one_shot(launch_records):
    text = str(report.grid_table(launch_records, sms=132))
    rows = [line for line in text.splitlines() if line.startswith("| one-shot") or line.startswith("| capped")]
    assert len(rows) == 1 + len(report.CAPS)
    tiles = -(-REF // (256 * 4 * 4))
    oneshot_index = report.launch_configs().index(cfg(256, 4, 0))
    assert rows[0].startswith(f"| one-shot | {tiles:,} | 2,048 | 1 |")
    # capped at 1 per SM: 132 blocks, 256 threads per SM, each block over ceil(tiles / 132) tiles
    cap1_index = report.launch_configs().index(cfg(256, 4, 1))
    change = (1 + cap1_index / 100) / (1 + oneshot_index / 100) - 1
    assert rows[1].startswith(f"| capped, 1 per SM | 132 | 256 | {-(-tiles // 132):,} |")
    assert rows[1].endswith(f"| {change:+.1%} |")
    assert "capped at 4 to 16 blocks per SM" in text


def test_tables_of_old_records_are_empty_not_errors():
    old = [rec(COPY, REF, 4.0, run=None), rec("vectorized_v1_t256_oneshot", REF, 4.0, run=None),
           rec("vectorized_v4_t256_cap8", REF, 4.2, run=None)]
    for r in old:
        del r["run"], r["config"]
    records = as_records(old)
    assert "| 1 | 16 B | – | – | – |" in str(report.vectors_threads_table(records))
    assert "no one-shot record" in str(report.grid_table(records))
    assert "not measured" in str(report.goal_report(records))
    assert report.slowest_against_eager(records) is None
    assert "no selu_vectorized and torch_eager records" in report.curve_verdict(records)


def headline_rows(*, vectorized_ms, eager_ms, compile_ms, copy_ms=2.0, spread=0.0, run="run-h"):
    rows = []
    for dtype in report.GOAL_DTYPES:
        for variant, ms in ((COPY, copy_ms), ("selu_vectorized", vectorized_ms), ("torch_eager", eager_ms),
                            ("torch_compile", compile_ms)):
            rows.append(rec(variant, REF, ms, dtype=dtype, run=run, repeats=[ms, ms + spread, ms]))
    return rows


def test_goal_report_passes_and_misses_from_one_run():
    good = str(report.goal_report(headline_rows(vectorized_ms=2.01, eager_ms=2.4, compile_ms=2.02), "good"))
    assert good.startswith("**good**") and "MISS" not in good
    assert good.count("PASS") == 4 * 3  # fp32, fp64: copy, eager, compile; each half type: copy, eager, compile
    with_triton = headline_rows(vectorized_ms=2.01, eager_ms=2.4, compile_ms=2.02)
    with_triton += [rec(bench.TRITON, REF, 2.0, dtype=d, run="run-h", repeats=[2.0] * 3) for d in report.GOAL_DTYPES]
    beaten = str(report.goal_report(with_triton, "triton"))
    assert "bfloat16: not slower than triton beyond the spread | +0.0100 ms" in beaten and "**MISS**" in beaten
    assert "float32: not slower than triton" not in beaten  # the Triton goal is the 16-bit types' only
    slow = str(report.goal_report(headline_rows(vectorized_ms=2.1, eager_ms=2.2, compile_ms=2.0), "slow"))
    assert "| float32: ≤ 1.01 × copy | 1.050 × copy" in slow and "| **MISS** |" in slow
    assert "| bfloat16: ≥ 1.12× faster than eager | 1.048×" in slow
    # Within the spread is not slower.
    close = str(report.goal_report(headline_rows(vectorized_ms=2.01, eager_ms=2.4, compile_ms=2.0, spread=0.02)))
    assert "float32: not slower than torch_compile beyond the spread | +0.0100 ms (spread 0.0200 ms) | PASS" in close


def test_goal_report_never_compares_across_runs():
    rows = headline_rows(vectorized_ms=2.0, eager_ms=2.4, compile_ms=2.0)
    for r in rows:
        if r["variant"] == "torch_eager" and r["dtype"] == "float32":
            r["run"] = "another run"
    text = str(report.goal_report(rows, "mixed"))
    assert "float32 (torch_eager)" in text and "float32: ≤" not in text
    assert "bfloat16: ≤ 1.03 × copy" in text


def test_slowest_against_eager_and_the_verdict():
    rows = []
    for k, ratio in ((14, 0.5), (16, 1.0), (18, 0.96), (20, 1.02)):
        rows += [rec("torch_eager", 2**k, 1.0, run=f"r{k}"), rec("selu_vectorized", 2**k, 1.0 / ratio, run=f"r{k}")]
    rows.append(rec("selu_vectorized", 2**18, 100.0, run="r18", config=cfg(128, 1)))  # not the default launch
    ratio, numel = report.slowest_against_eager(rows)
    assert (ratio, numel) == (pytest.approx(0.96), 2**18)
    verdict = report.curve_verdict(as_records(rows, source="reference: H"))
    assert verdict.startswith("reference: H: ") and "at least 0.960 (at 262,144 elements)" in verdict
    assert verdict.endswith("PASS")
    assert report.slowest_against_eager(rows, smallest=2**12)[0] == pytest.approx(0.5)


def _rounds_table(rows):
    return {"device": "Test GPU 80GB", "device_slug": "h100", "rounds": 3, "window_ms": [5, 20],
            "rows": [{"numel": n, "selu_vectorized_ms": ours, "torch_eager_ms": eager} for n, ours, eager in rows]}


def test_the_curve_is_judged_on_its_rounds_where_it_has_them():
    """At 2^16 the sweep's one median says 0.5, but the rounds say eager and the kernel take
    the same time on average (their own ratios 0.9-1.1): the rounds decide there, the records
    decide above them (2^20: 0.96)."""
    rows = []
    for k, ratio in ((16, 0.5), (20, 0.96)):
        rows += [rec("torch_eager", 2**k, 1.0, run=f"r{k}"), rec("selu_vectorized", 2**k, 1.0 / ratio, run=f"r{k}")]
    table = _rounds_table([(2**16, [1.0, 1.1, 0.9], [1.1, 1.0, 0.9])])
    assert report.rounds_against_eager(table)[2**16][0] == pytest.approx(1.0)
    assert report.slowest_against_eager(rows) == (pytest.approx(0.5), 2**16)
    assert report.slowest_against_eager(rows, rounds_table=table) == (pytest.approx(0.96), 2**20)
    table = _rounds_table([(2**16, [1.0, 1.2, 1.1], [0.9, 0.9, 1.0])])
    verdict = report.curve_verdict(as_records(rows, source="reference: H"), table)
    assert "at least 0.900 (at 65,536 elements; the median of 3 rounds' ratios, which span 0.750–0.909)" in verdict
    assert verdict.endswith("MISS")


def test_one_disturbed_round_does_not_decide_the_curve():
    """A round in which the kernel's calls all took 4x as long would pull a mean of the
    rounds to 0.625; the median of the rounds' ratios stays at 1."""
    table = _rounds_table([(2**16, [1.0, 1.0, 4.0, 1.0, 1.0], [1.0] * 5)])
    ratio, ratios = report.rounds_against_eager(table)[2**16]
    assert ratio == pytest.approx(1.0) and min(ratios) == pytest.approx(0.25)
    assert report.slowest_against_eager([], rounds_table=table) == (pytest.approx(1.0), 2**16)


def test_measure_curve_rounds_takes_turns_at_every_size():
    table = report.measure_curve_rounds("cpu", rounds=2, smallest=2**10, largest=2**11)
    assert [row["numel"] for row in table["rows"]] == [2**10, 2**11]
    assert all(len(row["selu_vectorized_ms"]) == len(row["torch_eager_ms"]) == 2 for row in table["rows"])
    assert table["rounds"] == 2 and table["window_ms"] == list(report.CURVE_ROUND_WINDOW_MS)
    assert set(report.rounds_against_eager(table)) == {2**10, 2**11}


def test_the_sweep_times_every_point_in_the_curve_window(monkeypatch):
    windows, released = [], []

    def fake_time_fn(fn, *, device=None, window_ms=(bench.DO_BENCH_WARMUP_MS, bench.DO_BENCH_REP_MS)):
        windows.append(tuple(window_ms))
        return bench.Timing(1.0, 1.0, 1.0, None, "fake")

    monkeypatch.setattr(bench, "time_fn", fake_time_fn)
    monkeypatch.setattr(bench, "_release_memory", lambda device: released.append(device))
    monkeypatch.setattr(report, "curve_variants", lambda device=None: {"torch_eager": torch.selu})
    records = report.measure_curve("cpu", max_log2=13)
    assert windows and set(windows) == {tuple(report.CURVE_WINDOW_MS)}
    assert len(windows) == len(records)  # the copy and the variant, at every size
    assert report.CURVE_WINDOW_MS[1] < bench.DO_BENCH_REP_MS
    assert released == []  # only before a size that does not fit otherwise, and on a CPU every size fits
    bench.sweep({"torch_eager": torch.selu}, [2**10, 2**11], device="cpu")
    assert len(released) == 2  # the default: before every size


def test_measure_curve_rounds_refuses_no_rounds():
    with pytest.raises(ValueError, match="at least one round"):
        report.measure_curve_rounds("cpu", rounds=0)


def test_spreads_lists_every_variant_of_every_dtype():
    text = report.spreads(headline_rows(vectorized_ms=2.0, eager_ms=2.4, compile_ms=2.0, spread=0.5))
    assert len(text.splitlines()) == len(report.GOAL_DTYPES)
    assert "float32 spread over 3 runs" in text and "torch_eager 0.5 ms" in text


def test_roofline_figures_save_only_what_this_machine_measured(tmp_path):
    rows = headline_rows(vectorized_ms=2.0, eager_ms=2.4, compile_ms=2.1)
    figures = report.roofline_figures(as_records(rows))
    assert len(figures) == len(report.GOAL_DTYPES) and all(isinstance(f, Figure) for f in figures)
    assert not (tmp_path / "h100").exists()
    report.roofline_figures(as_records(rows, measured=True))
    assert sorted(p.name for p in (tmp_path / "h100" / "figures").glob("*.json")) == [
        "03_roofline_bfloat16.json", "03_roofline_float16.json", "03_roofline_float32.json",
        "03_roofline_float64.json"]


def test_roofline_figures_skip_a_dtype_whose_run_has_no_copy(capsys):
    rows = [r for r in headline_rows(vectorized_ms=2.0, eager_ms=2.4, compile_ms=2.1)
            if not (r["variant"] == COPY and r["dtype"] == "float16")]
    assert len(report.roofline_figures(as_records(rows))) == len(report.GOAL_DTYPES) - 1
    assert "float16: no copy" in capsys.readouterr().out


def test_roofline_figures_draw_the_kernels_run_only():
    # Another notebook's run can replace a peer's record of the same key (notebook 01's
    # torch_eager at the reference size, say); its copy is not the kernel's yardstick.
    n = env.REFERENCE_NUMEL
    rows = [rec(COPY, n, 4.25), rec("selu_vectorized", n, 4.24),
            rec(COPY, n, 4.26, run="run-2"), rec("torch_eager", n, 4.28, run="run-2")]
    (figure,) = report.roofline_figures(as_records(rows))
    labels = [t.get_text() for t in figure.axes[0].get_yticklabels()]
    assert labels == ["selu_vectorized"]


def test_throughput_figure_draws_what_there_is(capsys):
    rows = [rec(v, 2**k, 1.0, run=f"r{k}") for k in (12, 14) for v in (COPY, "selu_vectorized", "torch_eager")]
    assert isinstance(report.throughput_figure(as_records(rows)), Figure)
    empty = results.Records([], source="no GPU here, and no committed H100 records of these yet", measured=False)
    assert report.throughput_figure(empty) is None
    assert "no committed" in capsys.readouterr().out


def test_littles_law_reads_the_copy_and_each_kernels_share():
    rows = as_records([rec(COPY, REF, 4.0), rec("selu_naive", REF, 5.0), rec("selu_vectorized", REF, 4.0)])
    text = report.littles_law(rows)
    assert "132 SMs x 2,048 threads" in text and "1.02x the need" not in text
    assert "H100 reference: selu_naive at 80.0% of the copy's throughput" in text
    assert "no copy" in report.littles_law([])  # nothing to compute from: said, not raised


# --------------------------------------------------------------------------- the reference, filtered


@pytest.fixture
def committed(monkeypatch):
    """A committed H100 file in the new format, as a GPU run of notebook 03 leaves it."""
    rows = [rec(COPY, REF, 4.0, run="launch")]
    rows += [rec("selu_vectorized", REF, 4.1, run="launch", config=c) for c in report.launch_configs()]
    for dtype in check.DTYPES:
        name = bench.dtype_name(dtype)
        rows += [rec(v, REF, 4.0, dtype=name, run=f"head-{name}", repeats=[4.0] * 3)
                 for v in (COPY, "selu_vectorized", "torch_eager", "torch_compile")]
        if name in report.HALF_TYPES:
            rows.append(rec("selu_vectorized", REF, 4.5, dtype=name, run=f"head-{name}", config=cfg(128, 1)))
    rows.append(rec("selu_naive", REF, 5.0, dtype="float32", run="head-float32"))
    rows += [rec(v, 2**k, 1.0, run=f"curve-{k}") for k in (12, 13, 14) for v in (COPY, "selu_vectorized")]
    monkeypatch.setattr(env, "can_build_cuda", lambda: False)
    monkeypatch.setattr(results, "load_reference", lambda slug=env.REFERENCE_DEVICE_SLUG: [dict(r) for r in rows])
    return rows


def test_each_section_takes_its_own_records_from_the_reference(committed):
    first = report.first_look()
    assert not first.measured and first.source.startswith("no GPU here")
    assert sorted(r["variant"] for r in first) == [COPY, "selu_naive", "selu_vectorized"]  # the copy of their run
    assert all(r.get("config") is None for r in first)

    launch = report.launch_sweep()
    assert len(launch) == 1 + 20 and all(r["dtype"] == "float32" for r in launch)

    head = report.headline()
    configs = [(r["dtype"], r["config"]) for r in head if r["config"] is not None]
    assert sorted(configs, key=str) == [("bfloat16", cfg(128, 1)), ("float16", cfg(128, 1))]
    assert len(head) == 4 * 4 + 2 + 1
    assert "PASS" in str(report.goal_report(head))

    curve = report.curve()
    assert sorted({r["numel"] for r in curve}) == [2**12, 2**13, 2**14]  # powers of two only
    assert all(r.get("config") is None for r in curve)


def test_an_empty_reference_says_so(monkeypatch):
    monkeypatch.setattr(env, "can_build_cuda", lambda: False)
    monkeypatch.setattr(results, "load_reference", lambda slug=env.REFERENCE_DEVICE_SLUG: [])
    launch = report.launch_sweep()
    assert launch == [] and "no committed H100 records" in launch.source
    assert "no committed H100 records" in str(report.vectors_threads_table(launch))


def test_old_committed_records_leave_the_config_tables_empty(monkeypatch):
    old = [rec(COPY, REF, 4.0, run=None), rec("vectorized_v4_t256_cap8", REF, 4.2, run=None)]
    for r in old:
        del r["run"], r["config"]
    monkeypatch.setattr(env, "can_build_cuda", lambda: False)
    monkeypatch.setattr(results, "load_reference", lambda slug=env.REFERENCE_DEVICE_SLUG: old)
    launch = report.launch_sweep()
    assert launch == [] and "no committed" in launch.source


# --------------------------------------------------------------------------- the GPU path, run on the CPU


@pytest.fixture
def gpu_path(monkeypatch, kernels):
    """here_or_reference measures (as on a GPU) but on the CPU, with small sizes and no torch.compile."""
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(env, "can_build_cuda", lambda: True)
    monkeypatch.setattr(bench, "peers", lambda dtype=torch.float32, device=None, **_: {
        "torch_eager": torch.selu, "torch_compile": lambda x: torch.selu(x)})


def test_first_look_and_launch_sweep_measure_save_and_tabulate(gpu_path, tmp_path):
    first = report.first_look()
    assert first.measured and first.source.startswith("measured in this run")
    assert [r["variant"] for r in first] == [COPY, "selu_naive", "selu_vectorized", "copy_vectorized"]
    assert "selu_vectorized at" in report.littles_law(first)
    # A measured latency changes what Little's law asks for: twice the latency, twice the bytes.
    assert report.littles_law(first, latency_s=1.4e-6) != report.littles_law(first)

    launch = report.launch_sweep()
    assert len(launch) == 21 and len({r["run"] for r in launch}) == 1
    assert [r["config"] for r in launch[1:]] == report.launch_configs()
    assert "–" not in str(report.vectors_threads_table(launch))
    grid = str(report.grid_table(launch))
    assert grid.count("| capped") == len(report.CAPS)
    stored = results.load("cpu", tmp_path)
    assert sum(r["config"] is not None for r in stored) == 20


def test_the_control_measures_every_unrolling_and_the_vectorized_kernel(gpu_path):
    records = report.control()
    assert records.measured
    assert [r["variant"] for r in records] == [COPY, *map(report.unrolled_variant, report.UNROLLED),
                                               "selu_vectorized"]
    assert all(len(r["repeat_medians_ms"]) == 3 for r in records)
    table = str(report.control_table(records))
    assert table.count("| selu_naive_unrolled_x") == len(report.UNROLLED)
    assert "| selu_vectorized (256 threads × 1 vectors, one-shot grid) | 16 B | 1 | 1,024 |" in table


def test_the_control_keeps_the_run_that_timed_the_unrolled_kernels(monkeypatch):
    other = [rec(COPY, REF, 4.0, run="sweep"), rec("selu_vectorized", REF, 4.1, run="sweep", config=report.CONTROL_LAUNCH)]
    control = [rec(COPY, REF, 4.0, run="control"), rec(report.unrolled_variant(1), REF, 5.0, run="control"),
               rec("selu_vectorized", REF, 4.2, run="control", config=report.CONTROL_LAUNCH)]
    monkeypatch.setattr(results, "here_or_reference", lambda *a, **k: as_records(other + control))
    assert {r["run"] for r in report.control()} == {"control"}
    monkeypatch.setattr(results, "here_or_reference", lambda *a, **k: as_records(other))
    assert list(report.control()) == []  # no control run committed: nothing from the sweep's run


def test_control_table_reads_the_records():
    rows = [rec(COPY, REF, 4.0)]
    rows += [rec(report.unrolled_variant(k), REF, 4.0 * (1 + 0.1 / k), repeats=[4.0, 4.04]) for k in report.UNROLLED]
    rows.append(rec("selu_vectorized", REF, 4.0, config=report.CONTROL_LAUNCH))
    rows.append(rec("selu_vectorized", REF, 3.0, config=cfg(128, 2)))  # another launch: not the control's
    table = str(report.control_table(as_records(rows)))
    assert f"| selu_naive_unrolled_x4 | 16 B | 4 | 1,024 | {100 / 1.025:.1f}% | 1.0% |" in table
    assert "| selu_vectorized (256 threads × 1 vectors, one-shot grid) | 16 B | 1 | 1,024 | 100.0% | – |" in table
    assert "128 threads" not in table
    assert "no records" in str(report.control_table(as_records([rec(COPY, REF, 4.0)])))
    # A row the records lack is said, not dropped.
    without_vectorized = str(report.control_table(as_records(rows[:-2])))
    assert "| selu_vectorized (256 threads × 1 vectors, one-shot grid) | 16 B | 1 | 1,024 | no record of this run | – |" \
        in without_vectorized and "| selu_naive_unrolled_x1 |" in without_vectorized


def test_headline_measures_every_dtype_three_times_and_reports_the_goals(gpu_path, tmp_path):
    head = report.headline()
    assert head.measured
    assert {r["dtype"] for r in head} == {bench.dtype_name(d) for d in check.DTYPES}
    assert all(len(r["repeat_medians_ms"]) == 3 for r in head)
    assert len(report.roofline_figures(head)) == 4
    assert (tmp_path / "cpu" / "figures" / "03_roofline_bfloat16.png").exists()
    text = str(report.goal_report(head))
    assert text.count("| float") + text.count("| bfloat16") == 12 and "not measured" not in text


def test_curve_sweeps_saves_and_draws(gpu_path, tmp_path):
    curve = report.curve()
    assert curve.measured and {r["numel"] for r in curve} == set(env.sweep_sizes())
    assert isinstance(report.throughput_figure(curve), Figure)
    assert (tmp_path / "cpu" / "figures" / "03_vectorized_throughput.json").exists()
    assert report.curve_verdict(curve).startswith("this run: ")


# --------------------------------------------------------------------------- on the CPU, through the operators


def test_agreement_and_views_tables_on_the_cpu(kernels):
    agreement = str(report.agreement_table("cpu", per_distribution=1 << 10))
    assert agreement.count("same places") == 4
    views = str(report.views_table("cpu", numel=256))
    assert views.count("x read element by element") == 2 and views.count("x realigned in registers") == 2
    assert views.count("16-byte vectors + a tail") == 4 and "one element per thread" not in views


def test_launch_path_follows_the_launcher():
    assert report.launch_path(10, 0, 4) == "16-byte vectors + a tail of 2"
    assert report.launch_path(10, 4, 4) == "16-byte stores, x read element by element + a tail of 2"
    # fp16/bf16 realigned: one vector's worth is left to the tail, so that the chunk after the
    # last vector's lies inside the tensor (vectorized_loops.cuh, kSlackElements)
    assert report.launch_path(20, 2, 2) == "16-byte stores, x realigned in registers + a tail of 12"
    assert report.launch_path(16, 6, 2) == "16-byte stores, x realigned in registers + a tail of 8"
    assert report.launch_path(5, 2, 2) == "16-byte stores, x realigned in registers + a tail of 5"
    assert report.launch_path(5, 1, 2) == "one element per thread (not even element-aligned)"


def test_past_2_31_is_skipped_without_a_gpu():
    assert report.check_past_2_31("cpu").startswith("skipped: 2,147,495,993 fp32 elements")


def test_bad_input_table_gives_errors_and_correct_results(kernels):
    by_name = {case.name: case for case in report.bad_inputs("cpu")}
    outcome = report.bad_input_outcome
    for name in ("int32", "bool", "complex64", "float8_e4m3fn"):
        assert outcome("selu_vectorized", by_name[name]).startswith("error: RuntimeError")
    assert outcome("selu_naive", by_name["float16 (and float64, bfloat16)"]).startswith("error")
    assert outcome("selu_vectorized", by_name["float16 (and float64, bfloat16)"]).startswith("correct")
    for name in ("channels_last (2, 8, 6, 5)", "transposed (64, 48)", "strided slice `x[::3]`"):
        text = outcome("selu_vectorized", by_name[name])
        assert text.startswith("correct") and text.endswith("as torch.selu's"), text
    assert "(240, 1, 40, 8)" in outcome("selu_naive", by_name["channels_last (2, 8, 6, 5)"])
    overlap = next(c for c in by_name.values() if c.call == "out_overlap")
    assert "partly overlaps" in outcome("selu_vectorized", overlap)
    in_place = next(c for c in by_name.values() if c.call == "out_is_x")
    assert outcome("selu_naive", in_place).endswith(", in place")
    meta = next(c for c in by_name.values() if c.call == "meta")
    assert outcome("selu_vectorized", meta).endswith("as torch.selu gives")
    table = str(report.bad_input_table("cpu"))
    assert table.count("\n| ") == len(by_name) + 1 and "WRONG" not in table


@pytest.mark.nvcc
def test_kernel_resources_table_from_ptx_and_ptxas():
    text = str(report.kernel_resources_table(report.compile_ptx()))
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) == 1 + 16 + 4
    assert rows[0].startswith("| `selu_naive_kernel<selu_course::SeluOp>` | 0, 0 |")
    assert any(line.startswith("| `selu_vectorized_kernel<float, 4, false, true>` | 4, 4 |") for line in rows)


def test_without_nvcc_the_ptx_cells_say_so(monkeypatch, capsys):
    monkeypatch.setattr(env, "nvcc_path", lambda: None)
    assert report.compile_ptx() is None
    assert report.kernel_resources_table(None) == report.NO_NVCC
    assert "nvcc not found" in capsys.readouterr().out
