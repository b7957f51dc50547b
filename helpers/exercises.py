"""The check cells of the notebooks' exercises: each tells a learner whether an answer works.

Every check returns an :class:`Answer` that prints one line: not answered yet, right,
or wrong and why. A check never raises for a wrong answer, so a notebook with the
exercises left open still runs top to bottom.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import bench, check, results
from .compiled import is_elementwise

ROOFLINE_TOLERANCE = 0.02  # 2%: rounding the copy's bandwidth in one's head stays inside it


@dataclass(frozen=True)
class Answer:
    status: str  # "open", "right" or "wrong"
    message: str

    @property
    def right(self) -> bool:
        return self.status == "right"

    def __str__(self) -> str:
        mark = {"open": "…", "right": "✓", "wrong": "✗"}[self.status]
        return f"{mark} {self.message}"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))


def _open(what: str) -> Answer:
    return Answer("open", f"not answered yet: {what}")


def check_roofline_answer(answer_ms: float | None, records: list[dict], dtype="bfloat16") -> Answer:
    """Notebook 00: the fastest time for a SELU of ``dtype`` over the records' copy size,
    from the copy's measured throughput in ``records``."""
    copy = next((r for r in records if r["variant"] == bench.COPY), None)
    if copy is None:
        return Answer("wrong", "no copy in these records to compute the roofline from")
    expected = bench.roofline_ms(copy["numel"], dtype, copy["gbps"])
    if answer_ms is None:
        return _open(f"set answer_ms to the time, in ms, of a {bench.dtype_name(dtype)} SELU of "
                     f"{copy['numel']:,} elements at the copy's {copy['gbps']:.0f} GB/s")
    if abs(answer_ms - expected) <= ROOFLINE_TOLERANCE * expected:
        return Answer("right", f"{answer_ms:.4g} ms: bytes read and written over the copy's bandwidth "
                               f"({expected:.4g} ms)")
    hint = " (half of the float32 bytes per element: 2 read + 2 written)" if abs(answer_ms - 2 * expected) < 0.05 * expected else ""
    return Answer("wrong", f"{answer_ms:.4g} ms is not it{hint}: count the bytes of one read and one write "
                           "per element, then divide by the copy's GB/s")


def check_selu_answer(fn, dtypes=(torch.float32, torch.float64), device=None) -> Answer:
    """Notebook 01: a SELU written from elementary torch operations passes the harness."""
    if fn is None:
        return _open("write my_selu(x) from torch operations (torch.where, torch.expm1, ...), "
                     "without torch.selu or torch.nn.functional")
    probe = torch.randn(64)
    reports = [check.check_unary(fn, dtype=dtype, device=device, trials=1) for dtype in dtypes]
    failed = [r for r in reports if not r.passed]
    if failed:
        return Answer("wrong", "the harness fails it:\n" + str(failed[0]))
    calls = _calls_torch_selu(fn, probe)
    if calls:
        return Answer("wrong", f"it passes, but by calling {calls}: write the formula yourself")
    return Answer("right", f"passes the harness in {', '.join(bench.dtype_name(d) for d in dtypes)}")


