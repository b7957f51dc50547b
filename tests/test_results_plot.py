"""helpers.results and helpers.plot: merge semantics on disk, tables, and figures
whose JSON holds the numbers they draw. Every file goes to a temporary folder."""
from __future__ import annotations

import json

import pytest
import torch
from matplotlib.figure import Figure

from helpers import bench, env, plot, results

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def results_in_tmp(monkeypatch, tmp_path):
    """Point the results folder at a temporary one: a test never writes results/."""
    monkeypatch.setenv("HELPERS_RESULTS_DIR", str(tmp_path))
    return tmp_path


def record(variant, numel, median_ms, *, dtype="float32", op="forward", slug="h100", spread=0.1, run="run-1",
           config=None, experiment=None):
    """A record as bench.measure makes it, with a chosen time (q20/q80 +-spread)."""
    timing = bench.Timing(median_ms, median_ms * (1 - spread), median_ms * (1 + spread), 100, "test")
    r = bench.record(variant, op, bench._as_dtype(dtype), numel, timing, torch.device("cpu"), run, config, experiment)
    r.update(device_slug=slug, device="Test GPU 80GB", date="2026-11-20")
    return r


@pytest.fixture
def sweep_records():
    """copy, a kernel at 80% of it and a slow one at 50%, at three sizes."""
    rows = []
    for numel in (2**20, 2**22, 2**24):
        copy_ms = numel * 8 / 3e12 * 1e3  # 3000 GB/s
        rows += [record("copy", numel, copy_ms), record("vec4", numel, copy_ms / 0.8)]
        rows += [record("naive", numel, copy_ms / 0.5)]
    return rows


# --------------------------------------------------------------------------- results


def test_results_dir_follows_the_environment(monkeypatch, tmp_path):
    assert results.results_dir() == tmp_path
    monkeypatch.setenv("HELPERS_RESULTS_DIR", "scratch/results")  # relative: to the repository
    assert results.results_dir() == env.REPO_ROOT / "scratch" / "results"
    monkeypatch.delenv("HELPERS_RESULTS_DIR")
    assert results.results_dir() == env.REPO_ROOT / "results"


def test_save_replaces_the_same_key_and_keeps_the_others(tmp_path):
    first = [record("copy", 2**20, 1.0), record("vec4", 2**20, 2.0), record("vec4", 2**22, 8.0)]
    path = results.save(first)
    assert path == tmp_path / "h100" / "benchmarks.json"

    again = [record("vec4", 2**20, 1.5), record("vec4", 2**20, 3.0, dtype="bfloat16")]
    results.save(again)
    stored = {(r["variant"], r["dtype"], r["numel"]): r["median_ms"] for r in results.load("h100")}
    assert stored == {
        ("copy", "float32", 2**20): 1.0,  # kept
        ("vec4", "float32", 2**20): 1.5,  # replaced: same variant, op, dtype, numel
        ("vec4", "float32", 2**22): 8.0,  # kept: another size
        ("vec4", "bfloat16", 2**20): 3.0,  # added: another dtype
    }
    # No temporary file is left behind by the atomic write.
    assert [p.name for p in path.parent.iterdir()] == ["benchmarks.json"]


def test_save_keys_on_the_launch_configuration_and_never_stores_a_ratio(tmp_path):
    one, two = bench.launch_config(128, 1), bench.launch_config(256, 4)
    rows = [record("copy", 2**20, 1.0), record("vec", 2**20, 2.0, config=one), record("vec", 2**20, 3.0, config=two)]
    results.save(results.with_roofline_ratios(rows))  # a display copy with ratios, saved by mistake
    stored = results.load("h100")
    assert sorted((r["variant"], r["median_ms"]) for r in stored) == [("copy", 1.0), ("vec", 2.0), ("vec", 3.0)]
    assert all("pct_of_copy" not in r for r in stored)
    assert results.pct_of_copy(results.find(stored, "vec", config=two), stored) == pytest.approx(100 / 3)


