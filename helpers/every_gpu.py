"""Notebook 03b: one kernel at the roofline on every Hopper GPU (the H100 and the H200).

Each section's measurement on this GPU, or, without one, the committed records of both
GPUs side by side (``results/h100``, ``results/h200``). A table says which it shows.
"""
from __future__ import annotations

import functools
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

import torch


from . import bench, check, demos, env, nvcc, ops, power, report, results, tuning
from .bench import COPY, dtype_name
from .report import Markdown, _table

GPUS = ("h100", "h200")  # the GPUs whose records the course commits
DTYPES = ("float32", "float64", "bfloat16", "float16")
HALF_DTYPES = ("bfloat16", "float16")
# Datasheet figures, the same for the H100 SXM and the H200: 132 SMs, 4 schedulers per
# SM that each issue one warp instruction per clock, at up to 1,980 MHz.
SMS, SCHEDULERS_PER_SM, BOOST_CLOCK_HZ = 132, 4, 1.98e9
WARP = 32
LATENCY_US = (0.5, 1.0)  # a bracket for DRAM latency, assumed for a GPU where none was measured
DTYPE_COLORS = {"float32": "tab:blue", "float64": "tab:purple", "bfloat16": "tab:orange", "float16": "tab:green"}
TUNING_TABLE, INSTRUCTIONS_TABLE, MISALIGNED_TABLE = "03b_tuning.json", "03b_instructions.json", "03b_misaligned.json"
POWER_TABLE = "03b_power.json"
MISALIGNED_ROUNDS = 3  # each variant timed in turn this many times: the clock moves between seconds


def _here() -> str | None:
    """This machine's GPU slug when it measures (a GPU and CUDA kernels), else None."""
    return env.device_slug() if env.can_build_cuda() else None


def _notebook_03_ran_here(slug: str) -> bool:
    """Whether this run holds notebook 03's records of ``slug``: this GPU, with notebook 03
    run before this one (as ``make reproduce`` and the course's order do)."""
    return slug == _here() and any(r["variant"] == "selu_vectorized" for r in results.load(slug))


def _records(slug: str) -> list[dict]:
    """Notebook 03's records of ``slug``: this run's where notebook 03 ran here; otherwise the
    committed ones (any other GPU, or this one when this notebook runs without 03 first)."""
    return results.load(slug) if _notebook_03_ran_here(slug) else results.load_reference(slug)


def _records_source(slug: str) -> str:
    """Where :func:`_records` took ``slug``'s records from, for a table's first column."""
    if _notebook_03_ran_here(slug):
        return "this run"
    committed = f"committed {slug.upper()} run"
    return f"{committed}; notebook 03 has not run here yet" if slug == _here() else committed


def _source(slug: str) -> str:
    return "this run" if slug == _here() else f"committed {slug.upper()} run"


def _slugs() -> tuple[str, ...]:
    here = _here()
    return GPUS if here is None or here in GPUS else (*GPUS, here)


# --------------------------------------------------------------------------- 1. two GPUs

PEERS = (COPY, "torch_eager", "torch_compile", bench.TRITON, "selu_vectorized")


def _headline(records: list[dict], dtype: str) -> dict[str, dict]:
    """The default-launch headline records of ``dtype`` at the reference size, from the
    run of the kernel's record (notebook 03, section 6)."""
    kernel = next((r for r in records if r["variant"] == "selu_vectorized" and r["dtype"] == dtype
                   and r["numel"] == env.REFERENCE_NUMEL and r.get("config") is None and r["op"] == "forward"), None)
    if kernel is None:
        return {}
    return {r["variant"]: r for r in records if r.get("run") == kernel.get("run") and r["dtype"] == dtype
            and r["numel"] == kernel["numel"] and r.get("config") is None and r["op"] == "forward"}


def two_gpus_table() -> Markdown:
    """Notebook 03's headline on each GPU: ms, and each time as a multiple of the copy in its run."""
    rows = []
    for slug in _slugs():
        records, source = _records(slug), _records_source(slug)
        for dtype in DTYPES:
            run = _headline(records, dtype)
            if COPY not in run:
                continue
            copy = run[COPY]["median_ms"]
            cells = [f"{run[v]['median_ms']:.3f} ({run[v]['median_ms'] / copy:.3f}×)" if v in run else "–"
                     for v in PEERS[1:]]
            rows.append([f"{slug.upper()} ({source})", dtype, f"{copy:.3f}", *cells])
    if not rows:
        return Markdown("no headline records of notebook 03 yet: run it on a GPU first")
    header = ["GPU", "dtype", "copy ms", "torch.selu", "torch.compile", "Triton (10 lines)", "selu_vectorized"]
    return Markdown("*ms at the reference size, and (in brackets) × the copy of the same run; "
                    "notebook 03, section 6*\n\n" + "\n".join(_table(header, ["---"] * 2 + ["---:"] * 5, rows)))


