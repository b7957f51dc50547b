"""Timing through a timing library, bytes and GB/s, and the copy roofline.

SELU reads every element once and writes every element once, so its speed limit
is not arithmetic but memory traffic: the fastest it can possibly run is the time
a device-to-device copy of the same bytes takes. Every measurement here therefore
times ``out.copy_(x)`` on the same input, in the same run; a variant's ratio to
that copy is computed when the records are read (:mod:`helpers.results`), from
the copy of the same run, and never stored.

>>> records = helpers.bench.measure({"torch_eager": torch.selu}, 2**24)  # doctest: +SKIP
>>> records = helpers.bench.sweep(helpers.bench.peers(), env.sweep_sizes())  # doctest: +SKIP

Timings never come from a hand-rolled ``time.time()`` loop: on a GPU that would
time the kernel *launch*, not the kernel. On CUDA they come from
``triton.testing.do_bench`` (CUDA events, L2 flushed between calls), and from
``torch.utils.benchmark`` where triton is missing and on the CPU.
"""
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

# torch.compile with static shapes compiles once per size; dynamo's default limit
# (8 per function) would otherwise silently fall back to eager in a long sweep.
COMPILE_RECOMPILE_LIMIT = 64

METHOD_DO_BENCH = "triton.testing.do_bench"
METHOD_TORCH_BENCHMARK = "torch.utils.benchmark"


@dataclass(frozen=True)
class Timing:
    """One function's time: the median and the 20th/80th percentiles, in ms.

    ``n`` is the number of timed samples the statistics are taken over (for
    ``torch.utils.benchmark`` each sample is a block of calls, averaged); it is
    ``None`` where the timing library does not say.
    """

    median_ms: float
    q20_ms: float
    q80_ms: float
    n: int | None
    method: str


@dataclass(frozen=True)
class Variant:
    """A function to time, under a record name, with the launch configuration it runs.

    ``measure({"v1_t128": Variant(fn, "selu_vectorized", {"threads_per_block": 128, ...})}, n)``
    records ``variant="selu_vectorized"`` and the configuration as a field: one
    kernel under several configurations stays one variant. A plain function in
    :func:`measure`'s dict is a variant named by its key, with no configuration.
    ``experiment`` names the measurement a record belongs to where another one times
    the same variant and configuration: each keeps its own record (:func:`helpers.results.save`).
    """

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
    """Time ``fn()`` (no arguments) on ``device`` (default: where the course runs).

    CUDA: ``triton.testing.do_bench`` with ``window_ms`` of warm-up and of repetitions
    (by default its usual 25 ms and 100 ms); ``torch.utils.benchmark`` when triton is
    not installed. CPU: ``torch.utils.benchmark.Timer.blocked_autorange``.
    """
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
    """Whether this triton's ``do_bench`` accepts ``return_mode="all"`` (triton 3.x).

    Read from the source rather than found by trying: a failed try would be an
    AssertionError, which a benchmarked function can raise too.
    """
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
    median, q20, q80 = do_bench(
        fn,
        warmup=warmup_ms,
        rep=rep_ms,
        quantiles=[0.5, 0.2, 0.8],
        return_mode="median",
    )
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
    """Bytes an elementwise op must move: every element read ``reads`` times and
    written ``writes`` times (1 and 1 for SELU's forward pass, and for a copy)."""
    return int(numel) * _as_dtype(dtype).itemsize * (reads + writes)


def gbps(nbytes: int | float, ms: float) -> float:
    """Throughput in decimal GB/s (1 GB = 1e9 bytes, as memory bandwidths are quoted)."""
    if ms <= 0:
        raise ValueError(f"a time must be positive, got {ms} ms")
    return nbytes / (ms * 1e-3) / 1e9


def roofline_ms(
    numel: int, dtype: torch.dtype | str, bandwidth_gbps: float, reads: int = 1, writes: int = 1
) -> float:
    """The fastest an op moving these bytes can run at ``bandwidth_gbps``, in ms."""
    return bytes_moved(numel, dtype, reads, writes) / (bandwidth_gbps * 1e9) * 1e3


# --------------------------------------------------------------------------- inputs