def test_save_keeps_apart_two_experiments_that_time_one_launch(tmp_path):
    """Notebook 03's control and its launch sweep both time 256 threads x 1 vector: the sweep,
    saved later, must not replace the control's record, or the control's run loses its row."""
    launch = bench.launch_config(256, 1)
    results.save([record("copy", 2**20, 1.0, run="control"),
                  record("vec", 2**20, 2.0, config=launch, run="control", experiment="control")])
    results.save([record("copy", 2**20, 1.1, run="sweep"), record("vec", 2**20, 2.5, config=launch, run="sweep")])
    results.save([record("copy", 2**20, 1.2, run="sweep-2"), record("vec", 2**20, 2.4, config=launch, run="sweep-2")])
    stored = sorted((r["run"], r.get("experiment"), r["median_ms"])
                    for r in results.load("h100") if r["variant"] == "vec")
    assert stored == [("control", "control", 2.0), ("sweep-2", None, 2.4)]  # the sweep's own record is replaced
    loaded = results.load("h100")  # find names the experiment, or takes the record that has none
    assert results.find(loaded, "vec", config=launch, experiment="control")["median_ms"] == 2.0
    assert results.find(loaded, "vec", config=launch)["median_ms"] == 2.4
    measured = bench.measure({"v": bench.Variant(torch.neg, "vec", launch, experiment="control")}, 2**10, device="cpu")
    assert [r.get("experiment") for r in measured] == [None, "control"]  # the copy, then the variant


def test_saved_file_is_sorted_and_stable(tmp_path):
    rows = [record("vec4", 2**22, 8.0), record("copy", 2**20, 1.0), record("copy", 2**22, 4.0)]
    path = results.save(rows)
    text = path.read_text()
    assert results.save(list(reversed(rows))).read_text() == text  # order of saving does not matter
    stored = json.loads(text)
    assert [(r["numel"], r["variant"]) for r in stored] == [(2**20, "copy"), (2**22, "copy"), (2**22, "vec4")]
    assert all(list(r) == sorted(r) for r in stored)  # keys sorted too: a diff shows values only


def test_save_needs_one_device_or_a_slug(tmp_path):
    mixed = [record("copy", 2**20, 1.0, slug="h100"), record("copy", 2**20, 9.0, slug="cpu")]
    with pytest.raises(ValueError):
        results.save(mixed)
    assert results.save(mixed[:1], slug="elsewhere") == tmp_path / "elsewhere" / "benchmarks.json"


def test_load_of_nothing_saved_is_empty_and_reference_reads_the_repository(tmp_path):
    assert results.load("no-such-device") == []
    assert results.load_reference("no-such-device") == []
    # Records saved to the scratch folder are not the committed reference.
    results.save([record("copy", 2**20, 1.0, slug="scratch-only")])
    assert results.load("scratch-only") and results.load_reference("scratch-only") == []


def test_table_lists_time_throughput_and_percent_of_copy(sweep_records):
    text = results.table(sweep_records, numel=2**24)
    lines = text.splitlines()
    assert lines[0] == "| variant | dtype | numel | median ms | GB/s | % of copy |"
    assert len(lines) == 2 + 3  # header, alignment, one row per variant at that size
    assert [line.split("|")[1].strip() for line in lines[2:]] == ["**copy**", "vec4", "naive"]  # fastest first
    assert "| 3000.0 | 100.0% |" in lines[2]
    assert "| 2400.0 | 80.0% |" in lines[3]
    assert "| 1500.0 | 50.0% |" in lines[4]
    assert "16,777,216" in lines[2]


def test_table_computes_ratios_from_the_same_run_and_filters_op_and_dtype():
    rows = [record("copy", 2**20, 1.0), record("vec4", 2**20, 4.0), record("vec4", 2**20, 1.0, dtype="bfloat16")]
    rows += [record("copy", 2**20, 0.1, run="another run")]  # not the yardstick of run-1's records
    text = results.table(rows, dtype="float32")
    assert "25.0%" in text and "bfloat16" not in text
    assert "(no records)" in results.table(rows, op="backward")


def test_display_table_prints_outside_jupyter(capsys, sweep_records):
    results.display_table(sweep_records, numel=2**20)
    assert "% of copy" in capsys.readouterr().out


def test_figure_path_is_under_the_device_figures_folder(tmp_path):
    assert results.figure_path("throughput", slug="h100") == tmp_path / "h100" / "figures" / "throughput.png"
    assert results.figure_path("bars.png", slug="cpu") == tmp_path / "cpu" / "figures" / "bars.png"


