"""Compile a kernel of ``kernels/`` with nvcc and look at what it became -- no GPU needed.

>>> ptx = helpers.nvcc.compile_ptx("selu_vectorized.cu")           # doctest: +SKIP
>>> helpers.nvcc.vector_loads(ptx, "selu_vectorized_kernel<float, 4, false, true>")
{'ld.global.nc.v4.f32': 4}
>>> helpers.nvcc.show_ptx(ptx, "selu_vectorized_kernel<float, 4, false, true>", r"ld\\.global|st\\.global")
>>> helpers.nvcc.ptxas_report("selu_vectorized.cu")                 # registers, spills, stack
>>> helpers.nvcc.compile_source(cuda_text, "relu_inline").ptx     # doctest: +SKIP

The flags are the extension build's, with torch's defines and include folders, for ``sm_90`` by
default: the PTX shown is the PTX that would run. Results are cached under ``.build/nvcc/``, keyed
by the source, every header of ``kernels/``, the flags and the nvcc and torch versions.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
import time
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from . import build, env

DEFAULT_ARCH = "sm_90"
CACHE_DIR = env.BUILD_DIR / "nvcc"
SOURCES_DIR = CACHE_DIR / "sources"  # source text given to compile_source, as files
NVCC_TIMEOUT_S = 600


class NvccError(RuntimeError):
    """nvcc is missing or failed, with a message that says what to do."""


@dataclass(frozen=True)
class Compiled:
    """A kernel file compiled to PTX."""

    source: str  # relative to the repository: "kernels/selu_vectorized.cu"
    arch: str
    ptx: str
    seconds: float  # how long nvcc took when it ran
    cached: bool  # whether this call read the result from .build/nvcc/
    warnings: str  # what nvcc printed, usually nothing
    directory: Path


@dataclass(frozen=True)
class KernelResources:
    """What ``ptxas -v`` reports for one kernel."""

    registers: int  # per thread: more registers, fewer threads resident per SM
    stack_frame_bytes: int  # local memory each thread uses for its stack
    spill_store_bytes: int  # registers written to local memory (slow) for lack of room
    spill_load_bytes: int  # ... and read back


def nvcc_path() -> str:
    """The nvcc that torch's extension builder would use; :class:`NvccError` if none."""
    path = env.nvcc_path()
    if path is None:
        raise NvccError("nvcc (the CUDA compiler) was not found. It needs no GPU: install the CUDA toolkit "
                        "(e.g. `sudo apt-get install cuda-nvcc-13-0` from NVIDIA's repository, or `conda install "
                        "-c nvidia cuda-nvcc`), then put its bin/ on PATH or set CUDA_HOME.")
    return path


@lru_cache(maxsize=None)
def nvcc_version(nvcc: str | None = None) -> str:
    """nvcc's version line, e.g. ``Cuda compilation tools, release 13.0, V13.0.88``."""
    version = env.tool_version(nvcc or nvcc_path())
    if version is None:
        raise NvccError(f"`{nvcc or nvcc_path()} --version` failed: the CUDA toolkit looks broken.")
    return version


def _torch_include_dirs() -> list[str]:
    from torch.utils.cpp_extension import include_paths

    # The CPU default: include_paths("cuda") would add CUDA_HOME/include, which
    # nvcc already searches, and fails outright where CUDA_HOME is unknown.
    return include_paths() + [sysconfig.get_paths()["include"]]  # torch/extension.h includes Python.h


