"""helpers/power.py and notebook 03b's power table: what a kernel draws, and the clock it gets."""
from __future__ import annotations

import pytest
import torch

from helpers import every_gpu, power


def test_parse_sample_reads_nvidia_smi_lines():
    assert power.parse_sample("689.12, 1965, 0x0000000000000004\n") == (689.12, 1965.0, 4)
    assert power.parse_sample("[N/A], 1965, 0x0") is None
    assert power.parse_sample("") is None


def test_summarize_counts_the_samples_lowered_for_power():
    samples = [[700.0, 1500.0, 0x4], [690.0, 1700.0, 0x4 | 0x1], [600.0, 1980.0, 0x0], [650.0, 1900.0, 0x8]]
    found = power.summarize(samples)
    assert found == {"power_w": 670.0, "clock_mhz": 1800.0, "min_clock_mhz": 1500.0, "power_capped": 0.5}


def test_issue_time_grows_as_the_clock_falls():
    # 32 instructions per element: one warp instruction per element, 132 x 4 issue per clock
    at_top = every_gpu.issue_time_ms(132 * 4 * 1980 * 1000, 32, 1980)
    assert at_top == pytest.approx(1.0)
    assert every_gpu.issue_time_ms(132 * 4 * 1980 * 1000, 32, 990) == pytest.approx(2.0)


def _power_run(capped_clock=1500.0):
    def row(variant, ms, clock, reasons):
        return {"dtype": "bfloat16", "numel": 2**30, "variant": variant, "median_ms": ms, "gbps": 1.0,
                "samples": [[690.0, clock, reasons]] * 3}
    return {"device": "Test GPU", "device_slug": "test", "power_limit_w": 700.0, "run_s": 2.0, "settle_s": 0.6,
            "fields": ["power.draw.instant", "clocks.sm", "clocks_event_reasons.active"],
            "rows": [row("copy", 1.5, 1980.0, 0x0), row("selu_vectorized", 1.6, capped_clock, 0x4),
                     row("torch_eager", 2.4, capped_clock, 0x4)]}


def test_power_table_puts_the_issue_floor_at_the_measured_clock():
    counts = {"test": {"per_element": {"bfloat16": {"selu_vectorized": 24.0, "torch.selu": 45.0}}}}
    text = str(every_gpu.power_table({"test": _power_run()}, counts))
    issue = every_gpu.issue_time_ms(2**30, 24.0, 1500.0)
    assert f"| selu_vectorized | 1.600 | 690 | 1,500 (lowest 1,500) | 100% | {issue:.2f} ms ({issue / 1.6:.0%}) |" in text
    assert "| copy | 1.500 | 690 | 1,980 (lowest 1,980) | 0% | – |" in text
    assert "board power limit: TEST 700 W" in text
    # a faster clock gives a smaller floor
    assert every_gpu.issue_time_ms(2**30, 24.0, 1980.0) < issue
    assert "no power records" in str(every_gpu.power_table({}))


def test_power_lines_say_how_often_each_kernel_was_held_back():
    text = every_gpu.power_lines({"test": _power_run()})
    assert "copy at 690 W and 1,980 MHz, clock lowered for power in 0% of samples" in text
    assert "selu_vectorized at 690 W and 1,500 MHz, clock lowered for power in 100% of samples" in text
    assert text.count("\n") == 3 and "torch_eager at 690 W" in text


def test_no_power_measurement_without_a_gpu():
    assert power.measure_power("cpu") is None


@pytest.mark.gpu
def test_power_run_samples_the_board():
    from helpers import build

    build.load("selu_vectorized")
    table = power.measure_power("cuda", dtypes=("float32",), seconds=1.0)
    if table is None:
        pytest.skip("nvidia-smi is not here")
    assert {r["variant"] for r in table["rows"]} == {"copy", "selu_vectorized", "torch_eager"}
    for row in table["rows"]:
        found = power.summarize(row["samples"])
        assert found["power_w"] > 0 and found["clock_mhz"] > 0 and row["median_ms"] > 0
    assert torch.cuda.is_available()
