"""Notebook 04's figures, checks, measurements and training run, each one call from a cell.

>>> from helpers import backward
>>> figure, errors = backward.derivative_two_ways()   # both formulas against float64   # doctest: +SKIP
>>> backward.correctness_table()                       # every dtype, against float64 and torch  # doctest: +SKIP
>>> speed = backward.speed()                           # measured on a GPU, the committed H100 run elsewhere  # doctest: +SKIP

Everything here runs the course's operators (:mod:`helpers.ops`) on the device at hand:
the CPU kernels on a CPU, the CUDA kernels on a GPU. Checks and the training run work
anywhere. Timings and peak memory need a GPU: there they are measured and saved to
``results/<device>/``; elsewhere the committed H100 records stand in, labelled as such.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from torch.autograd.gradcheck import GradcheckError

from . import bench, check, env, ops, plot, results
from .bench import COPY, dtype_name
from .report import Markdown, _table

LAMBDA = check.SELU_SCALE
LAMBDA_ALPHA = check.SELU_SCALE * check.SELU_ALPHA
HALF_TYPES = (torch.float16, torch.bfloat16)
# A few gradient values for the exhaustive 16-bit checks: ordinary, negative, small, large.
EXHAUSTIVE_GRADS = (1.0, -0.75, 3.5e-3, 1e4)

# The variants of the speed section: torch's own backward (aten::elu_backward, what
# torch.selu's and torch.selu_'s autograd nodes call), from the input and from the output,
# and the course's two backward operators; for a whole step, torch autograd on torch.selu
# against autograd on the course's forward operator.
BACKWARD_VARIANTS = ("torch_eager", "torch_eager_from_output", "selu_backward", "selu_backward_from_output")
STEP_VARIANTS = ("torch_autograd", "selu_course_autograd")
# Tensors alive while the backward is timed: x, y, grad, the result, and the copy's second input.
BACKWARD_TENSORS = 5

MEMORY_FILE = "04_memory.json"
IN_PLACE_COMPILE_FILE = "04_in_place_compile.json"
TRAINING_FIGURE = "04_training"

# The goals of notebook 04's speed section (reference size, one run per device).
FP32_VS_EAGER = 1.01
FP32_VS_COPY = 1.02
HALF_SPEEDUP = 1.2


def _device(device) -> torch.device:
    return torch.device(device) if device is not None else env.default_device()


def elu_backward(grad: torch.Tensor, saved: torch.Tensor, *, from_output: bool = False) -> torch.Tensor:
    """torch's own SELU backward: ``aten::elu_backward`` with SELU's constants, from the input
    ``x`` (what ``torch.selu`` saves) or from the output ``y`` (what ``torch.selu_`` saves)."""
    return torch.ops.aten.elu_backward(grad, check.SELU_ALPHA, check.SELU_SCALE, 1.0, from_output, saved)


# --------------------------------------------------------------------------- 1. the derivative


def derivative_two_ways(dtype: torch.dtype = torch.float32, device=None, low: float = -10.0,
                        high: float = 3.0) -> tuple[Figure, dict]:
    """The derivative from the input (``selu_backward``) and from the output
    (``selu_backward_from_output``) against float64, and each one's error in ulps of ``dtype``.

    Returns the figure and the largest error of each formula in ulps, over the whole range
    and over x ≥ −1.
    """
    device = _device(device)
    x = torch.linspace(low, high, 4001, dtype=torch.float64).to(dtype).to(device)
    ones = torch.ones_like(x)
    from_input = ops.selu_backward(ones, x)
    from_output = ops.selu_backward_from_output(ones, ops.selu_vectorized(x))
    reference = check.selu_backward_reference(ones.cpu(), x.cpu())
    xs = x.cpu().double()
    errors_of = {"from the input x": check.ulp_distance(from_input.cpu(), reference),
                 "from the output y": check.ulp_distance(from_output.cpu(), reference)}

    fig, (ax_d, ax_e) = plt.subplots(1, 2, figsize=(10.5, 3.6), layout="constrained")
    ax_d.plot(xs, reference, color="black", lw=3, alpha=0.3, label="float64 reference")
    ax_d.plot(xs, from_input.cpu().double(), "-", lw=1, label="selu_backward (from x)")
    ax_d.plot(xs, from_output.cpu().double(), "--", lw=1, label="selu_backward_from_output (from y)")
    ax_d.annotate(f"λα = {LAMBDA_ALPHA:.4f}", (0, LAMBDA_ALPHA), (-6, 1.55), arrowprops={"arrowstyle": "->"})
    ax_d.annotate(f"λ = {LAMBDA:.4f}", (0, LAMBDA), (0.6, 0.7), arrowprops={"arrowstyle": "->"})
    ax_d.set_title(f"d selu / dx, {dtype_name(dtype)}: a jump at 0")
    ax_d.set_xlabel("x")
    ax_d.legend(fontsize=8, loc="center left")
    for name, errors in errors_of.items():
        ax_e.plot(xs, errors.double().clamp(min=0.5), lw=1, label=name)
    ax_e.set_yscale("log")
    ax_e.set_title(f"error against float64, in ulps of {dtype_name(dtype)} (0 drawn at 0.5)")
    ax_e.set_xlabel("x")
    ax_e.legend(fontsize=8)
    for ax in (ax_d, ax_e):
        ax.axvline(0, color="grey", lw=0.5)
    plt.close(fig)
    near = xs >= -1
    summary = {name: {"max_ulp": int(e.max()), "max_ulp_from_-1": int(e[near].max())} for name, e in errors_of.items()}
    return fig, summary


def jump_at_zero(device=None) -> Markdown:
    """The derivative on both sides of 0 and at both zeros, in float32: torch's autograd and
    the two backward operators. Left of 0 it tends to λα, right of 0 it is λ."""
    device = _device(device)
    xs = torch.tensor([-1e-3, -1e-30, -0.0, 0.0, 1e-30, 1e-3], dtype=torch.float32, device=device)
    ones = torch.ones_like(xs)
    leaf = xs.clone().requires_grad_()
    (torch_grad,) = torch.autograd.grad(torch.selu(leaf), leaf, ones)
    from_x = ops.selu_backward(ones, xs)
    from_y = ops.selu_backward_from_output(ones, ops.selu_vectorized(xs))
    rows = [[f"{x:+.0e}" if x != 0 else ("−0.0" if math.copysign(1, x) < 0 else "+0.0"), f"{a:.7f}", f"{b:.7f}",
             f"{c:.7f}"] for x, a, b, c in zip(xs.tolist(), torch_grad.tolist(), from_x.tolist(), from_y.tolist())]
    lines = _table(["x", "torch autograd", "selu_backward (x)", "selu_backward_from_output (y)"],
                   ["---:", "---:", "---:", "---:"], rows)
    return Markdown(f"*{dtype_name(torch.float32)}, on {bench.device_name(device)}; λα = {LAMBDA_ALPHA:.7f}, "
                    f"λ = {LAMBDA:.7f}*\n\n" + "\n".join(lines))


def gradcheck_across_zero(eps: float = 1e-6) -> Markdown:
    """What a finite-difference check sees at the jump: at x = 0 (and within ``eps`` of it)
    the central difference averages the two slopes and disagrees with the analytic one."""
    xs = torch.tensor([-0.5, -eps / 2, 0.0, eps / 2, 0.5], dtype=torch.float64)
    analytic = ops.selu_backward(torch.ones_like(xs), xs)
    numeric = (ops.selu_vectorized(xs + eps) - ops.selu_vectorized(xs - eps)) / (2 * eps)
    rows = [[f"{x:+.1e}", f"{a:.6f}", f"{n:.6f}", "agree" if abs(a - n) < 1e-4 else "DISAGREE"]
            for x, a, n in zip(xs.tolist(), analytic.tolist(), numeric.tolist())]
    lines = _table(["x", "analytic (selu_backward)", f"central difference, eps = {eps:g}", ""],
                   ["---:", "---:", "---:", "---"], rows)
    outcomes = []
    for label, sample in (("on these five points", xs), ("on the points with |x| > 1e-3", xs[xs.abs() > 1e-3])):
        outcomes.append(f"torch.autograd.gradcheck {label}: {_gradcheck_outcome(sample)}")
    return Markdown("\n".join(lines) + "\n\n" + "\n\n".join(outcomes))


def _gradcheck_outcome(x: torch.Tensor) -> str:
    try:
        torch.autograd.gradcheck(ops.selu_vectorized, (x.clone().requires_grad_(),))
        return "passed"
    except GradcheckError as error:
        return f"fails ({str(error).strip().splitlines()[0]})"
    except RuntimeError as error:  # the forward's rule is not enabled
        return f"error: {str(error).strip().splitlines()[0]}"


# --------------------------------------------------------------------------- 2. correctness


def _backward_inputs(numel: int, dtype: torch.dtype, device, seed: int):
    x = check.harness_input(numel, dtype, device, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    grad = torch.randn(x.shape, generator=g, dtype=torch.float64).to(dtype).to(x.device)
    return x, grad


def _saved(op: str, x: torch.Tensor) -> torch.Tensor:
    return x if op == "selu_backward" else torch.selu(x)


def _verdict(actual, op, grad, saved, x) -> str:
    try:
        check.assert_selu_backward(actual, op, grad, saved, x)
        return "yes"
    except AssertionError as error:
        return f"NO: {str(error).splitlines()[0][:120]}"


def correctness_table(device=None, numel: int = 1 << 18, seed: int | None = None) -> Markdown:
    """Both backward operators in every dtype, on fresh harness inputs (both signs, special
    values, large negatives, denormals), outputs poisoned first, against the float64
    reference and against torch's own backward. NaN inputs are counted apart."""
    device = _device(device)
    seed = check._time_seed() if seed is None else seed
    rows = []
    for dtype in check.DTYPES:
        x, grad = _backward_inputs(numel, dtype, device, seed)
        for op in ops.BACKWARD_OPS:
            saved = _saved(op, x)
            with check.poisoned_outputs():
                ours = ops.overload(op)(grad, saved)
            theirs = elu_backward(grad, saved, from_output=op != "selu_backward")
            kept = ~check.backward_underflow(op, saved).to(x.device)
            reference = check.BACKWARD_REFERENCES[op](grad.cpu(), saved.cpu()).to(dtype).to(x.device)
            numbers = ~x.isnan()
            to_reference = check.agreement(ours[kept & numbers], reference[kept & numbers])
            to_torch = check.agreement(ours[numbers], theirs[numbers])
            rows.append([dtype_name(dtype), op, f"{numel:,}", _verdict(ours, op, grad, saved, x),
                         f"{to_reference.max_ulp} (≤ {check.BACKWARD_MAX_ULP[dtype]})",
                         f"{int((~kept).sum()):,}", f"{to_torch.identical_pct:.4g}%", str(to_torch.max_ulp)])
    lines = _table(["dtype", "operator", "inputs", "within tolerance", "max ulp vs float64", "eˣ underflows",
                    "identical to torch", "max ulp vs torch"], ["---", "---", "---:", "---", "---:", "---:", "---:",
                                                               "---:"], rows)
    return Markdown(f"*on {bench.device_name(device)}, seed {seed}; NaN inputs are compared in "
                    "`nan_inputs()`*\n\n" + "\n".join(lines))


