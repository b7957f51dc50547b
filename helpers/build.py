"""Build a kernel from ``kernels/`` into an importable extension, in one call.

>>> ext = helpers.build.build("selu_naive")      # doctest: +SKIP
>>> y = ext.selu(x)

What it does, so that a notebook need not:

* picks the backend: the ``.cu`` file when a GPU, a CUDA build of torch and nvcc
  are all present, otherwise the op's CPU implementation (``selu_cpu.cpp``);
* generates the binding file from ``kernels/selu_ops.h`` (the declarations that
  every kernel file also includes) and compiles it with the kernel file through
  ``torch.utils.cpp_extension.load``;
* names the extension after a hash of every source, header and flag, so editing a
  kernel and re-running the cell builds and imports a new module without
  restarting the Jupyter kernel, and an unchanged kernel is not rebuilt;
* builds quietly into the project's git-ignored ``.build/`` folder, with
  ``TORCH_CUDA_ARCH_LIST`` set to the GPU present;
* turns the usual failures (no ninja, no compiler, no nvcc, a CPU-only torch asked
  for CUDA, a lock left by a killed build, a compile or import error) into a
  :class:`BuildError` whose message says what to do.
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

from . import env

NAMESPACE = "selu_course"
DECLARATIONS_HEADER = "selu_ops.h"
CPU_SOURCE = "selu_cpu.cpp"
CPU_FUNCTIONS = ("selu", "selu_out", "selu_missing_minus_one", "selu_expf_minus_one")
EXTENSIONS_DIR = env.BUILD_DIR / "extensions"
STALE_LOCK_SECONDS = 600  # no honest build of these kernels takes 10 minutes


@dataclass(frozen=True)
class KernelSpec:
    """A CUDA kernel file and the functions of ``selu_ops.h`` it defines."""

    cuda_source: str
    functions: tuple[str, ...]


KERNELS = {
    "selu_naive": KernelSpec(
        "selu_naive.cu",
        CPU_FUNCTIONS + ("selu_on_legacy_default_stream", "selu_with_int32_count"),
    ),
    "selu_vectorized": KernelSpec("selu_vectorized.cu", ("selu", "selu_out", "selu_with_config")),
}

# torch adds the C++ standard its headers need (C++20 in recent releases): we add none.
CUDA_FLAGS = ("-O3", "-lineinfo")
CPU_FLAGS = ("-O3",)


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
    if backend == "auto":
        return env.default_backend()
    return backend


def check_toolchain(backend: str) -> None:
    """Raise a :class:`BuildError` naming the first missing piece of the toolchain."""
    from torch.utils.cpp_extension import is_ninja_available

    if not is_ninja_available():
        raise BuildError(
            "ninja is not installed, and torch.utils.cpp_extension needs it to build kernels. "
            "Install it into this environment with `python -m pip install ninja` "
            "(`make lab` and `make test` do this for you), then re-run the cell."
        )
    if env.cxx_path() is None:
        raise BuildError(
            "No C++ compiler found (looked for $CXX, c++ and g++). Install one: "
            "`sudo apt-get install g++` on Debian/Ubuntu, `xcode-select --install` on macOS, "
            "or set CXX to the compiler's path. Then restart the Jupyter kernel."
        )
    if backend != "cuda":
        return
    if torch.version.cuda is None:
        raise BuildError(
            f"CUDA kernels were asked for, but this torch ({torch.__version__}) is a CPU-only build. "
            "Install a CUDA build of torch (see the README), or build for the CPU with backend='cpu'."
        )
    if env.nvcc_path() is None:
        raise BuildError(
            "CUDA kernels were asked for, but nvcc (the CUDA compiler) was not found. Install the "
            f"CUDA toolkit that matches torch's CUDA {torch.version.cuda} and put its bin/ on PATH, "
            "or set CUDA_HOME to its folder; or build for the CPU with backend='cpu'."
        )
    if not torch.cuda.is_available():
        raise BuildError(
            "CUDA kernels were asked for, but torch sees no GPU (torch.cuda.is_available() is False). "
            "Check `nvidia-smi` and CUDA_VISIBLE_DEVICES, or build for the CPU with backend='cpu'."
        )


def check_stale_lock(directory: Path, stale_after_s: float = STALE_LOCK_SECONDS) -> None:
    """Fail fast on a lock file left by a build that was killed.

    torch's builder waits for ``lock`` to disappear, forever; a Jupyter kernel
    interrupted mid-build leaves it behind, and the next build hangs silently.
    """
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
    if lock.exists():
        lock.unlink()
        return True
    return False


def set_cuda_arch_list() -> str | None:
    """Build for the GPU present only (a fat binary for every arch takes far longer)."""
    if "TORCH_CUDA_ARCH_LIST" not in os.environ and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    return os.environ.get("TORCH_CUDA_ARCH_LIST")


def binding_source(functions: tuple[str, ...], declarations: str | None = None) -> str:
    """The C++ file that exposes ``functions`` to Python, as ``load_inline`` would write it."""
    header = declarations if declarations is not None else f'#include "{DECLARATIONS_HEADER}"'
    lines = ["#include <torch/extension.h>", header, "", "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
    lines += [f'  m.def("{f}", &{NAMESPACE}::{f}, "{NAMESPACE}::{f}");' for f in functions]
    lines.append("}")
    return "\n".join(lines) + "\n"


def source_hash(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\0")
    return digest.hexdigest()[:12]


def _headers_text() -> str:
    # Every header in kernels/ goes into the hash: a kernel includes some of them.
    return "".join(p.read_text() for p in sorted(env.KERNELS_DIR.glob("*.h*")))


def build(
    kernel: str,
    *,
    backend: str = "auto",
    functions: tuple[str, ...] | None = None,
    declarations: str | None = None,
    extra_cuda_cflags: tuple[str, ...] = (),
    extra_cflags: tuple[str, ...] = (),
    verbose: bool = False,
) -> ModuleType:
    """Build ``kernels/<kernel>.cu`` (or the CPU implementation) and import it.

    ``functions`` defaults to everything the kernel defines; ``declarations``
    replaces the shared header in the binding file (notebook 02 uses it to show
    what a mismatched declaration does). The returned module carries
    ``backend``, ``extension_name`` and ``source_files`` attributes.
    """
    if kernel not in KERNELS:
        raise BuildError(f"Unknown kernel {kernel!r}; known kernels: {', '.join(KERNELS)}.")
    backend = resolve_backend(backend)
    check_toolchain(backend)
    spec = KERNELS[kernel]
    if backend == "cuda":
        source = env.KERNELS_DIR / spec.cuda_source
        functions = functions or spec.functions
        flags = tuple(CUDA_FLAGS) + tuple(extra_cuda_cflags)
        arch = set_cuda_arch_list() or ""
    else:
        source = env.KERNELS_DIR / CPU_SOURCE
        # One CPU build serves every kernel: they share one CPU implementation.
        functions = functions or CPU_FUNCTIONS
        flags = ()
        arch = ""
    cflags = tuple(CPU_FLAGS) + tuple(extra_cflags)
    bindings = binding_source(tuple(functions), declarations)
    digest = source_hash(
        bindings, source.read_text(), _headers_text(), " ".join(flags + cflags), arch, torch.__version__
    )
    stem = kernel if backend == "cuda" else "selu_cpu"
    name = f"{stem}_{backend}_{digest}"
    directory = build_directory(name)
    check_stale_lock(directory)
    binding_file = directory / "bindings.cpp"
    if not binding_file.exists() or binding_file.read_text() != bindings:
        binding_file.write_text(bindings)

    from torch.utils.cpp_extension import load

    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 2))
    started = time.perf_counter()
    try:
        module = load(
            name=name,
            sources=[str(binding_file), str(source)],
            extra_cflags=list(cflags),
            extra_cuda_cflags=list(flags) if backend == "cuda" else None,
            extra_include_paths=[str(env.KERNELS_DIR)],
            build_directory=str(directory),
            verbose=verbose,
        )
    except ImportError as error:
        raise BuildError(
            f"The extension {name} compiled and linked, but Python could not import it:\n"
            f"    {relative_paths(str(error))}\n"
            "An 'undefined symbol' means a function was declared (in the binding file) with a "
            "different signature or linkage than it was defined with (in the kernel file): make "
            "both include the same declaration."
        ) from None
    except Exception as error:  # torch raises RuntimeError for compiler errors
        raise BuildError(
            f"Building {kernel} for {backend.upper()} failed. The compiler said:\n"
            f"{relative_paths(str(error))}\n"
            "Fix the first error it reports and re-run the cell; the build is cached per source "
            "hash, so only a changed kernel is rebuilt."
        ) from None
    module.backend = backend
    module.extension_name = name
    module.source_files = [relative_paths(str(source))]
    module.build_seconds = time.perf_counter() - started
    return module


def show_source(filename: str, start: str | None = None, end: str | None = None) -> None:
    """Display a file of ``kernels/`` (or the lines from ``start`` to ``end``) with highlighting."""
    text = (env.KERNELS_DIR / filename).read_text()
    if start is not None:
        text = text[text.index(start):]
    if end is not None:
        text = text[: text.index(end) + len(end)]
    language = "cuda" if filename.endswith((".cu", ".cuh")) else "cpp"
    try:
        from IPython.display import Markdown, display

        display(Markdown(f"`kernels/{filename}`\n```{language}\n{text.rstrip()}\n```"))
    except ImportError:
        print(f"// kernels/{filename}\n{text}")
