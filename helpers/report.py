"""Notebook 03's tables, checks and measurements, each one call from a cell.

>>> from helpers import report
>>> launch = report.launch_sweep()               # measured on a GPU, the committed H100 run elsewhere  # doctest: +SKIP
>>> report.vectors_threads_table(launch)         # % of the copy per (vectors, threads per block)      # doctest: +SKIP

Every function here either computes on the tensor's device through the course's
operators (:mod:`helpers.ops`: the CPU kernels on a CPU, the CUDA kernels on a
GPU), or reads benchmark records. Measurements go through
:func:`helpers.results.here_or_reference`: where CUDA kernels can be built they
are taken on this GPU and saved; elsewhere the committed H100 records stand in,
and every table and figure says which. Launch configurations are read from the
records' ``config`` field (:func:`helpers.bench.launch_config`), never from
variant names, and ratios to the copy are taken within one run
(:func:`helpers.results.pct_of_copy`).

Tables are returned as :class:`Markdown` (rendered by Jupyter, plain text when
printed), so a test can read what a notebook shows.
"""
from __future__ import annotations

import functools
import re
import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from . import bench, check, demos, env, ops, results, tuning
from .bench import COPY, dtype_name

FLOAT32 = torch.float32
HALF_TYPES = ("float16", "bfloat16")

REGISTERS_PER_SM = 65536
REGISTER_ALLOCATION_UNIT = 256  # registers are handed out per warp in steps of this many
MAX_THREADS_PER_SM = 2048

VECTOR_BYTES = tuning.VECTOR_BYTES

# Section 5: the launch configurations measured. Every (vectors, threads) pair with a
# one-shot grid; then 4 vectors x 256 threads with the grid capped at k blocks per SM.
THREADS = (128, 256, 512)
VECTORS = (1, 2, 4, 8)
CAPS = (1, 2, 4, 8, 16, 64, 256, 1024)
GRID_THREADS, GRID_VECTORS = 256, 4
# The launch the kernel uses until helpers.tuning has measured the GPU at hand
# (kernels/selu_vectorized.cu's default_config); the table compares this run's fastest with it.
DEFAULT_LAUNCH = bench.launch_config(*tuning.DEFAULT_CONFIG)

# Section 6: the headline variants, and for fp16/bf16 our kernel in eager's shape
# (one 16-byte vector per thread, 128 threads per block, like ATen's CUDALoops.cuh).
HEADLINE_VARIANTS = ("selu_vectorized", "copy_vectorized", "selu_naive", "torch_eager", "torch_compile", bench.TRITON)
EAGER_SHAPE = bench.launch_config(128, 1, 0)

# Section 7.
CURVE_VARIANTS = ("selu_vectorized", "selu_naive", "torch_eager", "torch_compile")
CURVE_MAX_LOG2 = 31
CURVE_GOAL_FROM = 2**16
CURVE_GOAL = 0.95
# Up to this size a call takes microseconds, and one do_bench call's median can sit a
# fraction of a microsecond above or below the next one's: the goal is judged there on
# rounds that take turns (measure_curve_rounds), not on the sweep's one median per size.
CURVE_ROUNDS_UP_TO = 2**24
CURVE_ROUNDS = 10
CURVE_ROUND_WINDOW_MS = (5, 20)  # do_bench's warm-up and repetitions: hundreds of calls a round
CURVE_ROUNDS_FILE = "03_curve_rounds.json"
# do_bench's warm-up and repetitions (ms) for each point of the sweep: about 100 timings, at
# up to 20 sizes. A large size's time moves little from call to call, and 50 ms still holds 8
# or more calls at 2^31 elements; the sizes the goal is most sensitive to, 2^16 to 2^24, are
# judged on the rounds above.
CURVE_WINDOW_MS = (10, 50)

# Section 3: one element past 2^31, in fp32 (8.6 GB a tensor).
PAST_2_31 = 2**31 + 12345

PTX_FILES = ("selu_naive.cu", "selu_vectorized.cu")
NO_NVCC = "nvcc not found, so this is skipped: install the CUDA toolkit (no GPU needed) to run it"


