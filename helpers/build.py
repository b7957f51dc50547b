"""Build the kernels of ``kernels/`` and register them as PyTorch operators, in one call.

>>> build.load("selu_vectorized")            # doctest: +SKIP
>>> y = torch.ops.selu_course.selu_vectorized(x)     # on the CPU or the GPU, by x's device

:func:`load` compiles a kernel's CPU implementation and, where a GPU, a CUDA build of torch
and nvcc are all present, its CUDA one, each into a shared library whose kernels register
with the dispatcher when it loads (``TORCH_LIBRARY_IMPL``); the schemas they register against
come from :mod:`helpers.schemas`. Each library is named after a hash of its sources, headers
and flags: an unchanged kernel is not rebuilt, and an edited one replaces the loaded build in
the running process (the old library is unloaded first). It compiles and registers, nothing
else: the launch of selu_vectorized stays the C++ default until a notebook calls
:func:`helpers.tuning.configure`. The usual failures (no ninja, compiler or nvcc, a CPU-only
torch asked for CUDA, a stale lock, a compile or registration error) become a
:class:`BuildError` that says what to do.
"""
from __future__ import annotations

import _ctypes
import contextlib
import ctypes
import gc
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Iterator

import torch

from . import env, schemas

EXTENSIONS_DIR = env.BUILD_DIR / "extensions"
STALE_LOCK_SECONDS = 600  # no honest build of these kernels takes 10 minutes


@dataclass(frozen=True)
class KernelSpec:
    """A kernel of the course: its CPU and CUDA (None: CPU only) sources and the operators they implement."""

    cpu_source: str
    cuda_source: str | None
    operators: tuple[str, ...]
    tuned: bool = False  # its launch configuration is chosen per GPU (helpers.tuning.configure)


KERNELS = {
    "selu_naive": KernelSpec("selu_cpu.cpp", "selu_naive.cu", ("selu_naive", "selu_naive.out", "selu_naive_unrolled")),
    "selu_vectorized": KernelSpec(
        "selu_cpu.cpp", "selu_vectorized.cu",
        ("selu_vectorized", "selu_vectorized.out", "selu_vectorized_", "selu_vectorized_with_config",
         "copy_vectorized"),
        tuned=True,
    ),
    "selu_backward": KernelSpec("selu_backward_cpu.cpp", "selu_backward.cu",
                                ("selu_backward", "selu_backward_from_output")),
    "latency_chain": KernelSpec("latency_chain_cpu.cpp", "latency_chain.cu", ("pointer_chase",)),
    "mistakes": KernelSpec("mistakes_cpu.cpp", "mistakes.cu",
                           ("mistake_missing_minus_one", "mistake_expf_minus_one", "mistake_legacy_default_stream",
                            "mistake_int32_count", "mistake_int32_index")),
}

# Autograd-key kernels: C++ alone, serving every device. Not in KERNELS: loading one changes
# the autograd rule of its operators, which is helpers.ops's business (it removes the Python
# rule first: an operator has one Autograd kernel at a time).
AUTOGRAD_KERNELS = {
    "selu_autograd": KernelSpec("selu_autograd.cpp", None, ("selu_vectorized", "selu_vectorized_with_config")),
}

# Called with the kernel's name after each load: helpers.ops puts the operator's fast path in place.
AFTER_LOAD: list = []

# A pybind11 binding of the forward operator, cheaper per call than torch.ops' (appendix A8):
# it registers nothing, so it is imported like any extension and never unloaded.
ENTRY_SOURCE = "selu_entry.cpp"
_ENTRIES: dict[str, ModuleType] = {}  # imported entry modules, by build name

# torch adds the C++ standard its headers need (C++20 in recent releases): we add none.
CUDA_FLAGS = ("-O3", "-lineinfo")
CPU_FLAGS = ("-O3",)
# GCC marks some template statics STB_GNU_UNIQUE, and a library holding one can
# never be unloaded: dlclose leaves it, and its kernels, registered. Without them
# a rebuilt kernel can replace the old one in a running process.
GNU_UNIQUE_OFF = "-fno-gnu-unique"


class BuildError(RuntimeError):
    """A build that could not be done, with a message that says what to do."""