def _calls_torch_selu(fn, x: torch.Tensor) -> str | None:
    """The name of the built-in SELU that ``fn`` calls, if it calls one."""
    seen = []

    class Spy(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if name in ("selu", "selu_"):
                seen.append(f"torch.{name}")
            return func(*args, **(kwargs or {}))

    with Spy():
        fn(x)
    return seen[0] if seen else None


def _spans(record: dict) -> tuple[float, float]:
    """A record's 20th and 80th percentile times, or its median twice where it has none."""
    return record.get("q20_ms", record["median_ms"]), record.get("q80_ms", record["median_ms"])


def check_vectors_per_thread_answer(answer: int | None, records: list[dict]) -> Answer:
    """Notebook 03: the vectors per thread that are fastest for float32 in ``records``
    (records of selu_vectorized with launch configurations, one run). An answer whose
    fastest launch's 20-80% band overlaps the fastest one's is right too: the timer
    cannot tell those apart."""
    if answer is None:
        return _open("set answer to the vectors per thread of the fastest one-shot configuration above")
    timed = [r for r in records if r["variant"] == "selu_vectorized" and r.get("config")
             and not r["config"].get("max_blocks_per_sm") and r["dtype"] == "float32"]
    if not timed:
        return Answer("wrong", "no timed launch configurations here to compare with")
    best = min(timed, key=lambda r: r["median_ms"])
    fastest = best["config"]["vectors_per_thread"]
    ties = sorted({r["config"]["vectors_per_thread"] for r in timed if _spans(r)[0] <= _spans(best)[1]})
    if answer in ties:
        pct = results.pct_of_copy(best, records)
        detail = f" ({results.label(best)}, {pct:.1f}% of the copy)" if pct else ""
        tie = "the fastest" if answer == fastest else "its 20-80% band overlaps the fastest's, a tie"
        return Answer("right", f"{answer} vectors per thread: {tie}{detail}")
    return Answer("wrong", f"{answer} is not among the fastest; read the table again (fastest: {fastest})")


# Notebook 03, exercise 3: why the read-only path is refused in place.
READ_ONLY_CHOICES = {
    "a": "ld.global.nc is slower than ld.global when the same kernel also stores to memory",
    "b": "memory read through the read-only path must not be written by any thread for the whole kernel: "
         "the non-coherent cache is not kept in step with stores, so a load may see the old value or the new "
         "one, depending on timing and on the GPU",
    "c": "a thread may not read an address it will later write, on any path",
    "d": "__ldg needs 16-byte alignment, which an in-place call cannot guarantee",
}
READ_ONLY_ANSWER = "b"


def check_read_only_answer(answer: str | None) -> Answer:
    """Notebook 03, exercise 3: which rule forbids ``ld.global.nc`` (``__ldg``) in the in-place call."""
    if answer is None:
        return _open("set answer to one letter: " + "; ".join(f"({k}) {v}" for k, v in READ_ONLY_CHOICES.items()))
    if not isinstance(answer, str) or answer not in READ_ONLY_CHOICES:
        return Answer("wrong", f"{answer!r} is not one of the letters {', '.join(READ_ONLY_CHOICES)}")
    if answer == READ_ONLY_ANSWER:
        return Answer("right", "the read-only data must stay unwritten while the kernel runs; that a test passes "
                               "on one GPU says only that its cache timing hid the race there")
    why = {"a": "speed is not what the rule is about: it is a rule of correctness",
           "c": "plain ld.global then st.global of one address by one thread is ordered and fine: that is "
                "how the in-place instantiation works",
           "d": "alignment is the same for both loads, and the launcher checks it either way"}
    return Answer("wrong", why[answer])


def check_launch_for_size_answer(answer: tuple[int, int] | None, numel: int, config: tuple[int, int, int],
                                 dtype: torch.dtype = torch.float32, sms: int = 132) -> Answer:
    """Notebook 03, exercise 4: the (threads per block, vectors per thread) that the launcher
    gives a tensor of ``numel`` elements when ``config`` is set (``for_size`` in
    kernels/selu_vectorized.cu, mirrored by :func:`helpers.tuning.launch_for_size`)."""
    from . import tuning

    threads, vectors = tuning.launch_for_size(config, numel, dtype, sms)
    if answer is None:
        return _open(f"set answer to (threads per block, vectors per thread) for {numel:,} "
                     f"{bench.dtype_name(dtype)} elements under {config} on {sms} SMs")
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        return Answer("wrong", f"{answer!r} is not a pair: set answer to (threads per block, vectors per thread)")
    if tuple(answer) == (threads, vectors):
        blocks = tuning.blocks_for(numel, dtype, threads, vectors)
        return Answer("right", f"{threads} threads × {vectors} vectors: {blocks:,} blocks, at least "
                               f"{tuning.MIN_BLOCKS_PER_SM} per SM ({tuning.MIN_BLOCKS_PER_SM * sms:,}), or "
                               "nothing left to halve")
    return Answer("wrong", f"{tuple(answer)} is not it: count the blocks (16-byte vectors / (threads × vectors)), "
                           f"and halve vectors, then threads, while there are fewer than "
                           f"{tuning.MIN_BLOCKS_PER_SM} per SM")


def check_backward_answer(fn, dtypes=(torch.float32, torch.float64), device=None, numel: int = 4099) -> Answer:
    """Notebook 04: ``fn(grad, x)``, a SELU backward written from torch operations, within
    the backward's tolerance of the float64 reference on the harness inputs."""
    if fn is None:
        return _open("write my_selu_backward(grad, x) from torch operations (torch.where, torch.exp, ...)")
    for dtype in dtypes:
        x = check.harness_input(numel, dtype, device, seed=21)
        grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(22), dtype=torch.float64)
        grad = grad.to(dtype).to(x.device)
        try:
            with check.poisoned_outputs():
                got = fn(grad, x)
            check.assert_selu_backward(got, "selu_backward", grad, x)
        except AssertionError as error:
            return Answer("wrong", f"in {bench.dtype_name(dtype)}: {str(error).splitlines()[0]}")
        except Exception as error:  # a learner's code may raise anything; say what, do not crash
            return Answer("wrong", f"it raised {type(error).__name__}: {error}")
    return Answer("right", f"within {check.BACKWARD_MAX_ULP[dtypes[0]]} ulp of float64 on the harness inputs, "
                           f"NaN, infinities and signs of zero exact, in {', '.join(bench.dtype_name(d) for d in dtypes)}")