@dataclass(frozen=True)
class Markdown:
    """Markdown text: Jupyter renders it, ``print`` and ``str`` give it as it is."""

    text: str

    def _repr_markdown_(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text


def _table(header: Iterable[str], align: Iterable[str], rows: Iterable[Iterable[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def _device(device) -> torch.device:
    return torch.device(device) if device is not None else env.default_device()


def _tolerance(device: torch.device, dtype: torch.dtype | None = None) -> int:
    """ulps allowed between our kernel and torch.selu: the goal, 1, on a GPU; on a CPU
    the check's tolerance (two CPU implementations, each within it of the exact value)."""
    if device.type == "cuda":
        return 1
    return check.MAX_ULP.get(dtype, check.MAX_ULP[FLOAT32])


# --------------------------------------------------------------------------- records


def _source(records) -> str:
    return getattr(records, "source", "")


def _measured(records) -> bool:
    return bool(getattr(records, "measured", False))


def _keep(records, keep: Callable[[dict], bool]):
    """The records ``keep`` accepts, and the copies measured in their runs (same run, op,
    dtype and size), as a :class:`results.Records` where ``records`` is one; when nothing
    but copies would be left, an empty one whose ``source`` says so."""
    def measurement(r):
        return r.get("run"), r["op"], r["dtype"], r["numel"]

    chosen = [r for r in records if r["variant"] != COPY and keep(r)]
    runs = {measurement(r) for r in chosen}
    kept = {id(r) for r in chosen}
    chosen = [r for r in records if id(r) in kept or (r["variant"] == COPY and measurement(r) in runs and keep(r))]
    if not isinstance(records, results.Records):
        return chosen
    if not chosen:
        where = "this run measured none of these" if records.measured else \
            f"no GPU here, and no committed {env.REFERENCE_DEVICE_SLUG.upper()} records of these yet"
        return results.Records([], source=where, measured=records.measured)
    return results.Records(chosen, source=records.source, measured=records.measured)


def _is_default_launch(record: dict) -> bool:
    return record.get("config") is None


def _same_run(records: list[dict], record: dict, variant: str, config: dict | None = None) -> dict | None:
    """The record of ``variant`` (with ``config``) from ``record``'s run, dtype, op and size."""
    for r in records:
        if (r["variant"] == variant and r.get("config") == config and r.get("run") == record.get("run")
                and r["op"] == record["op"] and r["dtype"] == record["dtype"] and r["numel"] == record["numel"]):
            return r
    return None


def _pct(record: dict | None, records: list[dict]) -> str:
    pct = None if record is None else results.pct_of_copy(record, records)
    return "–" if pct is None else f"{pct:.1f}%"


def _gpu_shape(records) -> tuple[int, int, str]:
    """(SMs, threads per SM, name) of the GPU the records were measured on (:func:`helpers.demos.gpu_shape`)."""
    copy = next((r for r in records if r["variant"] == COPY), None) if records else None
    name = copy["device"] if copy else "H100"
    shape = demos.gpu_shape(name, env.default_device())
    return shape.sms, shape.threads_per_sm, shape.name


# --------------------------------------------------------------------------- 1. the gap


def measure_first_look(numel: int | None = None, device=None) -> list[dict]:
    """The copy, notebook 02's kernel, this notebook's, and this notebook's loop with no math
    (copy_vectorized, a copy of our own), in one run at the problem size."""
    if numel is None:
        numel, why = env.problem_numel(FLOAT32)
        print("size:", why)
    variants = {"selu_naive": ops.selu_naive, "selu_vectorized": ops.selu_vectorized,
                "copy_vectorized": ops.copy_vectorized}
    return bench.measure(variants, numel, dtype=FLOAT32, device=device)


def first_look() -> results.Records:
    """:func:`measure_first_look` on this GPU, or the committed H100 records of it."""
    records = results.here_or_reference(measure_first_look, variants=["selu_naive", "selu_vectorized",
                                                                      "copy_vectorized"],
                                        dtype=FLOAT32, numel=env.REFERENCE_NUMEL)
    return _keep(records, _is_default_launch)


def littles_law(records, latency_s: float = demos.DRAM_LATENCY_S) -> str:
    """Little's law (:func:`helpers.demos.littles_law`) for one 4-byte load per thread (the naive
    kernel) and one 16-byte load (the vectorized kernel in fp32), at ``latency_s`` (e.g.
    :func:`helpers.demos.latency_s` of the measured latency), and each kernel's % of the copy
    in ``records``."""
    if not any(r["variant"] == COPY for r in records):
        return "no copy measured, so no bandwidth to apply Little's law to"
    naive = demos.littles_law(records, bytes_per_thread=4, latency_s=latency_s)
    vectorized = demos.littles_law(records, bytes_per_thread=16, latency_s=latency_s)
    lines = [str(naive),
             f"at most, one 16-byte load per thread (the vectorized kernel, fp32): {vectorized.most_bytes / 1e6:.2f} MB, "
             f"{vectorized.ratio:.1f}x the need"]
    where = "measured" if _measured(records) else "H100 reference"
    for r in records:
        if r["variant"] != COPY:
            lines.append(f"{where}: {results.label(r)} at {_pct(r, records)} of the copy's throughput")
    return "\n".join(lines)


# --------------------------------------------------------------------------- 1. the control
# A 16-byte load per thread changes three things at once against notebook 02's one
# 4-byte load: the bytes each thread has in flight (16 against 4), the load
# instructions per byte (a quarter as many) and the number of blocks (a quarter as
# many). selu_naive_unrolled(x, k) is the naive kernel with k independent 4-byte loads
# per thread: at k = 4 it has the bytes in flight and the blocks of the vectorized
# kernel at 256 threads x 1 vector, and four times its load instructions.
UNROLLED = (1, 2, 4, 8)
CONTROL_LAUNCH = bench.launch_config(256, 1, 0)  # the naive kernel's 256 threads, one 16-byte vector
CONTROL_EXPERIMENT = "control"


def unrolled_variant(elements_per_thread: int) -> str:
    return f"selu_naive_unrolled_x{elements_per_thread}"


def control_variants() -> dict:
    """selu_naive_unrolled at every :data:`UNROLLED`, and selu_vectorized at :data:`CONTROL_LAUNCH`."""
    variants: dict = {unrolled_variant(k): (lambda x, k=k: ops.selu_naive_unrolled(x, k)) for k in UNROLLED}
    # Section 5's sweep times the same launch: "control" keeps this run's record apart from it.
    variants["vectorized"] = bench.Variant(_with_config(CONTROL_LAUNCH), "selu_vectorized", CONTROL_LAUNCH,
                                           experiment=CONTROL_EXPERIMENT)
    return variants


def measure_control(numel: int | None = None, device=None, repeats: int = 3) -> list[dict]:
    """The copy and :func:`control_variants` in fp32, ``repeats`` runs back to back on one input."""
    if numel is None:
        numel, why = env.problem_numel(FLOAT32)
        print("size:", why)
    return bench.measure_repeated(control_variants(), numel, repeats=repeats, dtype=FLOAT32, device=device)


def control() -> results.Records:
    """:func:`measure_control` on this GPU, or the committed H100 records of it."""
    records = results.here_or_reference(measure_control, variants=[*map(unrolled_variant, UNROLLED),
                                                                   "selu_vectorized"],
                                        dtype=FLOAT32, numel=env.REFERENCE_NUMEL)
    # One run: the one that timed the unrolled kernels (section 5's sweep has a record of
    # the same launch too, from another run, kept apart by the control's experiment field).
    runs = [r.get("run") for r in records if r["variant"] == unrolled_variant(UNROLLED[0])]
    return _keep(records, lambda r: r.get("run") == (runs[-1] if runs else None) and
                 (r["variant"] != "selu_vectorized" or r.get("config") == CONTROL_LAUNCH))


def control_table(records) -> Markdown:
    """Per variant of :func:`control_variants`: bytes in flight per thread, load instructions
    per 16 bytes and elements per block, as the code has them, and the measured % of the
    copy, with the spread of the repeated runs as a share of the median."""
    rows = []
    # Blocks of 256 threads for all of them: the naive kernel's kNaiveThreadsPerBlock, and CONTROL_LAUNCH's.
    threads = CONTROL_LAUNCH["threads_per_block"]
    kinds = [(unrolled_variant(k), None, f"{4 * k} B", "4", k) for k in UNROLLED]
    kinds.append(("selu_vectorized", CONTROL_LAUNCH, "16 B", "1", 4))  # one vector: 4 floats per thread
    if not any(results.find(records, variant, config=config, dtype=FLOAT32) for variant, config, *_ in kinds):
        return Markdown(f"*{_source(records)}*\n\nno records of the control yet: it is measured on a GPU")
    for variant, config, in_flight, loads_per_16, elements in kinds:
        record = results.find(records, variant, config=config, dtype=FLOAT32)
        if record is None:  # said, not skipped: a row missing from the records is no result
            rows.append([results.label({"variant": variant, "config": config}), in_flight, loads_per_16,
                         f"{threads * elements:,}", "no record of this run", "–"])
            continue
        spread = bench.spread_ms(record)
        rows.append([results.label(record), in_flight, loads_per_16, f"{threads * elements:,}",
                     _pct(record, records), f"{spread / record['median_ms']:.1%}" if spread else "–"])
    header = ["variant", "bytes in flight per thread", "load instructions per 16 B", "elements per block",
              "% of the copy's throughput", "spread of the repeated runs"]
    return Markdown(f"*{_source(records)}*\n\n" + "\n".join(_table(header, ["---"] + ["---:"] * 5, rows)))


# --------------------------------------------------------------------------- 3. correctness


def agreement_table(device=None, per_distribution: int = 1 << 18, seed: int = 0) -> Markdown:
    """``ops.selu_vectorized`` against ``torch.selu`` in every dtype, bit for bit and in ulps:
    special values and ``per_distribution`` elements from each of the check's distributions.

    On a GPU each dtype must be identical or within 1 ulp (an AssertionError otherwise);
    on a CPU the two CPU implementations are compared and reported, not asserted.
    """
    device = _device(device)
    rows = []
    for dtype in check.DTYPES:
        generator = torch.Generator().manual_seed(seed)
        x = torch.cat([check.special_values(dtype, device)]
                      + [check.make_input(d, (per_distribution,), dtype, device, generator)
                         for d in check.DEFAULT_DISTRIBUTIONS])
        match = check.agreement(ops.selu_vectorized(x), torch.selu(x))
        rows.append((dtype_name(dtype), f"{match.numel:,}", f"{match.identical_pct:.3f}%", match.max_ulp,
                     "same places" if match.nan_match else "DIFFERENT places"))
        if device.type == "cuda":
            assert match.within(1), (dtype, str(match))
    lines = _table(["dtype", "elements", "identical to torch.selu", "max ulp", "NaN"],
                   ["---", "---:", "---:", "---:", "---"], rows)
    return Markdown(f"*{device.type.upper()}: selu_course::selu_vectorized against torch.selu*\n\n" + "\n".join(lines))


def launch_path(numel: int, address: int, element_size: int) -> str:
    """The path the CUDA launcher takes for a contiguous ``x`` of ``numel`` elements that starts
    ``address`` bytes past a 16-byte boundary, into a fresh (aligned) result: no head, since
    the result is aligned; the vector loop; the elements it leaves to its tail."""
    per_vector = VECTOR_BYTES // element_size
    if address % element_size:
        return "one element per thread (not even element-aligned)"
    if address == 0:
        return f"16-byte vectors + a tail of {numel % per_vector}"
    if element_size == 2:  # realigned in registers, leaving one vector's worth of slack to the tail
        vectors = (numel - per_vector) // per_vector if numel > per_vector else 0
        return f"16-byte stores, x realigned in registers + a tail of {numel - vectors * per_vector}"
    return f"16-byte stores, x read element by element + a tail of {numel % per_vector}"


def views_table(device=None, dtypes=(torch.float32, torch.bfloat16), numel: int = 4096) -> Markdown:
    """Misaligned views and every tail length 1..17: the address each view starts at,
    the path the CUDA launcher takes for it, and the agreement with ``torch.selu``."""
    device = _device(device)
    rows = []
    for dtype in dtypes:
        x = torch.cat([check.special_values(dtype, device), bench.random_input(numel, dtype, device, seed=0)])
        step = VECTOR_BYTES // x.element_size()
        for name, view in [("x", x), ("x[1:]", x[1:]), ("x[3:]", x[3:]), (f"x[{step}:]", x[step:])]:
            address = view.data_ptr() % VECTOR_BYTES
            path = launch_path(view.numel(), address, view.element_size())
            match = check.agreement(ops.selu_vectorized(view), torch.selu(view))
            rows.append((dtype_name(dtype), f"`{name}`", f"{view.numel():,}", address, path,
                         f"{match.identical_pct:.2f}%, max {match.max_ulp} ulp"))
        tails = [check.agreement(ops.selu_vectorized(x[:n]), torch.selu(x[:n])) for n in range(1, 18)]
        rows.append((dtype_name(dtype), "`x[:n]`, n = 1 … 17", "1 … 17", 0, "vectors + every tail length",
                     f"max {max(t.max_ulp for t in tails)} ulp"))
    lines = _table(["dtype", "view", "elements", "address % 16", "path on a GPU", "identical to torch.selu"],
                   ["---", "---", "---:", "---:", "---", "---"], rows)
    return Markdown("\n".join(lines))


def check_past_2_31(device=None, numel: int = PAST_2_31) -> str:
    """``numel`` (2^31 + 12,345) fp32 elements through the vectorized kernel, compared
    with ``torch.selu`` in chunks: the default one-shot grid, a grid capped at 2 blocks
    per SM whose blocks loop, and last in place (``out`` is ``x``), each within 1 ulp
    (an AssertionError otherwise). Runs only on a GPU with room for three such tensors;
    elsewhere it says why it is skipped, and returns that line."""
    device = _device(device)
    gigabytes = numel * 4 / 1e9
    if device.type != "cuda":
        return (f"skipped: {numel:,} fp32 elements ({gigabytes:.1f} GB a tensor) are a GPU test, "
                f"and this is a {device.type.upper()}")
    if not env.fits_on_gpu(numel, FLOAT32, tensors=3):
        return (f"skipped: {numel:,} fp32 elements need room for 3 tensors of {gigabytes:.1f} GB, "
                f"and this GPU has {env.free_gpu_bytes() / 1e9:.1f} GB free")
    lines = []
    try:
        x = bench.random_input(numel, FLOAT32, device, seed=0)
        expected = torch.selu(x)
        runs = [("one-shot grid (the default launch)", ops.selu_vectorized),
                ("capped grid, 2 blocks per SM, 4 vectors per thread",
                 lambda t: ops.selu_vectorized_with_config(t, 256, 4, 2)),
                ("in place, out is x (last: it overwrites x)", lambda t: ops.selu_vectorized_out(t, t))]
        for name, run in runs:
            match = check.agreement(run(x), expected)
            lines.append(f"{numel:,} elements, {name}: {match}")
            print(lines[-1])
            assert match.within(1), (name, str(match))
    finally:
        x = expected = None
        torch.cuda.empty_cache()
    return f"all {len(lines)} within 1 ulp of torch.selu"


# --------------------------------------------------------------------------- 4. the compiler's output


def resident_threads(registers: int, threads_per_block: int = 256) -> int:
    """Threads an H100 SM holds for a kernel of ``registers`` per thread: 65,536 registers,
    handed out per warp in steps of 256, whole blocks only, and at most 2,048 threads."""
    per_warp = -(-registers * 32 // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    blocks = REGISTERS_PER_SM // (per_warp * threads_per_block // 32)
    return min(blocks * threads_per_block, MAX_THREADS_PER_SM)


_GLOBAL_LOAD = re.compile(r"\bld\.global(?:\.nc)?(?:\.v(\d))?\.[a-z]+(\d+)")


def loaded_bytes(body: str) -> int:
    """Bytes the global loads in a PTX body fetch, one pass through the code:
    ``ld.global.v4.f32`` 16, ``ld.global.u16`` 2 (``.nc`` loads count the same)."""
    return sum(int(v or 1) * int(bits) // 8 for v, bits in _GLOBAL_LOAD.findall(body))


def compile_ptx() -> dict[str, str] | None:
    """The PTX of ``selu_naive.cu`` and ``selu_vectorized.cu`` for sm_90, compiled side by
    side (cached after the first time); ``None``, with a note, where nvcc is missing."""
    if env.nvcc_path() is None:
        print(NO_NVCC)
        return None
    from . import nvcc

    with ThreadPoolExecutor(len(PTX_FILES)) as pool:
        return dict(zip(PTX_FILES, pool.map(nvcc.compile_ptx, PTX_FILES)))


def _instructions(body: str) -> int:
    return sum(1 for line in body.splitlines()
               if line.strip().endswith(";") and not line.strip().startswith((".", "//")))


ELEMENT_SIZES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2}


def kernel_resources_table(ptx: dict[str, str] | None, threads_per_block: int = 256) -> Markdown | str:
    """Every kernel of ``selu_vectorized.cu`` and notebook 02's SELU kernel: 16-byte loads
    and stores in the PTX, registers and spills from ptxas, PTX instructions per element
    and per byte loaded, resident threads per SM, and loads in flight per SM.

    Asserts that no kernel spills or uses a stack frame. ``ptx`` is :func:`compile_ptx`'s.
    """
    if ptx is None:
        return NO_NVCC
    from . import nvcc

    resources = {name: r for filename in PTX_FILES for name, r in nvcc.ptxas_report(filename).items()}
    bodies = {name: body for filename in PTX_FILES for name, body in nvcc.kernels(ptx[filename]).items()}
    kernels = [("selu_naive_kernel<selu_course::SeluOp>", "selu_naive.cu", 4, 4)]
    # The instantiations that read an aligned x through the read-only path (IN_PLACE =
    # false, ALIGNED = true): the in-place ones differ only in the load instruction.
    kernels += [(f"selu_vectorized_kernel<{t}, {v}, false, true>", "selu_vectorized.cu", size, VECTOR_BYTES * v)
                for t, size in ELEMENT_SIZES.items() for v in VECTORS]
    kernels += [(f"selu_scalar_kernel<{t}>", "selu_vectorized.cu", size, None) for t, size in ELEMENT_SIZES.items()]
    rows = []
    for kernel, filename, size, per_thread in kernels:
        name = next(n for n in bodies if kernel in n)
        r, body = resources[name], bodies[name]
        instructions, loaded = _instructions(body), loaded_bytes(body)
        threads = resident_threads(r.registers, threads_per_block)
        loads = sum(nvcc.vector_loads(ptx[filename], kernel).values())
        stores = sum(nvcc.vector_stores(ptx[filename], kernel).values())
        rows.append((f"`{kernel}`", f"{loads}, {stores}", r.registers,
                     f"{r.spill_store_bytes + r.spill_load_bytes}, {r.stack_frame_bytes}",
                     f"{instructions / (loaded / size):.0f} ({instructions / loaded:.1f})", f"{threads:,}",
                     f"{threads * per_thread / 1024:.0f} KiB" if per_thread else "–"))
    spilled = [n for n, r in resources.items() if r.spill_store_bytes or r.spill_load_bytes or r.stack_frame_bytes]
    assert not spilled, f"kernels that spill or use a stack frame: {spilled}"
    lines = _table(["kernel", "16-byte loads, stores", "registers", "spilled, stack (B)",
                    "PTX instructions per element (per byte)", f"threads per SM ({threads_per_block} per block)",
                    "loads in flight per SM"], ["---"] + ["---:"] * 6, rows)
    return Markdown("\n".join(lines))


# --------------------------------------------------------------------------- 5. launch configurations


def launch_configs() -> list[dict]:
    """The configurations section 5 measures: every (vectors, threads) with a one-shot
    grid, then 4 vectors x 256 threads capped at each of :data:`CAPS` blocks per SM."""
    configs = [bench.launch_config(t, v, 0) for v in VECTORS for t in THREADS]
    return configs + [bench.launch_config(GRID_THREADS, GRID_VECTORS, k) for k in CAPS]


def _with_config(config: dict) -> Callable[[torch.Tensor], torch.Tensor]:
    t, v, k = config["threads_per_block"], config["vectors_per_thread"], config["max_blocks_per_sm"]
    return lambda x: ops.selu_vectorized_with_config(x, t, v, k)


def launch_variants() -> dict[str, bench.Variant]:
    """One :class:`bench.Variant` of ``selu_vectorized`` per launch configuration."""
    variants = {}
    for config in launch_configs():
        key = f"v{config['vectors_per_thread']}_t{config['threads_per_block']}_cap{config['max_blocks_per_sm']}"
        variants[key] = bench.Variant(_with_config(config), "selu_vectorized", config)
    return variants


def measure_launch_configs(numel: int | None = None, device=None) -> list[dict]:
    """Every configuration of :func:`launch_configs` and the copy, in one fp32 run."""
    if numel is None:
        numel, why = env.problem_numel(FLOAT32)
        print("size:", why)
    return bench.measure(launch_variants(), numel, dtype=FLOAT32, device=device)


def launch_sweep() -> results.Records:
    """:func:`measure_launch_configs` on this GPU, or the committed H100 records of it."""
    records = results.here_or_reference(measure_launch_configs, variants=["selu_vectorized"], dtype=FLOAT32,
                                        numel=env.REFERENCE_NUMEL)
    configs = launch_configs()
    return _keep(records, lambda r: r["variant"] == COPY or r.get("config") in configs)


def vectors_threads_table(records) -> Markdown:
    """% of the copy's throughput for each (vectors per thread, threads per block), one-shot
    grid, from the records' ``config``; and this run's fastest against the default launch."""
    def find(threads, vectors):
        return results.find(records, "selu_vectorized", config=bench.launch_config(threads, vectors, 0), dtype=FLOAT32)

    rows = [(v, f"{VECTOR_BYTES * v} B", *(_pct(find(t, v), records) for t in THREADS)) for v in VECTORS]
    lines = _table(["vectors per thread", "bytes loaded per thread", *(f"{t} threads per block" for t in THREADS)],
                   ["---:"] * (2 + len(THREADS)), rows)
    text = f"*{_source(records)}*\n\n% of the copy's throughput, one-shot grid:\n\n" + "\n".join(lines)
    measured = [(results.pct_of_copy(r, records), r) for t in THREADS for v in VECTORS if (r := find(t, v))]
    measured = [(pct, r) for pct, r in measured if pct is not None]
    if measured:
        pct, best = max(measured, key=lambda m: m[0])
        default = results.find(records, "selu_vectorized", config=DEFAULT_LAUNCH, dtype=FLOAT32)
        text += (f"\n\nfastest: {results.config_label(best['config'])} at {pct:.1f}% of the copy; "
                 f"the default launch, {results.config_label(DEFAULT_LAUNCH)}: {_pct(default, records)}")
    return Markdown(text)


def grid_table(records, sms: int | None = None) -> Markdown:
    """One-shot against capped grids (4 vectors x 256 threads, fp32): blocks, resident
    threads per SM, tiles per block, time, % of copy and the time against one-shot."""
    oneshot = results.find(records, "selu_vectorized", config=bench.launch_config(GRID_THREADS, GRID_VECTORS, 0),
                           dtype=FLOAT32)
    if oneshot is None:
        return Markdown(f"*{_source(records)}*\n\n(no one-shot record of {GRID_VECTORS} vectors x {GRID_THREADS} "
                        "threads, so no grid table)")
    gpu_sms, threads_per_sm, gpu = _gpu_shape(records)
    sms = sms or gpu_sms
    per_tile = GRID_THREADS * GRID_VECTORS * (VECTOR_BYTES // 4)  # fp32 elements per tile
    tiles = -(-oneshot["numel"] // per_tile)
    blocks_per_sm_limit = threads_per_sm // GRID_THREADS
    rows, slower = [], {}
    for k in (0, *CAPS):
        r = _same_run(records, oneshot, "selu_vectorized", bench.launch_config(GRID_THREADS, GRID_VECTORS, k))
        if r is None:
            continue
        blocks = min(k * sms, tiles) if k else tiles
        change = r["median_ms"] / oneshot["median_ms"] - 1
        if k:
            slower[k] = change
        rows.append(("one-shot" if not k else f"capped, {k} per SM", f"{blocks:,}",
                     f"{min(k or blocks_per_sm_limit, blocks_per_sm_limit) * GRID_THREADS:,}",
                     f"{-(-tiles // blocks):,}", f"{r['median_ms']:.3f}", _pct(r, records), f"{change:+.1%}"))
    lines = _table(["grid", "blocks", "resident threads per SM", "tiles per block", "median ms", "% of copy",
                    "vs one-shot"], ["---"] + ["---:"] * 6, rows)
    text = f"*{_source(records)}; {sms} SMs ({gpu})*\n\n" + "\n".join(lines)
    middle = [slower[k] for k in (4, 8, 16) if k in slower]
    if len(middle) == 3 and CAPS[-1] in slower:
        text += (f"\n\ncapped at 4 to 16 blocks per SM: {min(middle):+.1%} to {max(middle):+.1%} against one-shot; "
                 f"at {CAPS[-1]} per SM: {slower[CAPS[-1]]:+.1%}")
    return Markdown(text)


# --------------------------------------------------------------------------- 6. every dtype


def headline_variants(dtype: torch.dtype, device=None) -> dict:
    """What section 6 times for ``dtype``: torch eager and compiled, our kernel's default
    launch, our kernel's loop with no math (copy_vectorized: what the kernel would take if
    SELU cost nothing), the naive kernel (fp32 only), and (fp16, bf16) our kernel in eager's shape."""
    variants = {**bench.peers(dtype, device), "selu_vectorized": ops.selu_vectorized,
                "copy_vectorized": ops.copy_vectorized}
    triton = bench.triton_selu()
    if triton is not None and _device(device).type == "cuda":
        variants[bench.TRITON] = triton
    if dtype == torch.float32:
        variants["selu_naive"] = ops.selu_naive
    if dtype_name(dtype) in HALF_TYPES:
        variants["selu_vectorized in eager's shape"] = bench.Variant(_with_config(EAGER_SHAPE), "selu_vectorized",
                                                                     EAGER_SHAPE)
    return variants


def measure_headline(dtypes=check.DTYPES, device=None, repeats: int = 3) -> list[dict]:
    """:func:`headline_variants` of each dtype at its problem size, ``repeats`` runs back
    to back on one input (:func:`bench.measure_repeated`: the first run's records, with
    every run's medians)."""
    records = []
    for dtype in dtypes:
        numel, why = env.problem_numel(dtype)
        print(f"{dtype_name(dtype)}: {why}")
        records += bench.measure_repeated(headline_variants(dtype, device), numel, repeats=repeats, dtype=dtype,
                                          device=device)
    return records


def _headline_record(record: dict) -> bool:
    config = record.get("config")
    return config is None or (record["dtype"] in HALF_TYPES and config == EAGER_SHAPE)


def headline() -> results.Records:
    """:func:`measure_headline` on this GPU, or the committed H100 records of it."""
    records = results.here_or_reference(measure_headline, variants=list(HEADLINE_VARIANTS),
                                        numel=env.REFERENCE_NUMEL)
    return _keep(records, _headline_record)


def spreads(records) -> str:
    """Per dtype, each variant's spread over the repeated runs (max - min of the medians)."""
    lines = []
    for dtype in dict.fromkeys(r["dtype"] for r in records):
        rows = [r for r in records if r["dtype"] == dtype]
        runs = max(len(r.get("repeat_medians_ms") or [r["median_ms"]]) for r in rows)
        lines.append(f"{dtype:>8s} spread over {runs} run{'s' if runs != 1 else ''} (max - min of medians): "
                     + ", ".join(f"{results.label(r)} {bench.spread_ms(r):.3g} ms" for r in rows))
    return "\n".join(lines) or _source(records)


def roofline_figures(records) -> list:
    """One bar chart per dtype: each variant's % of the copy measured in its run.
    Saved (PNG and JSON) only when this machine measured the records."""
    from . import plot

    figures = []
    for dtype in dict.fromkeys(r["dtype"] for r in records):
        kernel = results.find(records, "selu_vectorized", dtype=dtype)
        if kernel is None:
            continue
        rows = [r for r in records if r["dtype"] == dtype and r["numel"] == kernel["numel"]]
        # Only the kernel's run: its copy is the one yardstick of the bars (on read, every
        # ratio is within a run), and a record of the same key from another run is left out.
        copy = _same_run(rows, kernel, COPY)
        rows = [r for r in rows if r.get("run") == kernel.get("run")]
        if copy is None or len(rows) < 2:
            print(f"{dtype}: no copy measured in the kernel's run, so no bars")
            continue
        if _measured(records):
            figures.append(plot.roofline_bars(rows, numel=kernel["numel"], dtype=dtype, save_as=f"03_roofline_{dtype}",
                                              title=f"SELU forward, {dtype}, on {kernel['device']}"))
        else:
            figures.append(plot.roofline_bars(rows, numel=kernel["numel"], dtype=dtype,
                                              title=f"SELU forward, {dtype}", label=_source(records)))
    return figures


GOAL_DTYPES = ("float32", "float64", "bfloat16", "float16")


def goal_report(records, title: str | None = None) -> Markdown:
    """Section 6's goals, one line each, with the measured value and PASS or MISS.

    fp32, fp64: ≤ 1.01 × copy; not slower than torch eager or torch.compile beyond the spread.
    bf16, fp16: ≥ 1.12× faster than eager; ≤ 1.03 × copy; not slower than torch.compile
    (and the plain Triton SELU, where it was measured) beyond the spread. "Beyond the spread": the kernel's median is at most the peer's
    plus the larger of the two spreads over the repeated runs (:func:`bench.spread_ms`).
    Every comparison is within the run of the kernel's default-launch record.
    """
    title = title or _source(records) or "goals"
    rows, missing = [], []

    def goal(text, measured, ok):
        rows.append((text, measured, "PASS" if ok else "**MISS**"))

    for dtype in GOAL_DTYPES:
        kernel = results.find(records, "selu_vectorized", dtype=dtype)
        peers = {name: kernel and _same_run(records, kernel, name) for name in (COPY, "torch_eager", "torch_compile")}
        absent = [name for name, r in peers.items() if r is None]
        if kernel is None or absent:
            missing.append(f"{dtype} ({'selu_vectorized' if kernel is None else ', '.join(absent)})")
            continue
        v, copy, eager, compiled = (r["median_ms"] for r in (kernel, peers[COPY], peers["torch_eager"],
                                                               peers["torch_compile"]))
        wide = dtype in ("float32", "float64")
        limit = 1.01 if wide else 1.03
        goal(f"{dtype}: ≤ {limit} × copy", f"{v / copy:.3f} × copy ({v:.4g} ms against {copy:.4g} ms)",
             v <= limit * copy)
        if not wide:
            goal(f"{dtype}: ≥ 1.12× faster than eager", f"{eager / v:.3f}× (eager at {copy / eager:.1%} of copy)",
                 eager / v >= 1.12)
        to_beat = ["torch_eager", "torch_compile"] if wide else ["torch_compile"]
        triton = _same_run(records, kernel, bench.TRITON)
        if triton is not None and not wide:
            to_beat.append(bench.TRITON)
            peers[bench.TRITON] = triton
        for peer in to_beat:
            spread = max(bench.spread_ms(kernel), bench.spread_ms(peers[peer]))
            peer_ms = peers[peer]["median_ms"]
            goal(f"{dtype}: not slower than {peer} beyond the spread",
                 f"{v - peer_ms:+.4f} ms (spread {spread:.4f} ms)", v <= peer_ms + spread)
    text = f"**{title}**\n\n"
    if rows:
        text += "\n".join(_table(["goal", "measured", ""], ["---", "---", "---"], rows))
    if missing:
        text += ("\n\n" if rows else "") + "not measured in one run with the copy and both peers: " + "; ".join(missing)
    return Markdown(text)


# --------------------------------------------------------------------------- 7. sizes


def curve_variants(device=None) -> dict:
    return {"selu_vectorized": ops.selu_vectorized, "selu_naive": ops.selu_naive, **bench.peers(FLOAT32, device)}


def measure_curve(device=None, max_log2: int = CURVE_MAX_LOG2) -> list[dict]:
    """The fp32 sweep from 2^12 to 2^``max_log2`` elements (fewer sizes on a CPU), each point in
    a ``CURVE_WINDOW_MS`` window, releasing memory only before a size that needs it; a size that
    does not fit in free GPU memory is skipped with a note. A progress bar only where
    a person watches (:func:`helpers.env.interactive`)."""
    return bench.sweep(curve_variants(device), env.sweep_sizes(max_log2=max_log2), dtype=FLOAT32, device=device,
                       window_ms=CURVE_WINDOW_MS, release_each_size=False)


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def measure_curve_rounds(device=None, rounds: int = CURVE_ROUNDS, smallest: int = CURVE_GOAL_FROM,
                         largest: int = CURVE_ROUNDS_UP_TO,
                         window_ms: tuple[float, float] = CURVE_ROUND_WINDOW_MS) -> dict:
    """The kernel and torch eager at every power of two from ``smallest`` to ``largest``
    elements (fp32), taking turns: each round times both at every size, ``rounds`` times,
    each time one ``do_bench`` call of ``window_ms``. Returns the table of every round's
    median per size and variant (ms)."""
    if rounds < 1 or smallest > largest:
        raise ValueError(f"measure_curve_rounds: needs at least one round and smallest <= largest, got "
                         f"rounds={rounds}, smallest={smallest:,}, largest={largest:,}")
    device = torch.device(device) if device is not None else env.default_device()
    variants = {"selu_vectorized": ops.selu_vectorized, "torch_eager": torch.selu}
    sizes = [1 << k for k in range(smallest.bit_length() - 1, largest.bit_length())]
    inputs = {numel: bench.random_input(numel, FLOAT32, device, seed=11) for numel in sizes}
    times = bench.take_turns({(numel, name): functools.partial(fn, x) for numel, x in inputs.items()
                              for name, fn in variants.items()}, rounds, device=device, window_ms=window_ms)
    return {"device": bench.device_name(device), "device_slug": env.device_slug(device), "torch": torch.__version__,
            "dtype": "float32", "rounds": rounds, "window_ms": list(window_ms),
            "rows": [{"numel": numel, **{f"{name}_ms": times[numel, name] for name in variants}} for numel in sizes]}


def curve_rounds() -> tuple[dict | None, str]:
    """:func:`measure_curve_rounds` on this GPU (saved as ``03_curve_rounds.json``), or the
    committed H100 table, and where it comes from."""
    return results.here_or_reference_table(measure_curve_rounds, CURVE_ROUNDS_FILE)


def rounds_against_eager(table: dict | None) -> dict[int, tuple[float, list[float]]]:
    """Per size of a :func:`measure_curve_rounds` table: every round's ratio of throughputs,
    kernel / eager (eager's round median over the kernel's, timed one after the other), and
    the median of those ratios, which one disturbed round cannot move far."""
    found = {}
    for row in (table or {}).get("rows", []):
        ratios = [e / o for e, o in zip(row["torch_eager_ms"], row["selu_vectorized_ms"])]
        found[row["numel"]] = (statistics.median(ratios), ratios)
    return found


def curve() -> results.Records:
    """:func:`measure_curve` on this GPU, or the committed H100 records of it (powers of two)."""
    records = results.here_or_reference(measure_curve, variants=list(CURVE_VARIANTS), dtype=FLOAT32)
    return _keep(records, lambda r: _is_default_launch(r) and _power_of_two(r["numel"]))


def throughput_figure(records):
    """GB/s against size for the curve's variants and the copy; saved when measured here."""
    from . import plot

    names = [n for n in (*CURVE_VARIANTS, COPY) if any(results.label(r) == n for r in records)]
    if not any(n != COPY for n in names):
        print(_source(records) or "no records")
        return None
    if _measured(records):
        return plot.throughput(records, title=f"SELU forward, float32, on {records[0]['device']}", variants=names,
                               save_as="03_vectorized_throughput")
    return plot.throughput(records, title="SELU forward, float32", variants=names, label=_source(records))


def slowest_against_eager(records, smallest: int = CURVE_GOAL_FROM, rounds_table: dict | None = None
                          ) -> tuple[float, int] | None:
    """The smallest ratio of throughputs, selu_vectorized / torch eager, over the sizes
    from ``smallest`` up, and the size where it is; ``None`` without such pairs.

    A size of ``rounds_table`` (:func:`measure_curve_rounds`) is judged on its rounds
    (:func:`rounds_against_eager`), any other size on the records: eager taken from the
    kernel's own run where that run measured it, else from any record of its size.
    """
    in_rounds = {numel: ratio for numel, (ratio, _) in rounds_against_eager(rounds_table).items() if numel >= smallest}
    ratios = dict(in_rounds)
    for r in records:
        if (r["variant"] != "selu_vectorized" or r.get("config") is not None or r["numel"] < smallest
                or r["numel"] in in_rounds):
            continue
        eager = _same_run(records, r, "torch_eager") or results.find(records, "torch_eager", dtype=r["dtype"],
                                                                      numel=r["numel"], op=r["op"])
        if eager is not None:
            ratios[r["numel"]] = eager["median_ms"] / r["median_ms"]
    if not ratios:
        return None
    worst = min(ratios, key=ratios.get)
    return ratios[worst], worst


def curve_verdict(records, rounds_table: dict | None = None, smallest: int = CURVE_GOAL_FROM,
                  goal: float = CURVE_GOAL, where: str | None = None) -> str:
    """One line: section 7's goal (≥ 0.95 × eager's throughput from 2^16 elements up), from
    the rounds where ``rounds_table`` has the size (:func:`slowest_against_eager`)."""
    found = slowest_against_eager(records, smallest, rounds_table)
    where = where or ("this run" if _measured(records) else _source(records) or "these records")
    if found is None:
        return f"{where}: no selu_vectorized and torch_eager records from {smallest:,} elements up"
    ratio, numel = found
    rounds = rounds_against_eager(rounds_table).get(numel)
    how = (f"; the median of {len(rounds[1])} rounds' ratios, which span {min(rounds[1]):.3f}–{max(rounds[1]):.3f}"
           if rounds else "")
    return (f"{where}: vectorized / eager throughput from 2^{smallest.bit_length() - 1} up is at least {ratio:.3f} "
            f"(at {numel:,} elements{how}); goal ≥ {goal}: {'PASS' if ratio >= goal else 'MISS'}")


# --------------------------------------------------------------------------- 8. bad input


@dataclass(frozen=True)
class BadInput:
    """A row of the bad-input table: an input, and how each operator is called on it.

    ``call`` is ``"functional"`` (``op(x)``), ``"out_overlap"`` (``op(x[:-1], out=x[1:])``),
    ``"out_is_x"`` (``op(c, out=c)`` on a clone ``c`` of x: in place) or ``"meta"``.
    ``strides`` asks for the result's strides next to ``torch.selu``'s.
    """

    name: str
    x: torch.Tensor
    call: str = "functional"
    strides: bool = False


def bad_inputs(device=None) -> list[BadInput]:
    """Section 8's inputs, on ``device``."""
    device = _device(device)
    x = bench.random_input(64 * 48, FLOAT32, device, seed=0)
    images = bench.random_input(2 * 8 * 6 * 5, FLOAT32, device, seed=1).view(2, 8, 6, 5)
    return [
        BadInput("int32", torch.randint(-5, 5, (8,), dtype=torch.int32, device=device)),
        BadInput("bool", torch.randn(8, device=device) > 0),
        BadInput("complex64", torch.randn(8, dtype=torch.complex64, device=device)),
        BadInput("float8_e4m3fn", torch.randn(8).to(torch.float8_e4m3fn).to(device)),
        BadInput("float16 (and float64, bfloat16)", x.half()),
        BadInput("channels_last (2, 8, 6, 5)", images.to(memory_format=torch.channels_last), strides=True),
        BadInput("transposed (64, 48)", x.view(64, 48).t(), strides=True),
        BadInput("strided slice `x[::3]`", x[::3], strides=True),
        BadInput("misaligned view `x[1:]`", x[1:]),
        BadInput("empty, 0 elements", x[:0]),
        BadInput("0-d, a single element `x[5]`", x[5]),
        BadInput("`out=` partly overlapping x: `op(x[:-1], out=x[1:])`", x.clone(), call="out_overlap"),
        BadInput("`out=` is x itself (in place)", x, call="out_is_x"),
        BadInput("meta tensor (64, 48): no data", torch.empty(64, 48, device="meta"), call="meta"),
    ]


OPERATORS = {
    "selu_naive": (ops.selu_naive, ops.selu_naive_out),
    "selu_vectorized": (ops.selu_vectorized, ops.selu_vectorized_out),
}


def _in_place(out_op):
    def run(t):
        c = t.clone()  # x itself stays for the reference
        result = out_op(c, c)
        assert result is c
        return c
    return run


def _meta_outcome(op, x: torch.Tensor) -> str:
    try:
        y = op(x)
    except Exception as error:  # an outcome to report
        lines = str(error).strip().splitlines()
        return f"error: {type(error).__name__}: {lines[0] if lines else ''}"
    want = torch.selu(x)
    same = (y.shape, y.dtype, y.device, y.stride()) == (want.shape, want.dtype, want.device, want.stride())
    return (f"shape only (the fake kernel): {tuple(y.shape)}, {str(y.dtype).removeprefix('torch.')}, {y.device}"
            + (", as torch.selu gives" if same else f"; WRONG: torch.selu gives {tuple(want.shape)}, {want.dtype}"))


def _strides_note(op, x: torch.Tensor) -> str:
    y, want = op(x), torch.selu(x)
    if y.stride() == want.stride():
        return f"; strides {y.stride()}, as torch.selu's"
    return f"; strides {y.stride()}, torch.selu's {want.stride()}"


def bad_input_outcome(operator: str, case: BadInput) -> str:
    """What ``operator`` (a key of :data:`OPERATORS`) does with ``case``, in one line."""
    functional, out_op = OPERATORS[operator]
    x = case.x
    max_ulp = _tolerance(x.device, x.dtype)
    if case.call == "meta":
        return _meta_outcome(functional, x)
    if case.call == "out_overlap":
        return check.outcome(lambda t: out_op(t[:-1], t[1:]), x, lambda t: torch.selu(t[:-1]), max_ulp=max_ulp)
    if case.call == "out_is_x":
        text = check.outcome(_in_place(out_op), x, max_ulp=max_ulp)
        return text + (", in place" if text.startswith("correct") else "")
    text = check.outcome(functional, x, max_ulp=max_ulp)
    if case.strides and text.startswith("correct"):
        text += _strides_note(functional, x)
    return text


def bad_input_table(device=None) -> Markdown:
    """Both operators, through the dispatcher, on every input of :func:`bad_inputs`:
    a clear error or a correct result (:func:`helpers.check.outcome`)."""
    device = _device(device)
    rows = [(case.name, *(bad_input_outcome(op, case).replace("|", "/") for op in OPERATORS))
            for case in bad_inputs(device)]
    lines = _table(["input", "`selu_naive` (notebook 02)", "`selu_vectorized`"], ["---", "---", "---"], rows)
    return Markdown(f"*on {device.type.upper()}, through the dispatcher*\n\n" + "\n".join(lines))