def relative_paths(text: str) -> str:
    """Replace this checkout's absolute path with ``.`` so outputs are portable."""
    return text.replace(str(env.REPO_ROOT) + os.sep, "").replace(str(env.REPO_ROOT), ".")


def build_directory(name: str) -> Path:
    """The project-local folder where extension ``name`` is built (created if needed)."""
    path = EXTENSIONS_DIR / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def resolve_backend(backend: str = "auto") -> str:
    """``auto`` becomes ``cuda`` where CUDA kernels can be built and run, else ``cpu``."""
    if backend not in ("auto", "cuda", "cpu"):
        raise BuildError(f"backend must be 'auto', 'cuda' or 'cpu', not {backend!r}.")
    return env.default_backend() if backend == "auto" else backend


def check_toolchain(backend: str) -> None:
    """Raise a :class:`BuildError` naming the first missing piece of the toolchain."""
    from torch.utils.cpp_extension import is_ninja_available

    cpu_instead = "or build for the CPU with backend='cpu'."
    missing = [
        (not is_ninja_available(), "ninja is not installed, and torch.utils.cpp_extension needs it to build kernels. "
         "Install it with `python -m pip install ninja` (`make lab` and `make test` do), then re-run the cell."),
        (env.cxx_path() is None, "No C++ compiler found (looked for $CXX, c++ and g++). Install one (`sudo apt-get "
         "install g++`, `xcode-select --install` on macOS) or set CXX to its path, then restart the Jupyter kernel."),
    ]
    if backend == "cuda":
        missing += [
            (torch.version.cuda is None, f"CUDA kernels were asked for, but this torch ({torch.__version__}) is a "
             f"CPU-only build. Install a CUDA build of torch (see the README), {cpu_instead}"),
            (env.nvcc_path() is None, "CUDA kernels were asked for, but nvcc (the CUDA compiler) was not found. "
             f"Install the CUDA toolkit that matches torch's CUDA {torch.version.cuda} and put its bin/ on PATH, "
             f"or set CUDA_HOME to its folder; {cpu_instead}"),
            (not torch.cuda.is_available(), "CUDA kernels were asked for, but torch sees no GPU "
             f"(torch.cuda.is_available() is False). Check `nvidia-smi` and CUDA_VISIBLE_DEVICES, {cpu_instead}"),
        ]
    for is_missing, message in missing:
        if is_missing:
            raise BuildError(message)


def check_stale_lock(directory: Path, stale_after_s: float = STALE_LOCK_SECONDS) -> None:
    """Fail fast on a lock left by a killed build (torch's builder would wait for it forever)."""
    lock = directory / "lock"
    if lock.exists() and time.time() - lock.stat().st_mtime > stale_after_s:
        raise BuildError(
            f"A build lock from {time.time() - lock.stat().st_mtime:.0f} s ago is still in "
            f"{relative_paths(str(directory))}: a build was probably interrupted. If no other "
            f"build is running, delete it (`helpers.build.remove_stale_lock({directory.name!r})` "
            f"or `rm {relative_paths(str(lock))}`) and re-run the cell."
        )


def remove_stale_lock(name: str) -> bool:
    lock = EXTENSIONS_DIR / name / "lock"
    if not lock.exists():
        return False
    lock.unlink()
    return True


def set_cuda_arch_list() -> str | None:
    """Build for the GPU present only (a fat binary for every arch takes far longer)."""
    if "TORCH_CUDA_ARCH_LIST" not in os.environ and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    return os.environ.get("TORCH_CUDA_ARCH_LIST")