def nan_inputs(device=None) -> Markdown:
    """What each backward gives for a NaN input: torch's takes the ``x > 0`` branch's
    ``grad·λ`` (its test is ``x <= 0``, false for NaN); the course's gives NaN, as its forward does."""
    device = _device(device)
    rows = []
    for dtype in check.DTYPES:
        nan = torch.full((1,), float("nan"), dtype=dtype, device=device)
        grad = torch.ones_like(nan)
        rows.append([dtype_name(dtype), f"{elu_backward(grad, nan).item():.6g}",
                     f"{elu_backward(grad, nan, from_output=True).item():.6g}",
                     f"{ops.selu_backward(grad, nan).item():.6g}",
                     f"{ops.selu_backward_from_output(grad, nan).item():.6g}"])
    lines = _table(["dtype", "torch (from x)", "torch (from y)", "selu_backward", "selu_backward_from_output"],
                   ["---", "---:", "---:", "---:", "---:"], rows)
    return Markdown(f"*grad = 1 at a NaN input, on {bench.device_name(device)}*\n\n" + "\n".join(lines))


def exhaustive_16_bit(device=None) -> Markdown:
    """Every float16 and bfloat16 input (65,536 bit patterns) × :data:`EXHAUSTIVE_GRADS`, both
    operators: within tolerance of float64, and how often identical to torch's own backward."""
    device = _device(device)
    rows = []
    for dtype in HALF_TYPES:
        x = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype).to(device)
        numbers = ~x.isnan()
        for op in ops.BACKWARD_OPS:
            saved = _saved(op, x)
            verdicts, identical, worst = [], 0, 0
            for value in EXHAUSTIVE_GRADS:
                grad = torch.full_like(x, value)
                with check.poisoned_outputs():
                    ours = ops.overload(op)(grad, saved)
                verdicts.append(_verdict(ours, op, grad, saved, x))
                match = check.agreement(ours[numbers], elu_backward(grad, saved, from_output=op != "selu_backward")[numbers])
                identical += match.identical
                worst = max(worst, match.max_ulp)
            failed = [v for v in verdicts if v != "yes"]
            checked = x.numel() * len(EXHAUSTIVE_GRADS)
            rows.append([dtype_name(dtype), op, f"{checked:,}", failed[0] if failed else "yes",
                         f"{100 * identical / (int(numbers.sum()) * len(EXHAUSTIVE_GRADS)):.4g}%", str(worst)])
    lines = _table(["dtype", "operator", "inputs × grads", "within tolerance", "identical to torch (non-NaN)",
                    "max ulp vs torch"], ["---", "---", "---:", "---", "---:", "---:"], rows)
    grads = ", ".join(f"{g:g}" for g in EXHAUSTIVE_GRADS)
    return Markdown(f"*all 65,536 bit patterns × grad ∈ {{{grads}}}, on {bench.device_name(device)}*\n\n"
                    + "\n".join(lines))