def test_reference_label_names_the_device_and_no_date(sweep_records):
    assert results.reference_label(sweep_records) == "Test GPU 80GB"  # a printed date would change every run


def test_here_or_reference_measures_on_a_gpu_and_reads_the_reference_elsewhere(monkeypatch, tmp_path):
    measured = [record("copy", 2**20, 1.0), record("vec4", 2**20, 2.0)]
    monkeypatch.setattr(env, "can_build_cuda", lambda: True)
    here = results.here_or_reference(lambda: measured, variants=["vec4"])
    assert here.measured and list(here) == measured and "measured in this run" in here.source
    assert results.load("h100") != []  # and saved
    monkeypatch.setattr(env, "can_build_cuda", lambda: False)
    monkeypatch.setattr(results, "load_reference", lambda slug: measured + [record("other", 2**20, 3.0)])
    elsewhere = results.here_or_reference(lambda: pytest.fail("must not measure"), variants=["vec4"])
    assert not elsewhere.measured and sorted(r["variant"] for r in elsewhere) == ["copy", "vec4"]
    assert elsewhere.source.startswith("no GPU here; reference: Test GPU 80GB")
    assert results.table(elsewhere).startswith(f"*{elsewhere.source}*")


# --------------------------------------------------------------------------- plots


def test_committed_records_shown_elsewhere_are_not_filed_again(tmp_path, sweep_records):
    """make reproduce on a CPU shows the committed GPU records; it must not write them as its own."""
    shown = results.Records(sweep_records, source="no GPU here; reference", measured=False)
    plot.throughput(shown, title="SELU forward", save_as="throughput")
    assert not list(tmp_path.rglob("*.png"))
    plot.throughput(results.Records(sweep_records, source="measured in this run", measured=True),
                    title="SELU forward", save_as="throughput")
    assert (tmp_path / "h100" / "figures" / "throughput.png").exists()


def test_throughput_writes_png_and_the_plotted_numbers(tmp_path, sweep_records):
    label = results.reference_label(sweep_records)
    fig = plot.throughput(sweep_records, title="SELU forward", save_as="throughput", label=label)
    assert isinstance(fig, Figure)
    png = tmp_path / "h100" / "figures" / "throughput.png"  # with the records' device
    assert png.read_bytes().startswith(PNG_MAGIC)
    data = json.loads(png.with_suffix(".json").read_text())
    assert data["label"] == label and data["dtype"] == "float32"
    assert data["variants"] == ["copy", "vec4", "naive"] and set(data["series"]) == set(data["variants"])
    vec4 = data["series"]["vec4"]
    assert vec4["numel"] == [2**20, 2**22, 2**24]
    assert vec4["gbps"] == pytest.approx([2400.0] * 3)
    assert all(lo < mid < hi for lo, mid, hi in zip(vec4["gbps_q20"], vec4["gbps"], vec4["gbps_q80"]))
    # The copy is the dashed black roofline; the label is shown.
    ax = fig.axes[0]
    (copy_line,) = [line for line in ax.get_lines() if line.get_label() == plot.COPY_LABEL]
    assert copy_line.get_linestyle() == "--" and copy_line.get_color() == "black"
    assert ax.get_title() == label and ax.get_xscale() == "log"


def test_throughput_picks_variants_and_refuses_mixed_devices(tmp_path, sweep_records):
    fig = plot.throughput(sweep_records, title="t", variants=["copy", "naive"], save_as=tmp_path / "two")
    assert [line.get_label() for line in fig.axes[0].get_lines()] == [plot.COPY_LABEL, "naive"]
    assert json.loads((tmp_path / "two.json").read_text())["variants"] == ["copy", "naive"]
    with pytest.raises(ValueError):
        plot.throughput(sweep_records + [record("copy", 2**20, 1.0, slug="cpu")], title="t")
    with pytest.raises(ValueError):
        plot.throughput(sweep_records, title="t", dtype="bfloat16")


