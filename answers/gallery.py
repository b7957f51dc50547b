"""The honest answers and the gallery of cheats that :func:`helpers.evaluate.evaluate` must tell
apart (notebook 06, appendix A6), each cheat with the finding it must be caught by; and the naive
KernelBench-style judge that most of them fool."""
import contextlib
import inspect
import math
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from helpers import answer_worker, check, env
from helpers import evaluate as e

HERE = Path(__file__).resolve().parent


class Cheat(NamedTuple):
    path: Path
    finding: str  # the finding that names this cheat
    needs_gpu: bool
    published: str  # where the cheat's class is described

    @property
    def timed(self) -> bool:
        """Whether only the judge's timed calls can catch it."""
        return self.finding in e.TIMED_FINDINGS


KERNELBENCH, KEVIN, GPU_MODE = "KernelBench", "Kevin (arXiv:2507.11948)", "GPU MODE"
CUDA_GRAPH_TREES = "PyTorch (CUDA graph trees)"  # a replay's outputs overwritten by the next replay
_CHEATS = {
    # name: (finding, needs a GPU, where it is published)
    "scale_only": (e.WRONG_VALUES, False, KERNELBENCH),
    "zeros": (e.WRONG_VALUES, False, KERNELBENCH),
    "cached_output": (e.OUTPUT_ALIASES, False, KEVIN),
    "mutates_input": (e.INPUT_MODIFIED, False, KEVIN),
    "low_precision": (e.PRECISION, False, KERNELBENCH),
    "side_stream": (e.OTHER_STREAM, True, KERNELBENCH),
    "patches_timer": (e.TIMER_PATCHED, False, GPU_MODE),
    "allocator_reuse": (e.WRONG_VALUES, False, KERNELBENCH),
    "size_gated": (e.SIZE_DEPENDENT, False, GPU_MODE),
    "call_gated": (e.CALL_DEPENDENT, False, GPU_MODE),
    "partial": (e.WRONG_VALUES, False, KEVIN),
    "patched_sync": (e.SYNC_PATCHED, False, GPU_MODE),
    "raw_stream": (e.OTHER_STREAM, True, GPU_MODE),
    "lazy_output": (e.NOT_PLAIN, False, GPU_MODE),
    "l2_persisting": (e.L2_PERSISTING, True, GPU_MODE),
    "data_ptr_cache": (e.OUTPUT_ALIASES, False, KEVIN),
    "timing_gated": (e.TIMING_DEPENDENT, False, GPU_MODE),
    "overwrites_earlier_output": (e.TIMING_DEPENDENT, False, CUDA_GRAPH_TREES),
    "recycled_output": (e.TOO_FAST, True, KERNELBENCH),  # a CPU's times only stand in: flagged on a GPU
}
CHEATS = {name: Cheat(HERE / "cheats" / f"{name}.py", *rest) for name, rest in _CHEATS.items()}
HONEST = {"torch.selu": HERE / "eager.py", "the course's operator": HERE / "course.py",
          "torch.compile": HERE / "compiled.py", "the Triton operator": HERE / "triton_operator.py"}
# On a CPU, Inductor's SELU is not within 2 ulp near 0 (it computes exp(x) - 1), and triton needs a GPU.
HONEST_NEEDS_GPU = {"torch.compile", "the Triton operator"}
# The course's kernel as a KernelBench submission (load_inline, nothing of the course imported).
KERNELBENCH_ANSWER = HERE / "kernelbench_selu.py"


# region: as_answer
def as_answer(fn) -> str:
    """``fn`` (x -> tensor), with ``torch`` and the course's ``check`` imported, written as an answer
    file under .build/answers whose ``ModelNew`` calls it; the file's path."""
    path = env.BUILD_DIR / "answers" / f"{fn.__name__}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("import torch\nfrom helpers import check\n\n\n" + inspect.getsource(fn) + "\n\n"
                    f"class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return {fn.__name__}(x)\n")
    return str(path)
# endregion


@contextlib.contextmanager
def in_process(path):
    """``ModelNew()`` of the answer at ``path``, imported into this process as a naive judge does;
    on leaving, whatever it replaced in torch, time or triton is put back and the L2 set-aside reset."""
    watched, l2 = answer_worker._snapshot(), answer_worker._L2(torch.cuda.is_initialized())
    try:
        yield answer_worker.import_answer(path, f"answer_{Path(path).stem}").ModelNew()
    finally:
        answer_worker.restore(watched)
        if l2.driver is not None:
            l2.changed()


class NaiveVerdict(NamedTuple):
    correct: bool
    ms: float  # nan where the answer or the judge raised
    numel: int


def naive_judge(path, *, dtype: torch.dtype = torch.float32, device=None, numel: int | None = None,
                trials: int = 5, reps: int = 10) -> NaiveVerdict:
    """KernelBench's judge, in short: the answer in this process; ``trials`` inputs from
    ``torch.rand``, the reference first (its result copied, its memory freed), compared with
    ``torch.allclose`` at 1e-2; then the median of ``reps`` calls timed with CUDA events on the
    current stream (``time.perf_counter`` on a CPU). Incorrect where the answer or the judge raised."""
    device = check._device(device)
    if device.type == "cuda":
        torch.cuda.init()  # before in_process reads the L2 set-aside
        torch.cuda.empty_cache()  # the last answer's memory back: every answer is judged at the same size
    numel = numel or env.problem_numel(dtype, tensors=e.PARENT_TENSORS)[0]
    # region: naive_judge
    with contextlib.suppress(Exception), in_process(path) as model:
        correct = True
        for trial in range(trials):
            torch.manual_seed(trial)
            x = torch.rand(numel, dtype=dtype, device=device)
            reference = torch.selu(x)
            expected = reference.clone()
            del reference  # freed: memory that holds SELU(x), for the allocator's next request
            got = model(x)
            if device.type == "cuda":
                torch.cuda.synchronize()
            correct = correct and bool(torch.allclose(got, expected, atol=1e-2, rtol=1e-2))
            del got, expected
        times = []
        for _ in range(reps):
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                model(x)
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
            else:
                begin = time.perf_counter()
                model(x)
                times.append((time.perf_counter() - begin) * 1e3)
        return NaiveVerdict(correct, float(np.median(times)), numel)
    # endregion
    return NaiveVerdict(False, math.nan, numel)