# --------------------------------------------------------------------------- 3. autograd


def _away_from_zero(numel: int, device, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(numel, generator=g, dtype=torch.float64) * 2
    return x[x.abs() > 1e-3].to(device)  # the derivative jumps at 0: finite differences must not straddle it


def _in_place_of_a_product(x: torch.Tensor) -> torch.Tensor:
    h = x * 1.5  # a non-leaf: an in-place op may overwrite it
    return ops.selu_vectorized_(h)


def _outcome(run: Callable[[], object]) -> str:
    try:
        result = run()
        if isinstance(result, dict):  # opcheck: {test name: "SUCCESS" or what went wrong}
            failed = {name: outcome for name, outcome in result.items() if outcome != "SUCCESS"}
            return f"FAILED: {failed}" if failed else "passed: " + ", ".join(result)
        return "passed" if result in (True, None) else f"returned {result!r}"
    except Exception as error:  # each row reports its own failure
        return f"FAILED: {type(error).__name__}: {str(error).strip().splitlines()[0][:160]}"


def autograd_checks(device=None, seed: int = 0) -> Markdown:
    """gradcheck, gradgradcheck and opcheck of the forward operators (the in-place one
    included) and of the backward operators, in float64 on the device at hand.
    Needs :func:`helpers.ops.enable_backward`."""
    device = _device(device)
    x = _away_from_zero(48, device, seed)
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64).to(device)
    leaf = lambda t: t.clone().requires_grad_()  # noqa: E731
    gradcheck, gradgradcheck = torch.autograd.gradcheck, torch.autograd.gradgradcheck
    opcheck = torch.library.opcheck
    checks = {
        "gradcheck selu_vectorized": lambda: gradcheck(ops.selu_vectorized, (leaf(x),)),
        "gradgradcheck selu_vectorized (double backward)": lambda: gradgradcheck(ops.selu_vectorized, (leaf(x),)),
        "gradcheck selu_vectorized_ (in place, on x·1.5)": lambda: gradcheck(_in_place_of_a_product, (leaf(x),)),
        "gradgradcheck selu_vectorized_": lambda: gradgradcheck(_in_place_of_a_product, (leaf(x),)),
        "gradcheck selu_backward (grad and x)": lambda: gradcheck(ops.selu_backward, (leaf(grad), leaf(x))),
        "gradgradcheck selu_backward_from_output": lambda: gradgradcheck(
            ops.selu_backward_from_output, (leaf(grad), leaf(torch.selu(x)))),
    }
    for name in ("selu_vectorized", "selu_vectorized_", "selu_backward"):
        args = (leaf(grad), leaf(x)) if name == "selu_backward" else (leaf(x),)
        if name == "selu_vectorized_":
            args = (x.clone(),)  # opcheck mutates its input: a tensor that needs no grad
        checks[f"opcheck {name}"] = lambda name=name, args=args: opcheck(ops.overload(name), args)
    rows = [[name, _outcome(run)] for name, run in checks.items()]
    return Markdown(f"*float64, {x.numel()} points with |x| > 1e-3, on {bench.device_name(device)}*\n\n"
                    + "\n".join(_table(["check", "outcome"], ["---", "---"], rows)))


