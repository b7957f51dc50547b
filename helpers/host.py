"""When a GPU timer sees the host: the CPU's share of a small call (notebook 01, section 3).

``triton.testing.do_bench`` times each call with CUDA events, and before each call it
flushes the L2 cache by writing a 256 MiB buffer on the GPU. While the GPU is busy with
that flush the host queues the call's launch, so the host's work (Python, dispatch,
``torch.compile``'s guards) stays out of the reading. Only as long as the host is
faster than the flush: once it is not, the GPU waits for the launch after the start
event, and the reading takes in the host's time. This module measures both sides of that race:

>>> table, source = helpers.host.host_time()  # doctest: +SKIP
>>> print(helpers.host.host_time_lines(table, source))  # doctest: +SKIP

* the flush's GPU time (:func:`l2_flush_us`);
* the host time per call of eager and compiled ``torch.selu`` (:func:`helpers.bench.per_call_us`
  on a tensor small enough for the GPU to keep up), sampled a few times, since the host's
  speed varies from moment to moment;
* the experiment that shows the threshold: eager ``torch.selu`` with a busy-wait of
  known length added before each call, timed as every other variant is
  (:func:`with_host_work`).
"""
from __future__ import annotations

import functools
import statistics
import time

import torch

from . import bench, env, results

HOST_TIME_FILE = "01_host_time.json"
HOST_TIME_NUMEL = 2**16  # small: its kernel takes a few microseconds
HOST_WORK_US = (0, 20, 40, 60, 80, 100)  # busy-waits added before each call, microseconds
HOST_SAMPLES = 7  # host-time samples per function, spread over about a second
SAMPLE_S = 0.05  # each sample times blocks of calls for at least this long
LEFT_THE_GPU_TIME = 2.0  # a reading this many times the reading with no added work has left the GPU's time


def with_host_work(fn, microseconds: float):
    """``fn`` with a busy-wait of ``microseconds`` on the host before each call: host work of
    known length, where a Python wrapper or a guard check would be."""
    def slowed(x: torch.Tensor) -> torch.Tensor:
        until = time.perf_counter() + microseconds * 1e-6
        while time.perf_counter() < until:
            pass
        return fn(x)

    return slowed


def l2_flush_us(device=None, repeats: int = 50) -> float | None:
    """GPU time, in microseconds, of the L2 flush that ``triton.testing.do_bench`` runs before
    every timed call (its own buffer and its own call); None without triton or a GPU."""
    device = torch.device(device) if device is not None else env.default_device()
    if device.type != "cuda":
        return None
    try:
        from triton import runtime
    except ImportError:
        return None
    with torch.cuda.device(device):
        driver = runtime.driver.active
        cache = driver.get_empty_cache_for_benchmark()
        driver.clear_cache(cache)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            driver.clear_cache(cache)
        end.record()
        torch.cuda.synchronize(device)
    return start.elapsed_time(end) / repeats * 1e3


def _selu_one_size(x: torch.Tensor) -> torch.Tensor:
    # bench._selu's twin with its own code object, so that torch.compile keeps a cache of
    # its own for it: the compiled function with one size compiled, beside the one that
    # the sweep has compiled for every size.
    return torch.selu(x)


@functools.lru_cache(maxsize=1)
def compiled_one_size():
    """``torch.compile(torch.selu)`` as :func:`helpers.bench.compiled_selu` builds it,
    with a cache of its own."""
    return torch.compile(_selu_one_size, dynamic=False)


def compiled_sizes() -> int | None:
    """How many compiled versions :func:`helpers.bench.compiled_selu` holds (one per size and
    dtype it has seen), each with guards a call may check; None where torch does not say."""
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list
        return len(_debug_get_cache_entry_list(bench._selu.__code__))
    except Exception:  # a private function: gone or changed in another torch
        return None


def _samples(fns: dict, x: torch.Tensor, samples: int) -> dict[str, list[float]]:
    # Interleaved, so that every function sees the host at the same moments.
    out = {name: [] for name in fns}
    for _ in range(samples):
        for name, fn in fns.items():
            out[name].append(round(bench.per_call_us(lambda fn=fn: fn(x), x.device, SAMPLE_S), 2))
    return out