def test_the_datasheet_peak_is_drawn_where_the_gpu_has_one(tmp_path, sweep_records):
    h100 = [{**r, "device": "NVIDIA H100 80GB HBM3"} for r in sweep_records]
    assert plot.throughput(sweep_records, title="t", save_as=tmp_path / "none").axes[0].get_legend() is not None
    assert json.loads((tmp_path / "none.json").read_text())["datasheet_gbps"] is None  # no datasheet entry: no line
    fig = plot.throughput(h100, title="t", save_as=tmp_path / "sweep")
    (line,) = [line for line in fig.axes[0].get_lines() if line.get_label() == "datasheet peak (3350 GB/s)"]
    assert list(line.get_ydata()) == [3350.0, 3350.0]
    assert json.loads((tmp_path / "sweep.json").read_text())["datasheet_gbps"] == 3350.0


def test_a_marked_size_is_drawn_and_saved_with_the_figure(tmp_path, sweep_records):
    fig = plot.throughput(sweep_records, title="t", save_as=tmp_path / "sweep", marks={"levels off": 2**20})
    (line,) = [line for line in fig.axes[0].get_lines() if line.get_label() == "levels off"]
    assert list(line.get_xdata()) == [2**20, 2**20]
    assert json.loads((tmp_path / "sweep.json").read_text())["marks"] == {"levels off": 2**20}


def test_a_variant_keeps_its_colour_and_the_throughput_axis_is_logarithmic(sweep_records):
    """The same variant is drawn in the same colour in every figure, whichever lines are
    beside it; the throughput axis is logarithmic, so small sizes are not flattened at the bottom."""
    both = plot.throughput(sweep_records, title="t")
    alone = plot.throughput(sweep_records, title="t", variants=["copy", "naive"])
    colour = {fig: {line.get_label(): line.get_color() for line in fig.axes[0].get_lines()} for fig in (both, alone)}
    assert colour[both]["naive"] == colour[alone]["naive"] == plot.variant_color("naive")
    assert colour[both]["vec4"] != colour[both]["naive"]
    assert plot.variant_color("torch_eager") != plot.variant_color("torch_compile")
    assert both.axes[0].get_yscale() == "log"


def test_save_keeps_each_stored_records_copy_and_drops_copies_nobody_needs(tmp_path):
    results.save([record("copy", 2**20, 1.0, run="a"), record("vec", 2**20, 2.0, run="a")])
    results.save([record("copy", 2**20, 1.1, run="b"), record("eager", 2**20, 2.2, run="b")])
    stored = results.load("h100")
    assert sorted(r["run"] for r in stored if r["variant"] == "copy") == ["a", "b"]  # both still needed
    assert results.pct_of_copy(results.find(stored, "vec"), stored) == pytest.approx(50.0)  # run a's copy
    results.save([record("copy", 2**20, 1.2, run="c"), record("vec", 2**20, 2.4, run="c")])
    stored = results.load("h100")
    assert sorted(r["run"] for r in stored if r["variant"] == "copy") == ["b", "c"]  # run a is gone
    results.save([record("copy", 2**20, 1.3, run="d")])  # a copy on its own (notebook 00's sweep)
    assert sorted(r["run"] for r in results.load("h100") if r["variant"] == "copy") == ["b", "c", "d"]


def test_reference_keeps_only_the_copies_of_the_chosen_records_runs(monkeypatch):
    rows = [record("copy", 2**20, 1.0, run="a"), record("vec", 2**20, 2.0, run="a"),
            record("copy", 2**20, 1.5, run="b"), record("other", 2**20, 3.0, run="b")]
    monkeypatch.setattr(results, "load_reference", lambda slug: rows)
    chosen = results.reference(variants=["vec"])
    assert [(r["variant"], r["run"]) for r in chosen] == [("copy", "a"), ("vec", "a")]
    assert chosen.source.startswith("reference: Test GPU 80GB")
    only_copies = results.reference(variants=[])
    assert sorted(r["run"] for r in only_copies) == ["a", "b"]


def test_here_or_reference_table_measures_on_a_gpu_and_reads_the_committed_table_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setenv("HELPERS_RESULTS_DIR", str(tmp_path))
    monkeypatch.setattr(env, "can_build_cuda", lambda: True)
    measured = {"device": "a GPU", "device_slug": "gpu", "rows": [1, 2]}
    table, source = results.here_or_reference_table(lambda: measured, "probe.json")
    assert table == measured and source == "measured in this run on a GPU"
    assert json.loads((tmp_path / "gpu" / "probe.json").read_text()) == measured
    monkeypatch.setattr(env, "can_build_cuda", lambda: False)
    table, source = results.here_or_reference_table(lambda: pytest.fail("measured without a GPU"), "04_memory.json")
    assert table["rows"] and source.startswith("no GPU here; reference: NVIDIA H100")
    assert results.here_or_reference_table(lambda: None, "none.json") == (
        None, "needs a GPU, and there is no committed H100 table yet")