# --------------------------------------------------------------------------- 4. in place


def _error_of(run: Callable[[], object]) -> str:
    try:
        run()
        return "no error"
    except RuntimeError as error:
        return f"RuntimeError: {str(error).strip().splitlines()[0]}"


def leaf_errors(device=None) -> Markdown:
    """In place on a leaf that requires grad: torch's error and the course's, side by side,
    and the same call on a non-leaf, which both accept."""
    device = _device(device)

    def leaf():
        return torch.randn(4, device=device, requires_grad=True)

    rows = [
        ["torch.selu_(leaf)", _error_of(lambda: torch.selu_(leaf()))],
        ["ops.selu_vectorized_(leaf)", _error_of(lambda: ops.selu_vectorized_(leaf()))],
        ["torch.selu_(leaf * 2)", _error_of(lambda: torch.selu_(leaf() * 2))],
        ["ops.selu_vectorized_(leaf * 2)", _error_of(lambda: ops.selu_vectorized_(leaf() * 2))],
    ]
    return Markdown("\n".join(_table(["call", "outcome"], ["---", "---"], rows)))


def in_place_network(device=None, seed: int = 0) -> Markdown:
    """A small network with an in-place SELU after each hidden layer: the course's in-place
    operator against ``torch.nn.SELU(inplace=True)``, same seed; the loss and every parameter's
    gradient compared bit for bit and in ulps."""
    device = _device(device)
    results_of = {}
    for name, activation in (("torch.nn.SELU(inplace=True)", lambda: torch.nn.SELU(inplace=True)),
                             ("CourseSELU(inplace=True)", lambda: CourseSELU(inplace=True))):
        torch.manual_seed(seed)
        model = SelfNormalizingNet(activation, inputs=16, width=64, depth=4, outputs=1, dropout=0.0).to(device)
        x = torch.randn(256, 16, generator=torch.Generator().manual_seed(seed + 1)).to(device)
        loss = model(x).square().mean()
        loss.backward()
        results_of[name] = (loss.detach(), [p.grad for p in model.parameters()])
    (loss_t, grads_t), (loss_c, grads_c) = results_of.values()
    same = [torch.equal(a, b) for a, b in zip(grads_t, grads_c)]
    # Relative to each gradient's largest element: an ulp count would blow up on elements near 0.
    worst = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(grads_c, grads_t))
    return Markdown(
        f"*on {bench.device_name(device)}*: loss {loss_t.item():.9g} (torch) and {loss_c.item():.9g} (course), "
        f"{'identical' if torch.equal(loss_t, loss_c) else 'different'}; "
        f"{sum(same)} of {len(same)} parameter gradients identical bit for bit; the largest difference is "
        f"{worst:.2g} of its gradient's largest element.")


def _step_in_place(selu_in_place):
    def step(x: torch.Tensor) -> torch.Tensor:
        h = x * 2.0  # a non-leaf, as inside a network
        selu_in_place(h)
        return h

    return step


IN_PLACE_VARIANTS = {"torch.selu_": torch.selu_, "selu_course::selu_vectorized_": ops.selu_vectorized_}