def source_hash(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\0")
    return digest.hexdigest()[:12]


def kernel_headers() -> list[Path]:
    """Every header of ``kernels/``: a kernel includes some of them, so all go into its hash."""
    return sorted(p for p in env.KERNELS_DIR.iterdir() if p.suffix in (".h", ".cuh", ".hpp"))


def _compiler_flags() -> tuple[str, ...]:
    """The host compiler's extra flags: GNU_UNIQUE_OFF where the compiler is GCC."""
    version = env.tool_version(env.cxx_path()) or ""
    return (GNU_UNIQUE_OFF,) if "clang" not in version.lower() else ()


@dataclass(frozen=True)
class Library:
    """One shared library of kernels, built and loaded into this process."""

    source: str  # the kernel file it was built from, e.g. "selu_naive.cu"
    device: str  # "cpu", "cuda" or "autograd": the dispatch key its kernels are registered for
    name: str  # the source's stem, the device and a content hash
    path: Path  # the .so file
    build_seconds: float  # in this call (about 0 when it was built before)


@dataclass
class Loaded:
    """What :func:`load` registered: the operators, and the libraries that implement them."""

    kernel: str
    operators: tuple[str, ...]
    libraries: list[Library] = field(default_factory=list)

    @property
    def devices(self) -> list[str]:
        return [library.device for library in self.libraries]

    @property
    def build_seconds(self) -> float:
        return sum(library.build_seconds for library in self.libraries)

    def __str__(self) -> str:
        operators = ", ".join(f"selu_course::{name}" for name in self.operators)
        built = "; ".join(f"{lib.device.upper()} from kernels/{lib.source} ({lib.name})" for lib in self.libraries)
        return f"{operators}\n  {built}; {self.build_seconds:.1f} s"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))


_LOADED: dict[str, Library] = {}  # source file -> the library built from it that is loaded now


def loaded_library(source: str) -> Library | None:
    """The library built from ``source`` (e.g. ``"selu_vectorized.cu"``) loaded now, if any."""
    return _LOADED.get(source)


def _is_loaded(path: Path) -> bool:
    with symbols(path) as handle:
        return handle is not None


# ``int64_t selu_course_objects_alive()``: the autograd nodes of kernels/selu_autograd.cpp alive.
OBJECTS_ALIVE_SYMBOL = "selu_course_objects_alive"


@contextlib.contextmanager
def symbols(library: Library | Path) -> Iterator[ctypes.CDLL | None]:
    """A library's C functions through ctypes while it is loaded (None where it is not)."""
    try:
        handle = ctypes.CDLL(str(getattr(library, "path", library)), mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError:
        handle = None
    try:
        yield handle
    finally:
        if handle is not None:
            _ctypes.dlclose(handle._handle)  # the reference RTLD_NOLOAD just added


def objects_alive(library: Library) -> int:
    """How many objects made by ``library``'s code are alive now (0 where it counts none)."""
    with symbols(library) as handle:
        count = getattr(handle, OBJECTS_ALIVE_SYMBOL, None)
        if count is not None:
            count.restype = ctypes.c_int64
            if count() > 0:
                gc.collect()  # a reference cycle may be all that keeps one alive
        return 0 if count is None else count()


def unload(library: Library) -> None:
    """Unload ``library``, and with it the kernels it registered (its static registration objects
    are destroyed). Not while an autograd node made by its code is alive (:func:`objects_alive`),
    which would run unloaded code; queued CUDA work is finished first."""
    alive = objects_alive(library)
    if alive:
        raise BuildError(f"{library.name} cannot be unloaded yet: {alive} autograd graph node(s) made by its code "
                         f"(kernels/{library.source}) are still alive, and freeing one after the unload would crash "
                         "this process. They belong to results that require grad (their .grad_fn), or to the graphs "
                         "that torch.compile traced meanwhile: delete those results (del y) or keep only y.detach(), "
                         "call torch._dynamo.reset() if something was compiled, then try again.")
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    # Each dlopen of a path counts one reference (torch's loader opened it once);
    # dlclose each, through a handle that does not load it again.
    for _ in range(16):
        with symbols(library) as handle:
            if handle is None:
                break
            _ctypes.dlclose(handle._handle)  # one that was there before (symbols closes its own)
    torch.ops.loaded_libraries.discard(str(library.path))
    if _LOADED.get(library.source, library).path == library.path:
        _LOADED.pop(library.source, None)
    if _is_loaded(library.path):
        raise BuildError(f"{library.name} could not be unloaded, so its kernels stay registered. Restart the "
                         "Jupyter kernel to load the rebuilt one.")


def _library_options(source_name: str, device: str, extra_flags: tuple[str, ...], extra_cflags: tuple[str, ...],
                     verbose: bool) -> dict:
    """The arguments of ``torch.utils.cpp_extension.load`` for one library: its name carries
    a hash of its sources, flags, GPU architecture and torch version, and so does its folder."""
    source = env.KERNELS_DIR / source_name
    cflags = tuple(CPU_FLAGS) + _compiler_flags() + tuple(extra_cflags)
    if device == "cuda":
        cuda_flags = tuple(CUDA_FLAGS) + tuple(f"-Xcompiler={flag}" for flag in _compiler_flags()) + extra_flags
        arch = set_cuda_arch_list() or ""
    else:
        cuda_flags, arch = (), ""
    headers = "".join(path.read_text() for path in kernel_headers())
    digest = source_hash(source.read_text(), headers, " ".join(cflags + cuda_flags), arch, torch.__version__)
    name = f"{source.stem}_{device}_{digest}"
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 2))
    return dict(name=name, sources=[str(source)], extra_cflags=list(cflags),
                extra_cuda_cflags=list(cuda_flags) if device == "cuda" else None,
                extra_include_paths=[str(env.KERNELS_DIR)], build_directory=str(build_directory(name)),
                is_python_module=False, verbose=verbose)