def random_input(
    numel: int,
    dtype: torch.dtype | str = torch.float32,
    device: torch.device | str | None = None,
    seed: int | None = None,
) -> torch.Tensor:
    """A 1-D standard-normal tensor: both signs, so both branches of SELU run.

    Drawn directly in ``dtype`` on ``device``, so a 6.4 GB input never needs a
    float32 staging copy beside it. Not ``torch.rand``: values in [0, 1) would
    never reach SELU's negative branch. Exact zeros (possible after rounding to a
    16-bit type) are replaced, since a zero is the one input where a wrong
    branch choice cannot show.
    """
    dtype = _as_dtype(dtype)
    if not dtype.is_floating_point:
        raise ValueError(f"SELU inputs are floating point, not {dtype}")
    device = torch.device(device) if device is not None else env.default_device()
    generator = None
    if seed is not None:
        generator = torch.Generator(device=device)
        generator.manual_seed(seed)
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


def new_run() -> str:
    """An identifier for one run of measurements: its date and time, and a random suffix."""
    return f"{datetime.datetime.now():%Y-%m-%dT%H:%M:%S}-{secrets.token_hex(3)}"


def _record(variant: str, op: str, dtype: torch.dtype, numel: int, timing: Timing, device: torch.device,
            run: str, config: dict | None = None, experiment: str | None = None) -> dict:
    reads, writes = TENSORS_READ_WRITTEN[op]
    nbytes = bytes_moved(numel, dtype, reads, writes)
    record = {
        "variant": variant,
        "op": op,
        "dtype": dtype_name(dtype),
        "numel": int(numel),
        "bytes": nbytes,
        "median_ms": timing.median_ms,
        "q20_ms": timing.q20_ms,
        "q80_ms": timing.q80_ms,
        "gbps": gbps(nbytes, timing.median_ms),
        # Percentiles of throughput: the 20th percentile of GB/s is the 80th of time.
        "gbps_q20": gbps(nbytes, timing.q80_ms),
        "gbps_q80": gbps(nbytes, timing.q20_ms),
        "n": timing.n,
        "method": timing.method,
        "device": device_name(device),
        "device_slug": env.device_slug(device),
        "torch": torch.__version__,
        "date": datetime.date.today().isoformat(),
        # The measurements of one measure() call share a run: ratios are taken within it.
        "run": run,
        "config": config,
    }
    if experiment:  # only where one is named: every other record keeps its fields
        record["experiment"] = experiment
    return record


# --------------------------------------------------------------------------- measuring


def measure(
    variants: dict[str, Callable[[torch.Tensor], torch.Tensor]],
    numel: int,
    *,
    dtype: torch.dtype | str = torch.float32,
    device: torch.device | str | None = None,
    op: str = "forward",
    include_copy: bool = True,
    x: torch.Tensor | None = None,
    window_ms: tuple[float, float] = (DO_BENCH_WARMUP_MS, DO_BENCH_REP_MS),
) -> list[dict]:
    """Time every variant on one fresh random input of ``numel`` elements, as one run.

    With ``include_copy`` the copy roofline of ``op`` (:func:`roofline_copy`: for the
    forward pass ``out.copy_(x)`` into a preallocated ``out``) is timed first, on the
    same input. ``x`` replaces the random input
    (its dtype and device then win). A value of ``variants`` is a function or a
    :class:`Variant`. Returns one JSON-ready record per variant (see
    :func:`_record`), all with the same ``run``. ``window_ms``: see :func:`time_fn`.
    """
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
        records.append(_record(COPY, op, dtype, numel, time_fn(copy, device=device, window_ms=window_ms), device, run))
        # Its buffers go back to torch's caching allocator, which hands the same blocks to
        # the variants' outputs. (No gc.collect per variant: with torch.compile loaded one
        # takes about 0.2 s, longer than timing a variant at a small size.)
        del copy
    for label, fn in variants.items():
        # Each call's output is dropped before the next call, so at most one lives at a time.
        timing = time_fn(lambda fn=fn: fn(x), device=device, window_ms=window_ms)
        name, config, experiment = (fn.name, fn.config, fn.experiment) if isinstance(fn, Variant) else (label, None, None)
        records.append(_record(name, op, dtype, numel, timing, device, run, config, experiment))
    return records