def check_peak_tensors_answer(answer: int | None, memory: dict | None, variant: str = "selu_course::selu_vectorized_") -> Answer:
    """Notebook 04: how many tensors of x's size are alive at the peak of one in-place forward +
    backward, against the measured peak in ``memory`` (a table of :func:`helpers.backward.memory`)."""
    if answer is None:
        return _open("set answer to the number of tensors of x's size alive at the peak of the in-place step")
    if memory is None:
        return Answer("wrong", "there is no memory table here to compare with (it needs a GPU or committed records)")
    peak = next(r["peak_bytes"] for r in memory["rows"] if r["variant"] == variant)
    measured = peak / memory["tensor_bytes"]
    if abs(answer - measured) < 0.25:
        return Answer("right", f"{answer}: the measured peak is {measured:.2f} tensors of x's size")
    return Answer("wrong", f"{answer} is not it: list what is alive when the backward writes the gradient of h "
                           "(x, the incoming gradient, h...)")


def check_head_answer(answer: int | None, dtype: torch.dtype = torch.bfloat16, offset: int = 3) -> Answer:
    """Notebooks 03 and 03b: how many elements the vectorized kernel does one by one before
    ``y[offset:]`` reaches a 16-byte boundary, for a fresh tensor ``y`` of ``dtype``."""
    size = torch.empty((), dtype=dtype).element_size()
    per_vector = 16 // size
    expected = (per_vector - offset % per_vector) % per_vector
    if answer is None:
        return _open(f"set answer to the number of {bench.dtype_name(dtype)} elements before y[{offset}:] "
                     "reaches a 16-byte boundary (a fresh tensor starts on one)")
    if answer == expected:
        return Answer("right", f"{answer}: y[{offset}:] starts {offset * size} bytes in, and "
                               f"{expected} more elements of {size} bytes reach byte {16 * -(-offset * size // 16)}")
    return Answer("wrong", f"{answer} is not it: count the bytes from y's start ({offset} × {size}) up to the next "
                           "multiple of 16, then divide by the element size")