def _build_failed(source_name: str, device: str, error: Exception | str) -> BuildError:
    return BuildError(f"Building kernels/{source_name} for {device.upper()} failed. The compiler said:\n"
                      f"{relative_paths(str(error))}\nFix the first error it reports and re-run the cell; the build "
                      "is cached per source hash, so only a changed kernel is rebuilt.")


def _build_side_by_side(jobs: list[tuple], verbose: bool) -> dict[str, float]:
    """Build the libraries of ``jobs`` (:func:`_build_library`'s arguments) not built yet, each in a
    child process, all at once; each source's build seconds. Loading stays one at a time."""
    from concurrent.futures import ThreadPoolExecutor

    def build(job: tuple) -> float:
        source_name, device, extra_flags, extra_cflags = job
        options = _library_options(source_name, device, extra_flags, extra_cflags, verbose)
        directory = Path(options["build_directory"])
        loaded = _LOADED.get(source_name)
        if (loaded is not None and loaded.name == options["name"]) or (directory / REGISTERED_MARK).exists():
            return 0.0
        check_stale_lock(directory)
        started = time.perf_counter()
        try:
            _build_and_register_in_a_child(source_name, device, directory, options)
        except BuildError:
            raise
        except Exception as error:  # torch raises RuntimeError for compiler errors
            raise _build_failed(source_name, device, error) from None
        return time.perf_counter() - started

    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {job[0]: pool.submit(build, job) for job in jobs}
    return {source_name: future.result() for source_name, future in futures.items()}


def _build_library(source_name: str, device: str, extra_flags: tuple[str, ...], extra_cflags: tuple[str, ...],
                   verbose: bool, built_s: float = 0.0) -> Library:
    """Build (unless built) and load one library; ``built_s``: its seconds in :func:`_build_side_by_side`."""
    options = _library_options(source_name, device, extra_flags, extra_cflags, verbose)
    name, directory = options["name"], Path(options["build_directory"])
    previous = _LOADED.get(source_name)
    if previous is not None and previous.name == name:
        return Library(source_name, device, name, previous.path, 0.0)  # loaded already: nothing to do
    check_stale_lock(directory)

    from torch.utils.cpp_extension import load

    started = time.perf_counter()
    try:
        _build_and_register_in_a_child(source_name, device, directory, options)
        if previous is not None:
            unload(previous)  # its kernels go, so the new ones replace them without a warning
        path = load(**options)  # built already: this loads it, and its kernels register
    except BuildError:
        raise
    except Exception as error:  # torch raises RuntimeError for compiler errors, OSError for loading
        raise _build_failed(source_name, device, error) from None
    library = Library(source_name, device, name, Path(path), time.perf_counter() - started + built_s)
    _LOADED[source_name] = library
    return library


REGISTERED_MARK = "registered-in-a-child"