def roofline_copy(op: str, x: torch.Tensor) -> Callable[[], object]:
    """A function that moves exactly the bytes ``op`` must move, with torch's copy kernels:
    the yardstick its records are divided by.

    forward: ``out.copy_(x)``, one tensor read and one written. backward: ``out = x + other``,
    two read and one written: the cheapest elementwise op with the backward's traffic
    (an add costs no more than a copy on a GPU; both wait on memory). step: both, one after
    the other. The buffers are allocated here, once, outside what is timed.
    """
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
    """:func:`measure` ``repeats`` times, back to back on one input (``options``: its
    ``op`` and ``include_copy``), after ``settle_runs`` runs whose records are dropped.

    A settling run is for a measurement that follows work which leaves the GPU busy
    for a while after it returns: notebook 02 measures the copy running slower for a
    moment after a large free (:func:`helpers.demos.copy_after_free`).

    Returns the first run's records, so that every ratio (to the copy, one
    variant against another) comes from one run; each record also carries
    ``repeat_medians_ms``, its median time in every run. A claim that A is "not
    slower than B" needs that spread beside it: a median moves from run to run
    (clocks, the state of the memory system) by more than the 20-80% band within
    one run shows. :func:`spread_ms` reads it back.
    """
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
    """Each of ``fns`` (key: a function of no arguments) timed by :func:`time_fn` once a round,
    in turn, for ``rounds`` rounds; every key's median (ms) of every round, in round order.

    On a GPU at its board power limit the clock moves from one second to the next, and
    every kernel's time with it. Timed in turn, such a change weighs on every function
    alike, and one function's time can be read against another's of the same round.
    """
    if rounds < 1:
        raise ValueError(f"take_turns: needs at least one round, got rounds={rounds}")
    times = {key: [] for key in fns}
    for _ in range(rounds):
        for key, fn in fns.items():
            times[key].append(time_fn(fn, device=device, window_ms=window_ms).median_ms)
    return times


PROBE_CALLS = 10  # per_call_us's first block, which sizes the others


def per_call_us(fn: Callable[[], object], device: torch.device | str | None = None,
                min_run_time_s: float = 0.1, block_s: float | None = None) -> float:
    """Wall-clock time per call of ``fn()``, in microseconds: blocks of calls back to back,
    the GPU synchronized only around each block, the median over the blocks (timed by
    ``torch.utils.benchmark.Timer``).

    Where a call costs the GPU less than the host (a small op), the GPU runs behind the
    host and this is the host's cost of issuing a call: Python, the dispatcher, guards,
    the launch. On a CPU the op runs inside the call, so it is the whole time.

    How many calls make a block: by default ``blocked_autorange`` decides, growing the
    block tenfold until the timer's own overhead is under 1/10,000 of it; on a GPU host
    a block of 10 µs calls can then last 0.1 s and one of 45 µs calls 0.5 s, and finding
    the size takes about as long again. With ``block_s``, one short block measures the
    call first, and blocks of about ``block_s`` seconds follow, at least three and
    ``min_run_time_s`` in all: the timer's overhead (a few µs) stays under a thousandth
    of a 20 ms block, and a measurement takes ``min_run_time_s``, not up to ten times it.
    """
    from torch.utils.benchmark import Timer

    if block_s is not None and not block_s > 0:
        raise ValueError(f"per_call_us: block_s is the length of a block of calls in seconds and must be "
                         f"positive, got {block_s}; pass None to let blocked_autorange choose the blocks.")
    device = torch.device(device) if device is not None else env.default_device()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    timer = Timer(stmt="fn()", globals={"fn": fn})
    if block_s is None:
        return timer.blocked_autorange(min_run_time=min_run_time_s).median * 1e6
    first = timer.timeit(PROBE_CALLS).median
    calls = max(1, int(block_s / max(first, 1e-9)))
    blocks = max(3, math.ceil(min_run_time_s / block_s))
    return statistics.median(timer.timeit(calls).median for _ in range(blocks)) * 1e6


