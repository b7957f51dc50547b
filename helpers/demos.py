"""Notebook 02's demonstrations, so that its cells stay a few calls long.

Each function runs one demonstration of ``notebooks/02_first_cuda_kernel.ipynb``
and returns something to print or display. The ones that need a GPU take the
one switch of the course, :func:`helpers.env.can_build_cuda`: where it is false
they return the committed H100 result (read from ``results/h100``) or a
:class:`Skipped` that says what the cell would do on a GPU, so that every cell
runs everywhere and none of them branches. Where a GPU-only demonstration has
a part that runs on any device (``measure_fast_math``, ``compare_fast_math``,
``run_int32_count``), that part is a function of its own, which the tests run
on the CPU.

The operators (``helpers.ops``) must have been loaded first, as the notebook
does: ``build.load("selu_naive")`` and ``build.load("mistakes")``.

>>> sources = demos.inline_sources(RELU_CUDA, RELU_DECLARATION, RELU_CPU)  # doctest: +SKIP
>>> print(demos.attempt(torch.compile(f, fullgraph=True), x))              # doctest: +SKIP
>>> print(demos.littles_law(records))                                     # doctest: +SKIP
>>> print(demos.stream_race())                                             # doctest: +SKIP
"""
from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

import numpy as np
import torch

from . import bench, build, check, env, nvcc, ops, results

__all__ = [
    "Skipped",
    # section 1: load_inline
    "for_this_machine",
    "inline_sources",
    "replace_in_sources",
    "compiler_messages",
    "show_inline_ptx",
    # from a function to an operator
    "attempt",
    "registration_block",
    "show_registration",
    "registrations",
    # section 2: Little's law
    "DRAM_LATENCY_S",
    "LATENCY_FILE",
    "random_cycle",
    "measure_latency",
    "latency",
    "latency_s",
    "latency_line",
    "KNOWN_GPUS",
    "GpuShape",
    "LittlesLaw",
    "littles_law",
    # section 3a: extern "C"
    "PybindAttempt",
    "pybind_attempt",
    "Symbol",
    "symbols",
    "symbol_table",
    # section 3c: expf(x) - 1
    "Cancellation",
    "cancellation_near_zero",
    # section 3d: -use_fast_math
    "FAST_MATH_FILE",
    "FAST_MATH_FLAGS",
    "show_fast_math_ptx",
    "what_fast_math_did",
    "fast_math_probe",
    "measure_fast_math",
    "save_fast_math",
    "load_fast_math",
    "FastMathTable",
    "fast_math_special_values",
    "compare_fast_math",
    "fast_math_ordinary_inputs",
    # section 3e: 32-bit counts
    "INT32_DEMO_NUMEL",
    "as_int32",
    "int32_table",
    "Int32Count",
    "run_int32_count",
    "int32_count_demo",
    # section 3f: zeros_like
    "zeros_like_ratio",
    "zeros_like_summary",
    "COPY_AFTER_FREE_FILE",
    "measure_copy_after_free",
    "copy_after_free",
    "copy_after_free_line",
    # section 3g: streams
    "StreamRace",
    "stream_race",
]


@dataclass(frozen=True)
class Skipped:
    """What a demonstration that cannot run here would have shown, and why it did not run."""

    reason: str

    def __str__(self) -> str:
        return f"skipped: {self.reason}"


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


# ----------------------------------------------------------------------------- section 1: load_inline


def for_this_machine(*, cuda, cpu):
    """``cuda`` where CUDA kernels can be built and run here, ``cpu`` elsewhere."""
    return cuda if env.can_build_cuda() else cpu


def inline_sources(cuda_source: str, declaration: str, cpu_source: str, *, cuda: bool | None = None) -> dict:
    """The source arguments of ``load_inline`` for section 1's ReLU on this machine.

    On a GPU (``cuda``; default: :func:`helpers.env.can_build_cuda`) the CUDA
    source goes to nvcc as ``cuda_sources`` and ``cpp_sources`` holds only the
    declaration that the generated bindings need; the build is for this GPU's
    architecture only (``TORCH_CUDA_ARCH_LIST``), which is much faster than for
    every one. Elsewhere ``cpp_sources`` is the CPU implementation.
    """
    if cuda is None:
        cuda = env.can_build_cuda()
    if cuda:
        build.set_cuda_arch_list()
        return {"cpp_sources": declaration, "cuda_sources": cuda_source, "extra_cuda_cflags": ["-O3"]}
    return {"cpp_sources": cpu_source, "extra_cflags": ["-O3"]}


def replace_in_sources(sources: dict, old: str, new: str) -> dict:
    """``sources`` (``load_inline`` arguments) with ``old`` replaced by ``new`` in every
    ``*_sources`` text; the other arguments unchanged. ValueError when no source has ``old``."""
    texts = {key: value for key, value in sources.items() if key.endswith("_sources")}
    if not any(old in value for value in texts.values()):
        raise ValueError(f"{old!r} is in none of the sources ({', '.join(texts)})")
    return {key: value.replace(old, new) if key in texts else value for key, value in sources.items()}


_COMMAND_LINE_STARTS = ("[", "FAILED:", "ninja:")


def compiler_messages(error: BaseException) -> str:
    """The compiler's diagnostics from a failed ``load_inline``, without the command lines.

    torch's message starts with ``Error building extension '<name>'`` and then
    repeats ninja's output, full compiler command lines included; only the
    diagnostics (file:line:column: message, and the source lines they show) are
    kept, with this checkout's paths made relative and terminal colours removed.
    """
    text = re.sub(r"\x1b\[[0-9;]*m", "", build.relative_paths(str(error)))
    first, *rest = text.splitlines() or [""]
    kept = [line for line in rest if line.strip() and not line.startswith(_COMMAND_LINE_STARTS)
            and "-isystem" not in line]
    return first.split(":")[0] + ":\n" + "\n".join(kept)


