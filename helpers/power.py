"""What a kernel draws from the board, and the SM clock it gets for it (notebook 03b).

A GPU has a board power limit (700 W for the H100 SXM and the H200, datasheet). When a
kernel would draw more, the GPU lowers the SM clock until it does not, and says so in its
clock event reasons ("SW power cap"). Every instruction then takes longer, and so does
any kernel whose time is not all memory. This module runs one kernel back to back for a
couple of seconds while ``nvidia-smi`` samples the board's power, the SM clock and the
reasons, and reports both sides:

>>> table = helpers.power.measure_power("cuda")            # doctest: +SKIP
>>> helpers.power.summarize(table["rows"][0]["samples"])   # doctest: +SKIP
"""
from __future__ import annotations

import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable

import torch

from . import bench, env, ops

RUN_S = 2.0  # each kernel runs back to back this long
SETTLE_S = 0.6  # the first part of a run is left out: power and clock settle in a few hundred ms
SAMPLE_MS = 50
SW_POWER_CAP = 0x4  # nvmlClocksEventReasonSwPowerCap: the clock is lowered to stay under the power limit
# Newer drivers name the fields below; older ones power.draw (averaged) and clocks_throttle_reasons.
FIELDS = (("power.draw.instant", "power.draw"), ("clocks.sm",),
          ("clocks_event_reasons.active", "clocks_throttle_reasons.active"))
DTYPES = ("float32", "float64", "bfloat16", "float16")


def _smi_id(device: torch.device) -> str:
    """The GPU as nvidia-smi names it: its PCI address, which does not depend on CUDA_VISIBLE_DEVICES."""
    props = torch.cuda.get_device_properties(device)
    if not hasattr(props, "pci_bus_id"):  # an older torch: the CUDA index, right unless devices are hidden
        return str(device.index or 0)
    return f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"


def _query(fields: list[str], gpu: str) -> subprocess.CompletedProcess:
    return subprocess.run(["nvidia-smi", "-i", gpu, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, timeout=30)


def query_fields(gpu: str) -> list[str] | None:
    """The first name of each field of :data:`FIELDS` that this driver knows; None without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    chosen = []
    for names in FIELDS:
        name = next((n for n in names if _query([n], gpu).returncode == 0), None)
        if name is None:
            return None
        chosen.append(name)
    return chosen


def parse_sample(line: str) -> tuple[float, float, int] | None:
    """``"689.12, 1965, 0x0000000000000004"`` → (watts, MHz, reasons); None for a line that is not one."""
    parts = [p.strip() for p in line.split(",")]
    try:
        return float(parts[0]), float(parts[1]), int(parts[2], 16)
    except (IndexError, ValueError):
        return None


def summarize(samples: list[list[float]]) -> dict:
    """Median power and SM clock of ``samples`` ([watts, MHz, reasons] each), the lowest clock,
    and the share of samples in which the clock was lowered for the power limit."""
    watts, mhz, reasons = zip(*samples)
    return {"power_w": statistics.median(watts), "clock_mhz": statistics.median(mhz), "min_clock_mhz": min(mhz),
            "power_capped": sum(int(r) & SW_POWER_CAP != 0 for r in reasons) / len(reasons)}


class _Sampler:
    """nvidia-smi in the background, every line stamped with the host's clock when it arrived."""

    def __init__(self, fields: list[str], gpu: str):
        self.lines: list[tuple[float, str]] = []
        self._process = subprocess.Popen(
            ["nvidia-smi", "-i", gpu, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
             f"-lms={SAMPLE_MS}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.perf_counter() + 10
        while not self.lines and time.perf_counter() < deadline:  # sampling has begun before any kernel runs
            time.sleep(0.01)

    def _read(self):
        for line in self._process.stdout:
            self.lines.append((time.perf_counter(), line))

    def between(self, start: float, end: float) -> list[list[float]]:
        return [list(s) for t, line in self.lines if start <= t <= end and (s := parse_sample(line)) is not None]

    def stop(self):
        self._process.terminate()
        self._process.wait(timeout=10)
        self._reader.join(timeout=10)


def run_back_to_back(fn: Callable[[], object], device: torch.device, seconds: float = RUN_S) -> list[tuple[float, float]]:
    """Call ``fn`` again and again for ``seconds``: (host time at its end, GPU ms) of every call."""
    fn()
    torch.cuda.synchronize(device)
    calls, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        calls.append((time.perf_counter(), begin.elapsed_time(end)))
    return calls


def variants(x: torch.Tensor, out: torch.Tensor) -> dict[str, Callable[[], object]]:
    return {bench.COPY: lambda: out.copy_(x), "selu_vectorized": lambda: ops.selu_vectorized_out(x, out),
            "torch_eager": lambda: torch.selu(x)}


def measure_power(device=None, dtypes=DTYPES, seconds: float = RUN_S) -> dict | None:
    """Each variant of :func:`variants` on each dtype at the problem size, run back to back
    while nvidia-smi samples the board: ms per call, GB/s, and :func:`summarize` of the samples
    after the first :data:`SETTLE_S`. None where there is no GPU or no nvidia-smi."""
    device = torch.device(device) if device is not None else env.default_device()
    if device.type != "cuda":
        return None
    gpu = _smi_id(device)
    fields = query_fields(gpu)
    if fields is None:
        return None
    try:
        limit_w = float(_query(["power.limit"], gpu).stdout.strip())
    except ValueError:  # "[N/A]" on a board that does not report it
        limit_w = None
    table = {"device": torch.cuda.get_device_name(device), "device_slug": env.device_slug(device),
             "fields": fields, "power_limit_w": limit_w,
             "run_s": seconds, "settle_s": SETTLE_S, "rows": []}
    sampler = _Sampler(fields, gpu)
    try:
        for dtype in dtypes:
            numel, _ = env.problem_numel(getattr(torch, dtype), tensors=4)
            x = bench.random_input(numel, dtype, device, seed=0)
            out = torch.empty_like(x)
            for name, fn in variants(x, out).items():
                start = time.perf_counter()
                calls = run_back_to_back(fn, device, seconds)
                settled = start + SETTLE_S
                samples = sampler.between(settled, calls[-1][0])
                if not samples:
                    continue  # nvidia-smi gave nothing in the window: no row rather than a row of nothing
                ms = statistics.median(t for end, t in calls if end >= settled)
                table["rows"].append({"dtype": dtype, "numel": numel, "variant": name, "median_ms": ms,
                                      "gbps": bench.gbps(bench.bytes_moved(numel, dtype), ms), "samples": samples})
            del x, out
            torch.cuda.empty_cache()
    finally:
        sampler.stop()
    return table