def check_instruction_budget_answer(answer: float | None, copy_ms: float | None, numel: int,
                                    sms: int = 132, schedulers: int = 4, clock_hz: float = 1.98e9) -> Answer:
    """Notebook 03b: the instructions per element at which issuing them takes as long as the copy
    (a kernel above it cannot reach the copy's time however its memory accesses look)."""
    if copy_ms is None:
        return Answer("wrong", "no copy time to work from")
    expected = copy_ms * 1e-3 * sms * schedulers * clock_hz * 32 / numel
    if answer is None:
        return _open(f"set answer to the instructions per element that take {copy_ms:.3f} ms to issue for "
                     f"{numel:,} elements at {sms} SMs × {schedulers} warp instructions per clock × "
                     f"{clock_hz / 1e9:.2f} GHz (32 lanes per warp instruction)")
    if abs(answer - expected) <= 0.03 * expected:
        return Answer("right", f"{answer:.1f} per element: above that, issuing alone takes longer than the copy "
                               f"(exactly {expected:.1f})")
    return Answer("wrong", f"{answer:.1f} is not it: warp instructions per second × 32 lanes × the copy's time, "
                           "divided by the elements")


def check_polynomial_answer(answer: dict | None, degree: int = 5) -> Answer:
    """Notebook 03b, exercise 3: for each 16-bit type, whether the economical SELU with a Taylor
    polynomial of ``degree`` still gives torch.selu's value on every input ("matches") or not
    ("differs"), computed live on all 65,536 inputs (:func:`helpers.every_gpu.polynomial_mismatches`)."""
    from . import every_gpu  # notebook 03b's module, which imports most of the others

    if answer is None:
        return _open(f'set answer to {{"float16": "matches" or "differs", "bfloat16": ...}} for a polynomial '
                     f"of degree {degree}")
    if not isinstance(answer, dict):
        return Answer("wrong", f'{answer!r} is not a dict: {{"float16": "matches" or "differs", "bfloat16": ...}}')
    found = every_gpu.polynomial_mismatches(degree)
    truth = {dtype: "matches" if count == 0 else "differs" for dtype, count in found.items()}
    summary = ", ".join(f"{dtype} {'matches on every input' if count == 0 else f'differs on {count:,} inputs'}"
                        for dtype, count in found.items())
    if {k: answer.get(k) for k in truth} == truth:
        return Answer("right", f"degree {degree}: {summary}")
    return Answer("wrong", "not what trying every input gives: which type keeps more of the polynomial's "
                           "error after rounding (count the mantissa bits of each)?")


def check_custom_op_answer(op, device=None, numel: int = 4099) -> Answer:
    """Notebook 05: ``op(x, shift)`` is a ``torch.library.custom_op`` computing
    ``selu(x) + shift`` with a fake kernel and an autograd rule: ``opcheck`` passes, it
    compiles with ``fullgraph=True``, and its gradient is SELU's."""
    if op is None:
        return _open("define selu_shift with @torch.library.custom_op, then register_fake and register_autograd")
    if not isinstance(op, torch._library.custom_ops.CustomOpDef):
        return Answer("wrong", f"{type(op).__name__} is not a custom operator: decorate the function with "
                               "@torch.library.custom_op('mylib::selu_shift', mutates_args=())")
    device = torch.device(device) if device is not None else torch.device("cpu")
    x = check.harness_input(numel, torch.float64, device, seed=11).clamp(-30, 30)
    # Finite (opcheck compares with NaN != NaN), and away from the jump of the slope at 0.
    x = torch.where(x.isfinite() & (x.abs() >= 1e-3), x, 0.5)
    try:
        failed = [name for name, outcome in torch.library.opcheck(op, (x.clone().requires_grad_(), 0.25)).items()
                  if outcome != "SUCCESS"]
    except Exception as error:  # opcheck raises on the first failure, with what failed
        return Answer("wrong", f"opcheck failed: {str(error).strip().splitlines()[0]}")
    if failed:
        return Answer("wrong", f"opcheck failed: {', '.join(failed)}")
    leaf = x.clone().requires_grad_()
    try:
        y = torch.compile(lambda t: op(t, 0.25), fullgraph=True)(leaf)
        (grad,) = torch.autograd.grad(y.sum(), leaf)
    except Exception as error:
        return Answer("wrong", f"torch.compile(fullgraph=True) failed: {str(error).strip().splitlines()[0]}")
    expected = torch.selu(x) + 0.25
    slope = torch.where(x > 0, check.SELU_SCALE, check.SELU_SCALE * check.SELU_ALPHA * x.exp())
    if not torch.allclose(y.detach(), expected, rtol=1e-12, atol=1e-12):
        return Answer("wrong", "the values are not selu(x) + shift")
    if not torch.allclose(grad, slope, rtol=1e-10, atol=1e-12):
        return Answer("wrong", "the gradient is not SELU's slope: check the backward of register_autograd")
    return Answer("right", "opcheck passes, it compiles into one graph, and its values and gradient are right")