def show_inline_ptx(cuda_source: str, name: str, kernel: str, pattern: str | None = None) -> None:
    """Print the PTX of ``kernel`` in ``cuda_source`` (compiled by nvcc for the H100, no GPU
    needed; :func:`helpers.nvcc.compile_source`), or say that nvcc is missing."""
    if env.nvcc_path() is None:
        print("nvcc not found: install the CUDA toolkit to see the PTX (no GPU needed)")
        return
    nvcc.show_ptx(nvcc.compile_source(cuda_source, name).ptx, kernel, pattern)


# ----------------------------------------------------------------------------- from a function to an operator


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return (f"a {value.device.type} tensor of shape {tuple(value.shape)}, requires_grad={value.requires_grad}, "
                f"grad_fn={type(value.grad_fn).__name__ if value.grad_fn is not None else None}")
    return f"{type(value).__name__} {value!r}"[:200]


def attempt(fn: Callable, *args, **kwargs) -> str:
    """``fn(*args, **kwargs)`` in one line: what it returned, or the error's type and first line.

    For cells that show what a call does where it is expected to fail: the error
    is reported, not raised, and warnings (torch.compile warns before it fails)
    are kept out of the output.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            result = fn(*args, **kwargs)
            if isinstance(result, torch.Tensor) and result.is_cuda:
                torch.cuda.synchronize(result.device)  # a kernel's error belongs to this call
        except Exception as error:  # any error is the outcome to show
            return f"raised {type(error).__name__}: {_first_line(error)}"
    return f"returned {_describe(result)}"


_REGISTRATION = re.compile(r"^TORCH_LIBRARY_IMPL\(.*?^\}[ \t]*$", re.MULTILINE | re.DOTALL)


def registration_block(filename: str) -> str:
    """The ``TORCH_LIBRARY_IMPL(...) { ... }`` block(s) of ``kernels/<filename>``."""
    blocks = _REGISTRATION.findall((env.KERNELS_DIR / filename).read_text())
    if not blocks:
        raise ValueError(f"kernels/{filename} registers no kernels (no TORCH_LIBRARY_IMPL block)")
    return "\n\n".join(blocks)


def show_registration(*filenames: str) -> None:
    """Display the registration block of each of ``kernels/<filenames>``."""
    for filename in filenames:
        language = "cuda" if filename.endswith((".cu", ".cuh")) else "cpp"
        build.display_code(f"kernels/{filename}", registration_block(filename), language)


# What each dispatch key's entry of an operator is, in the course's words.
_KEY_NOTES = {
    "CPU": "the CPU kernel",
    "CUDA": "the CUDA kernel",
    "Meta": "the fake kernel: the result's shape, dtype and strides, nothing computed",
    "Autograd[alias]": "the autograd rule (refuses a gradient until notebook 04)",
}


def registrations(name: str) -> str:
    """What the dispatcher holds for operator ``name`` (``"selu_naive"``, ``"selu_naive.out"``):
    its schema, then one line per dispatch key with a kernel, and where it was registered.

    Read from torch's own table (``torch._C._dispatch_dump``), with this
    checkout's paths made relative.
    """
    qualified = ops.qualified(name)
    try:
        dump = torch._C._dispatch_dump(qualified)
    except Exception as error:  # a private function: say so rather than fail the cell
        return f"{qualified}: this torch cannot list its dispatcher's table ({type(error).__name__})"
    lines = []
    for line in dump.splitlines():
        if line.startswith("schema:"):
            lines.append(line.removeprefix("schema:").strip())
            continue
        match = re.match(r"^(?P<key>[\w\[\]]+): registered at (?P<where>\S+)", line)
        if match and match["key"] != "debug":  # "debug": where the schema was defined
            where = build.relative_paths(match["where"])
            note = _KEY_NOTES.get(match["key"], "")
            lines.append(f"  {match['key'].removesuffix('[alias]'):<9} {where:<28} {note}".rstrip())
    return "\n".join(lines)


# ----------------------------------------------------------------------------- section 2: Little's law

# A DRAM load on a busy GPU, roughly (the value notebook 03 uses).
DRAM_LATENCY_S = 0.7e-6


@dataclass(frozen=True)
class GpuShape:
    """How many threads a GPU holds: its SMs, and the resident threads each SM can hold."""

    name: str
    sms: int
    threads_per_sm: int


# The GPUs whose committed records a notebook may show on a machine without one.
KNOWN_GPUS = {"H100": GpuShape("NVIDIA H100 SXM", 132, 2048)}


def gpu_shape(device_name: str, device: torch.device) -> GpuShape:
    """The shape of the GPU named ``device_name``: read off ``device`` when it is that GPU,
    else from :data:`KNOWN_GPUS`; an H100's, said to be assumed, for any other name."""
    if device.type == "cuda" and device_name == bench.device_name(device):
        props = torch.cuda.get_device_properties(device)
        return GpuShape(props.name, props.multi_processor_count, props.max_threads_per_multi_processor)
    for key, shape in KNOWN_GPUS.items():
        if key in device_name:
            return shape
    h100 = KNOWN_GPUS["H100"]
    return GpuShape(f"{device_name}, with an H100 SXM's SMs assumed", h100.sms, h100.threads_per_sm)