def _build_and_register_in_a_child(source_name: str, device: str, directory: Path, options: dict) -> None:
    """Build the library and load it once in a child process (once per build: a mark file).

    A registration that fails (a C++ signature that does not match its schema in helpers/schemas.py) throws while
    the library loads, and the C++ runtime ends the process: that must not be a learner's Jupyter kernel."""
    mark = directory / REGISTERED_MARK
    if mark.exists():
        return
    child = ("import json, sys\n"
             "import helpers.schemas  # so that each registration is checked against its schema\n"
             "from torch.utils.cpp_extension import load\n"
             "load(**json.loads(sys.argv[1]))\n")
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(env.REPO_ROOT), environment.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, "-c", child, json.dumps(options)], capture_output=True, text=True,
                            cwd=env.REPO_ROOT, env=environment)
    if options.get("verbose"):
        print(result.stdout, end="")
    if result.returncode == 0:
        mark.write_text(options["name"] + "\n")
        return
    output = relative_paths(result.stderr.strip())
    if "Error building extension" in output or result.returncode > 0 and "c10::Error" not in output:
        raise _build_failed(source_name, device, output[max(output.find("Error building extension"), 0):])
    output = output.split("Exception raised from")[0].replace("terminate called after throwing an instance of "
                                                              "'c10::Error'\n", "").strip()
    raise BuildError(
        f"kernels/{source_name} compiled, but registering its {device.upper()} kernels failed, which would "
        f"have ended this Python process (it was tried in a separate one). The dispatcher said:\n{output}\n"
        "Each m.impl(name, &function) must have the C++ signature of the schema of `name` in "
        "helpers/schemas.py (Tensor -> const at::Tensor&, Tensor(a!) -> at::Tensor&, int -> int64_t, "
        "`-> ()` -> void)."
    )


def load(kernel: str, *, backend: str = "auto", extra_cuda_cflags: tuple[str, ...] = (),
         extra_cflags: tuple[str, ...] = (), verbose: bool = False) -> Loaded:
    """Build ``kernel`` (a key of :data:`KERNELS` or :data:`AUTOGRAD_KERNELS`) and register its operators:
    the CPU implementation always, the CUDA one too where ``backend`` (``"auto"``: where a GPU, a
    CUDA build of torch and nvcc are all here) says so. Unchanged libraries are neither rebuilt nor
    reloaded; an edited source (or other flags) is rebuilt and replaces the loaded library."""
    spec = kernel_spec(kernel)
    backend = resolve_backend(backend)
    if spec.cuda_source is None:
        backend = "cpu"  # nothing for nvcc to build: not needed, even on a GPU machine
    check_toolchain(backend)
    loaded = Loaded(kernel, spec.operators)
    key = "autograd" if kernel in AUTOGRAD_KERNELS else "cpu"
    jobs = [(spec.cpu_source, key, (), tuple(extra_cflags))]
    if backend == "cuda" and spec.cuda_source is not None:
        jobs.append((spec.cuda_source, "cuda", tuple(extra_cuda_cflags), tuple(extra_cflags)))
    built_s = _build_side_by_side(jobs, verbose) if len(jobs) > 1 else {}
    for job in jobs:
        loaded.libraries.append(_build_library(*job, verbose, built_s=built_s.get(job[0], 0.0)))
    for after_load in AFTER_LOAD:
        after_load(kernel)
    return loaded


def load_entry(verbose: bool = False) -> ModuleType:
    """Build kernels/selu_entry.cpp (C++ only) and import it, cached per source hash; its functions
    call the operators through the dispatcher, with whichever kernels and rules are loaded."""
    from torch.utils.cpp_extension import load

    source = env.KERNELS_DIR / ENTRY_SOURCE
    cflags = tuple(CPU_FLAGS)
    name = f"{source.stem}_{source_hash(source.read_text(), ' '.join(cflags), torch.__version__)}"
    if name in _ENTRIES:
        return _ENTRIES[name]  # imported already: torch's load would run ninja again to find it up to date
    directory = build_directory(name)
    check_stale_lock(directory)
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 2))
    try:
        module = load(name=name, sources=[str(source)], extra_cflags=list(cflags), build_directory=str(directory),
                      verbose=verbose)
    except Exception as error:  # RuntimeError for compiler errors, ImportError for loading
        raise BuildError(
            f"Building kernels/{ENTRY_SOURCE} failed. The compiler said:\n{relative_paths(str(error))}\n"
            "Fix the first error it reports and re-run the cell."
        ) from None
    _ENTRIES[name] = module
    return module