def compile_check(device=None, numel: int = 4099) -> Markdown:
    """The in-place step ``h = x * 2; selu_(h)`` under ``torch.compile(fullgraph=True)``: how
    many graphs and graph breaks dynamo sees, and whether the compiled forward and gradient
    match eager's bit for bit. Runs on any device."""
    device = _device(device)
    x = check.harness_input(numel, torch.float32, device, seed=1)
    x = torch.where(x.isfinite(), x, 0).clamp(-40, 40)
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(2)).to(device)
    rows = []
    for name, in_place in IN_PLACE_VARIANTS.items():
        step = _step_in_place(in_place)
        torch._dynamo.reset()
        explained = torch._dynamo.explain(step)(x.clone().requires_grad_())
        leaf = x.clone().requires_grad_()
        eager = step(leaf)
        (eager_grad,) = torch.autograd.grad(eager, leaf, grad)
        compiled = torch.compile(step, fullgraph=True)(leaf)
        (compiled_grad,) = torch.autograd.grad(compiled, leaf, grad)
        rows.append([name, str(explained.graph_count), str(explained.graph_break_count),
                     "identical" if torch.equal(eager, compiled) else str(check.agreement(compiled, eager)),
                     "identical" if torch.equal(eager_grad, compiled_grad) else
                     str(check.agreement(compiled_grad, eager_grad))])
    torch._dynamo.reset()
    lines = _table(["in-place op", "graphs", "graph breaks", "compiled forward vs eager", "compiled gradient vs eager"],
                   ["---", "---:", "---:", "---", "---"], rows)
    return Markdown(f"*float32, {numel:,} elements, on {bench.device_name(device)}*\n\n" + "\n".join(lines))


def measure_in_place_compile(device=None, numel: int | None = None) -> dict:
    """Time and peak memory of one forward + backward of the in-place step, eager and compiled,
    with torch's ``selu_`` and the course's; a table (dict) to save as JSON."""
    device = _device(device)
    if numel is None:
        numel, _ = env.problem_numel(torch.float32, tensors=6)
    x = bench.random_input(numel, torch.float32, device, seed=3)
    grad = bench.random_input(numel, torch.float32, device, seed=4)
    rows = []
    for name, in_place in IN_PLACE_VARIANTS.items():
        for compiled in (False, True):
            step = _step_in_place(in_place)
            if compiled:
                torch._dynamo.reset()
                step = torch.compile(step, fullgraph=True)
            leaf = x.detach().requires_grad_()

            def one_step(step=step, leaf=leaf):
                return torch.autograd.grad(step(leaf), leaf, grad)

            one_step()  # compiles, outside the timing
            timing = bench.time_fn(one_step, device=device)
            peak = _peak_bytes(one_step, device)
            rows.append({"variant": name, "compiled": compiled, "median_ms": timing.median_ms,
                         "q20_ms": timing.q20_ms, "q80_ms": timing.q80_ms, "method": timing.method,
                         "peak_bytes": peak})
            del step, one_step
            bench._release_memory(device)
    torch._dynamo.reset()
    return {"device": bench.device_name(device), "device_slug": env.device_slug(device), "numel": numel,
            "dtype": "float32", "torch": torch.__version__, "rows": rows, "tensor_bytes": numel * 4}


def _peak_bytes(run: Callable[[], object], device: torch.device) -> int | None:
    """Peak allocated bytes while ``run()`` runs, on a GPU (None on a CPU: no allocator stats)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    result = run()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    del result
    return peak


# --------------------------------------------------------------------------- 5. speed


def backward_variants(grad: torch.Tensor, y: torch.Tensor | None = None) -> dict:
    """The backward variants, each a function of the tensor :func:`helpers.bench.measure` hands
    it (``x``): torch's and the course's from ``x``, and, where ``y`` is given, from the output.
    Those ignore ``x`` and read ``y``, which has ``x``'s size, dtype and signs, so each variant
    moves the same bytes."""
    variants = {"torch_eager": lambda t: elu_backward(grad, t)}
    if y is not None:
        variants["torch_eager_from_output"] = lambda t: elu_backward(grad, y, from_output=True)
    variants["selu_backward"] = lambda t: ops.selu_backward(grad, t)
    if y is not None:
        variants["selu_backward_from_output"] = lambda t: ops.selu_backward_from_output(grad, y)
    return variants


def step_variants(grad: torch.Tensor) -> dict:
    """One forward + backward of a leaf (``torch.autograd.grad``, which does not accumulate
    into ``.grad``): torch.selu under torch autograd, and the course's forward operator under
    the autograd rule notebook 04 registers."""
    def step(selu):
        def run(x):
            leaf = x.detach().requires_grad_()
            return torch.autograd.grad(selu(leaf), leaf, grad)
        return run

    return {"torch_autograd": step(torch.selu), "selu_course_autograd": step(ops.selu_vectorized)}


def measure_speed(dtypes=check.DTYPES, device=None, repeats: int = 3) -> list[dict]:
    """The backward and a whole step in each dtype at its problem size (the reference size where
    :data:`BACKWARD_TENSORS` tensors fit), ``repeats`` runs back to back, each with its copy."""
    device = _device(device)
    records = []
    for dtype in dtypes:
        numel, why = env.problem_numel(dtype, tensors=BACKWARD_TENSORS)
        print(f"{dtype_name(dtype)}: {why}")
        x = bench.random_input(numel, dtype, device, seed=5)
        grad = bench.random_input(numel, dtype, device, seed=6)
        y = torch.selu(x)
        records += bench.measure_repeated(backward_variants(grad, y), numel, x=x, repeats=repeats, op="backward")
        del y
        bench._release_memory(device)
        records += bench.measure_repeated(step_variants(grad), numel, x=x, repeats=repeats, op="step")
        del x, grad
        bench._release_memory(device)
    return records


def speed() -> results.Records:
    """:func:`measure_speed` on this GPU (saved to ``results/<device>/``), or the committed H100 records."""
    measured = results.here_or_reference(measure_speed, variants=BACKWARD_VARIANTS + STEP_VARIANTS, op=None,
                                         numel=None)
    kept = [r for r in measured if r["op"] in ("backward", "step")]
    return results.Records(kept, source=measured.source, measured=measured.measured)


def speed_table(records) -> Markdown:
    """Per dtype: each backward and step variant's median, its throughput as a % of its copy
    (three tensors for the backward, five for the step), and its time against torch's."""
    rows = []
    for dtype in dict.fromkeys(r["dtype"] for r in records):
        for op, baseline in (("backward", "torch_eager"), ("step", "torch_autograd")):
            base = results.find(records, baseline, dtype=dtype, op=op)
            for r in [r for r in records if r["dtype"] == dtype and r["op"] == op]:
                pct = results.pct_of_copy(r, records)
                versus = "" if base is None or r["variant"] == COPY else f"{r['median_ms'] / base['median_ms']:.3f}×"
                rows.append([dtype, op, f"**{COPY}**" if r["variant"] == COPY else r["variant"], f"{r['numel']:,}",
                             f"{r['median_ms']:.4g}", f"{bench.spread_ms(r):.2g}",
                             "" if pct is None else f"{pct:.1f}%", versus])
    lines = _table(["dtype", "op", "variant", "elements", "median ms", "spread ms", "% of copy", "time vs torch"],
                   ["---", "---", "---", "---:", "---:", "---:", "---:", "---:"], rows)
    return Markdown(f"*{getattr(records, 'source', '')}*\n\n" + "\n".join(lines))