@dataclass(frozen=True)
class LittlesLaw:
    """Little's law for a kernel whose threads each have ``bytes_per_thread`` of loads in flight.

    Only loads count: a thread waits for its load before it can compute, while a
    store is handed to the memory system and forgotten. A copy's bandwidth is half
    loads, half stores, so to keep up with it the loads in flight must be
    ``copy bandwidth / 2 × latency``.
    """

    gpu: GpuShape
    copy_gbps: float  # the copy's throughput, bytes read plus bytes written
    latency_s: float
    bytes_per_thread: int
    source: str  # where the copy's number comes from

    @property
    def load_bytes_per_s(self) -> float:
        return self.copy_gbps * 1e9 / 2

    @property
    def needed_bytes(self) -> float:
        """Bytes of loads that must be in flight at every moment to load at the copy's pace."""
        return self.load_bytes_per_s * self.latency_s

    @property
    def most_bytes(self) -> int:
        """Bytes of loads in flight if every thread the GPU holds were waiting on its load."""
        return self.bytes_per_thread * self.gpu.threads_per_sm * self.gpu.sms

    @property
    def ratio(self) -> float:
        return self.most_bytes / self.needed_bytes

    def __str__(self) -> str:
        return "\n".join([
            f"{self.gpu.name}: {self.gpu.sms} SMs x {self.gpu.threads_per_sm:,} threads; "
            f"copy at {self.copy_gbps / 1e3:.2f} TB/s ({self.source})",
            f"needed: {self.load_bytes_per_s / 1e12:.2f} TB/s of loads x {self.latency_s * 1e6:.1f} us latency "
            f"= {self.needed_bytes / 1e6:.2f} MB of loads in flight",
            f"at most, one {self.bytes_per_thread}-byte load per thread: {self.bytes_per_thread} B x "
            f"{self.gpu.threads_per_sm:,} threads x {self.gpu.sms} SMs = {self.most_bytes / 1e6:.2f} MB, "
            f"{self.ratio:.2f}x the need, and only if every thread were waiting on its load at every moment",
        ])


def littles_law(records: list[dict], device=None, *, bytes_per_thread: int = 4,
                latency_s: float = DRAM_LATENCY_S) -> LittlesLaw:
    """Little's law for the GPU that measured ``records``, at the bandwidth of their copy.

    The SM count comes from ``device`` (default: where the course runs) when the
    records were measured on it, and otherwise from :data:`KNOWN_GPUS` (the
    committed H100 records on a machine without a GPU). The copy is the record of
    :data:`helpers.bench.COPY` with the most elements.
    """
    copies = [r for r in records if r["variant"] == bench.COPY]
    if not copies:
        raise ValueError("the records have no copy: measure them with include_copy=True")
    copy = max(copies, key=lambda r: r["numel"])
    device = torch.device(device) if device is not None else env.default_device()
    source = getattr(records, "source", None) or f"{copy['device']}, {copy['date']}"
    return LittlesLaw(gpu_shape(copy["device"], device), copy["gbps"], latency_s, bytes_per_thread, source)


# A load's latency, measured: one thread follows a random cycle of indices through a
# table far larger than the L2 cache (ops.pointer_chase), so that every step waits for
# the one before it and nearly every one is a DRAM access. That is the latency of a load
# on an idle GPU, TLB misses included; under a full load of traffic queues add to it,
# so it is the least Little's law can ask for, not the most.
LATENCY_FILE = "02_latency.json"  # beside benchmarks.json in results/<device>/
LATENCY_TABLE_BYTES = 1 << 30  # 1 GiB: at least 20 times the L2 of an H100 or H200
LATENCY_STEPS = 1 << 14  # about 10 ms of loads on a GPU, one at a time


def random_cycle(numel: int, device=None, seed: int = 0) -> torch.Tensor:
    """An int64 table ``next`` of ``numel`` entries (a power of two) that links every index
    into one cycle in a random order: following it from 0 visits all of them before 0 again."""
    if numel <= 0 or numel & (numel - 1):
        raise ValueError(f"numel must be a power of two, got {numel}")
    order = torch.randperm(numel, generator=torch.Generator().manual_seed(seed))
    table = torch.empty(numel, dtype=torch.int64)
    table[order] = order.roll(-1)  # each index points at the one after it in the random order
    return table.to(device if device is not None else env.default_device())


