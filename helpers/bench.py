"""Timing through a timing library, bytes and GB/s, and the copy roofline.

SELU moves every element once each way, so its speed limit is memory traffic: a copy of the same bytes, timed on the
same input in the same run, is the yardstick of every measurement (its ratio is computed on reading,
:mod:`helpers.results`). Times come from ``triton.testing.do_bench`` on CUDA (events, L2 flushed) and
``torch.utils.benchmark`` elsewhere, never from a ``time.time()`` loop, which on a GPU would time the launch."""
from __future__ import annotations

import datetime
import functools
import gc
import inspect
import math
import platform
import secrets
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import env

COPY = "copy"  # the variant name of the roofline measurement

# How many full-size tensors each op reads and writes: the forward pass reads x and
# writes y; the backward pass reads grad_out and x and writes grad_in; a training
# step is both (x read twice, grad_out once; y and grad_in written).
TENSORS_READ_WRITTEN = {"forward": (1, 1), "backward": (2, 1), "step": (3, 2)}

# do_bench's defaults, written out because the course's text quotes them.
DO_BENCH_WARMUP_MS = 25
DO_BENCH_REP_MS = 100

# Seconds of measurement per variant on the CPU: CI only needs the cells to run.
CPU_MIN_RUN_TIME_S = 0.2
CPU_MIN_RUN_TIME_CI_S = 0.05

COMPILE_RECOMPILE_LIMIT = 64  # sizes compiled per function (dynamo's default: 8); see compiled_selu

METHOD_DO_BENCH = "triton.testing.do_bench"
METHOD_TORCH_BENCHMARK = "torch.utils.benchmark"


@dataclass(frozen=True)
class Timing:
    """One function's time: the median and the 20th/80th percentiles, in ms, over ``n`` samples
    (None where the timing library does not say)."""

    median_ms: float
    q20_ms: float
    q80_ms: float
    n: int | None
    method: str


@dataclass(frozen=True)
class Variant:
    """A function to time under the record name ``name`` with its launch ``config``: one kernel
    under several configurations stays one variant. ``experiment`` keeps apart two measurements
    of the same variant and configuration (:func:`helpers.results.save`)."""

    fn: Callable[[torch.Tensor], torch.Tensor]
    name: str
    config: dict | None = None
    experiment: str | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def launch_config(threads_per_block: int, vectors_per_thread: int, max_blocks_per_sm: int = 0) -> dict:
    """The launch configuration of the vectorized kernel, as records carry it."""
    return {"threads_per_block": threads_per_block, "vectors_per_thread": vectors_per_thread,
            "max_blocks_per_sm": max_blocks_per_sm}


# --------------------------------------------------------------------------- timing


def time_fn(fn: Callable[[], object], *, device: torch.device | str | None = None,
            window_ms: tuple[float, float] = (DO_BENCH_WARMUP_MS, DO_BENCH_REP_MS)) -> Timing:
    """Time ``fn()`` on ``device``: ``do_bench`` with ``window_ms`` of warm-up and of repetitions
    on CUDA, ``torch.utils.benchmark`` where triton is missing and on the CPU."""
    if len(window_ms) != 2 or not all(ms > 0 for ms in window_ms):
        raise ValueError(f"time_fn: window_ms is (warm-up ms, repetitions ms), both positive, got {window_ms!r}; "
                         f"do_bench's own is ({DO_BENCH_WARMUP_MS}, {DO_BENCH_REP_MS}).")
    device = torch.device(device) if device is not None else env.default_device()
    if device.type == "cuda":
        try:
            import triton.testing  # noqa: F401  (only to learn whether triton is here)
        except ImportError:
            return _time_torch_benchmark(fn, device)
        with torch.cuda.device(device):
            return _time_do_bench(fn, *window_ms)
    return _time_torch_benchmark(fn, device)


@functools.lru_cache(maxsize=1)
def _do_bench_returns_all() -> bool:
    """Whether this triton's ``do_bench`` accepts ``return_mode="all"`` (triton 3.x): read from its
    source, since a failed try is an AssertionError, which a benchmarked function can raise too."""
    from triton.testing import do_bench

    try:
        source = inspect.getsource(do_bench)
    except (OSError, TypeError):  # no source shipped: take the call every version accepts
        return False
    return '"all"' in source or "'all'" in source