def goal_report(records, memory: dict | None = None) -> Markdown:
    """Notebook 04's goals, each HIT or MISS with the numbers it was decided on."""
    lines = []

    def goal(text, measured, ok):
        lines.append(f"| {text} | {measured} | {'HIT' if ok else 'MISS'} |")

    for dtype in ("float32", "float16", "bfloat16", "float64"):
        ours, eager, copy = (results.find(records, name, dtype=dtype, op="backward")
                             for name in ("selu_backward", "torch_eager", COPY))
        if ours is None or eager is None:
            continue
        ratio = ours["median_ms"] / eager["median_ms"]
        if dtype == "float32":
            goal(f"fp32 backward ≤ {FP32_VS_EAGER} × torch eager's", f"{ratio:.3f}×", ratio <= FP32_VS_EAGER)
            to_copy = ours["median_ms"] / copy["median_ms"]
            goal(f"fp32 backward ≤ {FP32_VS_COPY} × the three-tensor copy", f"{to_copy:.3f}×", to_copy <= FP32_VS_COPY)
        elif dtype in ("float16", "bfloat16"):
            speedup = eager["median_ms"] / ours["median_ms"]
            # No kernel can beat the copy of its bytes: eager's time over the copy's bounds the gain.
            possible = "" if copy is None else f" (at most {eager['median_ms'] / copy['median_ms']:.3f}× possible here)"
            goal(f"{dtype} backward ≥ {HALF_SPEEDUP}× faster than torch eager's", f"{speedup:.3f}×{possible}",
                 speedup >= HALF_SPEEDUP)
    if memory:
        peaks = {(r["variant"]): r["peak_bytes"] for r in memory["rows"]}
        ours, theirs = peaks.get("selu_course::selu_vectorized_"), peaks.get("torch.selu_")
        if ours and theirs:
            goal("peak memory, in place: course ≤ torch.selu_", f"{ours / 1e9:.1f} GB vs {theirs / 1e9:.1f} GB",
                 ours <= theirs)
    header = ["goal", "measured", ""]
    text = "\n".join(_table(header, ["---", "---:", "---"], []) + lines)
    return Markdown(f"*{getattr(records, 'source', '')}*\n\n{text}")


# --------------------------------------------------------------------------- 6. memory


MEMORY_VARIANTS = {
    "torch.selu": torch.selu,
    "torch.selu_": torch.selu_,
    "selu_course::selu_vectorized": ops.selu_vectorized,
    "selu_course::selu_vectorized_": ops.selu_vectorized_,
}