def measure_latency(device=None, table_bytes: int = LATENCY_TABLE_BYTES, steps: int = LATENCY_STEPS) -> dict:
    """The time per step of :func:`helpers.ops.pointer_chase` over a :func:`random_cycle` of
    ``table_bytes``: the median of the timer (less the call with no steps, the launch), over ``steps``."""
    device = torch.device(device) if device is not None else env.default_device()
    table = random_cycle(table_bytes // 8, device)
    # Every call follows the same first steps of the chain, a few hundred KB that the L2
    # cache would keep from one call to the next: on a GPU the timer must flush it
    # between calls, as triton.testing.do_bench does.
    chased = bench.time_fn(lambda: ops.pointer_chase(table, steps), device=device)
    empty = bench.time_fn(lambda: ops.pointer_chase(table, 0), device=device)
    del table
    return {"device": bench.device_name(device), "device_slug": env.device_slug(device),
            "table_bytes": table_bytes, "steps": steps, "median_ms": chased.median_ms,
            "no_steps_ms": empty.median_ms, "method": chased.method,
            "l2_flushed": device.type == "cuda" and chased.method == bench.METHOD_DO_BENCH,
            "latency_ns": (chased.median_ms - empty.median_ms) * 1e6 / steps}


def latency() -> tuple[dict | None, str]:
    """:func:`measure_latency` on this GPU (saved as :data:`LATENCY_FILE`), or the committed
    H100 table; and a line that says which. Builds and loads the probe's library first."""
    def measure() -> dict:
        build.load("latency_chain")
        return measure_latency()

    return results.here_or_reference_table(measure, LATENCY_FILE)


def latency_s(table: dict | None) -> float:
    """The latency that Little's law should use: the measured one in seconds, or
    :data:`DRAM_LATENCY_S` (an assumption) where nothing was measured."""
    return table["latency_ns"] * 1e-9 if table else DRAM_LATENCY_S


def latency_line(table: dict | None, source: str) -> str:
    """One line that reads the measurement of :func:`measure_latency`."""
    if table is None:
        return f"no latency measured: {source}"
    line = (f"{table['latency_ns']:.0f} ns per dependent load over a {table['table_bytes'] / 2**30:g} GiB random "
            f"cycle on {table['device']} ({table['steps']:,} steps in {table['median_ms']:.2f} ms; {source})")
    if table["device_slug"] != "cpu" and not table.get("l2_flushed"):
        line += "; the timer did not flush L2 between calls (no triton here), so this is mostly L2's latency"
    return line


# ----------------------------------------------------------------------------- section 3a: extern "C"


@dataclass
class PybindAttempt:
    """One build of :func:`helpers.build.pybind_extension`: the module, or the error it raised."""

    module: ModuleType | None
    error: str | None
    directory: Path | None  # where it was built (None if the build never got that far)

    @property
    def bindings(self) -> str:
        """The generated ``bindings.cpp``."""
        return (self.directory / "bindings.cpp").read_text() if self.directory else ""

    @property
    def library(self) -> Path | None:
        """The shared library, if the build linked one."""
        if self.directory is None:
            return None
        path = self.directory / f"{self.directory.name}.so"
        return path if path.exists() else None


def pybind_attempt(name: str, *, declarations: str, definitions: str, functions: tuple[str, ...],
                   cuda: bool | None = None) -> PybindAttempt:
    """Build a two-file pybind11 extension (:func:`helpers.build.pybind_extension`) and keep
    its :class:`~helpers.build.BuildError` instead of raising it.

    ``cuda`` (default: :func:`helpers.env.can_build_cuda`) compiles ``definitions``
    with nvcc.
    """
    if cuda is None:
        cuda = env.can_build_cuda()
    module = error = None
    try:
        module = build.pybind_extension(name, declarations=declarations, definitions=definitions,
                                        functions=tuple(functions), cuda=cuda)
    except build.BuildError as failure:
        error = str(failure)
    directory = build.pybind_directory(name, declarations=declarations, definitions=definitions,
                                       functions=tuple(functions), cuda=cuda)
    return PybindAttempt(module, error, directory)


@dataclass(frozen=True)
class Symbol:
    """A dynamic symbol of a shared library, as ``nm -D`` lists it."""

    kind: str  # "U": used here, defined elsewhere (undefined); "T": defined here, in the code
    mangled: str
    readable: str  # the C++ name, through c++filt (the mangled name where it is missing)


def symbols(library: Path, function: str) -> list[Symbol] | None:
    """The dynamic symbols of ``library`` that name the C++ function ``function``, with and
    without mangling; None where ``nm`` (GNU binutils) is not installed."""
    tool = shutil.which("nm")
    if tool is None:
        return None
    listing = subprocess.run([tool, "-D", str(library)], capture_output=True, text=True, check=True).stdout
    entries = [line.split()[-2:] for line in listing.splitlines() if len(line.split()) >= 2]
    readable = nvcc.demangle(tuple(name for _, name in entries))
    return [Symbol(kind, name, readable[name]) for kind, name in entries
            if readable[name] == function or readable[name].startswith(function + "(")]


_KIND = {"U": "undefined: used here, looked for elsewhere at import", "T": "defined here"}


def symbol_table(library: Path | None, function: str) -> str:
    """:func:`symbols` as lines to print: kind, mangled name, C++ name, what the kind means."""
    if library is None:
        return "no shared library was linked"
    found = symbols(library, function)
    if found is None:
        return (f"nm (GNU binutils) not found; a definition of `torch::Tensor {function}(torch::Tensor)` "
                "is the symbol _Z4reluN2at6TensorE, which c++filt reads back as relu(at::Tensor)")
    width = max((len(s.mangled) for s in found), default=0)
    return "\n".join(f"{s.kind}  {s.mangled:<{width}}  {s.readable:<20}  {_KIND.get(s.kind, '')}" for s in found)


# ----------------------------------------------------------------------------- section 3c: expf(x) - 1


@dataclass
class Cancellation:
    """The error of ``expf(x) - 1`` and of ``expm1f(x)`` in SELU, for small negative x."""

    x: torch.Tensor  # float32, on the CPU
    ulp_expf: torch.Tensor  # int64: ulps of mistake_expf_minus_one from the float64 reference
    ulp_expm1: torch.Tensor  # int64: the same for selu_naive
    device: str  # where the operators ran

    def table(self, every: int = 20) -> str:
        """Every ``every``-th point as a text table."""
        lines = [f"{'x':>9}  {'expf(x) - 1':>13}  {'expm1f(x)':>10}   (ulp)"]
        for k in range(0, self.x.numel(), every):
            lines.append(f"{self.x[k].item():9.0e}  {self.ulp_expf[k].item():13,}  {self.ulp_expm1[k].item():10,}")
        return "\n".join(lines)

    def figure(self):
        """Both errors against |x|, log-log (symlog, so 0 ulp shows)."""
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.5, 3.4), layout="constrained")
        ax.plot(-self.x, self.ulp_expf, label="expf(x) - 1")
        ax.plot(-self.x, self.ulp_expm1, label="expm1f(x)")
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(0, 4e9)
        ax.set_xlabel("|x| (x negative)")
        ax.set_ylabel("error, ulp of float32")
        ax.set_title(f"SELU near 0: exp(x) - 1 cancels ({self.device.upper()} build)")
        ax.legend()
        plt.close(fig)
        return fig


def cancellation_near_zero(device=None, points: int = 181) -> Cancellation:
    """``mistake_expf_minus_one`` and ``selu_naive`` on x = -1e-10 ... -1e-1 (``points``
    log-spaced values), each in ulps from the float64 reference."""
    device = torch.device(device) if device is not None else env.default_device()
    x = -torch.logspace(-10, -1, points, dtype=torch.float64).float().to(device)
    expected = check.selu_reference(x)
    ulp_expf = check.ulp_distance(ops.mistake_expf_minus_one(x), expected).cpu()
    ulp_expm1 = check.ulp_distance(ops.selu_naive(x), expected).cpu()
    return Cancellation(x.cpu(), ulp_expf, ulp_expm1, device.type)