def check_fusion_answer(answer: dict | None, fusion_table: dict | None,
                        case: str = "selu(x) * scale + shift") -> Answer:
    """Notebook 05: the number of elementwise kernels one compiled call of ``case`` launches
    with each SELU, against the profiled table (this GPU's, or the committed one)."""
    if fusion_table is None:
        return Answer("wrong", "no fusion table to check against: run section 4 first")
    measured = {r["selu"]: sum(map(is_elementwise, r["kernels"])) for r in fusion_table["rows"]
                if r["case"] == case and r["compiled"]}
    if answer is None:
        return _open(f"set answer to a dict {{SELU: elementwise kernels per call}} for {sorted(measured)}")
    wrong = {name: answer.get(name) for name, count in measured.items() if answer.get(name) != count}
    if wrong:
        return Answer("wrong", f"not what the profiler counted for {', '.join(sorted(wrong))}: "
                               "which of these can Inductor fuse with the multiply and add, and which are opaque?")
    return Answer("right", f"as the profiler counted on {fusion_table['device']}: "
                           + ", ".join(f"{name} {count}" for name, count in measured.items()))


def check_findings_answer(answer: dict | None, device=None) -> Answer:
    """Notebook 06: for each answer of ``helpers.gallery.SUSPECTS``, the harness's first
    finding (a name such as ``"wrong values"``), or ``"passes"``."""
    from . import evaluate, gallery  # gallery imports the harness, which this module does not need otherwise

    names = ", ".join(gallery.SUSPECTS)
    if answer is None:
        return _open(f"set answer to a dict from each of {names} to the harness's first finding "
                     f"(one of: {', '.join(evaluate.FINDINGS)}) or \"passes\"")
    if set(answer) != set(gallery.SUSPECTS):
        return Answer("wrong", f"name each of {names} once, no more")
    wrong = []
    for name, fn in gallery.SUSPECTS.items():
        verdict = evaluate.evaluate(fn, device=device, trials=2)
        found = verdict.names()[0] if verdict.findings else "passes"
        if answer[name] != found:
            wrong.append(f"{name}: the harness says {found!r}")
    if wrong:
        return Answer("wrong", "; ".join(wrong))
    return Answer("right", "each one as the harness reports it")


def check_int32_index_answer(cuda_source: str | None, kernel: str = "relu_kernel") -> Answer:
    """Notebook 02, exercise 1: ``cuda_source`` computes ``kernel``'s index in 32 bits. Its
    PTX then has no ``mul.wide.u32`` (section 1's 32 × 32 → 64-bit multiply); the answer
    says which 32-bit instruction computes the index and which one widens it to 64 bits
    for the address."""
    from . import env, nvcc

    if cuda_source is None:
        return _open("set your_source to RELU_CUDA with the index line changed to int i = ...")
    if env.nvcc_path() is None:
        return _open("needs nvcc (no GPU needed) to read the PTX")
    try:
        ptx = nvcc.compile_source(cuda_source, "relu_int32").ptx
    except nvcc.NvccError as error:
        return Answer("wrong", f"nvcc refused it: {str(error).strip().splitlines()[0]}")
    bodies = [body for name, body in nvcc.kernels(ptx).items() if kernel in name]
    if not bodies:
        return Answer("wrong", f"no kernel named {kernel} in the PTX")
    opcodes = [line.split()[0] for line in bodies[0].splitlines() if line.strip() and line.strip()[0].isalpha()]
    if "mul.wide.u32" in opcodes:
        return Answer("wrong", "the PTX still has mul.wide.u32: the index is still computed in 64 bits")
    index = [op for op in opcodes if op.startswith(("mad.lo.s32", "mul.lo.s32", "mad.lo.u32", "mul.lo.u32"))]
    widen = [op for op in opcodes if op.startswith(("cvt.s64.s32", "cvt.u64.u32", "mul.wide.s32"))]
    if not index or not widen:
        return Answer("wrong", f"no 32-bit index multiply and widening found; the instructions: {' '.join(opcodes)}")
    return Answer("right", f"the index is computed in 32 bits by {index[0]} and only then widened by {widen[0]} "
                           "for the address: past 2^31 - 1 elements it overflows before it is widened (section 4e)")