def measure_memory(device=None, dtype: torch.dtype = torch.float32, numel: int | None = None) -> dict:
    """Peak GPU memory of one forward + backward of SELU on a non-leaf ``h = x * 2``, with
    ``x`` a leaf and the incoming gradient allocated beforehand; a table (dict) to save as JSON.

    Out of place, ``h``, ``y``, the gradient of ``h`` and that of ``x`` are alive beside ``x``
    and the incoming gradient: six tensors. In place, ``y`` is ``h``: five.
    """
    device = _device(device)
    if device.type != "cuda":
        raise RuntimeError("peak memory is read from the CUDA caching allocator: this needs a GPU")
    if numel is None:
        numel, _ = env.problem_numel(dtype, tensors=6)
    rows = []
    for name, selu in MEMORY_VARIANTS.items():
        bench._release_memory(device)
        x = bench.random_input(numel, dtype, device, seed=7).requires_grad_()
        grad = bench.random_input(numel, dtype, device, seed=8)

        def step(x=x, grad=grad, selu=selu):
            h = x * 2.0
            y = selu(h)
            y.backward(grad)

        peak = _peak_bytes(step, device)
        rows.append({"variant": name, "peak_bytes": peak})
        del x, grad, step
    bench._release_memory(device)
    return {"device": bench.device_name(device), "device_slug": env.device_slug(device), "numel": numel,
            "dtype": dtype_name(dtype), "torch": torch.__version__, "tensor_bytes": numel * dtype.itemsize,
            "rows": rows}


def memory() -> tuple[dict | None, Markdown]:
    """:func:`measure_memory` on this GPU (saved), or the committed H100 table; and the table to show."""
    table, source = results.here_or_reference_table(measure_memory, MEMORY_FILE)
    if table is None:
        return None, Markdown(f"*{source}*")
    size = table["tensor_bytes"]
    rows = [[r["variant"], f"{r['peak_bytes'] / 1e9:.1f}", f"{r['peak_bytes'] / size:.2f}"] for r in table["rows"]]
    lines = _table(["forward + backward of SELU on h = x * 2", "peak GB", "in tensors of x's size"],
                   ["---", "---:", "---:"], rows)
    return table, Markdown(f"*{source}; {table['dtype']}, {table['numel']:,} elements "
                           f"({size / 1e9:.2f} GB a tensor)*\n\n" + "\n".join(lines))