# ----------------------------------------------------------------------------- section 3d: -use_fast_math

FAST_MATH_FILE = "02_fast_math.json"  # beside benchmarks.json in results/<device>/
FAST_MATH_FLAGS = ("-use_fast_math",)
NAIVE_KERNEL = "selu_naive_kernel<selu_course::SeluOp>"  # the PTX name of notebook 02's SELU kernel


def _instructions(ptx: str, kernel: str) -> list[str]:
    """The instruction lines of the one kernel whose name contains ``kernel`` (no directives or labels)."""
    (body,) = [b for name, b in nvcc.kernels(ptx).items() if kernel in name]
    return [line for line in map(str.strip, body.splitlines()) if re.match(r"[a-z@]", line)]


def show_fast_math_ptx(shown: int = 6) -> None:
    """Print what ``-use_fast_math`` changes in the PTX (nvcc, no GPU needed): in the SELU
    kernel (selu_naive.cu), which instructions change and whether only by ``.ftz``; in the
    ``expf(x) - 1`` first draft (mistakes.cu), its arithmetic afterwards."""
    if env.nvcc_path() is None:
        print("nvcc not found: install the CUDA toolkit to compare the PTX (no GPU needed)")
        return
    normal = _instructions(nvcc.compile_ptx("selu_naive.cu"), NAIVE_KERNEL)
    fast = _instructions(nvcc.compile_ptx("selu_naive.cu", extra_flags=FAST_MATH_FLAGS), NAIVE_KERNEL)
    changed = [(a, b) for a, b in zip(normal, fast) if a != b]
    only_ftz = len(normal) == len(fast) and all(b.replace(".ftz", "") == a for a, b in changed)
    print(f"selu kernel: {len(changed)} of {len(normal)} instructions changed, all by .ftz only: {only_ftz}")
    for a, b in changed[:shown]:
        print(f"   {a:<42} ->  {b}")
    normal_ptx = nvcc.compile_ptx("mistakes.cu")
    fast_ptx = nvcc.compile_ptx("mistakes.cu", extra_flags=FAST_MATH_FLAGS)
    print(f"expf(x) - 1 kernel: {len(_instructions(normal_ptx, 'ExpfMinusOneOp>'))} instructions, "
          f"{len(_instructions(fast_ptx, 'ExpfMinusOneOp>'))} with -use_fast_math; its arithmetic then:")
    nvcc.show_ptx(fast_ptx, "ExpfMinusOneOp>", r"ex2|mul\.ftz|add\.ftz")


def what_fast_math_did(normal: str, fast: str) -> str:
    """How the fast-math result differs from the normal build's, both as printed float32s."""
    if fast == normal:
        return "nothing"
    if (normal == "nan") != (fast == "nan"):
        return f"NaN {'made' if fast == 'nan' else 'lost'}"
    if float(fast) == 0 and float(normal) != 0:
        return "flushed to " + ("-0" if fast.startswith("-") else "+0")
    return "changed"


def fast_math_probe(device=None) -> torch.Tensor:
    """The float32 values where flushing and special cases show: denormals of both signs,
    ±the smallest normal, ±0, two ordinary negatives, NaN and ±inf."""
    tiny = torch.finfo(torch.float32).tiny  # the smallest normal float32; below it, denormals
    values = [1e-45, -1e-45, 1e-40, -1e-40, tiny, -tiny, 0.0, -0.0, -1e-3, -1.0,
              float("nan"), float("inf"), float("-inf")]
    return torch.tensor(values, device=device if device is not None else env.default_device())


def measure_fast_math(device=None) -> dict:
    """``selu_naive`` on :func:`fast_math_probe`, built as it is and with ``-use_fast_math``.

    The normal build's outputs are computed first, then, while the fast-math build
    is registered (:func:`helpers.build.loaded`), the fast-math ones: an operator
    has one implementation per device at a time. Returns ``{"device": ..., "rows":
    [[x, normal, fast math, reference, what fast math did], ...]}``, every value
    printed as a float32. On a CPU the flag changes nothing (it is nvcc's), and
    every row says so.
    """
    build.load("selu_naive")  # the normal build, whatever ran before (cached: instant once built)
    probe = fast_math_probe(device)
    normal = ops.selu_naive(probe)
    with build.loaded("selu_naive", extra_cuda_cflags=FAST_MATH_FLAGS):
        fast = ops.selu_naive(probe)
        if fast.is_cuda:
            torch.cuda.synchronize(fast.device)
    columns = [probe, normal, fast, check.selu_reference(probe).float()]
    rows = [[str(np.float32(v)) for v in values] for values in zip(*(c.tolist() for c in columns))]
    return {"device": bench.device_name(probe.device), "rows": [r + [what_fast_math_did(r[1], r[2])] for r in rows]}


def save_fast_math(table: dict, slug: str | None = None) -> Path:
    """Write ``table`` to ``results_dir()/<slug>/02_fast_math.json`` (slug: this machine's device)."""
    return results.save_table(table, FAST_MATH_FILE, slug or env.device_slug())


def load_fast_math(slug: str = env.REFERENCE_DEVICE_SLUG) -> dict | None:
    """The committed table of ``slug`` in the repository's ``results/`` (None if none)."""
    return results.load_table(FAST_MATH_FILE, slug)