def test_tables_of_every_gpu_measure_this_one_and_read_the_others_committed(tmp_path, monkeypatch):
    monkeypatch.setattr(env, "can_build_cuda", lambda: True)
    monkeypatch.setattr(env, "device_slug", lambda device=None: "h200")
    measured = {"device": "NVIDIA H200", "rows": [1]}
    tables = results.tables_of_every_gpu("A1_tuning.json", lambda: measured)
    assert tables["h200"] == measured and json.loads((tmp_path / "h200" / "A1_tuning.json").read_text()) == measured
    assert tables["h100"] == results.load_table("A1_tuning.json", "h100") is not None  # the committed H100 table
    assert (results.table_source("h200"), results.table_source("h100")) == ("H200 (this run)", "H100 (committed run)")
    monkeypatch.setattr(env, "can_build_cuda", lambda: False)
    tables = results.tables_of_every_gpu("A1_tuning.json", lambda: pytest.fail("measured without a GPU"))
    assert sorted(tables) == ["h100", "h200"] and results.table_source("h200") == "H200 (committed run)"
    assert results.tables_of_every_gpu("no_such_table.json", lambda: None) == {}


def test_markdown_table_aligns_its_columns():
    assert results.markdown_table(["a", "b"], [[1, "x"]], ["---", "---:"]) == "| a | b |\n|---|---:|\n| 1 | x |"
    assert results.markdown_table(["a"], []) == "| a |\n|---|"


def test_a_bar_inside_a_markdown_table_cell_is_escaped_not_a_new_column():
    text = results.markdown_table(["outcome", "ok"], [["max |Δ| = 1e-07 × max |value|", "PASS"]])
    row = text.splitlines()[2]
    assert row == "| max \\|Δ\\| = 1e-07 × max \\|value\\| | PASS |"
    assert len(row.replace("\\|", "").split("|")) == 4  # two cells: the row's bars are the separators only


# --------------------------------------------------------------------------- a notebook's own timings


def test_a_notebooks_own_timings_read_back_as_it_saved_them(monkeypatch, tmp_path):
    """save_times keeps do_bench's (median, q20, q80) per name with the copy of the same run; without a GPU,
    committed_times hands the same dict back from the committed records, at the size they were timed at."""
    x = torch.zeros(1000)
    saved = results.save_times({"copy": (1.0, 0.9, 1.1), "k": (2.0, 1.8, 2.5)}, x, experiment="nb")
    assert {r["run"] for r in saved} == {saved[0]["run"]}
    assert results.pct_of_copy(saved[1], saved) == pytest.approx(50.0)
    later = results.save_times({"copy": (1.2, 1.1, 1.3), "k": (2.4, 2.2, 2.6), "j": (1.2, 1.1, 1.3)}, x,
                               experiment="nb")
    other = results.save_times({"copy": (1.0, 1.0, 1.0), "k": (9.0, 9.0, 9.0)}, x, experiment="elsewhere")
    committed = results.load(env.device_slug(x.device), tmp_path)
    monkeypatch.setattr(results, "load_reference", lambda slug: committed)
    times, source = results.committed_times(["k", "j"], numel=1000, dtype=torch.float32, experiment="nb")
    assert times == {"copy": (1.2, 1.1, 1.3), "k": (2.4, 2.2, 2.6), "j": (1.2, 1.1, 1.3)}  # `later`: k and j
    assert "1,000 elements" in source and saved[0]["device"] in source
    assert results.committed_times(["k"], numel=None, dtype="float32", experiment="elsewhere")[0]["k"][0] == 9.0
    assert results.committed_times(["k"], numel=999, dtype=torch.float32, experiment="nb")[0] == {}
    assert later[0]["run"] != other[0]["run"]


def test_save_times_needs_the_copy():
    with pytest.raises(ValueError, match="yardstick"):
        results.save_times({"k": (2.0, 1.8, 2.5)}, torch.zeros(4))