def _time_do_bench(fn: Callable[[], object], warmup_ms: float = DO_BENCH_WARMUP_MS,
                   rep_ms: float = DO_BENCH_REP_MS) -> Timing:
    from triton.testing import do_bench

    if _do_bench_returns_all():
        # Every sample back: the statistics and the sample count are then ours.
        times = do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all")
        return _timing_from_samples(np.asarray(times, dtype=float), n=len(times), method=METHOD_DO_BENCH)
    median, q20, q80 = do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.2, 0.8], return_mode="median")
    return Timing(float(median), float(q20), float(q80), None, METHOD_DO_BENCH)


def _time_torch_benchmark(fn: Callable[[], object], device: torch.device) -> Timing:
    from torch.utils.benchmark import Timer

    # The first call may compile (torch.compile) or allocate; keep it out of the
    # block-size estimate that blocked_autorange makes from its first runs.
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    min_run_time = CPU_MIN_RUN_TIME_CI_S if env.is_ci() else CPU_MIN_RUN_TIME_S
    # One thread, the Timer's default, on purpose: with every core in use, a core
    # that another process holds stalls each parallel call by a scheduler time
    # slice (milliseconds), and on a shared or CI machine that noise swamps the op.
    # CPU numbers stand in for the GPU's and are only compared with each other.
    timer = Timer(stmt="fn()", globals={"fn": fn})
    timer.timeit(1)  # dynamo guards the thread count: a compiled fn compiles again for one thread, here
    measurement = timer.blocked_autorange(min_run_time=min_run_time)
    times_ms = np.asarray(measurement.times, dtype=float) * 1e3  # per-call time of each block
    timing = _timing_from_samples(times_ms, n=len(times_ms), method=METHOD_TORCH_BENCHMARK)
    # The library's own median, so that the number matches what it prints.
    return Timing(measurement.median * 1e3, timing.q20_ms, timing.q80_ms, timing.n, timing.method)


def _timing_from_samples(times_ms: np.ndarray, *, n: int, method: str) -> Timing:
    # Linear interpolation between samples, as torch.quantile and do_bench do.
    median, q20, q80 = np.quantile(times_ms, [0.5, 0.2, 0.8])
    return Timing(float(median), float(q20), float(q80), n, method)


# --------------------------------------------------------------------------- bytes


def _as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """``torch.float32`` or the record spelling ``"float32"`` alike."""
    if isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"not a torch dtype: {dtype!r}")
    return value


def dtype_name(dtype: torch.dtype | str) -> str:
    """The spelling used in records: ``"float32"``, ``"bfloat16"``..."""
    return str(_as_dtype(dtype)).removeprefix("torch.")


def bytes_moved(numel: int, dtype: torch.dtype | str, reads: int = 1, writes: int = 1) -> int:
    """Bytes an elementwise op moves: each element read ``reads`` and written ``writes`` times."""
    return int(numel) * _as_dtype(dtype).itemsize * (reads + writes)


def gbps(nbytes: int | float, ms: float) -> float:
    """Throughput in decimal GB/s (1 GB = 1e9 bytes, as memory bandwidths are quoted)."""
    if ms <= 0:
        raise ValueError(f"a time must be positive, got {ms} ms")
    return nbytes / (ms * 1e-3) / 1e9


def roofline_ms(numel: int, dtype: torch.dtype | str, bandwidth_gbps: float, reads: int = 1, writes: int = 1) -> float:
    """The fastest an op moving these bytes can run at ``bandwidth_gbps``, in ms."""
    return bytes_moved(numel, dtype, reads, writes) / (bandwidth_gbps * 1e9) * 1e3


# --------------------------------------------------------------------------- inputs


def random_input(numel: int, dtype: torch.dtype | str = torch.float32, device: torch.device | str | None = None,
                 seed: int | None = None) -> torch.Tensor:
    """A 1-D standard-normal tensor, drawn in ``dtype`` on ``device`` (no float32 staging copy):
    both signs, so both branches of SELU run, and no exact zero, where a wrong branch cannot show."""
    dtype = _as_dtype(dtype)
    if not dtype.is_floating_point:
        raise ValueError(f"SELU inputs are floating point, not {dtype}")
    device = torch.device(device) if device is not None else env.default_device()
    generator = None if seed is None else torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(numel, dtype=dtype, device=device, generator=generator)
    # In chunks: a full-size boolean mask would cost numel more bytes.
    chunk = 1 << 24
    tiny = torch.finfo(dtype).tiny
    for start in range(0, numel, chunk):
        part = x[start : start + chunk]
        part.masked_fill_(part == 0, tiny)
    return x