@dataclass
class FastMathTable:
    """A :func:`measure_fast_math` table, and where it comes from; prints as a table."""

    table: dict | None
    source: str

    def summary(self) -> str:
        """One line: what fast math did to denormal inputs, NaN, ±inf and -0."""
        did = {row[0]: row[4] for row in self.table["rows"]}
        denormal = sorted({verdict for x, verdict in did.items()
                           if x != "nan" and 0 < abs(float(x)) < torch.finfo(torch.float32).tiny})
        special = "; ".join(f"{x}: {did[x]}" for x in ("nan", "inf", "-inf", "-0.0") if x in did)
        return f"in short: denormal inputs: {', '.join(denormal) or 'none'}; {special}"

    def __str__(self) -> str:
        if self.table is None:
            return self.source
        lines = [self.source,
                 f"{'x':>14} {'normal build':>14} {'fast math':>14} {'reference':>14}   what fast math did"]
        lines += [f"{x:>14} {normal:>14} {fast:>14} {ref:>14}   {verdict}"
                  for x, normal, fast, ref, verdict in self.table["rows"]]
        return "\n".join(lines + ["", self.summary()])


def fast_math_special_values(device=None) -> FastMathTable:
    """On a GPU, :func:`measure_fast_math`, saved (:func:`save_fast_math`); elsewhere the
    committed H100 table."""
    return FastMathTable(*results.here_or_reference_table(lambda: measure_fast_math(device), FAST_MATH_FILE))


def compare_fast_math(x: torch.Tensor) -> str:
    """``selu_naive`` on ``x`` built normally and with ``-use_fast_math``: how each build
    agrees with the float64 reference rounded to x's dtype and with the other
    (:func:`helpers.check.agreement`: identical elements, worst ulp, NaN in place),
    and the harness's verdict on the fast-math build."""
    build.load("selu_naive")  # the normal build, whatever ran before (cached: instant once built)
    expected = check.selu_reference(x)
    normal = ops.selu_naive(x)
    with build.loaded("selu_naive", extra_cuda_cflags=FAST_MATH_FLAGS):
        fast = ops.selu_naive(x)
        report = check.check_unary(ops.selu_naive, device=x.device, name="selu_naive, -use_fast_math")
    rounded = expected.to(x.dtype)
    comparisons = {"normal build vs reference": (normal, rounded), "-use_fast_math vs reference": (fast, rounded),
                   "the two builds vs each other": (fast, normal)}
    lines = [f"{name:>28}: {check.agreement(a, b)}" for name, (a, b) in comparisons.items()]
    return "\n".join(lines + ["", str(report)])


def fast_math_ordinary_inputs(numel: int = 2**22, device=None) -> str | Skipped:
    """On a GPU, :func:`compare_fast_math` on ``numel`` normal and ``numel`` wide-uniform inputs."""
    if not env.can_build_cuda():
        return Skipped("needs a GPU: on one, this compares the two builds on ordinary inputs and runs the "
                       "harness on the fast-math build (this notebook's committed outputs show the H100's)")
    device = torch.device(device) if device is not None else env.default_device()
    x = torch.cat([bench.random_input(numel, device=device, seed=0),
                   check.make_input("wide_uniform", numel, device=device, generator=torch.Generator().manual_seed(0))])
    return compare_fast_math(x)


# ----------------------------------------------------------------------------- section 3e: 32-bit counts

INT32_DEMO_NUMEL = 2**32 + 2**20  # the int count wraps to 2^20


def as_int32(value: int) -> int:
    """What a 32-bit ``int`` holds after ``value`` is stored in it: wrapped into [-2^31, 2^31)."""
    return (value + 2**31) % 2**32 - 2**31


def int32_table(counts=(env.REFERENCE_NUMEL, 2**31 - 1, 2**31 + 2**20, INT32_DEMO_NUMEL)) -> str:
    """For each element count, what ``int n = numel`` holds, what an ``int`` holds for the
    last index, and what an unsigned 32-bit product holds for it."""
    lines = [f"{'elements':>15} {'int n = numel':>15} {'last index, int':>16} {'unsigned 32-bit':>16}"]
    lines += [f"{n:>15,} {as_int32(n):>15,} {as_int32(n - 1):>16,} {(n - 1) % 2**32:>16,}" for n in counts]
    return "\n".join(lines)


@dataclass(frozen=True)
class Int32Count:
    """``mistake_int32_count`` against ``selu_naive`` on one input, with outputs poisoned."""

    numel: int
    unwritten_mistake: int  # elements mistake_int32_count never wrote
    unwritten_correct: int  # elements selu_naive never wrote
    worst_ulp: dict[int, int]  # selu_naive's worst ulp in 4096 elements from each of these starts

    def __str__(self) -> str:
        written = self.numel - self.unwritten_mistake
        if self.unwritten_mistake:
            which = f"all but the first {written:,}" if written else "all of them"
            mistake = (f"{self.unwritten_mistake:,} of {self.numel:,} elements never written ({which}: int n "
                       f"holds {as_int32(self.numel):,}), and no error")
        else:
            mistake = f"0 of {self.numel:,} elements never written: a count below 2^31 fits an int"
        lines = [
            f"mistake_int32_count: {mistake}",
            f"selu_naive (64-bit count and index): {self.unwritten_correct:,} elements never written",
        ]
        lines += [f"  elements {start:>13,} .. {start + 4095:>13,}: max {ulp} ulp from the reference"
                  for start, ulp in self.worst_ulp.items()]
        return "\n".join(lines)