def spread_ms(record: dict) -> float:
    """Max minus min of a record's ``repeat_medians_ms`` (0.0 for a record of one run)."""
    medians = record.get("repeat_medians_ms") or [record["median_ms"]]
    return max(medians) - min(medians)


def _release_memory(device: torch.device) -> None:
    """Return cached blocks to the driver, so the next size's fit check sees them."""
    gc.collect()  # a variant's closure may hold the last reference to a big tensor
    if device.type == "cuda":
        torch.cuda.empty_cache()


def sweep(
    variants: dict[str, Callable[[torch.Tensor], torch.Tensor]],
    sizes: Iterable[int],
    *,
    dtype: torch.dtype | str = torch.float32,
    device: torch.device | str | None = None,
    op: str = "forward",
    include_copy: bool = True,
    progress: bool | None = None,
    window_ms: tuple[float, float] = (DO_BENCH_WARMUP_MS, DO_BENCH_REP_MS),
    release_each_size: bool = True,
) -> list[dict]:
    """:func:`measure` at each size (with ``window_ms``), with a progress bar; the records of all sizes.

    On a GPU, a size whose tensors (input, output, and for the backward pass the
    incoming gradient) do not fit in free memory is skipped with a note. Before each
    size the garbage collector runs and torch's cached blocks go back to the driver;
    with ``release_each_size=False`` only before a size that does not fit otherwise
    (a collection takes about 0.2 s once torch.compile is loaded).
    ``progress`` defaults to :func:`helpers.env.interactive`: a bar while a person
    watches, none in a headless run, whose saved notebook would otherwise keep
    every redraw of the bar as output.
    """
    # The plain-text bar: it needs no widget extension and reads the same in a
    # terminal, in JupyterLab and in a committed notebook's output.
    from tqdm.std import tqdm

    device = torch.device(device) if device is not None else env.default_device()
    dtype = _as_dtype(dtype)
    reads, writes = TENSORS_READ_WRITTEN[op]
    records: list[dict] = []
    if progress is None:
        progress = env.interactive()
    bar = tqdm(list(sizes), desc=f"{op} {dtype_name(dtype)}", unit="size", disable=not progress, mininterval=2.0)
    def fits(numel: int) -> bool:
        return device.type != "cuda" or env.fits_on_gpu(numel, dtype, tensors=reads + writes)

    for numel in bar:
        bar.set_postfix_str(f"{numel:,} elements", refresh=False)
        if release_each_size or not fits(numel):
            _release_memory(device)
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
    """``torch.compile`` of ``torch.selu``, built once per session.

    Static shapes (``dynamic=False``): Inductor then specialises each size's
    kernel (its element count, 32-bit indexing where it fits), which is the best
    it can do and what a fixed-shape model gets. Each new size compiles once, so
    dynamo's recompile limit is raised; otherwise past 8 sizes it would quietly
    run eager torch.selu under the compiled name.
    """
    import torch._dynamo.config as dynamo_config

    name = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"
    setattr(dynamo_config, name, max(getattr(dynamo_config, name), COMPILE_RECOMPILE_LIMIT))
    return torch.compile(_selu, dynamic=False)


TRITON = "triton"  # the variant name of the plain Triton SELU in records


@functools.lru_cache(maxsize=1)
def triton_selu() -> Callable[[torch.Tensor], torch.Tensor] | None:
    """A plain Triton SELU, the ten lines anyone would write first: one element per
    program lane, blocks of 1024, math in float32 (float64 for float64), ``expm1``
    from libdevice. The peer a hand-written CUDA kernel must beat to be worth its
    code. None where triton is not installed (a CPU machine, usually).
    """
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


def peers(
    dtype: torch.dtype | str = torch.float32,
    device: torch.device | str | None = None,
    *,
    include_compile: bool = True,
) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """What a hand-written kernel competes with: eager ``torch.selu`` and its
    ``torch.compile`` (``"torch_eager"``, ``"torch_compile"``).

    The compiled one is tried once here, on a small input of ``dtype`` on
    ``device``, and checked against eager; if compiling fails (no C++ compiler
    for the CPU backend, say) a note is printed and that variant is left out, so
    a notebook still runs.
    """
    variants: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"torch_eager": torch.selu}
    if not include_compile:
        return variants
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
