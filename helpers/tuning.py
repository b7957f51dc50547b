"""Choose ``selu_vectorized``'s launch configuration on the GPU at hand, per dtype, and remember it.

>>> from helpers import build, tuning
>>> build.load("selu_vectorized")        # compiles and registers: the C++ default launch  # doctest: +SKIP
>>> tuning.configure("cuda")             # measures, or reads the cache: the tuned launch  # doctest: +SKIP

Why measure rather than compute. Little's law says how many bytes must be in flight
(bandwidth × latency), and on the H100 and the H200 every candidate below puts more
than that in flight: it cannot tell them apart. What does tell them apart on the
H200, whose memory is 1.43× faster with the same SMs, is how many instructions each
element costs and how long each block lives, and those are measured, not derived.
So the candidates are timed on this GPU, at the reference size where it fits, and
the fastest is set in the operator (``selu_course::set_launch_config``) and cached
under ``.build/tuning/``, keyed by the GPU model and by the build of the kernel:
editing the kernel tunes again.

The candidates: 128, 256 or 512 threads per block; 1, 2, 4 or 8 vectors of 16 bytes
per thread; a one-shot grid (one block per tile) or one wave of resident blocks
that loop over the tiles (``2048 / threads`` per SM, as many as an SM holds).

Near-equals are not told apart by one median each: the candidates differ by a percent
or two, about what a median moves from run to run. On a GPU that runs at its board power
limit (the H200 moving memory at full speed does, appendix A2_power_and_clocks), the SM clock itself moves
from one second to the next, and every kernel's time with it. So the fastest few of the
first pass and the kernel's default launch are timed again, taking turns, :data:`ROUNDS`
times (:func:`helpers.bench.take_turns`), and each round times the copy too: a launch is
judged by its time as a multiple of the copy of its own round, which moves with the clock
as the kernel does. A finalist replaces the default only if its median round beats the
default's best round.
Otherwise the default stays, and the record says so.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from . import bench, build, env, ops, results

CACHE_DIR = env.BUILD_DIR / "tuning"
THREADS = (128, 256, 512)
VECTORS = (1, 2, 4, 8)
THREADS_PER_SM = 2048  # Hopper, and every GPU since Volta except a few consumer parts with 1536
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
REFERENCE_NUMEL = env.REFERENCE_NUMEL
MEMORY_FRACTION = 0.4  # input and output together take at most this much of the free memory
FINALISTS = 4  # the fastest of the first pass, timed again beside the default
ROUNDS = 5
# do_bench's warm-up and repetitions (ms) in the first pass, which only ranks the 24 launches
# for the rounds to decide between the fastest: at the reference size still 4 calls of fp64
# and 12 of fp32 per median, and about 7 s less tuning in all than do_bench's own window.
FIRST_PASS_WINDOW_MS = (10, 40)
# ... and in the rounds, which take turns ROUNDS times: a round's median still holds several
# calls of fp64 at the reference size, and every finalist is judged on its median round, as a
# multiple of its round's copy. With both windows, tuning all four dtypes took about 16 s on
# an H200.
ROUNDS_WINDOW_MS = (10, 50)


def candidates() -> list[tuple[int, int, int]]:
    """``(threads_per_block, vectors_per_thread, max_blocks_per_sm)`` of every configuration tried."""
    return [(threads, vectors, blocks_per_sm)
            for threads in THREADS for vectors in VECTORS for blocks_per_sm in (0, THREADS_PER_SM // threads)]


def tuning_numel(dtype: torch.dtype, free_bytes: int) -> int:
    """The reference size where input and output fit in :data:`MEMORY_FRACTION` of ``free_bytes``;
    otherwise the largest power of two that does."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    budget = int(free_bytes * MEMORY_FRACTION) // (2 * itemsize)
    if budget >= REFERENCE_NUMEL:
        return REFERENCE_NUMEL
    return 1 << max(budget.bit_length() - 1, 20)


def launch_label(config: tuple[int, int, int]) -> str:
    """A launch in words, from (threads, vectors per thread, blocks per SM; 0: one block per tile)."""
    threads, vectors, blocks_per_sm = config
    grid = "one-shot" if blocks_per_sm == 0 else f"{blocks_per_sm}/SM"
    return f"{results.launch_words(threads, vectors)}, {grid}"


def tune(dtype: torch.dtype, device=None, numel: int | None = None) -> dict:
    """Time every candidate on ``dtype`` at ``numel`` elements (default :func:`tuning_numel`);
    the record of the winner and of every time, in ms (medians)."""
    device = torch.device(device) if device is not None else env.default_device()
    if numel is None:
        free, _ = torch.cuda.mem_get_info(device)
        numel = tuning_numel(dtype, free)
    x = bench.random_input(numel, dtype, device, seed=0)
    copy_ms, times, rounds, round_copies = _time_candidates(x)
    del x
    torch.cuda.empty_cache()
    best = choose(rounds, round_copies)
    return {"dtype": bench.dtype_name(dtype), "numel": numel, "copy_ms": copy_ms, "config": list(best),
            "label": launch_label(best), "kept_default": best == ops.default_launch_config(),
            "first_pass_window_ms": list(FIRST_PASS_WINDOW_MS), "rounds_window_ms": list(ROUNDS_WINDOW_MS),
            "times_ms": {_key(c): ms for c, ms in times.items()},
            "rounds_ms": {_key(c): ms for c, ms in rounds.items()}, "rounds_copy_ms": round_copies}