def _checkpoints(numel: int, width: int = 4096) -> list[int]:
    """Starts of ``width``-element windows: the start, the middle, around 2^31 and 2^32, the end."""
    starts = (0, numel // 2, 2**31 - width // 2, 2**32 - width // 2, numel - width)
    return sorted({s for s in starts if 0 <= s <= numel - width}) or [0]


def run_int32_count(x: torch.Tensor) -> Int32Count:
    """Both operators on ``x`` (float32 without NaN), every new tensor poisoned with NaN
    (:func:`helpers.check.poisoned_outputs`), so an element never written is NaN.

    One output lives at a time: on a GPU, ``x`` plus one output plus the check's
    temporaries must fit (about three times ``x``).
    """
    with check.poisoned_outputs():
        y = ops.mistake_int32_count(x)
    unwritten_mistake = int(y.isnan().sum())
    del y
    with check.poisoned_outputs():
        y = ops.selu_naive(x)
    unwritten_correct = int(y.isnan().sum())
    worst = {}
    for start in _checkpoints(x.numel()):
        part = slice(start, start + 4096)
        worst[start] = int(check.ulp_distance(y[part], check.selu_reference(x[part])).max())
    return Int32Count(x.numel(), unwritten_mistake, unwritten_correct, worst)


def int32_count_demo(numel: int = INT32_DEMO_NUMEL, device=None) -> Int32Count | Skipped:
    """On a GPU with room for three float32 tensors of ``numel``, :func:`run_int32_count` on a
    fresh random input; elsewhere what the count would become."""
    wrapped = as_int32(numel)
    consequence = (f"with {numel:,} elements int n holds {wrapped:,}: "
                   + (f"the first {wrapped:,} elements would be written, the other {numel - wrapped:,} never"
                      if wrapped > 0 else "nothing would be written"))
    if not env.can_build_cuda():
        return Skipped(f"{numel:,} float32 elements are {numel * 4 / 2**30:.0f} GiB, and input, output and a check "
                       f"need about three times that on a GPU; there is none here. {consequence}.")
    device = torch.device(device) if device is not None else env.default_device()
    torch.cuda.empty_cache()
    if not env.fits_on_gpu(numel, torch.float32, tensors=3):
        return Skipped(f"three float32 tensors of {numel:,} elements do not fit in this GPU's free memory. "
                       f"{consequence}.")
    x = torch.randn(numel, device=device)
    try:
        return run_int32_count(x)
    finally:
        del x
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------- section 3f: zeros_like


def zeros_like_ratio(records: list[dict], *, numel: int | None = None) -> float | None:
    """Median time of ``selu_naive_out_zeros_like`` over ``selu_naive_out_empty_like``
    (None unless the records have both)."""
    zeros = results.find(records, "selu_naive_out_zeros_like", numel=numel)
    empty = results.find(records, "selu_naive_out_empty_like", numel=numel)
    if zeros is None or empty is None:
        return None
    return zeros["median_ms"] / empty["median_ms"]


ZERO_FILL = "zeros_like_alone"  # the fill by itself, timed beside the two allocations


def zeros_like_summary(records: list[dict], *, numel: int | None = None) -> str:
    """What the records say of ``zeros_like``: its time over ``empty_like``'s, with the range
    over repeated runs, against the 1.5× the bytes predict; and the zero fill alone (a pure
    write), its write bandwidth beside the copy's, and whether fill + kernel adds up."""
    ratio = zeros_like_ratio(records, numel=numel)
    if ratio is None:
        return "no records of both allocations"
    zeros = results.find(records, "selu_naive_out_zeros_like", numel=numel)
    empty = results.find(records, "selu_naive_out_empty_like", numel=numel)
    runs = [z / e for z, e in zip(zeros.get("repeat_medians_ms", []), empty.get("repeat_medians_ms", []))]
    spread = f" ({min(runs):.2f}–{max(runs):.2f}× over {len(runs)} runs)" if len(runs) > 1 else ""
    lines = [f"zeros_like / empty_like: {ratio:.2f}×{spread}; predicted from the bytes: 1.5×"]
    fill = results.find(records, ZERO_FILL, numel=numel)
    copy = results.find(records, bench.COPY, numel=zeros["numel"], dtype=zeros["dtype"])
    copy_runs = copy.get("repeat_medians_ms", []) if copy else []
    copy_line = ["the copy's median in each run: " + ", ".join(f"{m:.3f}" for m in copy_runs) + " ms"] \
        if len(copy_runs) > 1 else []
    if fill is None:
        return "\n".join(lines + ["(no record of the zero fill alone)"] + copy_line)
    written_gbps = fill["numel"] * torch.empty((), dtype=getattr(torch, fill["dtype"])).element_size() / fill["median_ms"] / 1e6
    lines.append(f"the zero fill alone: {fill['median_ms']:.3f} ms, writing {written_gbps:.0f} GB/s"
                 + (f" (the copy of the same run: {copy['gbps']:.0f} GB/s read + written)" if copy else ""))
    lines.append(f"empty_like's kernel + the fill alone: {empty['median_ms'] + fill['median_ms']:.3f} ms; "
                 f"zeros_like measured: {zeros['median_ms']:.3f} ms")
    return "\n".join(lines + copy_line)


COPY_AFTER_FREE_FILE = "02_copy_after_free.json"
COPY_AFTER_FREE_COPIES = 200
SLOWER_THAN_SETTLED = 1.05  # a copy this much over the settled median counts as slow


def measure_copy_after_free(numel: int = env.REFERENCE_NUMEL, freed_numel: int = INT32_DEMO_NUMEL,
                            copies: int = COPY_AFTER_FREE_COPIES, device=None) -> dict:
    """Allocate what section 4e allocates (an input and an output of ``freed_numel`` float32
    elements, both written), free it back to the driver, and time ``copies`` copies of a
    ``numel``-element tensor back to back, each between its own CUDA events: the copy's time
    from the first moment after a large free, copy by copy."""
    device = torch.device(device) if device is not None else env.default_device()
    torch.cuda.empty_cache()
    x = torch.randn(freed_numel, device=device)
    y = torch.empty_like(x).fill_(float("nan"))
    freed_bytes = x.nbytes + y.nbytes
    del x, y
    torch.cuda.empty_cache()  # cudaFree: the memory goes back to the driver
    source = bench.random_input(numel, torch.float32, device)
    out = torch.empty_like(source)
    torch.cuda.synchronize(device)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(copies + 1)]
    events[0].record()
    for i in range(copies):
        out.copy_(source)
        events[i + 1].record()
    torch.cuda.synchronize(device)
    copy_ms = [round(events[i].elapsed_time(events[i + 1]), 4) for i in range(copies)]
    del source, out
    torch.cuda.empty_cache()
    return {"device": bench.device_name(device), "device_slug": env.device_slug(device), "numel": numel,
            "dtype": "float32", "freed_bytes": freed_bytes, "copy_ms": copy_ms}