# --------------------------------------------------------------------------- 2. Little's law


def _latency_us(slug: str) -> float | None:
    """The DRAM latency measured on GPU ``slug`` (notebook 02, :func:`helpers.demos.latency`),
    in µs: this run's for this GPU, else the committed one; None where none was measured."""
    this_run = results.load_table(demos.LATENCY_FILE, slug, results.results_dir()) if slug == _here() else None
    table = this_run or results.load_table(demos.LATENCY_FILE, slug)
    return table["latency_ns"] / 1e3 if table else None


def littles_law() -> str:
    """Bytes in flight that Little's law asks of each GPU, per SM, against what one 16-byte
    load per resident thread provides: at the latency measured on each GPU (notebook 02), or
    at the bracket :data:`LATENCY_US` where none was measured, which the line then says."""
    lines = []
    for slug in _slugs():
        run = _headline(_records(slug), "float32")
        if COPY not in run:
            continue
        bandwidth = run[COPY]["gbps"] * 1e9  # bytes per second, read + written
        reads = bandwidth / 2
        measured = _latency_us(slug)
        if measured is not None:
            latency = f"at the {measured * 1e3:.0f} ns of latency measured on it (notebook 02)"
            need = f"{reads * measured * 1e-6 / SMS / 1024:.1f} KiB"
        else:
            low, high = (reads * bound * 1e-6 / SMS / 1024 for bound in LATENCY_US)
            latency = f"at an assumed {LATENCY_US[0]}–{LATENCY_US[1]} µs of latency (none measured on it yet)"
            need = f"{low:.0f}–{high:.0f} KiB"
        lines.append(f"{slug.upper()} ({_records_source(slug)}): copy at {run[COPY]['gbps']:,.0f} GB/s, so "
                     f"{reads / 1e9:,.0f} GB/s of loads; {latency}, that is {need} of loads in flight per SM")
    provided = 2048 * 16 / 1024
    lines.append(f"one 16-byte load per thread, 2,048 threads per SM: {provided:.0f} KiB per SM in flight, "
                 "before any thread issues a second")
    return "\n".join(lines)


# --------------------------------------------------------------------------- 3. tuning


def _per_gpu_tables(filename: str, measure) -> dict[str, dict]:
    """A JSON table per GPU: ``measure()`` on this GPU, saved as ``filename`` with this run's
    results (skipped where it returns None), and the committed table of every other GPU."""
    tables = {}
    here = _here()
    if here is not None and (table := measure()) is not None:
        results.save_table(table, filename)
        tables[here] = table
    for slug in GPUS:
        if slug not in tables and (table := results.load_table(filename, slug)) is not None:
            tables[slug] = table
    return tables


def _tuning_records() -> dict | None:
    table = tuning.cached(env.default_device())
    return None if table is None else {"device": table["gpu"], **table}


def tuning_tables() -> dict[str, dict]:
    """The tuner's records (every candidate's time) per GPU, saved as ``03b_tuning.json``."""
    return _per_gpu_tables(TUNING_TABLE, _tuning_records)


def _pct(ms: float, copy_ms: float) -> str:
    return f"{100 * copy_ms / ms:.1f}%"


def tuning_table(tables: dict[str, dict]) -> Markdown:
    """Per GPU and dtype: the configuration the tuner chose and its share of the copy's
    speed, the worst of the 24 candidates, and the default launch (kernels/selu_vectorized.cu's
    default_config, the one used until the tuner has measured the GPU)."""
    rows = []
    for slug, table in tables.items():
        for dtype in DTYPES:
            entry = table.get(dtype)
            if entry is None:
                continue
            times, copy = entry["times_ms"], entry["copy_ms"]
            default = times.get(",".join(map(str, tuning.DEFAULT_CONFIG)))
            worst = max(times, key=times.get)
            # Records from before the rounds existed have no "kept_default".
            chosen = entry["label"] + (" (the default, kept)" if entry.get("kept_default") else "")
            rows.append([f"{slug.upper()} ({_source(slug)})", dtype, chosen, _pct(times[",".join(map(str, entry["config"]))], copy),
                         f"{_pct(times[worst], copy)} ({worst})", _pct(default, copy) if default else "–"])
    if not rows:
        return Markdown("no tuning records yet: they are made on a GPU, by build.load")
    threads, vectors, _ = tuning.DEFAULT_CONFIG
    header = ["GPU", "dtype", "chosen", "chosen: % of copy speed", "worst candidate",
              f"default launch ({threads} threads × {vectors} vectors, one-shot)"]
    return Markdown("*share of the copy's speed (copy ms / kernel ms) in the first pass, at the tuning size "
                    f"({env.REFERENCE_NUMEL:,} elements where it fits); \"the default, kept\": no finalist's median "
                    "round beat the default's best, each as a multiple of its round's copy*\n\n"
                    + "\n".join(_table(header, ["---"] * 3 + ["---:"] * 3, rows)))