def kernel_spec(kernel: str) -> KernelSpec:
    """The :class:`KernelSpec` of ``kernel``, a key of :data:`KERNELS` or :data:`AUTOGRAD_KERNELS`."""
    spec = KERNELS.get(kernel) or AUTOGRAD_KERNELS.get(kernel)
    if spec is None:
        raise BuildError(f"Unknown kernel {kernel!r}; known kernels: {', '.join(KERNELS)}; "
                         f"autograd kernels: {', '.join(AUTOGRAD_KERNELS)}.")
    return spec


@contextlib.contextmanager
def loaded(kernel: str, **options) -> Iterator[Loaded]:
    """Within this block, ``kernel`` built with ``options`` (say, other flags) is registered; on exit
    the libraries registered before come back, with selu_vectorized's launch table as it was."""
    spec = kernel_spec(kernel)
    before = {source: _LOADED.get(source) for source in (spec.cpu_source, spec.cuda_source) if source is not None}
    launches = _launch_configs() if spec.tuned and before.get(spec.cuda_source) is not None else {}
    try:
        yield load(kernel, **options)
    finally:
        for source, library in before.items():
            current = _LOADED.get(source)
            if library is not None and current != library:
                if current is not None:
                    unload(current)
                torch.ops.load_library(str(library.path))
                _LOADED[source] = library
        for (device, dtype), config in launches.items():  # a library loaded anew starts from its default
            torch.ops.selu_course.set_launch_config.default(device, dtype, *config)


def _launch_configs() -> dict:
    """selu_vectorized's launch table, per GPU and dtype, as its CUDA library holds it now."""
    return {(torch.device("cuda", index), dtype): list(torch.ops.selu_course.launch_config.default(
                torch.device("cuda", index), dtype))
            for index in range(torch.cuda.device_count()) for dtype in schemas.FLOAT_DTYPES}


# ----------------------------------------------------------------------------- showing sources

_REGION = re.compile(r"^[ \t]*(?://|#) region: (?P<name>[\w-]+)[ \t]*\n(?P<body>.*?)^[ \t]*(?://|#) endregion[ \t]*$",
                     re.MULTILINE | re.DOTALL)


def _shown_name(filename: str) -> str:
    """``kernels/<filename>``, or the name as given where it has a folder (``"helpers/ops.py"``)."""
    return filename if "/" in filename else f"kernels/{filename}"


def _source_path(filename: str) -> Path:
    return env.REPO_ROOT / _shown_name(filename)


def regions(filename: str) -> dict[str, str]:
    """The ``// region: name`` ... ``// endregion`` (``#`` in Python) parts of a file, by name."""
    return {m["name"]: m["body"] for m in _REGION.finditer(_source_path(filename).read_text())}


def source_region(filename: str, region: str | None = None) -> str:
    """The text of one region of ``kernels/<filename>``, or the whole file."""
    text = _source_path(filename).read_text()
    if region is None:
        return text
    found = regions(filename)
    if region not in found:
        raise KeyError(f"{_shown_name(filename)} has no region {region!r}; its regions: {', '.join(found) or 'none'}")
    return found[region]


def display_code(header: str, text: str, language: str = "cpp") -> None:
    """``text`` as a highlighted code block under ``header`` in Jupyter, printed elsewhere."""
    if env.in_jupyter():
        from IPython.display import Markdown, display

        display(Markdown(f"`{header}`\n```{language}\n{text}\n```"))
    else:
        print(f"// {header}\n{text}")


def show_source(filename: str, *region_names: str) -> None:
    """Display ``kernels/<filename>`` (or ``helpers/ops.py``...), or the named regions of it, with highlighting."""
    parts = [source_region(filename, name) for name in region_names] or [source_region(filename)]
    text = "\n".join(part.rstrip() for part in parts)
    language = "cuda" if filename.endswith((".cu", ".cuh")) else "python" if filename.endswith(".py") else "cpp"
    display_code(_shown_name(filename), text, language)
