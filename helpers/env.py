"""What this machine has, and what the course will do with it.

Where there is a CUDA GPU *and* a toolchain to build for it, kernels are built from their ``.cu`` files and timed on
the GPU; elsewhere their CPU implementations stand in, and GPU figures are shown from the committed H100 records,
labelled as reference."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import torch
from torch.torch_version import TorchVersion

REPO_ROOT = Path(__file__).resolve().parents[1]
KERNELS_DIR = REPO_ROOT / "kernels"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
BUILD_DIR = REPO_ROOT / ".build"

# The reference problem of the course: one large fp32 activation tensor.
REFERENCE_SHAPE = (4096, 393216)
REFERENCE_NUMEL = REFERENCE_SHAPE[0] * REFERENCE_SHAPE[1]  # 1.61 G elements
REFERENCE_DEVICE_SLUG = "h100"  # the committed records in results/h100
# Peak memory bandwidth in GB/s from the vendor's datasheets, by the name torch gives the
# GPU: the H100 SXM5 80 GB (HBM3) and the H200 SXM (HBM3e). No measured time can beat
# bytes / this; a GPU not listed has no such bound here.
DATASHEET_BANDWIDTH_GBPS = {"NVIDIA H100 80GB HBM3": 3350.0, "NVIDIA H200": 4800.0}
# Element-instructions a second, both GPUs alike: 132 SMs x 4 warp-instructions a cycle x 32 threads x 1.98 GHz (boost)
DATASHEET_ISSUE_PER_S = 132 * 4 * 32 * 1.98e9


def torch_floor() -> str:
    """The oldest torch the course runs on: pyproject.toml's ``torch>=`` dependency, the one place
    that declares it (the oldest torch the course is tested with: the GPU machines')."""
    dependencies = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(d.removeprefix("torch>=") for d in dependencies if d.startswith("torch>="))


def check_torch_version(version: str = torch.__version__) -> None:
    """Refuse, with the reason, a torch older than the floor: the course uses its newer API
    (``torch.library.triton_op``, ``wrap_triton``, ...) and would otherwise fail mid-notebook."""
    if TorchVersion(version) < torch_floor():
        raise ImportError(f"the course needs torch {torch_floor()} or newer (pyproject.toml); this is torch {version}. "
                          "Upgrade torch, or let `make env` install the tested one into a fresh .venv.")


check_torch_version()


def is_ci() -> bool:
    """True under CI (``CI=true``): notebooks then pick small sizes."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


HEADLESS_ENV_VAR = "HELPERS_HEADLESS"


def interactive() -> bool:
    """False in a headless run (CI, ``make reproduce``, ``HELPERS_HEADLESS=1``), where
    nobody watches a progress bar and the executed notebook should not keep it."""
    headless = os.environ.get(HEADLESS_ENV_VAR, "").lower() in ("1", "true", "yes")
    return not (headless or is_ci())


def in_jupyter() -> bool:
    """Whether an IPython front end runs this code (a notebook): rich output is displayed
    there, and printed everywhere else (a script, pytest)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


def has_gpu() -> bool:
    return torch.cuda.is_available()


def nvcc_path() -> str | None:
    """The nvcc that torch's extension builder would use, if any."""
    from torch.utils.cpp_extension import CUDA_HOME

    candidate = Path(CUDA_HOME) / "bin" / "nvcc" if CUDA_HOME else None
    return str(candidate) if candidate and candidate.exists() else shutil.which("nvcc")


def cxx_path() -> str | None:
    return shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")


def ninja_path() -> str | None:
    try:
        import ninja  # the PyPI package ships the binary

        packaged = Path(ninja.BIN_DIR) / "ninja"
    except Exception:
        packaged = None
    return shutil.which("ninja") or (str(packaged) if packaged and packaged.exists() else None)


def can_build_cuda() -> bool:
    """A GPU, a CUDA build of torch and nvcc: the three things a CUDA build needs."""
    return has_gpu() and torch.version.cuda is not None and nvcc_path() is not None


def default_backend() -> str:
    return "cuda" if can_build_cuda() else "cpu"


def default_device() -> torch.device:
    return torch.device("cuda" if has_gpu() else "cpu")


def device_slug(device: torch.device | str | None = None) -> str:
    """A short folder name for a device: ``h100``, ``h200``, ``a100``, ``cpu``..."""
    device = torch.device(device) if device is not None else default_device()
    if device.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(device).lower()
    match = re.search(r"\b([a-z]{1,2}\d{2,4}[a-z]?)\b", name.replace("nvidia", ""))
    return match.group(1) if match else re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "gpu"


def tool_version(path: str | None) -> str | None:
    """``path --version``, reduced to the line that names the version."""
    if not path:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except Exception:
        return None
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    # nvcc's: "Cuda compilation tools, release 13.0, V13.0.88"
    return next((line for line in lines if "release" in line), lines[0] if lines else None)


@dataclass
class Environment:
    torch_version: str
    torch_cuda: str | None
    gpu: str | None
    gpu_memory_gib: float | None
    compute_capability: str | None
    nvcc: str | None
    ninja: str | None
    cxx: str | None
    ci: bool
    notes: list[str] = field(default_factory=list)

    @property
    def backend(self) -> str:
        return "cuda" if (self.gpu and self.torch_cuda and self.nvcc) else "cpu"

    def rows(self) -> list[tuple[str, str]]:
        return [
            ("torch", f"{self.torch_version} (CUDA {self.torch_cuda or 'none: CPU-only build'})"),
            ("GPU", f"{self.gpu} ({self.gpu_memory_gib:.0f} GiB, sm_{self.compute_capability})" if self.gpu
             else "none"),
            *((tool, found or "not found") for tool, found in
              (("nvcc", self.nvcc), ("ninja", self.ninja), ("C++ compiler", self.cxx))),
            ("CI mode (small sizes)", "yes" if self.ci else "no"),
            ("kernels will be built for", self.backend.upper()),
        ]

    def __str__(self) -> str:
        width = max(len(k) for k, _ in self.rows())
        lines = [f"{k:<{width}}  {v}" for k, v in self.rows()]
        lines += [f"- {note}" for note in self.notes]
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        table = "| | |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in self.rows())
        return table + ("\n\n" + "\n".join(f"- {n}" for n in self.notes) if self.notes else "")


@lru_cache(maxsize=1)
def describe() -> Environment:
    """Read the environment once (it does not change while a kernel runs)."""
    gpu = torch.cuda.get_device_name() if has_gpu() else None
    props = torch.cuda.get_device_properties(0) if gpu else None
    nvcc = nvcc_path()
    env = Environment(torch_version=torch.__version__, torch_cuda=torch.version.cuda, gpu=gpu,
                      gpu_memory_gib=props.total_memory / 2**30 if props else None,
                      compute_capability=f"{props.major}{props.minor}" if props else None,
                      nvcc=tool_version(nvcc), ninja=tool_version(ninja_path()), cxx=tool_version(cxx_path()),
                      ci=is_ci())
    if env.backend == "cpu":
        if gpu and not torch.version.cuda:
            env.notes.append("A GPU is present but this torch is a CPU-only build: install a CUDA build of torch.")
        elif gpu and not nvcc:
            env.notes.append("A GPU is present but nvcc was not found: install the CUDA toolkit or set CUDA_HOME.")
        env.notes.append(
            "Kernels run through their CPU implementations; GPU timings are shown from the committed "
            f"{REFERENCE_DEVICE_SLUG.upper()} records, labelled as reference."
        )
        if nvcc:
            env.notes.append("nvcc is here, so the CUDA sources are still compiled to PTX and inspected.")
    return env


def free_gpu_bytes() -> int:
    return torch.cuda.mem_get_info()[0] if has_gpu() else 0


def fits_on_gpu(numel: int, dtype: torch.dtype, tensors: int, headroom: float = 0.9) -> bool:
    """Whether ``tensors`` buffers of ``numel`` elements fit in free GPU memory."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return numel * itemsize * tensors <= headroom * free_gpu_bytes()


def problem_numel(dtype: torch.dtype = torch.float32, tensors: int = 3) -> tuple[int, str]:
    """The size of a notebook's headline measurement, and why: the reference size where ``tensors``
    buffers of it fit on the GPU, else the largest power of two that fits; on a CPU a small size,
    since the point there is that every cell runs, not the number."""
    if not has_gpu():
        numel = 2**16 if is_ci() else 2**22
        return numel, f"{numel:,} elements: no GPU here, so a small size on the CPU"
    if fits_on_gpu(REFERENCE_NUMEL, dtype, tensors):
        return REFERENCE_NUMEL, f"the reference size {REFERENCE_SHAPE}, {REFERENCE_NUMEL:,} elements"
    numel = 2**30
    while numel > 2**12 and not fits_on_gpu(numel, dtype, tensors):
        numel //= 2
    return numel, (
        f"{numel:,} elements: the reference size {REFERENCE_SHAPE} does not fit {tensors} buffers "
        "in this GPU's free memory, so the largest power of two that does"
    )


def sweep_sizes(max_log2: int = 30) -> list[int]:
    """Sizes for throughput-versus-size plots: 2^12 .. 2^max_log2 on a GPU, fewer on CPU."""
    if not has_gpu():
        top = 16 if is_ci() else 22
        return [2**k for k in range(12, top + 1, 2)]
    return [2**k for k in range(12, max_log2 + 1)]
