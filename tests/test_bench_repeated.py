"""helpers.bench.measure_repeated: one run's ratios, every run's medians."""
import pytest
import torch

from helpers import bench, results


@pytest.fixture(autouse=True)
def short_cpu_timing(monkeypatch):
    monkeypatch.setenv("CI", "true")  # the CPU timer measures 0.05 s per function


def test_measure_repeated_returns_the_first_run_with_every_median(monkeypatch):
    calls = []
    real_measure = bench.measure

    def counting_measure(*args, **kwargs):
        calls.append(kwargs["x"])
        return real_measure(*args, **kwargs)

    monkeypatch.setattr(bench, "measure", counting_measure)
    records = bench.measure_repeated({"torch_eager": torch.selu}, 4096, repeats=3, device="cpu")
    assert [r["variant"] for r in records] == ["copy", "torch_eager"]
    assert len(calls) == 3 and all(x is calls[0] for x in calls)  # one input for every run
    for r in records:
        assert len(r["repeat_medians_ms"]) == 3
        assert r["repeat_medians_ms"][0] == pytest.approx(r["median_ms"], rel=1e-5)  # the first run's record
    assert results.pct_of_copy(records[1], records) is not None  # the copy of the same run


def test_measure_repeated_uses_the_given_input_and_checks_repeats():
    x = bench.random_input(1000, torch.float64, "cpu", seed=0)
    records = bench.measure_repeated({"torch_eager": torch.selu}, 1000, repeats=2, x=x, include_copy=False)
    assert [r["dtype"] for r in records] == ["float64"] and len(records[0]["repeat_medians_ms"]) == 2
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        bench.measure_repeated({}, 1000, repeats=0)


def test_settle_runs_are_measured_first_and_dropped(monkeypatch):
    runs = []
    real_measure = bench.measure

    def numbered_measure(*args, **kwargs):
        records = real_measure(*args, **kwargs)
        runs.append(records)
        return records

    monkeypatch.setattr(bench, "measure", numbered_measure)
    records = bench.measure_repeated({"torch_eager": torch.selu}, 1000, repeats=2, settle_runs=1, device="cpu")
    assert len(runs) == 3  # one settling run, then the two that count
    kept = [run[0]["median_ms"] for run in runs[1:]]
    assert records[0]["repeat_medians_ms"] == [float(f"{m:.6g}") for m in kept]
    assert records[0]["run"] == runs[1][0]["run"] != runs[0][0]["run"]  # the first kept run, not the settling one
    with pytest.raises(ValueError, match="settle_runs must be at least 0"):
        bench.measure_repeated({}, 1000, settle_runs=-1)