def nvcc_flags(filename: str, arch: str = DEFAULT_ARCH, extra_flags: tuple[str, ...] = ()) -> list[str]:
    """The nvcc flags for ``kernels/<filename>``, less the input and output files."""
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    # Without a C++ standard in build.CUDA_FLAGS nvcc's default applies: it changes how torch's
    # headers parse, not the PTX. The defines are torch's builder's for an extension.
    flags = [f"-arch={arch}", *build.CUDA_FLAGS, *COMMON_NVCC_FLAGS,
             f"-DTORCH_EXTENSION_NAME={Path(filename).stem}", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    torch_includes = _torch_include_dirs()
    # CPU wheels of torch lack the header CMake generates, c10/cuda/impl/cuda_cmake_macros.h, which
    # only defines an export macro for Windows DLLs: this define is c10's own switch to skip it.
    if not (Path(torch_includes[0]) / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").exists():
        flags.append("-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE")
    flags.append(f"-I{env.KERNELS_DIR}")
    # -isystem, as torch's builder does: warnings inside torch's headers are not ours.
    for include in torch_includes:
        flags += ["-isystem", include]
    return flags + list(extra_flags)


def _relative(text: str) -> str:
    """``text`` with this machine's paths shortened, for messages."""
    text = text.replace(str(Path(torch.__file__).parent), "<torch>")
    text = text.replace(sysconfig.get_paths()["include"], "<python-include>")
    return build.relative_paths(text)


def _run(command: list[str], what: str) -> tuple[str, float]:
    """Run nvcc; return its stderr and how long it took, or raise :class:`NvccError`."""
    started = time.perf_counter()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise NvccError(f"nvcc took more than {NVCC_TIMEOUT_S} s to {what}; is the machine overloaded?") from None
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise NvccError(f"nvcc failed to {what}. It said:\n{_relative(result.stderr.strip())}\n"
                        f"Command: {_relative(' '.join(command))}")
    return result.stderr, seconds


def _source_path(filename: str) -> Path:
    path = env.KERNELS_DIR / Path(filename).name
    if not path.exists():
        known = ", ".join(sorted(p.name for p in env.KERNELS_DIR.glob("*.cu")))
        raise NvccError(f"No kernels/{Path(filename).name}; the .cu files there are: {known}.")
    return path


def _cache_directory(source: Path, flags: list[str]) -> Path:
    headers = (header.read_text() for header in build.kernel_headers())  # a kernel may include any of them
    digest = build.source_hash(source.read_text(), *headers, " ".join(flags), nvcc_version(), torch.__version__)
    return CACHE_DIR / f"{source.stem}_{digest}"


def _write_atomically(path: Path, text: str) -> None:
    # A compile interrupted halfway must not leave a truncated file that later reads as cached.
    partial = path.with_name(path.name + f".{os.getpid()}.partial")
    partial.write_text(text)
    partial.replace(path)


def compile_kernel(filename: str, arch: str = DEFAULT_ARCH, extra_flags: tuple[str, ...] = ()) -> Compiled:
    """Compile ``kernels/<filename>`` to PTX for ``arch`` (cached)."""
    source = _source_path(filename)
    return _compile(source, f"kernels/{source.name}", arch, extra_flags)


def compile_source(text: str, name: str = "inline", arch: str = DEFAULT_ARCH,
                   extra_flags: tuple[str, ...] = ()) -> Compiled:
    """Compile CUDA source *text* (a kernel written in a notebook cell) to PTX for ``arch`` as a file
    of ``kernels/`` is, through ``.build/nvcc/sources/<name>_<hash>.cu``; ``name`` is an identifier."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise NvccError(f"name must be a plain identifier (letters, digits and _), got {name!r}")
    source = SOURCES_DIR / f"{name}_{build.source_hash(text)}.cu"
    if not source.exists() or source.read_text() != text:
        source.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(source, text)
    return _compile(source, build.relative_paths(str(source)), arch, extra_flags)


def _compile(source: Path, shown_as: str, arch: str, extra_flags: tuple[str, ...]) -> Compiled:
    flags = nvcc_flags(source.name, arch, tuple(extra_flags))
    directory = _cache_directory(source, flags)
    ptx_file, log_file, seconds_file = (directory / n for n in ("kernel.ptx", "nvcc.log", "seconds.txt"))
    cached = seconds_file.exists()
    if not cached:
        directory.mkdir(parents=True, exist_ok=True)
        command = [nvcc_path(), "-ptx", *flags, str(source), "-o", str(ptx_file)]
        try:
            log, seconds = _run(command, f"compile {shown_as} to PTX for {arch}")
        except NvccError:
            shutil.rmtree(directory, ignore_errors=True)  # nothing half-done left to read as cached
            raise
        _write_atomically(log_file, _relative(log))
        _write_atomically(seconds_file, f"{seconds:.2f}\n")  # written last: marks the result complete
    return Compiled(source=shown_as, arch=arch, ptx=ptx_file.read_text(), seconds=float(seconds_file.read_text()),
                    cached=cached, warnings=log_file.read_text(), directory=directory)


def compile_ptx(filename: str, arch: str = DEFAULT_ARCH, extra_flags: tuple[str, ...] = ()) -> str:
    """The PTX of ``kernels/<filename>`` for ``arch``, as text (cached)."""
    return compile_kernel(filename, arch, extra_flags).ptx


_PTXAS_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)' for '(?P<arch>[^']+)'")
_PTXAS_FRAME = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads"
)
_PTXAS_REGISTERS = re.compile(r"Used (?P<registers>\d+) registers")


def parse_ptxas_log(log: str) -> dict[str, KernelResources]:
    """``ptxas -v``'s report per kernel (mangled name), from its stderr: a section from each "Compiling entry function
    '_Z...'" line, with "N bytes stack frame, N bytes spill stores, N bytes spill loads" and "Used N registers"."""
    report: dict[str, KernelResources] = {}
    # Each section runs from one "Compiling entry function" line to the next.
    starts = list(_PTXAS_ENTRY.finditer(log))
    for start, end in zip(starts, starts[1:] + [None]):
        section = log[start.end() : end.start() if end else len(log)]
        frame, registers = _PTXAS_FRAME.search(section), _PTXAS_REGISTERS.search(section)
        if frame is None or registers is None:
            raise NvccError(f"Could not read ptxas's report for {start['name']}:\n{section.strip()}")
        report[start["name"]] = KernelResources(int(registers["registers"]), int(frame["stack"]),
                                                int(frame["stores"]), int(frame["loads"]))
    return report


def ptxas_report(filename: str, arch: str = DEFAULT_ARCH,
                 extra_flags: tuple[str, ...] = ()) -> dict[str, KernelResources]:
    """Registers, spills and stack frame of every kernel of ``kernels/<filename>``, by C++ name: ptxas
    run on the cached PTX (``nvcc -cubin -Xptxas -v``, as the build runs it), cached too."""
    compiled = compile_kernel(filename, arch, extra_flags)
    log_file = compiled.directory / "ptxas.log"
    if not log_file.exists():
        ptx_file = compiled.directory / "kernel.ptx"
        command = [nvcc_path(), f"-arch={arch}", "-cubin", "-Xptxas", "-v", str(ptx_file),
                   "-o", str(compiled.directory / "kernel.cubin")]
        log, _seconds = _run(command, f"assemble the PTX of {compiled.source} with ptxas")
        _write_atomically(log_file, _relative(log))
    report = parse_ptxas_log(log_file.read_text())
    names = demangle(tuple(report))
    return {names[mangled]: resources for mangled, resources in report.items()}


@lru_cache(maxsize=None)
def demangle(names: tuple[str, ...]) -> dict[str, str]:
    """C++ names for mangled ones, through c++filt (the mangled names where it is missing)."""
    tool = shutil.which("c++filt") or shutil.which("cu++filt")
    if tool is None or not names:
        return {name: name for name in names}
    result = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True)
    lines = result.stdout.splitlines()
    if result.returncode != 0 or len(lines) != len(names):
        return {name: name for name in names}
    return dict(zip(names, lines))


_PTX_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+(?P<name>[\w$]+)\s*\(", re.MULTILINE)


def kernels(ptx: str) -> dict[str, str]:
    """The PTX of each kernel (``.entry``), keyed by its C++ name."""
    bodies = {}
    for match in _PTX_ENTRY.finditer(ptx):
        end = ptx.find("\n}", match.end())  # a kernel's body closes with "}" in column 0
        bodies[match["name"]] = ptx[match.start() : len(ptx) if end < 0 else end + 2]
    names = demangle(tuple(bodies))
    return {names[mangled]: body for mangled, body in bodies.items()}


def _select(ptx: str, kernel_name_substring: str | None) -> dict[str, str]:
    found = kernels(ptx)
    if kernel_name_substring is None:
        return found
    selected = {name: body for name, body in found.items() if kernel_name_substring in name}
    if not selected:
        raise ValueError(f"No kernel whose name contains {kernel_name_substring!r}; the kernels are:\n  "
                         + "\n  ".join(found))
    return selected


def _instructions(body: str):
    """The instruction mnemonics of a PTX body (``ld.global.nc.v4.f32``...), predicates dropped."""
    for line in body.splitlines():
        line = re.sub(r"^@!?%\w+\s+", "", line.strip())
        if line and not line.startswith((".", "//", "$", "{", "}", ")")):
            yield line.split(None, 1)[0].rstrip(";")


def _vector_accesses(ptx: str, prefix: str, kernel_name_substring: str | None) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for body in _select(ptx, kernel_name_substring).values():
        counts.update(op for op in _instructions(body) if op.startswith(prefix) and re.search(r"\.v[248]\.", op))
    return dict(counts)


def vector_loads(ptx: str, kernel_name_substring: str | None = None) -> dict[str, int]:
    """How many vector loads from global memory, per form (``ld.global.nc.v4.f32``: 4, ...), in the
    kernels whose name contains ``kernel_name_substring`` (all by default); ``.nc``: the read-only path."""
    return _vector_accesses(ptx, "ld.global", kernel_name_substring)


def vector_stores(ptx: str, kernel_name_substring: str | None = None) -> dict[str, int]:
    """How many vector stores to global memory, per form (``st.global.v4.f32``: 4, ...)."""
    return _vector_accesses(ptx, "st.global", kernel_name_substring)


def show_ptx(ptx: str, kernel_name_substring: str, pattern: str | None = None, max_lines: int = 60) -> None:
    """Print the PTX of the kernels whose name contains ``kernel_name_substring``, without ``.loc``
    directives; with ``pattern`` (a regular expression) only the lines that match, numbered."""
    for name, body in _select(ptx, kernel_name_substring).items():
        lines = [(n, line) for n, line in enumerate(body.splitlines(), 1)
                 if not line.lstrip().startswith((".loc", ".file"))]
        if pattern is not None:
            lines = [(n, line) for n, line in lines if re.search(pattern, line)]
        print(f"// {name}: {len(lines)} line{'s' if len(lines) != 1 else ''}"
              + (f" matching {pattern!r}" if pattern is not None else ""))
        for n, line in lines[:max_lines]:
            print(f"{n:5d}  {line.strip()}")
        if len(lines) > max_lines:
            print(f"       ... {len(lines) - max_lines} more (max_lines={max_lines})")