def copy_after_free():
    """:func:`measure_copy_after_free` on a GPU with room for it (saved as
    :data:`COPY_AFTER_FREE_FILE`), or the committed H100 table; and a line that says which."""
    if env.can_build_cuda() and not env.fits_on_gpu(INT32_DEMO_NUMEL, torch.float32, tensors=2):
        table = results.load_table(COPY_AFTER_FREE_FILE)
        return table, "section 4e's tensors do not fit in this GPU's free memory; reference: the committed run"
    return results.here_or_reference_table(measure_copy_after_free, COPY_AFTER_FREE_FILE)


def copy_after_free_line(table: dict | None, source: str) -> str:
    """What :func:`measure_copy_after_free` saw: how many copies at the start ran slow, for how
    long, and at what speed, against the settled copy."""
    if table is None:
        return f"no copy timed after a free: {source}"
    times = table["copy_ms"]
    settled = statistics.median(times[len(times) // 2:])
    slow = 0
    while slow < len(times) and times[slow] > SLOWER_THAN_SETTLED * settled:
        slow += 1
    nbytes = 2 * table["numel"] * 4
    head = (f"{table['device']} ({source}): {len(times)} copies of {table['numel']:,} float32 elements, "
            f"timed one by one right after {table['freed_bytes'] / 1e9:.1f} GB went back to the driver")
    settled_line = f"settled: {settled:.3f} ms per copy, {nbytes / settled / 1e6:.0f} GB/s (the median of the last half)"
    if not slow:
        return "\n".join([head, f"no copy at the start ran more than {SLOWER_THAN_SETTLED - 1:.0%} over the "
                                 "settled time", settled_line])
    first = times[:slow]
    later_slow = sum(t > SLOWER_THAN_SETTLED * settled for t in times[slow:])
    return "\n".join([
        head,
        f"the first {slow} copies, {sum(first):.0f} ms in all: {statistics.median(first):.3f} ms per copy, "
        f"{nbytes / statistics.median(first) / 1e6:.0f} GB/s (more than {SLOWER_THAN_SETTLED - 1:.0%} over the "
        "settled time)",
        settled_line,
        f"slow copies after those first {slow}: {later_slow}",
    ])


# ----------------------------------------------------------------------------- section 3g: streams


@dataclass(frozen=True)
class StreamRace:
    """Elements wrong after the double-buffer race of :func:`stream_race`."""

    numel: int
    wrong_legacy: int  # mistake_legacy_default_stream: elements not SELU of the new batch
    stale_legacy: int  # ... of which SELU of the previous batch
    wrong_current: int  # selu_naive, on torch's current stream

    def __str__(self) -> str:
        return (f"legacy default stream: {self.wrong_legacy:,} of {self.numel:,} elements wrong; "
                f"{self.stale_legacy:,} are SELU of the previous batch\n"
                f"current stream:        {self.wrong_current:,} of {self.numel:,} elements wrong")


def stream_race(numel: int = 2**24, device=None, sleep_cycles: int = 200_000_000,
                right=ops.selu_naive) -> StreamRace | Skipped:
    """A double buffer on a side stream: a slow producer (``torch.cuda._sleep``, about 0.1 s
    of GPU time at ``sleep_cycles``), then the new batch copied into ``x``, then SELU of
    ``x``, once by ``mistake_legacy_default_stream`` and once by ``right`` (an operator
    that launches on torch's current stream: ``selu_naive`` unless another is given).

    An element is wrong when it is more than :data:`helpers.check.MAX_ULP` from the
    float64 SELU of the new batch. Needs a GPU: streams are a CUDA concept.
    """
    if not env.can_build_cuda():
        return Skipped("needs a GPU: streams are a CUDA concept. On a GPU this runs the race; this "
                       "notebook's committed outputs show what the H100 did.")
    device = torch.device(device) if device is not None else env.default_device()
    new_batch = bench.random_input(numel, device=device, seed=1)
    x = bench.random_input(numel, device=device, seed=2)  # the previous batch
    # Run both kernels once first. CUDA loads a kernel's code at its first launch
    # (lazy loading), and that load waits for the work already queued on the GPU,
    # which would hide the race behind a synchronisation nobody wrote.
    ops.mistake_legacy_default_stream(x[:1])
    right(x[:1])
    expected, previous = check.selu_reference(new_batch), check.selu_reference(x)
    torch.cuda.synchronize(device)
    side = torch.cuda.Stream(device)
    with torch.cuda.stream(side):
        torch.cuda._sleep(sleep_cycles)  # the producer: cycles of GPU time
        x.copy_(new_batch)  # queued on side: lands after the sleep
        y_legacy = ops.mistake_legacy_default_stream(x)  # stream 0: does not wait
        y_current = right(x)  # torch's current stream, side: waits for the copy
    torch.cuda.synchronize(device)
    tolerance = check.MAX_ULP[torch.float32]

    def wrong(y: torch.Tensor, reference: torch.Tensor) -> int:
        return int((check.ulp_distance(y, reference) > tolerance).sum())

    return StreamRace(numel, wrong(y_legacy, expected), numel - wrong(y_legacy, previous),
                      wrong(y_current, expected))