# --------------------------------------------------------------------------- records


@functools.lru_cache(maxsize=None)
def device_name(device: torch.device | str | None = None) -> str:
    """The GPU's name, or the CPU's model (``"cpu"`` when the system does not say)."""
    device = torch.device(device) if device is not None else env.default_device()
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpuinfo = Path("/proc/cpuinfo")  # Linux; platform.processor() is often "" there
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "cpu"


def record(variant: str, op: str, dtype: torch.dtype, numel: int, timing: Timing, device: torch.device,
            run: str, config: dict | None = None, experiment: str | None = None) -> dict:
    """One timing as the course's JSON record: what was timed, its times and throughput, where and when."""
    reads, writes = TENSORS_READ_WRITTEN[op]
    nbytes = bytes_moved(numel, dtype, reads, writes)
    row = {
        "variant": variant, "op": op, "dtype": dtype_name(dtype), "numel": int(numel), "bytes": nbytes,
        "median_ms": timing.median_ms, "q20_ms": timing.q20_ms, "q80_ms": timing.q80_ms,
        "gbps": gbps(nbytes, timing.median_ms),
        # Percentiles of throughput: the 20th percentile of GB/s is the 80th of time.
        "gbps_q20": gbps(nbytes, timing.q80_ms), "gbps_q80": gbps(nbytes, timing.q20_ms),
        "n": timing.n, "method": timing.method, "device": device_name(device), "device_slug": env.device_slug(device),
        "torch": torch.__version__, "date": datetime.date.today().isoformat(),
        "run": run, "config": config,  # the records of one measure() call share a run: ratios are taken within it
    }  # fmt: skip
    if experiment:  # only where one is named: every other record keeps its fields
        row["experiment"] = experiment
    return row


def new_run() -> str:
    """A run's name: the records timed together share it, and ratios are taken within one run."""
    return f"{datetime.datetime.now():%Y-%m-%dT%H:%M:%S}-{secrets.token_hex(3)}"  # unique, and sorts by time


# --------------------------------------------------------------------------- measuring


def measure(variants: dict[str, Callable[[torch.Tensor], torch.Tensor]], numel: int, *,
            dtype: torch.dtype | str = torch.float32, device: torch.device | str | None = None, op: str = "forward",
            include_copy: bool = True, x: torch.Tensor | None = None,
            window_ms: tuple[float, float] = (DO_BENCH_WARMUP_MS, DO_BENCH_REP_MS)) -> list[dict]:
    """Time every variant (a function or a :class:`Variant`) on one random input of ``numel`` elements
    (or on ``x``), as one run, after the copy roofline of ``op`` (:func:`roofline_copy`) on the same
    input; one JSON-ready record per variant, all with the same ``run``."""
    if op not in TENSORS_READ_WRITTEN:
        raise ValueError(f"op must be one of {sorted(TENSORS_READ_WRITTEN)}, not {op!r}")
    if include_copy and COPY in variants:
        raise ValueError(f"{COPY!r} is the roofline's name; give that variant another one")
    if x is None:
        x = random_input(numel, dtype, device)
    elif x.numel() != numel:
        raise ValueError(f"x has {x.numel()} elements, numel says {numel}")
    dtype, device = x.dtype, x.device

    run = new_run()
    records = []
    if include_copy:
        copy = roofline_copy(op, x)
        records.append(record(COPY, op, dtype, numel, time_fn(copy, device=device, window_ms=window_ms), device, run))
        # Its buffers go back to torch's caching allocator, which hands the same blocks to
        # the variants' outputs. (No gc.collect per variant: with torch.compile loaded one
        # takes about 0.2 s, longer than timing a variant at a small size.)
        del copy
    for label, fn in variants.items():
        # Each call's output is dropped before the next call, so at most one lives at a time.
        timing = time_fn(lambda fn=fn: fn(x), device=device, window_ms=window_ms)
        variant = fn if isinstance(fn, Variant) else Variant(fn, label)
        records.append(record(variant.name, op, dtype, numel, timing, device, run, variant.config, variant.experiment))
    return records