def tuning_figure(tables: dict[str, dict]):
    """Every candidate's share of the copy's speed, one panel per GPU, one line per dtype."""
    import matplotlib.pyplot as plt

    from . import plot

    if not tables:
        return None
    labels = [",".join(map(str, c)) for c in tuning.candidates()]
    fig, axes = plt.subplots(1, len(tables), figsize=(6 * len(tables), 3.6), sharey=True, squeeze=False)
    for ax, (slug, table) in zip(axes[0], tables.items()):
        for dtype in DTYPES:
            entry = table.get(dtype)
            if entry:
                ax.plot(range(len(labels)), [100 * entry["copy_ms"] / entry["times_ms"][k] for k in labels],
                        marker="o", markersize=3, label=dtype, color=DTYPE_COLORS[dtype])
        ax.axhline(100, color="black", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
        ax.set_title(f"{table['device']} ({_source(slug)})", fontsize=9)
        ax.set_xlabel("threads, vectors per thread, blocks per SM (0: one-shot)")
    axes[0][0].set_ylabel("% of the copy's speed")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    if _here() is not None:
        plot.save_figure(fig, tables, results.figure_path("03b_tuning", slug=_here()))
    plt.close(fig)
    return fig


# --------------------------------------------------------------------------- 4. instructions

COMPARE_SOURCE = r"""
#include "selu_math.cuh"
// Two bf16 values per 32-bit word, as the kernels hold them: expm1f's path against the economical one.
__device__ __forceinline__ unsigned int apply(unsigned int w, bool economical) {
  const float lo = __uint_as_float(w << 16), hi = __uint_as_float(w & 0xffff0000u);
  const float a = economical ? selu_course::selu_economical(lo) : selu_course::selu(lo);
  const float b = economical ? selu_course::selu_economical(hi) : selu_course::selu(hi);
  unsigned int r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
  return r;
}
__global__ void with_expm1f(const uint4* x, uint4* y) {
  uint4 v = x[threadIdx.x];
  v.x = apply(v.x, false); v.y = apply(v.y, false); v.z = apply(v.z, false); v.w = apply(v.w, false);
  y[threadIdx.x] = v;
}
__global__ void economical(const uint4* x, uint4* y) {
  uint4 v = x[threadIdx.x];
  v.x = apply(v.x, true); v.y = apply(v.y, true); v.z = apply(v.z, true); v.w = apply(v.w, true);
  y[threadIdx.x] = v;
}
"""
ARITHMETIC = ("fma", "mul", "add", "sub", "max", "min", "selp", "setp", "shl", "and", "or", "cvt", "ex2", "abs", "neg")


def ptx_per_element() -> Markdown | str:
    """PTX instructions per bf16 element, by kind, for the two formulations (no GPU needed)."""
    if env.nvcc_path() is None:
        return report.NO_NVCC
    ptx = nvcc.compile_source(COMPARE_SOURCE, "selu_economy").ptx
    rows = []
    for name, body in nvcc.kernels(ptx).items():
        kinds = {}
        for line in body.splitlines():
            op = line.strip().split(" ")[0].split("\t")[0]
            base = op.split(".")[0]
            if base in ARITHMETIC:
                kinds[base] = kinds.get(base, 0) + 1
            elif base == "bra" or base.startswith("@"):
                kinds["branch"] = kinds.get("branch", 0) + 1
        total = sum(kinds.values())
        label = "expm1f (what torch runs)" if "with_expm1f" in name else "economical (selu_math.cuh)"
        top = ", ".join(f"{k} {v / 8:.1f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])[:6])
        rows.append([label, f"{total / 8:.1f}", top])
    return Markdown("*PTX instructions per element: 8 bf16 elements, compiled for sm_90*\n\n"
                    + "\n".join(_table(["formulation", "per element", "the most frequent (per element)"],
                                       ["---", "---:", "---"], rows)))


NCU_PROBE = r"""
import sys, torch
from helpers import build, ops
build.load("selu_vectorized")
for name in sys.argv[1:]:
    dtype = getattr(torch, name)
    x = torch.randn(2**24 + 8, device="cuda", dtype=dtype)
    torch.selu(x[:2**24]); ops.selu_vectorized(x[:2**24])
    if dtype.itemsize == 2:  # x[1:] into a fresh result: the realigning loop of section 6
        ops.selu_vectorized(x[1:2**24 + 1])
torch.cuda.synchronize()
"""
MISALIGNED_KERNEL = "selu_vectorized x[1:]"  # the realigning loop's row of the instruction table


def _ncu_path() -> str | None:
    """Nsight Compute's ``ncu``: on PATH, or in the CUDA toolkit torch's extension builder uses."""
    from shutil import which

    from torch.utils.cpp_extension import CUDA_HOME

    candidate = os.path.join(CUDA_HOME, "bin", "ncu") if CUDA_HOME else None
    return which("ncu") or (candidate if candidate and os.path.exists(candidate) else None)


INSTRUCTIONS_METRIC = "smsp__inst_executed.sum"
FP64_PIPE_METRIC = "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active"


def measure_instructions(dtypes=("bfloat16", "float16", "float32", "float64")) -> dict:
    """Warp instructions per element that Nsight Compute counts on this GPU for torch.selu and
    for the course's kernel, at 2^24 elements (``smsp__inst_executed.sum`` × 32 / elements);
    and in fp64, how busy the fp64 units were, as a share of the cycles."""
    ncu = _ncu_path()
    if ncu is None:
        return {"device": torch.cuda.get_device_name(), "error": "ncu (Nsight Compute) is not installed here"}
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as probe:
        probe.write(NCU_PROBE)
    try:
        metrics = f"{INSTRUCTIONS_METRIC},{FP64_PIPE_METRIC}"
        done = subprocess.run([ncu, "--clock-control", "none", "--metrics", metrics, "--csv",
                               sys.executable, probe.name, *dtypes], capture_output=True, text=True, timeout=300,
                              cwd=env.REPO_ROOT, env={**os.environ, "PYTHONPATH": str(env.REPO_ROOT)})
    finally:
        os.unlink(probe.name)
    found = read_ncu_csv(done.stdout, dtypes)
    if found is None:
        return {"device": torch.cuda.get_device_name(), "error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return {"device": torch.cuda.get_device_name(), "numel": 2**24, **found}


def read_ncu_csv(text: str, dtypes: tuple[str, ...], numel: int = 2**24) -> dict | None:
    """From ``ncu --csv`` output of NCU_PROBE: each kernel's warp instructions per element
    (``per_element``, by dtype and kernel) and, in fp64, how busy its fp64 units were
    (``fp64_pipe_busy_pct``); None where the output holds no table."""
    import csv

    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return None
    counts, fp64_busy = {}, {}
    for row in csv.DictReader(lines[start:]):
        name = row["Kernel Name"]
        kernel = _kernel_label(name)
        dtype = _kernel_dtype(name)
        if kernel is None or dtype not in dtypes:
            continue
        value = float(row["Metric Value"].replace(",", ""))
        if row["Metric Name"] == INSTRUCTIONS_METRIC:
            counts.setdefault(dtype, {})[kernel] = round(value * WARP / numel, 1)
        elif row["Metric Name"] == FP64_PIPE_METRIC and dtype == "float64":
            fp64_busy[kernel] = round(value, 1)
    return {"per_element": counts, "fp64_pipe_busy_pct": fp64_busy}


def _kernel_label(name: str) -> str | None:
    """torch.selu, the course's aligned loop, or its realigning loop (the template argument
    ALIGNED of ``selu_vectorized_kernel<T, VECTORS_PER_THREAD, IN_PLACE, ALIGNED>`` is 0)."""
    if "elu_kernel" in name:
        return "torch.selu"
    found = re.search(r"selu_vectorized_kernel<[^<>]+, \d+, \d+, (\d+)>", name)
    if found is None:
        return None
    return "selu_vectorized" if found.group(1) != "0" else MISALIGNED_KERNEL


def _kernel_dtype(name: str) -> str | None:
    for needle, dtype in (("BFloat16", "bfloat16"), ("Half", "float16"), ("double", "float64"), ("float", "float32")):
        if needle in name:
            return dtype
    return None


def instruction_tables() -> dict[str, dict]:
    """Instructions per element on each GPU, saved as ``03b_instructions.json``."""
    return _per_gpu_tables(INSTRUCTIONS_TABLE, measure_instructions)


def issue_time_ms(numel: int, per_element: float, clock_mhz: float) -> float:
    """Time to issue ``per_element`` warp-lane instructions for ``numel`` elements at ``clock_mhz``
    (SMs × schedulers × one warp instruction per clock): section 4's floor at the datasheet
    clock, section 7's at the clock a kernel actually got."""
    return numel * per_element / WARP / (SMS * SCHEDULERS_PER_SM * clock_mhz * 1e6) * 1e3


def issue_bound_table(tables: dict[str, dict]) -> Markdown:
    """How long issuing the counted instructions takes at the reference size, against the copy.

    issue time = elements × (instructions per element / 32 lanes) / (SMs × schedulers × clock):
    a floor, since nothing issues faster; where it nears the copy's time, the kernel is
    instruction-bound rather than memory-bound."""
    rows = []
    for slug, table in tables.items():
        if "error" in table:
            rows.append([slug.upper(), "–", "–", "–", table["error"]])
            continue
        records = _records(slug)
        for dtype, counts in table["per_element"].items():
            run = _headline(records, dtype)
            copy = run[COPY]["median_ms"] if COPY in run else None
            for kernel, per_element in counts.items():
                issue_ms = issue_time_ms(env.REFERENCE_NUMEL, per_element, BOOST_CLOCK_HZ / 1e6)
                rows.append([f"{slug.upper()} ({_source(slug)})", dtype, kernel, f"{per_element:.1f}",
                             f"{issue_ms:.2f} ms" + (f" ({issue_ms / copy:.0%} of the copy's {copy:.2f} ms)" if copy else "")])
    if not rows:
        return Markdown("no instruction counts yet: they are measured on a GPU with Nsight Compute")
    header = ["GPU", "dtype", "kernel", "instructions per element", "issue time at the reference size"]
    busy = [f"{slug.upper()} " + ", ".join(f"{kernel} {pct:.0f}%" for kernel, pct in table["fp64_pipe_busy_pct"].items())
            for slug, table in tables.items()
            if table.get("fp64_pipe_busy_pct")]
    fp64 = ("\n\nfp64 units busy, as a share of the cycles of the same calls (Nsight Compute, "
            f"`{FP64_PIPE_METRIC}`): " + "; ".join(busy)) if busy else ""
    return Markdown("*warp instructions × 32 / elements, counted by Nsight Compute at 2^24 elements; issue time at "
                    "132 SMs × 4 per clock × 1.98 GHz (datasheet)*\n\n"
                    + "\n".join(_table(header, ["---"] * 3 + ["---:"] * 2, rows)) + fp64)


# --------------------------------------------------------------------------- 5. misaligned views


def misaligned_variants(numel: int) -> dict:
    """The same ``numel`` elements aligned and misaligned, out of a tensor of ``numel + 8``."""
    def into_same_offset(x):
        out = torch.empty_like(x)
        return ops.selu_vectorized_out(x[1:numel + 1], out[1:numel + 1])

    return {"aligned x[:n]": lambda x: ops.selu_vectorized(x[:numel]),
            "x[1:n+1] (fresh out)": lambda x: ops.selu_vectorized(x[1:numel + 1]),
            "x[1:n+1] into y[1:n+1]": into_same_offset,
            "torch.selu aligned": lambda x: torch.selu(x[:numel]),
            "torch.selu x[1:n+1]": lambda x: torch.selu(x[1:numel + 1])}


def measure_misaligned(device=None) -> dict:
    device = torch.device(device) if device is not None else env.default_device()
    table = {"device": torch.cuda.get_device_name(device), "rows": []}
    for dtype in DTYPES:
        numel, _ = env.problem_numel(getattr(torch, dtype), tensors=4)
        x = bench.random_input(numel + 8, dtype, device, seed=0)
        variants = misaligned_variants(numel)
        # One call of each first: the first call of a new output size allocates it (and the
        # GPU maps its pages), which would otherwise weigh on whichever variant runs first.
        for fn in variants.values():
            fn(x)
        torch.cuda.synchronize(device)
        # Taking turns, so that a change of clock (section 7) weighs on every variant alike.
        rounds = bench.take_turns({name: functools.partial(fn, x) for name, fn in variants.items()},
                                  MISALIGNED_ROUNDS, device=device)
        for name, times in rounds.items():
            table["rows"].append({"dtype": dtype, "numel": numel, "variant": name,
                                  "median_ms": statistics.median(times), "rounds_ms": times})
        del x
        torch.cuda.empty_cache()
    return table


def misaligned_tables() -> dict[str, dict]:
    """Aligned against misaligned views on each GPU, saved as ``03b_misaligned.json``."""
    return _per_gpu_tables(MISALIGNED_TABLE, measure_misaligned)


def misaligned_table(tables: dict[str, dict]) -> Markdown:
    rows = []
    for slug, table in tables.items():
        for dtype in DTYPES:
            ms = {r["variant"]: r["median_ms"] for r in table["rows"] if r["dtype"] == dtype}
            if not ms:
                continue
            aligned = ms["aligned x[:n]"]
            rows.append([f"{slug.upper()} ({_source(slug)})", dtype, f"{aligned:.3f}",
                         *(f"{ms[k]:.3f} ({ms[k] / aligned:.3f}×)" for k in ("x[1:n+1] (fresh out)",
                                                                            "x[1:n+1] into y[1:n+1]")),
                         f"{ms['torch.selu x[1:n+1]'] / ms['torch.selu aligned']:.3f}×"])
    if not rows:
        return Markdown("no misaligned-view records yet: they are measured on a GPU")
    header = ["GPU", "dtype", "aligned ms", "x[1:] → fresh out", "x[1:] → y[1:]", "torch.selu: x[1:] / aligned"]
    return Markdown("*the same number of elements (the problem size), aligned and one element off; goal ≤ 1.10 × "
                    "aligned*\n\n" + "\n".join(_table(header, ["---"] * 2 + ["---:"] * 4, rows)))


def misaligned_issue_lines(instructions: dict[str, dict], misaligned: dict[str, dict]) -> str:
    """Per GPU and 16-bit dtype: the realigning loop's instructions per element against the
    aligned loop's (section 4's count), beside its time against the aligned time (the table
    above). Where the kernel is bound by issuing its instructions, the two ratios agree."""
    lines = []
    for slug, table in misaligned.items():
        counts = instructions.get(slug, {}).get("per_element", {})
        for dtype in HALF_DTYPES:
            ms = {r["variant"]: r["median_ms"] for r in table["rows"] if r["dtype"] == dtype}
            aligned, realigned = counts.get(dtype, {}).get("selu_vectorized"), counts.get(dtype, {}).get(MISALIGNED_KERNEL)
            if not ms or not aligned or not realigned:
                continue
            time_ratio = ms["x[1:n+1] (fresh out)"] / ms["aligned x[:n]"]
            lines.append(f"{slug.upper()} {dtype}: x[1:] into a fresh result issues {realigned:.1f} instructions per "
                         f"element against the aligned loop's {aligned:.1f} ({realigned / aligned:.3f}×), and takes "
                         f"{time_ratio:.3f}× the aligned time")
    return "\n".join(lines) or "no count of the realigning loop yet: Nsight Compute counts it on a GPU"


def misaligned_goals(tables: dict[str, dict], limit: float = 1.10) -> list[tuple[str, str, bool]]:
    goals = []
    for slug, table in tables.items():
        for dtype in DTYPES:
            ms = {r["variant"]: r["median_ms"] for r in table["rows"] if r["dtype"] == dtype}
            if ms:
                worst = max(ms["x[1:n+1] (fresh out)"], ms["x[1:n+1] into y[1:n+1]"]) / ms["aligned x[:n]"]
                goals.append((f"{slug.upper()} {dtype}: misaligned ≤ {limit} × aligned", f"{worst:.3f}×",
                              worst <= limit))
    return goals


# --------------------------------------------------------------------------- the power limit (notebook section 7)


def power_tables() -> dict[str, dict]:
    """Each kernel's board power and SM clock on each GPU (helpers.power), saved as ``03b_power.json``."""
    return _per_gpu_tables(POWER_TABLE, power.measure_power)


# the instruction count of section 4 that stands for each timed variant
_COUNTED = {"selu_vectorized": "selu_vectorized", "torch_eager": "torch.selu"}


def power_table(tables: dict[str, dict], instructions: dict[str, dict] | None = None) -> Markdown:
    """Per GPU, dtype and kernel: ms per call, board power, SM clock, how often the clock was
    lowered for the power limit, and the issue time of section 4's count at that clock."""
    rows, limits = [], []
    for slug, table in tables.items():
        counts = (instructions or {}).get(slug, {}).get("per_element", {})
        limits.append(f"{slug.upper()} {table['power_limit_w']:.0f} W" if table.get("power_limit_w") else slug.upper())
        for row in table["rows"]:
            found = power.summarize(row["samples"])
            per_element = counts.get(row["dtype"], {}).get(_COUNTED.get(row["variant"], ""))
            issue = "–"
            if per_element:
                ms = issue_time_ms(row["numel"], per_element, found["clock_mhz"])
                issue = f"{ms:.2f} ms ({ms / row['median_ms']:.0%})"
            rows.append([f"{slug.upper()} ({_source(slug)})", row["dtype"], row["variant"], f"{row['median_ms']:.3f}",
                         f"{found['power_w']:.0f}", f"{found['clock_mhz']:,.0f} (lowest {found['min_clock_mhz']:,.0f})",
                         f"{found['power_capped']:.0%}", issue])
    if not rows:
        return Markdown("no power records yet: they are measured on a GPU with nvidia-smi")
    header = ["GPU", "dtype", "kernel", "ms per call", "board W", "SM clock MHz", "clock lowered for power",
              "issue time at that clock (share of the call)"]
    first = next(iter(tables.values()))
    return Markdown(f"*each kernel back to back for {first['run_s']:g} s at the problem size, nvidia-smi sampling "
                    f"every {power.SAMPLE_MS} ms after the first {first['settle_s']:g} s; medians; board power "
                    f"limit: {', '.join(limits)}; issue time: section 4's instructions per element at the median "
                    "clock*\n\n" + "\n".join(_table(header, ["---"] * 3 + ["---:"] * 5, rows)))


def power_lines(tables: dict[str, dict]) -> str:
    """Per GPU: the power and clock the copy, the course's kernel and ``torch.selu`` ran at, and
    how often the clock was lowered for the power limit, over all dtypes."""
    lines = []
    for slug, table in tables.items():
        parts = []
        for variant in (COPY, "selu_vectorized", "torch_eager"):
            samples = [s for row in table["rows"] if row["variant"] == variant for s in row["samples"]]
            if samples:
                found = power.summarize(samples)
                parts.append(f"{variant} at {found['power_w']:.0f} W and {found['clock_mhz']:,.0f} MHz, "
                             f"clock lowered for power in {found['power_capped']:.0%} of samples")
        lines.append(f"{slug.upper()} ({_source(slug)}):\n  " + "\n  ".join(parts))
    return "\n".join(lines)


# --------------------------------------------------------------------------- 6. every input


def exhaustive_table(device=None) -> Markdown:
    """The operator against torch on every fp16 and bf16 input, and on every fp32 input (a GPU)
    or every 1,021st fp32 bit pattern (a CPU); on a GPU, the CPU's 16-bit results too."""
    device = torch.device(device) if device is not None else env.default_device()
    runs = [(device, dtype) for dtype in (torch.float16, torch.bfloat16, torch.float32)]
    if device.type == "cuda":
        runs += [(torch.device("cpu"), torch.float16), (torch.device("cpu"), torch.bfloat16)]
    rows = []
    for where, dtype in runs:
        stride = 1 if where.type == "cuda" else 1021
        found = check.exhaustive(ops.selu_vectorized, dtype, where, fp32_stride=stride)
        rows.append([bench.device_name(where), dtype_name(dtype), f"{found.inputs:,}",
                     "yes" if found.identical else f"no: {found.differ_from_torch:,} differ",
                     str(found.max_ulp_vs_torch), str(found.max_ulp_vs_float64), f"{found.beyond_1_ulp_vs_float64:,}",
                     f"{found.seconds:.1f} s"])
    header = ["device", "dtype", "inputs", "bit-identical to torch.selu there", "max ulp vs torch",
              "max ulp vs float64", "beyond 1 ulp of float64", "time"]
    return Markdown("\n".join(_table(header, ["---"] * 2 + ["---:", "---"] + ["---:"] * 4, rows)))


# --------------------------------------------------------------------------- 7. goals


def goal_reports() -> list[Markdown]:
    """Notebook 03's goal report for each GPU, from its headline records (this run's or the committed)."""
    reports = []
    for slug in _slugs():
        records = _records(slug)
        head = [r for dtype in DTYPES for r in _headline(records, dtype).values()]
        if head:
            reports.append(report.goal_report(head, f"{slug.upper()}, {_records_source(slug)}"))
    return reports


def curve_verdicts() -> str:
    lines = []
    for slug in _slugs():
        records = [r for r in _records(slug) if r["dtype"] == "float32" and r.get("config") is None
                   and r["op"] == "forward" and r["variant"] in ("selu_vectorized", "torch_eager")]
        where = f"{slug.upper()} ({_records_source(slug)})"
        lines.append(report.curve_verdict(records, _rounds_table(slug), where=where))
    return "\n".join(lines)


def _rounds_table(slug: str) -> dict | None:
    """Notebook 03's rounds of small sizes (report.measure_curve_rounds) of ``slug``, from where
    :func:`_records` takes its records."""
    directory = results.results_dir() if _notebook_03_ran_here(slug) else None
    return results.load_table(report.CURVE_ROUNDS_FILE, slug, directory)


def goals_markdown(misaligned: dict[str, dict]) -> Markdown:
    rows = [(text, value, "PASS" if ok else "**MISS**") for text, value, ok in misaligned_goals(misaligned)]
    return Markdown("\n".join(_table(["goal", "measured", ""], ["---", "---", "---"], rows)) if rows
                    else "no misaligned-view records yet")


def launch_in_use(device=None) -> str:
    device = torch.device(device) if device is not None else env.default_device()
    if device.type != "cuda":
        return "no GPU here: the operator runs its CPU implementation, which has no launch configuration"
    return "; ".join(f"{dtype_name(d)}: {ops.launch_config(device, d)}" for d in tuning.DTYPES)


def bf16_copy(slug: str | None = None) -> tuple[float | None, int]:
    """The bf16 copy's time at the reference size on ``slug`` (default: this GPU, else the H200)."""
    slug = slug or _here() or "h200"
    run = _headline(_records(slug), "bfloat16")
    return (run[COPY]["median_ms"] if COPY in run else None), env.REFERENCE_NUMEL


# --------------------------------------------------------------------------- 5. the polynomial, in Python
# kernels/selu_math.cuh's economical SELU, operation by operation in float32, with the
# degree of its polynomial as a parameter: exercise 3 asks what a shorter one costs, and
# this answers it on any machine, on every 16-bit input, with no compiler. Each
# operation is rounded as IEEE rounds it: a product or a sum of two floats is exact in
# float64, so rounding that to float32 is the one rounding of the float operation, and
# fmaf's single rounding of a * b + c is rebuilt from a float64 sum and its exact error.
MAGIC_ROUND = 12582912.0  # 1.5 * 2^23
LOG2_E = 1.44269502
LN_2 = 0.693147182
TAYLOR = {k: 1.0 / math.factorial(k) for k in range(2, 8)}  # 1/2 ... 1/5040, each rounded to float32 below


def _f32(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float32)


def fmaf(a: torch.Tensor, b: torch.Tensor | float, c: torch.Tensor | float) -> torch.Tensor:
    """``a * b + c`` rounded once to float32, as the fused multiply-add does; float32 in and out."""
    a64 = a.double()
    b64 = torch.as_tensor(b, dtype=torch.float32).double()
    c64 = torch.as_tensor(c, dtype=torch.float32).double()
    product = a64 * b64  # exact: 24 + 24 significant bits
    total = product + c64
    back = total - product
    error = (product - (total - back)) + (c64 - back)  # product + c64 == total + error, exactly
    rounded = _f32(total)
    gap = total - rounded.double()
    # A float64 sum that lands exactly halfway between two floats is where rounding twice
    # can differ from rounding once: the exact value lies past the midpoint, on error's side.
    toward = torch.where(gap > 0, torch.tensor(math.inf), torch.tensor(-math.inf)).to(torch.float32)
    neighbour = torch.nextafter(rounded, toward)
    halfway = (gap != 0) & (gap.abs() * 2 == (neighbour.double() - rounded.double()).abs())
    past = halfway & (error != 0) & ((error > 0) == (gap > 0))
    return torch.where(past, neighbour, rounded)


def _mul(a: torch.Tensor, b: float) -> torch.Tensor:
    return _f32(a.double() * torch.tensor(b, dtype=torch.float32).double())


def expm1_nonpositive(x: torch.Tensor, degree: int = 7) -> torch.Tensor:
    """kernels/selu_math.cuh's expm1_nonpositive on float32 ``x``, its Taylor polynomial of
    ``degree`` (7 in the kernel; at least 2)."""
    x = torch.where(x.isnan() | (x < -32.0), torch.tensor(-32.0), x)  # fmaxf: a NaN becomes -32 too
    j = fmaf(x, LOG2_E, MAGIC_ROUND)
    n = _f32(j.double() - MAGIC_ROUND)
    r = fmaf(n, -LN_2, x)
    q = torch.full_like(x, TAYLOR[degree])
    for k in range(degree - 1, 1, -1):
        q = fmaf(q, r, TAYLOR[k])
    expm1_r = fmaf(_f32(r.double() * r.double()), q, r)
    # (float_bits(j) << 23) + 0x3f800000u in uint32 arithmetic: n + 127 in the exponent field.
    bits = (((j.view(torch.int32).to(torch.int64) & 0xFFFFFFFF) << 23) + 0x3F800000) & 0xFFFFFFFF
    two_to_n = torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32).view(torch.float32)
    return fmaf(two_to_n, expm1_r, _f32(two_to_n.double() - 1.0))


def selu_economical(x: torch.Tensor, degree: int = 7) -> torch.Tensor:
    """selu_math.cuh's selu_economical in float32 (x < 0 takes the polynomial, NaN and ±0 the other side)."""
    scale = torch.tensor(check.SELU_SCALE, dtype=torch.float32).item()
    negative_coef = _mul(torch.tensor(check.SELU_ALPHA, dtype=torch.float32), scale).item()
    negative = _mul(expm1_nonpositive(x, degree), negative_coef)
    return torch.where(x < 0, negative, _mul(x, scale))


def polynomial_mismatches(degree: int, dtypes=(torch.float16, torch.bfloat16)) -> dict[str, int]:
    """Per 16-bit dtype, how many of its 65,536 inputs the economical SELU with a polynomial
    of ``degree`` rounds to another value than ``torch.selu`` on the CPU (NaNs alike count as equal)."""
    found = {}
    for dtype in dtypes:
        x = check.every_16_bit_value(dtype, "cpu")
        match = check.agreement(selu_economical(x.float(), degree).to(dtype), torch.selu(x))
        found[dtype_name(dtype)] = x.numel() - match.identical
    return found