def check_relu_op_answer(relu_op, device=None, numel: int = 4099) -> Answer:
    """Notebook 02, exercise 2: ``relu_op`` is a ``torch.library.custom_op`` around the inline
    ReLU with a fake kernel: its values are ReLU's, ``opcheck`` passes, it runs on a meta
    tensor and compiles with ``fullgraph=True``."""
    if relu_op is None:
        return _open("define relu_op with @torch.library.custom_op('mylib::relu', mutates_args=()) "
                     "and give it a fake kernel")
    if not isinstance(relu_op, torch._library.custom_ops.CustomOpDef):
        return Answer("wrong", f"{type(relu_op).__name__} is not a custom operator: decorate a function that "
                               "calls relu_ext.relu with @torch.library.custom_op('mylib::relu', mutates_args=())")
    device = torch.device(device) if device is not None else torch.device("cpu")
    x = torch.randn(numel, device=device)
    try:
        outcome = torch.library.opcheck(relu_op, (x,))
        meta = relu_op(torch.empty(8, 3, device="meta"))
        compiled = torch.compile(lambda t: relu_op(t) * 2, fullgraph=True)(x)
    except Exception as error:  # opcheck raises on the first failure, with what failed
        return Answer("wrong", f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300]}")
    if failed := [name for name, result in outcome.items() if result != "SUCCESS"]:
        return Answer("wrong", f"opcheck failed: {', '.join(failed)}")
    if meta.shape != (8, 3) or not torch.equal(relu_op(x), torch.relu(x)) or not torch.equal(compiled, torch.relu(x) * 2):
        return Answer("wrong", "the fake kernel's shape or the values are not ReLU's")
    return Answer("right", "opcheck passes, a meta tensor gets its shape, and it compiles into one graph; a gradient "
                           "still needs an autograd rule (register_autograd), which notebook 04 adds to SELU")


def check_naive_check_answer(answer: dict | None, device=None) -> Answer:
    """Notebook 02, exercise 4: for each first draft, whether ``check.naive_rand_check``
    passes it (``True``) or not; the check runs both checks live and, when the answer is
    right, names the harness's groups of inputs that catch each draft."""
    from . import ops

    drafts = {"mistake_missing_minus_one": ops.mistake_missing_minus_one,
              "mistake_expf_minus_one": ops.mistake_expf_minus_one, "selu_naive": ops.selu_naive}
    if answer is None:
        return _open("set answer to {name: True if naive_rand_check passes it} for " + ", ".join(drafts))
    passes = {name: check.naive_rand_check(op, device=device) for name, op in drafts.items()}
    if missing := [name for name in drafts if name not in answer]:
        return Answer("wrong", f"no answer for {', '.join(missing)}")
    if wrong := [name for name in drafts if bool(answer[name]) != passes[name]]:
        return Answer("wrong", f"run it and look again at {', '.join(wrong)}: torch.rand draws from [0, 1)")
    caught = {name: sorted({case.group for case in check.check_unary(op, device=device).failing_cases()})
              for name, op in drafts.items()}
    return Answer("right", "; ".join(f"{name}: naive check {'passes' if passes[name] else 'fails'}, the harness "
                                     f"{'fails it on ' + ', '.join(groups) if groups else 'passes it'}"
                                     for name, groups in caught.items()))