def measure_host_time(device=None, numel: int = HOST_TIME_NUMEL, work_us=HOST_WORK_US,
                      samples: int = HOST_SAMPLES) -> dict:
    """Everything :func:`host_time_lines` reads, measured here, as a JSON-ready table."""
    device = torch.device(device) if device is not None else env.default_device()
    x = bench.random_input(numel, torch.float32, device)
    fns = {"torch_eager": torch.selu}
    peers = bench.peers(torch.float32, device)
    if "torch_compile" in peers:
        fns["torch_compile"] = peers["torch_compile"]
        fns["torch_compile, one size compiled"] = compiled_one_size()
    table = {"device": bench.device_name(device), "device_slug": env.device_slug(device), "numel": numel,
             "dtype": "float32", "compiled_sizes": compiled_sizes() if "torch_compile" in fns else None,
             "l2_flush_us": l2_flush_us(device), "host_us_per_call": _samples(fns, x, samples),
             "sample_s": SAMPLE_S, "method": None, "with_host_work": []}
    for us in work_us:
        timing = bench.time_fn(lambda us=us: with_host_work(torch.selu, us)(x), device=device)
        table["method"] = timing.method
        table["with_host_work"].append({"added_us": us, "median_us": round(timing.median_ms * 1e3, 2),
                                        "q20_us": round(timing.q20_ms * 1e3, 2),
                                        "q80_us": round(timing.q80_ms * 1e3, 2)})
    return table


def host_time():
    """:func:`measure_host_time` on this GPU (saved as :data:`HOST_TIME_FILE`), or the committed
    H100 table; and a line that says which."""
    return results.here_or_reference_table(measure_host_time, HOST_TIME_FILE)


def hidden_budget_us(table: dict) -> float | None:
    """The most added host work that the timer still hid: the largest added busy-wait
    before the first one whose reading is :data:`LEFT_THE_GPU_TIME` times the reading
    with none (None if every reading stayed, or the first already left)."""
    rows = table["with_host_work"]
    base = rows[0]["median_us"]
    for before, row in zip(rows, rows[1:]):
        if row["median_us"] >= LEFT_THE_GPU_TIME * base:
            return float(before["added_us"])
    return None


def _range(values: list[float]) -> str:
    return f"{min(values):.1f}–{max(values):.1f} µs (median {statistics.median(values):.1f})"


def host_time_lines(table: dict | None, source: str) -> str:
    """The table of :func:`measure_host_time` in words, with the verdict it supports."""
    if table is None:
        return f"no host time measured: {source}"
    lines = [f"{table['device']}, float32, {table['numel']:,} elements ({source})"]
    if table["l2_flush_us"] is not None:
        lines.append(f"do_bench's L2 flush before each timed call: {table['l2_flush_us']:.1f} µs of GPU time")
    per_call = table["host_us_per_call"]
    lines.append(f"host time per call, {len(next(iter(per_call.values())))} samples of "
                 f"{table['sample_s'] * 1e3:g} ms each:")
    for name, values in per_call.items():
        extra = (f", {table['compiled_sizes']} versions compiled"
                 if name == "torch_compile" and table.get("compiled_sizes") else "")
        lines.append(f"  {name:<33} {_range(values)}{extra}")
    lines.append(f"eager torch.selu with host work added before each call, as {table['method']} times it:")
    for row in table["with_host_work"]:
        lines.append(f"  +{row['added_us']:>4} µs of host work: {row['median_us']:7.1f} µs "
                     f"[{row['q20_us']:.1f}, {row['q80_us']:.1f}]")
    budget = hidden_budget_us(table)
    if budget is None or "torch_compile" not in per_call:
        return "\n".join(lines)
    eager = statistics.median(per_call["torch_eager"])
    limit = budget + eager
    over = sum(v > limit for v in per_call["torch_compile"])
    lines.append(f"hidden: up to +{budget:g} µs of added host work, about {limit:.0f} µs of host time per call "
                 f"with eager's own; torch_compile's host time was above that in {over} of "
                 f"{len(per_call['torch_compile'])} samples")
    return "\n".join(lines)


def _size(numel: int) -> str:
    return f"2^{numel.bit_length() - 1}" if numel & (numel - 1) == 0 else f"{numel:,}"


def above_eager(records: list[dict], variant: str = "torch_compile") -> str:
    """The sizes of a sweep at which ``variant``'s median is above eager's 80th percentile,
    with both medians: where a line of the throughput figure falls below eager's."""
    by_size: dict[int, dict[str, dict]] = {}
    for record in records:
        by_size.setdefault(record["numel"], {})[record["variant"]] = record
    sizes = [n for n, r in sorted(by_size.items()) if variant in r and "torch_eager" in r]
    slower = [n for n in sizes if by_size[n][variant]["median_ms"] > by_size[n]["torch_eager"]["q80_ms"]]
    if not sizes:
        return f"no sizes with both {variant} and torch_eager"
    head = f"{variant} above eager's 80th percentile at {len(slower)} of {len(sizes)} sizes"
    if not slower:
        return head
    parts = [f"{_size(n)}: {by_size[n][variant]['median_ms'] * 1e3:.1f} µs against "
             f"{by_size[n]['torch_eager']['median_ms'] * 1e3:.1f}" for n in slower]
    return head + ":\n  " + "\n  ".join(parts)