def roofline_copy(op: str, x: torch.Tensor) -> Callable[[], object]:
    """A function that moves exactly the bytes ``op`` moves, with torch's kernels, buffers allocated
    outside what is timed: ``out.copy_(x)`` forward; ``out = x + other`` backward, the cheapest op with
    two reads and one write (an add waits on memory as a copy does); both for a step."""
    out = torch.empty_like(x)
    if op == "forward":
        return lambda: out.copy_(x)
    other = torch.empty_like(x).copy_(x)  # a second tensor of x's size: reading x twice would hit the cache
    if op == "backward":
        return lambda: torch.add(x, other, out=out)
    if op == "step":
        return lambda: (out.copy_(x), torch.add(x, other, out=out))
    raise ValueError(f"op must be one of {sorted(TENSORS_READ_WRITTEN)}, not {op!r}")


def measure_repeated(variants, numel: int, *, repeats: int = 3, x: torch.Tensor | None = None,
                     dtype: torch.dtype | str = torch.float32, device=None, settle_runs: int = 0,
                     **options) -> list[dict]:
    """:func:`measure` ``repeats`` times on one input (``options``: its ``op`` and ``include_copy``), after
    ``settle_runs`` dropped runs (for work that leaves the GPU busy after it returns).

    The first run's records, so that every ratio comes from one run, each with ``repeat_medians_ms``: a median moves
    from run to run by more than one run's 20-80% band shows, and a claim that A is not slower than B needs that
    spread beside it."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if settle_runs < 0:
        raise ValueError(f"settle_runs must be at least 0, got {settle_runs}")
    if x is None:
        x = random_input(numel, dtype, device)
    for _ in range(settle_runs):
        measure(variants, numel, x=x, **options)
    runs = [measure(variants, numel, x=x, **options) for _ in range(repeats)]
    first = runs[0]
    for i, record in enumerate(first):
        assert all(run[i]["variant"] == record["variant"] for run in runs)  # measure keeps the order
        record["repeat_medians_ms"] = [float(f"{run[i]['median_ms']:.6g}") for run in runs]
    return first


def take_turns(fns: dict, rounds: int, *, device: torch.device | str | None = None,
               window_ms: tuple[float, float] = (DO_BENCH_WARMUP_MS, DO_BENCH_REP_MS)) -> dict[object, list[float]]:
    """Each of ``fns`` (functions of no arguments) timed once a round, in turn: each key's medians (ms),
    round by round. A GPU at its power limit moves its clock from second to second; timed in turn,
    the change weighs on every function alike, so times of one round compare."""
    if rounds < 1:
        raise ValueError(f"take_turns: needs at least one round, got rounds={rounds}")
    times = {key: [] for key in fns}
    for _ in range(rounds):
        for key, fn in fns.items():
            times[key].append(time_fn(fn, device=device, window_ms=window_ms).median_ms)
    return times


PROBE_CALLS = 10  # per_call_us's first block, which sizes the others


def gpu_kernels(fn: Callable[[], object], calls: int = 1) -> list[tuple[str, float]]:
    """The GPU kernels of ``calls`` calls of ``fn()``, each as (name, µs) on ``torch.profiler``'s clock: the GPU's own
    time, without the host's time between kernels (notebooks 02 and 05, appendix A7)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA], acc_events=True) as profile:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return [(event.name, event.time_range.elapsed_us()) for event in profile.events()
            if event.device_type == torch.autograd.DeviceType.CUDA]


def per_call_us(fn: Callable[[], object], device: torch.device | str | None = None,
                min_run_time_s: float = 0.1, block_s: float = 0.02) -> float:
    """Wall-clock µs per call of ``fn()``: the median over blocks of about ``block_s`` seconds of calls back to back
    (at least three, ``min_run_time_s`` in all), the GPU synchronized only around a block.

    Where the GPU's share of a call is smaller than the host's, this is the host's cost of a call (Python,
    dispatcher, guards, launch). One short block sizes the others, where ``blocked_autorange`` would grow a block
    tenfold at a time (to half a second for a 45 µs call) and take as long again."""
    from torch.utils.benchmark import Timer

    if not block_s > 0:
        raise ValueError(f"per_call_us: block_s is the length of a block of calls in seconds and must be "
                         f"positive, got {block_s}")
    device = torch.device(device) if device is not None else env.default_device()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    # Timer runs on one thread unless told; dynamo guards the thread count, so a compiled fn would compile again.
    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    first = timer.timeit(PROBE_CALLS).median
    calls = max(1, int(block_s / max(first, 1e-9)))
    blocks = max(3, math.ceil(min_run_time_s / block_s))
    return statistics.median(timer.timeit(calls).median for _ in range(blocks)) * 1e6