def _time_candidates(x: torch.Tensor) -> tuple[float, dict, dict, list[float]]:
    """The copy's time on ``x``, every candidate's, the finalists' in every round, and the
    copy's in every round (ms)."""
    copy = bench.roofline_copy("forward", x)

    def launch(config):
        return lambda: ops.selu_vectorized_with_config(x, *config)

    first_copy_ms = bench.time_fn(copy, device=x.device).median_ms
    times = {config: bench.time_fn(launch(config), device=x.device, window_ms=FIRST_PASS_WINDOW_MS).median_ms
             for config in candidates()}
    finalists = list(dict.fromkeys([*sorted(times, key=times.get)[:FINALISTS], ops.default_launch_config()]))
    # Each round times the copy first, then every finalist.
    rounds = bench.take_turns({bench.COPY: copy, **{config: launch(config) for config in finalists}}, ROUNDS,
                              device=x.device, window_ms=ROUNDS_WINDOW_MS)
    round_copies = rounds.pop(bench.COPY)
    return first_copy_ms, times, rounds, round_copies


def _key(config: tuple[int, int, int]) -> str:
    return ",".join(map(str, config))


def choose(rounds: dict[tuple[int, int, int], list[float]], round_copies: list[float] | None = None,
           default: tuple[int, int, int] | None = None) -> tuple[int, int, int]:
    """The launch to keep, from each finalist's times in every round and the copy's time in the same rounds: each time
    is taken as a multiple of its round's copy (without copies, as it is). The finalist with the lowest median
    multiple, if that median beats the best round of ``default`` (the kernel's default launch where None); otherwise
    ``default`` (a difference within the spread of the rounds is not a finding)."""
    default = default or ops.default_launch_config()
    copies = round_copies or [1.0] * len(next(iter(rounds.values())))
    if any(len(times) != len(copies) for times in rounds.values()):
        raise ValueError(f"tuning.choose: every finalist needs one time per round, and the copy {len(copies)}; "
                         f"got {sorted({len(t) for t in rounds.values()})} times per finalist")
    shares = {config: [ms / copy for ms, copy in zip(times, copies)] for config, times in rounds.items()}
    best = min(shares, key=lambda config: statistics.median(shares[config]))
    return best if statistics.median(shares[best]) < min(shares[default]) else default


def cache_path(device, library_name: str) -> Path:
    """Where the tuned configurations for this GPU model and this build of the kernel live."""
    return CACHE_DIR / f"{env.device_slug(device)}-{library_name}.json"


def _cuda_library_name() -> str:
    library = build.loaded_library("selu_vectorized.cu")
    if library is None:
        raise RuntimeError("tuning: the CUDA kernel of selu_vectorized is not loaded; call "
                           "helpers.build.load('selu_vectorized') on a machine with a GPU first.")
    return library.name


def configure(device=None, *, retune: bool = False, verbose: bool = True) -> dict[torch.dtype, tuple[int, int, int]]:
    """Set ``selu_vectorized``'s launch configuration on ``device`` for every dtype: from the cache
    where this GPU model and this build were tuned before, otherwise by :func:`tune` (about 15 s
    on an H100 or H200), then cached. Nothing to do (an empty dict) on a machine without a GPU."""
    device = torch.device(device) if device is not None else env.default_device()
    if device.type != "cuda":
        return {}
    path = cache_path(device, _cuda_library_name())
    cached = {} if retune or not path.exists() else json.loads(path.read_text())
    start, tuned_now = time.perf_counter(), []
    for dtype in DTYPES:
        name = bench.dtype_name(dtype)
        if name not in cached:
            cached[name] = tune(dtype, device)
            tuned_now.append(name)
    if tuned_now:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"gpu": torch.cuda.get_device_name(device), **cached}, indent=1))
    chosen = {}
    for dtype in DTYPES:
        config = tuple(cached[bench.dtype_name(dtype)]["config"])
        ops.set_launch_config(device, dtype, *config)
        chosen[dtype] = config
    if verbose:
        how = f"tuned now ({time.perf_counter() - start:.0f} s)" if tuned_now else "from the cache"
        print(f"selu_vectorized launch on {torch.cuda.get_device_name(device)}, {how}: "
              + "; ".join(f"{bench.dtype_name(d)} {launch_label(c)}" for d, c in chosen.items()))
    return chosen


def cached(device=None) -> dict | None:
    """The tuning records of ``device`` for the loaded build (every candidate's time), if tuned."""
    device = torch.device(device) if device is not None else env.default_device()
    path = cache_path(device, _cuda_library_name())
    return json.loads(path.read_text()) if path.exists() else None