def in_place_compile() -> tuple[dict | None, Markdown]:
    """:func:`measure_in_place_compile` on this GPU (saved), or the committed H100 table."""
    table, source = results.here_or_reference_table(measure_in_place_compile, IN_PLACE_COMPILE_FILE)
    if table is None:
        return None, Markdown(f"*{source}*")
    eager = {r["variant"]: r["median_ms"] for r in table["rows"] if not r["compiled"]}
    rows = [[r["variant"], "torch.compile" if r["compiled"] else "eager", f"{r['median_ms']:.4g}",
             f"{r['median_ms'] / eager[r['variant']]:.3f}×",
             "" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 1e9:.1f}"] for r in table["rows"]]
    lines = _table(["in-place op", "mode", "median ms", "vs its eager", "peak GB"], ["---", "---", "---:", "---:",
                                                                                      "---:"], rows)
    return table, Markdown(f"*{source}; one forward + backward of h = x * 2, selu_(h) in float32, "
                           f"{table['numel']:,} elements*\n\n" + "\n".join(lines))


# --------------------------------------------------------------------------- 7. training


class CourseSELU(torch.nn.Module):
    """``torch.nn.SELU`` on the course's operators: ``selu_vectorized``, or in place ``selu_vectorized_``."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.selu_vectorized_(x) if self.inplace else ops.selu_vectorized(x)


class SelfNormalizingNet(torch.nn.Sequential):
    """Klambauer et al.'s self-normalizing network: linear layers with LeCun-normal weights
    (std 1/√fan_in) and zero biases, SELU, and AlphaDropout, which keeps SELU's mean and variance."""

    def __init__(self, activation: Callable[[], torch.nn.Module], inputs: int, width: int, depth: int,
                 outputs: int, dropout: float = 0.05):
        layers: list[torch.nn.Module] = []
        for i in range(depth):
            layers += [torch.nn.Linear(inputs if i == 0 else width, width), activation()]
            if dropout:
                layers.append(torch.nn.AlphaDropout(dropout))
        layers.append(torch.nn.Linear(width, outputs))
        super().__init__(*layers)
        for layer in self:
            if isinstance(layer, torch.nn.Linear):
                torch.nn.init.normal_(layer.weight, std=layer.in_features ** -0.5)
                torch.nn.init.zeros_(layer.bias)


def hopper_image(size: int = 64) -> torch.Tensor:
    """Grace Hopper's portrait from matplotlib's sample data (it ships with matplotlib, so
    nothing is downloaded), in grey, ``size`` × ``size``, values in [0, 1]."""
    import matplotlib.cbook as cbook

    with cbook.get_sample_data("grace_hopper.jpg") as file:
        image = torch.from_numpy(plt.imread(file).copy()).float() / 255
    grey = image[..., :3].mul(torch.tensor([0.299, 0.587, 0.114])).sum(-1)
    side = min(grey.shape)
    grey = grey[:side, (grey.shape[1] - side) // 2:][:, :side]  # a centred square
    return torch.nn.functional.interpolate(grey[None, None], size=(size, size), mode="area")[0, 0]


def image_task(size: int = 64, features: int = 128, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The pixels of :func:`hopper_image` as a regression data set: each pixel's (row, column)
    through fixed random Fourier features (so that a small MLP can learn detail) -> its
    standardised grey value."""
    grey = hopper_image(size)
    axis = torch.linspace(-1, 1, size)
    coords = torch.stack(torch.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
    frequencies = torch.randn(2, features // 2, generator=torch.Generator().manual_seed(seed)) * 8
    angles = 2 * math.pi * coords @ frequencies
    inputs = torch.cat([angles.sin(), angles.cos()], 1)
    target = grey.reshape(-1, 1)
    return inputs, (target - target.mean()) / target.std()


def train(activation: Callable[[], torch.nn.Module], steps: int, device=None, seed: int = 0, size: int = 64,
          batch: int = 1024) -> dict:
    """Train a :class:`SelfNormalizingNet` on :func:`image_task` with Adam, minibatches of
    ``batch`` pixels; every RNG draw (init, batches, dropout) from ``seed``. Returns the loss of
    every step and the final prediction of the whole image."""
    device = _device(device)
    inputs, target = (t.to(device) for t in image_task(size))
    torch.manual_seed(seed)
    model = SelfNormalizingNet(activation, inputs.shape[1], width=256, depth=6, outputs=1).to(device)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = torch.Generator(device=device).manual_seed(seed)
    losses = []
    for _ in range(steps):
        chosen = torch.randint(0, inputs.shape[0], (batch,), device=device, generator=batches)
        loss = torch.nn.functional.mse_loss(model(inputs[chosen]), target[chosen])
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        losses.append(loss.detach())
    model.eval()
    with torch.no_grad():
        picture = model(inputs).reshape(size, size).cpu()
    return {"losses": torch.stack(losses).cpu(), "picture": picture, "target": target.reshape(size, size).cpu()}


def training_steps() -> int:
    """A few hundred steps; fewer under CI, where the point is that the cells run."""
    return 40 if env.is_ci() else 300


def training_run(steps: int | None = None, device=None, seed: int = 0) -> dict:
    """:func:`train` twice from one seed, with ``torch.nn.SELU`` and with :class:`CourseSELU`,
    and how far apart the two loss curves are (bitwise, and the largest relative difference)."""
    device = _device(device)
    steps = training_steps() if steps is None else steps
    runs = {"torch.nn.SELU": train(torch.nn.SELU, steps, device, seed),
            "CourseSELU (selu_course operators)": train(CourseSELU, steps, device, seed)}
    a, b = (run["losses"] for run in runs.values())
    first_difference = next((i for i, (p, q) in enumerate(zip(a.tolist(), b.tolist())) if p != q), None)
    return {"device": bench.device_name(device), "device_slug": env.device_slug(device), "steps": steps,
            "seed": seed, "runs": runs, "identical": bool(torch.equal(a, b)), "first_different_step": first_difference,
            "max_relative_difference": float(((a - b).abs() / a.abs()).max())}


def training_summary(run: dict) -> str:
    """One line: whether the two loss curves are identical, and if not, from which step and by how much."""
    head = f"{run['steps']} steps on {run['device']}, seed {run['seed']}: "
    if run["identical"]:
        return head + "the two loss curves are identical bit for bit at every step."
    return head + (f"the loss curves first differ at step {run['first_different_step']}; the largest relative "
                   f"difference over the run is {run['max_relative_difference']:.2e}.")


def training_figure(run: dict, save: bool = True) -> Figure:
    """The two loss curves, their relative difference, and the picture each network learned;
    saved (PNG and its data as JSON) as ``results_dir()/<device>/figures/04_training``."""
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.3), layout="constrained",
                             gridspec_kw={"width_ratios": [2.2, 2.2, 1, 1]})
    ax_loss, ax_diff, ax_target, ax_learned = axes
    names = list(run["runs"])
    for name, style in zip(names, ("-", "--")):
        ax_loss.plot(run["runs"][name]["losses"], style, lw=1, label=name)
    ax_loss.set_yscale("log")
    ax_loss.set(title="training loss (MSE)", xlabel="step")
    ax_loss.legend(fontsize=8)
    a, b = (run["runs"][name]["losses"] for name in names)
    ax_diff.plot(((a - b).abs() / a.abs()).clamp(min=1e-12))
    ax_diff.set_yscale("log")
    ax_diff.set(title="relative difference (0 drawn at 1e-12)", xlabel="step")
    if run["identical"]:
        ax_diff.text(0.5, 0.5, "0 at every step:\nidentical bit for bit", transform=ax_diff.transAxes, ha="center")
    ax_target.imshow(run["runs"][names[0]]["target"], cmap="gray")
    ax_target.set_title("the image", fontsize=9)
    ax_learned.imshow(run["runs"][names[1]]["picture"], cmap="gray")
    ax_learned.set_title("learned (course op)", fontsize=9)
    for ax in (ax_target, ax_learned):
        ax.axis("off")
    fig.suptitle(f"self-normalizing net, {run['device']}", fontsize=10)
    plt.close(fig)
    if save:
        data = {"device": run["device"], "steps": run["steps"], "seed": run["seed"], "identical": run["identical"],
                "first_different_step": run["first_different_step"],
                "max_relative_difference": run["max_relative_difference"],
                "losses": {name: [float(f"{v:.9g}") for v in r["losses"].tolist()] for name, r in run["runs"].items()}}
        plot.save_figure(fig, data, results.figure_path(TRAINING_FIGURE, slug=run["device_slug"]))
    return fig