def sweep(variants: dict[str, Callable[[torch.Tensor], torch.Tensor]], sizes: Iterable[int], *,
          dtype: torch.dtype | str = torch.float32, device: torch.device | str | None = None, op: str = "forward",
          include_copy: bool = True, window_ms: tuple[float, float] = (DO_BENCH_WARMUP_MS, DO_BENCH_REP_MS),
          release_each_size: bool = True) -> list[dict]:
    """:func:`measure` at each size; on a GPU a size whose tensors do not fit in free memory is skipped with a note.
    Memory goes back to the driver before each size, or with ``release_each_size=False`` only before one that does
    not fit otherwise (a collection takes 0.2 s once torch.compile is loaded)."""
    # The plain-text bar reads the same in a terminal, in JupyterLab and in saved output; none in a
    # headless run, whose saved notebook would keep every redraw.
    from tqdm.std import tqdm

    device = torch.device(device) if device is not None else env.default_device()
    dtype = _as_dtype(dtype)
    reads, writes = TENSORS_READ_WRITTEN[op]
    records: list[dict] = []
    bar = tqdm(list(sizes), desc=f"{op} {dtype_name(dtype)}", unit="size", disable=not env.interactive(),
               mininterval=2.0)

    def fits(numel: int) -> bool:
        return device.type != "cuda" or env.fits_on_gpu(numel, dtype, tensors=reads + writes)

    for numel in bar:
        bar.set_postfix_str(f"{numel:,} elements", refresh=False)
        if release_each_size or not fits(numel):
            gc.collect()  # a variant's closure may hold the last reference to a big tensor
            if device.type == "cuda":
                torch.cuda.empty_cache()  # cached blocks back to the driver, where the fit check sees them
        if not fits(numel):
            print(f"skipped {numel:,} elements: {reads + writes} tensors of them do not fit in free GPU memory")
            continue
        records += measure(variants, numel, dtype=dtype, device=device, op=op, include_copy=include_copy,
                           window_ms=window_ms)
    return records


# --------------------------------------------------------------------------- peers


def _selu(x: torch.Tensor) -> torch.Tensor:
    # A Python function, not torch.selu itself: dynamo compiles Python frames.
    return torch.selu(x)


@functools.lru_cache(maxsize=1)
def compiled_selu() -> Callable[[torch.Tensor], torch.Tensor]:
    """``torch.compile`` of ``torch.selu``, built once, with static shapes: Inductor specialises each
    size (as for a fixed-shape model), so dynamo's recompile limit is raised, or past 8 sizes it
    would quietly run eager torch.selu under the compiled name."""
    import torch._dynamo.config as dynamo_config

    name = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"
    setattr(dynamo_config, name, max(getattr(dynamo_config, name), COMPILE_RECOMPILE_LIMIT))
    return torch.compile(_selu, dynamic=False)


TRITON = "triton"  # the variant name of the plain Triton SELU in records


@functools.lru_cache(maxsize=1)
def triton_selu() -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The ten-line Triton SELU anyone would write first (blocks of 1024, float32 math, libdevice's
    ``expm1``): the peer a hand-written kernel must beat to be worth its code. None without triton."""
    try:
        import triton
        import triton.language as tl
        from triton.language.extra import libdevice
    except ImportError:
        return None

    @triton.jit
    def selu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        v = x.to(tl.float64) if x.dtype == tl.float64 else x.to(tl.float32)
        # λ and λα as literals: a Triton kernel reads only constexpr globals
        y = tl.where(v > 0, v * 1.0507009873554805, libdevice.expm1(v) * 1.7580993408473766)
        tl.store(y_ptr + offsets, y.to(x.dtype), mask=mask)

    def selu(x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        selu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y

    return selu


def peers(dtype: torch.dtype | str = torch.float32,
          device: torch.device | str | None = None) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """What a hand-written kernel competes with: ``"torch_eager"`` and ``"torch_compile"``, the latter
    tried once on a small input and left out with a note where compiling fails (no C++ compiler, say)."""
    variants: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"torch_eager": torch.selu}
    try:
        compiled = compiled_selu()
        probe = random_input(4096, dtype, device, seed=0)
        torch.testing.assert_close(compiled(probe), torch.selu(probe))
    except Exception as error:  # any failure of the compiler stack means: leave it out
        first_line = (str(error).strip().splitlines() or [""])[0]
        print(f"torch_compile left out: torch.compile failed here ({type(error).__name__}: {first_line})")
        return variants
    variants["torch_compile"] = compiled
    return variants
