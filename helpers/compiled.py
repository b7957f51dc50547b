"""Notebook 05: the course's operator inside compiled models, under CUDA graphs, beside a
Triton peer, and where a hand-written elementwise kernel pays.

Each section measures on a GPU and saves what it measured under ``results/<gpu>/``;
on a machine without one it shows the committed H100 table, and says so. The
checks of correctness (graphs and breaks, outputs and gradients against eager)
run on every device.
"""
from __future__ import annotations

import contextlib
import statistics
import warnings
from collections.abc import Callable

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from . import backward, bench, check, env, ops, plot, results, triton_selu
from .report import Markdown, _table

MODEL_FILE = "05_model.json"
GRAPHS_FILE = "05_cuda_graphs.json"
FUSION_FILE = "05_fusion.json"
DISPATCH_FILE = "05_dispatch.json"
# The Triton comparison's records, in a table of their own rather than in benchmarks.json:
# their variants and sizes are those of notebook 03's headline and notebook 04's backward,
# whose records they would otherwise replace.
TRITON_FILE = "05_triton.json"
DISPATCH_FIGURE = "05_dispatch"

# The network of notebook 04, without dropout (whose random masks eager and compiled
# code draw differently), at a size where the activations are a few percent of the work.
NET_INPUTS, NET_WIDTH, NET_DEPTH = 128, 256, 4
SPEED_BATCH, SPEED_WIDTH, SPEED_DEPTH = 16384, 2048, 4

# Dispatch overhead: per-call time from 2^10 to 2^20 elements, and the goal at 2^12. Four
# sizes draw the flat part and where the kernel starts to show; 0.1 s of calls per row and
# round, in five blocks of 20 ms, is thousands of calls, and the five rounds show how much
# the host drifts.
DISPATCH_SIZES = (2**10, 2**12, 2**16, 2**20)
DISPATCH_GOAL_NUMEL = 2**12
DISPATCH_GOAL = 1.2
DISPATCH_MIN_RUN_S = 0.1
DISPATCH_BLOCK_S = 0.02


def _device(device) -> torch.device:
    return torch.device(device) if device is not None else env.default_device()


def _agreement_cell(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> str:
    """"identical" when every pair is equal bit for bit; else the largest difference over all
    pairs, relative to the largest magnitude of its expected tensor (ulps would overstate the
    differences of values near 0, which a matrix product's rounding leaves everywhere)."""
    if all(torch.equal(a, e) for a, e in zip(actual, expected)):
        return "identical"
    worst = max(float((a.double() - e.double()).abs().max() / e.double().abs().max().clamp(min=1e-300))
                for a, e in zip(actual, expected))
    return f"differs: max |Δ| = {worst:.1e} × max |value|"


# --------------------------------------------------------------------------- 1. torch.compile

ACTIVATIONS = {"torch.nn.SELU": torch.nn.SELU, "CourseSELU": backward.CourseSELU}
# The control: the same network with no activation, so that what compiling does to the
# linear layers alone shows apart from what it does to each SELU.
CONTROL = {"torch.nn.Identity (no activation)": torch.nn.Identity}


def activations() -> dict[str, Callable[[], torch.nn.Module]]:
    """The network's activation modules: torch's, the course's CUDA/CPU operator, and the
    Triton operator where triton is here."""
    found = dict(ACTIVATIONS)
    if triton_selu.register():
        found["TritonSELU"] = TritonSELU
    return found


class TritonSELU(torch.nn.Module):
    """``torch.nn.SELU`` on the Triton operator ``selu_course::selu_triton``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return triton_selu.selu_triton(x)


def network(activation: Callable[[], torch.nn.Module], device=None, seed: int = 0, *, inputs: int = NET_INPUTS,
            width: int = NET_WIDTH, depth: int = NET_DEPTH, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """Notebook 04's self-normalizing network with ``activation``, from ``seed``, without dropout."""
    torch.manual_seed(seed)
    net = backward.SelfNormalizingNet(activation, inputs, width, depth, outputs=1, dropout=0.0)
    return net.to(device=_device(device), dtype=dtype)


def _forward_and_gradients(model: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor) -> list[torch.Tensor]:
    """The output, the input's gradient and every parameter's gradient, for ``grad`` as the
    output's gradient."""
    leaf = x.detach().requires_grad_()
    out = model(leaf)
    grads = torch.autograd.grad(out, [leaf, *model.parameters()], grad)
    return [out.detach(), *grads]


def compile_table(device=None, batch: int = 1000, seed: int = 0) -> Markdown:
    """Each activation's network under ``torch._dynamo.explain`` (graphs, graph breaks, and how
    many times the course's operators appear in the traced graph) and under
    ``torch.compile(fullgraph=True)``: output and gradients against the same network eager."""
    device = _device(device)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, NET_INPUTS, generator=generator).to(device)
    rows = []
    for name, activation in {**CONTROL, **activations()}.items():
        model = network(activation, device, seed)
        grad = torch.randn(batch, 1, generator=torch.Generator().manual_seed(seed + 1)).to(device)
        torch._dynamo.reset()
        explained = torch._dynamo.explain(model)(x)
        traced = "\n".join(graph.code for graph in explained.graphs)
        with _quiet():
            eager = _forward_and_gradients(model, x, grad)
            compiled = _forward_and_gradients(torch.compile(model, fullgraph=True), x, grad)
        rows.append([name, explained.graph_count, explained.graph_break_count, traced.count("selu_course"),
                     _agreement_cell(compiled[:1], eager[:1]), _agreement_cell(compiled[1:], eager[1:])])
    torch._dynamo.reset()
    lines = _table(["activation", "graphs", "graph breaks", "selu_course calls in the graph",
                    "compiled output vs eager", "compiled gradients vs eager (input and every parameter)"],
                   ["---", "---:", "---:", "---:", "---", "---"], rows)
    return Markdown(f"*float32, a batch of {batch} × {NET_INPUTS}, {NET_DEPTH} hidden layers of {NET_WIDTH}, "
                    f"on {bench.device_name(device)}*\n\n" + "\n".join(lines))


def compiled_selu_near_zero(device=None, numel: int = 1 << 16) -> str:
    """``torch.compile(torch.selu)`` against eager ``torch.selu`` on small negative inputs, where
    computing eˣ − 1 as ``exp(x) - 1`` rather than ``expm1(x)`` loses digits; in one line."""
    device = _device(device)
    x = -torch.logspace(-7, -1, numel, device=device)
    torch._dynamo.reset()
    got = torch.compile(lambda t: torch.selu(t), fullgraph=True)(x)
    torch._dynamo.reset()
    expected = check.selu_reference(x.double())
    relative = ((got.double() - expected).abs() / expected.abs()).max()
    eager = ((torch.selu(x).double() - expected).abs() / expected.abs()).max()
    return (f"float32 x in [-0.1, -1e-7] on {bench.device_name(device)}: largest relative error against float64, "
            f"compiled torch.selu {float(relative):.1e}, eager torch.selu {float(eager):.1e}")


def _training_step(forward: Callable[[torch.Tensor], torch.Tensor], parameters: list[torch.Tensor]):
    """One forward of ``forward`` (a model, compiled or not) and the gradients of ``parameters``.
    The backward is asked for outside the compiled code, as a training loop does: dynamo
    compiles the model's forward and, through AOTAutograd, its backward."""
    def step(x, grad):
        return torch.autograd.grad(forward(x), parameters, grad)
    return step


# Warnings that are advice, not findings, and would land in a notebook's stderr:
QUIET = (
    # Inductor suggests TF32 for float32 matrix products; the comparisons here are with eager
    # float32, which TF32's 10-bit mantissa would change by design.
    ".*TensorFloat32.*",
    # The autograd engine's thread makes its first cuBLAS call before it has a CUDA context;
    # torch then sets the primary context, as it says, and goes on.
    ".*Attempting to run cuBLAS, but there was no current CUDA context.*",
    # torch.profiler on a profile without a schedule: one cycle is all that is recorded here.
    ".*Profiler clears events at the end of each cycle.*",
)


@contextlib.contextmanager
def _quiet():
    with warnings.catch_warnings():
        for message in QUIET:
            warnings.filterwarnings("ignore", message=message)
        yield


def measure_model_speed(device=None, dtype: torch.dtype = torch.bfloat16, batch: int = SPEED_BATCH) -> dict:
    """One forward and backward of the network (width ``SPEED_WIDTH``), eager and compiled,
    with each activation: a table (dict) to save as JSON."""
    device = _device(device)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, SPEED_WIDTH, generator=generator).to(device, dtype)
    grad = torch.randn(batch, 1, generator=generator).to(device, dtype)
    rows = []
    for name, activation in activations().items():
        for compiled in (False, True):
            model = network(activation, device, inputs=SPEED_WIDTH, width=SPEED_WIDTH, depth=SPEED_DEPTH, dtype=dtype)
            torch._dynamo.reset()
            forward = torch.compile(model, fullgraph=True) if compiled else model
            step = _training_step(forward, list(model.parameters()))
            with _quiet():
                step(x, grad)  # compiles outside the timing
            timing = bench.time_fn(lambda step=step: step(x, grad), device=device)
            rows.append({"activation": name, "compiled": compiled, "median_ms": timing.median_ms,
                         "q20_ms": timing.q20_ms, "q80_ms": timing.q80_ms, "method": timing.method})
            del step, model
    torch._dynamo.reset()
    return {"device": bench.device_name(device), "device_slug": env.device_slug(device), "torch": torch.__version__,
            "dtype": bench.dtype_name(dtype), "batch": batch, "width": SPEED_WIDTH, "depth": SPEED_DEPTH, "rows": rows}


def model_speed() -> tuple[dict | None, Markdown]:
    """:func:`measure_model_speed` on this GPU (saved), or the committed H100 table; and the table."""
    table, source = results.here_or_reference_table(measure_model_speed, MODEL_FILE)
    if table is None:
        return None, Markdown(f"*{source}*")
    baseline = {r["compiled"]: r["median_ms"] for r in table["rows"] if r["activation"] == "torch.nn.SELU"}
    rows = [[r["activation"], "torch.compile" if r["compiled"] else "eager", f"{r['median_ms']:.4g}",
             f"{r['median_ms'] / baseline[r['compiled']]:.3f}×"] for r in table["rows"]]
    lines = _table(["activation", "mode", "median ms", "vs torch.nn.SELU in the same mode"],
                   ["---", "---", "---:", "---:"], rows)
    return table, Markdown(f"*{source}; one forward + backward, {table['dtype']}, a batch of {table['batch']:,}, "
                           f"{table['depth']} layers of {table['width']}*\n\n" + "\n".join(lines))


# --------------------------------------------------------------------------- 2. CUDA graphs

GRAPH_REPLAYS = 3


def _fresh(shape, dtype, device, seed: int) -> torch.Tensor:
    return check.harness_input(int(torch.Size(shape).numel()), dtype, device, seed=seed).reshape(shape)


def graph_replays(op: Callable[[torch.Tensor], torch.Tensor], dtype: torch.dtype, device,
                  numel: int = 1 << 20, replays: int = GRAPH_REPLAYS) -> list[str]:
    """Capture ``y = op(x)`` into a ``torch.cuda.CUDAGraph`` once, then, for ``replays`` fresh
    inputs copied into the captured ``x``, replay it and compare ``y`` with ``torch.selu`` of
    the new input. The capture runs on a side stream: a kernel that launched on any stream
    but the current one would not be captured (or would fail the capture)."""
    static_x = _fresh((numel,), dtype, device, seed=100)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # warm up outside the capture, as torch's docs do
        op(static_x)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = op(static_x)
    outcomes = []
    for replay in range(replays):
        x = _fresh((numel,), dtype, device, seed=101 + replay)
        static_x.copy_(x)
        static_y.fill_(float("nan"))  # poisoned: a replay that writes nothing cannot pass
        graph.replay()
        match = check.agreement(static_y, torch.selu(x))
        outcomes.append("identical" if match.identical == match.numel else str(match))
    return outcomes


def reduce_overhead_steps(activation: Callable[[], torch.nn.Module], device, steps: int = GRAPH_REPLAYS,
                          batch: int = 1000) -> list[str]:
    """The network's forward and backward under ``torch.compile(mode="reduce-overhead")`` (CUDA
    graphs of the compiled code) for ``steps`` fresh inputs, each against eager."""
    model = network(activation, device)
    parameters = list(model.parameters())
    step = _training_step(model, parameters)
    compiled = _training_step(torch.compile(model, mode="reduce-overhead", fullgraph=True), parameters)
    outcomes = []
    for i in range(steps):
        generator = torch.Generator().manual_seed(200 + i)
        x = torch.randn(batch, NET_INPUTS, generator=generator).to(device)
        grad = torch.randn(batch, 1, generator=generator).to(device)
        # Clone what a replay returns: the next replay overwrites those buffers.
        with _quiet():
            got = [g.clone() for g in compiled(x, grad)]
            outcomes.append(_agreement_cell(got, list(step(x, grad))))
    return outcomes


def measure_cuda_graphs(device=None) -> dict:
    """Both CUDA-graph checks on this GPU: a table (dict) to save as JSON."""
    device = _device(device)
    rows = []
    for dtype in check.DTYPES:
        for replay, outcome in enumerate(graph_replays(ops.selu_vectorized, dtype, device)):
            rows.append({"how": "torch.cuda.CUDAGraph, selu_vectorized", "dtype": bench.dtype_name(dtype),
                         "call": replay + 1, "outcome": outcome})
    for name, activation in {**CONTROL, **activations()}.items():
        torch._dynamo.reset()
        for i, outcome in enumerate(reduce_overhead_steps(activation, device)):
            rows.append({"how": f"torch.compile(mode='reduce-overhead'), network with {name}, forward + backward",
                         "dtype": "float32", "call": i + 1, "outcome": outcome})
    torch._dynamo.reset()
    return {"device": bench.device_name(device), "device_slug": env.device_slug(device), "torch": torch.__version__,
            "rows": rows}


def cuda_graphs() -> tuple[dict | None, Markdown]:
    """:func:`measure_cuda_graphs` on this GPU (saved), or the committed H100 table; and the table."""
    table, source = results.here_or_reference_table(measure_cuda_graphs, GRAPHS_FILE)
    if table is None:
        return None, Markdown(f"*{source}*")
    grouped: dict[tuple[str, str], list[str]] = {}
    for r in table["rows"]:
        grouped.setdefault((r["how"], r["dtype"]), []).append(r["outcome"])
    rows = [[how, dtype, len(outcomes), "identical every time" if set(outcomes) == {"identical"} else
             "; ".join(outcomes)] for (how, dtype), outcomes in grouped.items()]
    lines = _table(["what is replayed", "dtype", "fresh inputs", "result against eager"], ["---", "---", "---:", "---"],
                   rows)
    return table, Markdown(f"*{source}*\n\n" + "\n".join(lines))


# --------------------------------------------------------------------------- 3. the Triton peer

def triton_checks(device=None) -> Markdown:
    """The Triton operator checked as the CUDA one is: ``opcheck`` in every dtype, the
    harness against float64, and every 16-bit input against ``torch.selu``."""
    device = _device(device)
    if not triton_selu.register():
        return Markdown("*triton is not installed here (it comes with CUDA builds of torch): "
                        "these checks run on a GPU machine, and `tests/test_triton_selu.py` holds them*")
    rows = []
    for dtype in check.DTYPES:
        x = check.harness_input(4099, dtype, device, seed=3)
        x = torch.where(x.isfinite(), x, 0).clamp(-40, 40)  # opcheck compares results with NaN != NaN
        opcheck = torch.library.opcheck(torch.ops.selu_course.selu_triton.default, (x.requires_grad_(),),
                                        raise_exception=False)
        failed = [k for k, v in opcheck.items() if v != "SUCCESS"]
        report = check.check_unary(triton_selu.selu_triton, dtype=dtype, device=device, trials=2, seed=0)
        every = "" if dtype.itemsize != 2 else str(check.agreement(
            triton_selu.selu_triton(check.every_16_bit_value(dtype, device)),
            torch.selu(check.every_16_bit_value(dtype, device))))
        rows.append([bench.dtype_name(dtype), "passes" if not failed else f"FAILS: {', '.join(failed)}",
                     "passes" if report.passed else f"FAILS: {report.worst.failing[0]}",
                     f"{report.worst.max_ulp}", every or "(not exhaustive)"])
    lines = _table(["dtype", "opcheck", "harness (float64 reference)", "max ulp", "every 16-bit input vs torch.selu"],
                   ["---", "---", "---", "---:", "---"], rows)
    return Markdown(f"*on {bench.device_name(device)}*\n\n" + "\n".join(lines))


TRITON_FORWARD = ("torch_eager", "torch_compile", bench.TRITON, "selu_triton", "selu_vectorized")
TRITON_BACKWARD = ("torch_eager", "selu_triton_backward", "selu_backward")


def forward_variants(dtype: torch.dtype, device) -> dict:
    variants = bench.peers(dtype, device)
    plain = bench.triton_selu()
    if plain is not None:
        variants[bench.TRITON] = plain
    if triton_selu.register():
        variants["selu_triton"] = triton_selu.selu_triton
    variants["selu_vectorized"] = ops.selu_vectorized
    return variants


def backward_variants(grad: torch.Tensor) -> dict:
    """Notebook 04's backward variants from ``x`` (:func:`helpers.backward.backward_variants`),
    and the Triton operator's where Triton runs."""
    variants = backward.backward_variants(grad)
    if triton_selu.register():
        variants["selu_triton_backward"] = lambda t: triton_selu.selu_triton_backward(grad, t)
    return variants


def measure_triton(dtypes=check.DTYPES, device=None, repeats: int = 3) -> list[dict]:
    """Forward and backward, every dtype at its problem size: the copy, torch, the plain and
    the registered Triton SELU, and the course's CUDA operators, ``repeats`` runs back to back."""
    device = _device(device)
    records = []
    for dtype in dtypes:
        numel, _ = env.problem_numel(dtype, tensors=4)
        x = bench.random_input(numel, dtype, device, seed=5)
        records += bench.measure_repeated(forward_variants(dtype, device), numel, x=x, repeats=repeats)
        grad = bench.random_input(numel, dtype, device, seed=6)
        records += bench.measure_repeated(backward_variants(grad), numel, x=x, repeats=repeats, op="backward")
        del x, grad
        bench._release_memory(device)
    return records


def measure_triton_table(device=None) -> dict:
    """:func:`measure_triton` as a table (dict) to save as JSON."""
    device = _device(device)
    return {"device": bench.device_name(device), "device_slug": env.device_slug(device), "torch": torch.__version__,
            "records": measure_triton(device=device)}


def triton_speed() -> results.Records:
    """:func:`measure_triton` here (saved as ``05_triton.json``), or the committed H100 records."""
    table, source = results.here_or_reference_table(measure_triton_table, TRITON_FILE)
    records = [] if table is None else table["records"]
    return results.Records(records, source=source, measured=table is not None and env.can_build_cuda())


def _one_run(records, op: str, dtype: torch.dtype, names) -> dict[str, dict]:
    """The records of ``op`` and ``dtype`` from one run, by variant: the run that holds the most
    of ``names``, at the largest size (a reference holds many runs: sweeps, other notebooks)."""
    chosen = [r for r in records if r["op"] == op and r["dtype"] == bench.dtype_name(dtype)
              and r["variant"] in names and r.get("config") is None]
    if not chosen:
        return {}
    best = max(chosen, key=lambda r: (sum(o.get("run") == r.get("run") for o in chosen), r["numel"]))
    return {r["variant"]: r for r in records if r.get("run") == best.get("run") and r.get("config") is None}


def triton_table(records) -> Markdown:
    """Each variant's median against the copy of its run, forward and backward, every dtype."""
    wanted = {"forward": TRITON_FORWARD, "backward": TRITON_BACKWARD}
    rows = []
    for op, names in wanted.items():
        for dtype in check.DTYPES:
            run = _one_run(records, op, dtype, names)
            copy = run.get(bench.COPY)
            for name in names:
                if name not in run:
                    continue
                record = run[name]
                rows.append([op, bench.dtype_name(dtype), f"{record['numel']:,}", name, f"{record['median_ms']:.4g}",
                             "" if copy is None else f"{record['median_ms'] / copy['median_ms']:.3f}×",
                             f"{bench.spread_ms(record):.3f}"])
    if not rows:
        return Markdown(f"*{getattr(records, 'source', '')}: no records of these variants*")
    lines = _table(["pass", "dtype", "elements", "variant", "median ms", "× the copy of its run",
                    "spread of repeated runs, ms"], ["---", "---", "---:", "---", "---:", "---:", "---:"], rows)
    return Markdown(f"*{getattr(records, 'source', '')}*\n\n" + "\n".join(lines))


def _compare(a: dict, b: dict) -> str:
    """How record ``a`` compares with record ``b`` of the same run: faster or slower by how much,
    or within the larger of their spreads over repeated runs."""
    difference = a["median_ms"] - b["median_ms"]
    spread = max(bench.spread_ms(a), bench.spread_ms(b))
    if abs(difference) <= spread:
        return f"within the spread ({difference:+.3f} ms, spread {spread:.3f} ms)"
    return f"{'slower' if difference > 0 else 'faster'} by {abs(difference):.3f} ms ({a['median_ms'] / b['median_ms']:.3f}×; " \
           f"spread {spread:.3f} ms)"


def triton_verdict(records) -> Markdown:
    """Per dtype and pass: the course's CUDA operator against the registered Triton operator."""
    pairs = {"forward": ("selu_vectorized", "selu_triton"), "backward": ("selu_backward", "selu_triton_backward")}
    lines = []
    for op, (cuda, triton) in pairs.items():
        for dtype in check.DTYPES:
            found = _one_run(records, op, dtype, (cuda, triton))
            if cuda in found and triton in found:
                lines.append(f"- {op}, {bench.dtype_name(dtype)}: the CUDA operator is "
                             f"{_compare(found[cuda], found[triton])} against the Triton operator")
    if not lines:
        return Markdown(f"*{getattr(records, 'source', '')}: no Triton records to compare with*")
    return Markdown(f"*{getattr(records, 'source', '')}*\n\n" + "\n".join(lines))


# --------------------------------------------------------------------------- 4. fusion

def _affine(selu: Callable[[torch.Tensor], torch.Tensor]):
    def affine(x, scale, shift):
        return selu(x) * scale + shift
    return affine


def _linear(selu: Callable[[torch.Tensor], torch.Tensor]):
    def linear(x, weight, bias):
        return selu(x @ weight + bias)
    return linear


def selu_functions() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """The SELUs a compiled function can be written with: torch's, the course's CUDA
    operator, and the Triton operator where triton is here."""
    found = {"torch.selu": torch.selu, "selu_course::selu_vectorized": ops.selu_vectorized}
    if triton_selu.register():
        found["selu_course::selu_triton"] = triton_selu.selu_triton
    return found


def fusion_cases(device) -> list[dict]:
    """The functions and their arguments: ``selu(x) * scale + shift`` on a large fp32 tensor
    (per-column scale and shift), and ``selu(x @ W + b)`` in bf16 at two matrix sizes.
    ``unfused_bytes`` is what the elementwise work moves when every op reads its input and
    writes its result once; ``fused_bytes`` when the SELU and its neighbours are one pass."""
    rows, cols = (8192, 32768) if device.type == "cuda" else (256, 1024)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(rows, cols, generator=g).to(device)
    affine = {"name": "selu(x) * scale + shift", "make": _affine, "dtype": "float32",
              "shape": f"{rows} × {cols}", "args": (x, torch.randn(cols, generator=g).to(device),
                                                    torch.randn(cols, generator=g).to(device)),
              "tensor_bytes": x.numel() * 4, "fused_passes": 1, "unfused_passes": 3}
    cases = [affine]
    for k in ((1024, 4096) if device.type == "cuda" else (64,)):
        batch = 16384 if device.type == "cuda" else 256
        a = torch.randn(batch, k, generator=g).to(device, torch.bfloat16)
        w = (torch.randn(k, k, generator=g) * k ** -0.5).to(device, torch.bfloat16)
        b = torch.randn(k, generator=g).to(device, torch.bfloat16)
        cases.append({"name": "selu(x @ W + b)", "make": _linear, "dtype": "bfloat16", "shape": f"{batch} × {k} @ {k} × {k}",
                      "args": (a, w, b), "tensor_bytes": batch * k * 2, "fused_passes": 1, "unfused_passes": 2})
    return cases


def _cuda_kernels(fn: Callable[[], object], device) -> list[str]:
    """The names of the GPU kernels one call of ``fn`` launches, from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    with _quiet(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize(device)
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def measure_fusion(device=None) -> dict:
    """Every fusion case compiled with each SELU (and eager with torch.selu): median time, the
    kernels one call launches, and the result against eager torch.selu's."""
    device = _device(device)
    rows = []
    for case in fusion_cases(device):
        expected = case["make"](torch.selu)(*case["args"])
        for name, selu in {"eager torch.selu": None, **selu_functions()}.items():
            torch._dynamo.reset()
            fn = case["make"](torch.selu) if selu is None else torch.compile(case["make"](selu), fullgraph=True)
            got = fn(*case["args"])  # compiles outside the timing
            timing = bench.time_fn(lambda fn=fn: fn(*case["args"]), device=device)
            kernels = _cuda_kernels(lambda fn=fn: fn(*case["args"]), device) if device.type == "cuda" else []
            rows.append({"case": case["name"], "shape": case["shape"], "dtype": case["dtype"], "selu": name,
                         "compiled": selu is not None, "median_ms": timing.median_ms, "q20_ms": timing.q20_ms,
                         "q80_ms": timing.q80_ms, "method": timing.method, "kernels": kernels,
                         "tensor_bytes": case["tensor_bytes"], "fused_passes": case["fused_passes"],
                         "unfused_passes": case["unfused_passes"],
                         "vs_eager": _agreement_cell([got], [expected])})
            del fn, got
    torch._dynamo.reset()
    return {"device": bench.device_name(device), "device_slug": env.device_slug(device), "torch": torch.__version__,
            "rows": rows}


# Kernel names of elementwise passes: Inductor's generated pointwise kernels, torch's
# elementwise kernels, and every SELU kernel (the course's CUDA and Triton ones). The rest
# are the matrix product's (cuBLAS names vary by version and GPU).
ELEMENTWISE_KERNEL_WORDS = ("triton_poi", "elementwise_kernel", "selu")


def is_elementwise(kernel: str) -> bool:
    return any(word in kernel.lower() for word in ELEMENTWISE_KERNEL_WORDS)


def fusion() -> tuple[dict | None, Markdown]:
    """:func:`measure_fusion` on this GPU (saved), or the committed H100 table; and the table:
    time, elementwise kernels per call, and the bytes those passes move."""
    table, source = results.here_or_reference_table(measure_fusion, FUSION_FILE)
    if table is None:
        return None, Markdown(f"*{source}*")
    rows = []
    for r in table["rows"]:
        best = min(o["median_ms"] for o in table["rows"] if o["case"] == r["case"] and o["shape"] == r["shape"])
        passes = sum(map(is_elementwise, r["kernels"]))
        rows.append([r["case"], r["shape"], r["dtype"], r["selu"] + (" (compiled)" if r["compiled"] else ""),
                     f"{r['median_ms']:.4g}", f"{r['median_ms'] / best:.2f}×", len(r["kernels"]), passes,
                     f"{passes * 2 * r['tensor_bytes'] / 1e9:.2f}", r["vs_eager"]])
    lines = _table(["function", "shape", "dtype", "SELU", "median ms", "vs fastest", "kernels per call",
                    "elementwise passes", "GB those passes move (2 tensors each)", "result vs eager"],
                   ["---", "---", "---", "---", "---:", "---:", "---:", "---:", "---:", "---"], rows)
    return table, Markdown(f"*{source}*\n\n" + "\n".join(lines))


def fusion_verdict(table: dict | None) -> Markdown:
    """Per case: the compiled ``torch.selu`` version against the compiled course operator's,
    in time and in elementwise passes."""
    if table is None:
        return Markdown("")
    lines = []
    for key in dict.fromkeys((r["case"], r["shape"]) for r in table["rows"]):
        found = {r["selu"]: r for r in table["rows"] if (r["case"], r["shape"]) == key and r["compiled"]}
        fused, opaque = found.get("torch.selu"), found.get("selu_course::selu_vectorized")
        if fused is None or opaque is None:
            continue
        passes = [sum(map(is_elementwise, r["kernels"])) for r in (fused, opaque)]
        lines.append(f"- {key[0]}, {key[1]}: with torch.selu {passes[0]} elementwise pass(es) in "
                     f"{fused['median_ms']:.4g} ms; with the course's operator {passes[1]} in "
                     f"{opaque['median_ms']:.4g} ms, {opaque['median_ms'] / fused['median_ms']:.2f}× the fused time")
    return Markdown(f"*{table['device']}*\n\n" + "\n".join(lines))


def fusion_kernels(table: dict | None) -> Markdown:
    """The GPU kernels one call of each compiled (or eager) function launched, by name."""
    if table is None:
        return Markdown("")
    lines = []
    for key in dict.fromkeys((r["case"], r["shape"]) for r in table["rows"]):
        lines.append(f"**{key[0]}**, {key[1]}:")
        lines += [f"- {r['selu']}{' (compiled)' if r['compiled'] else ''}: "
                  + ", ".join(f"`{k[:60]}`" for k in r["kernels"])
                  for r in table["rows"] if (r["case"], r["shape"]) == key]
        lines.append("")
    return Markdown(f"*{table['device']}*\n\n" + "\n".join(lines))


# --------------------------------------------------------------------------- 5. dispatch overhead

@contextlib.contextmanager
def autograd_rule(rule: str):
    """The forward operator's autograd rule set to ``rule`` ("python" or "cpp") inside the block."""
    before = ops.autograd_rule("selu_vectorized")
    ops.set_autograd_rule(rule)
    try:
        yield
    finally:
        if before == "refuses":
            ops.disable_backward()
        else:
            ops.set_autograd_rule(before)


@contextlib.contextmanager
def cpp_entry(enabled: bool = True):
    """:func:`helpers.ops.selu_vectorized` through the C++ entry (``enabled``) or through
    ``torch.ops`` inside the block."""
    before = ops.uses_cpp_entry()
    ops.use_cpp_entry(enabled)
    try:
        yield
    finally:
        ops.use_cpp_entry(before)


def _graph_replay(op: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> Callable[[], None]:
    """A ``torch.cuda.CUDAGraph`` of ``op(x)``, and the function that replays it."""
    side = torch.cuda.Stream(x.device)
    side.wait_stream(torch.cuda.current_stream(x.device))
    with torch.cuda.stream(side):
        op(x)
    torch.cuda.current_stream(x.device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op(x)
    return graph.replay


DISPATCH_ROUNDS = 5


PYTHON_RULE = "selu_vectorized, Python autograd rule"
CPP_RULE = "selu_vectorized, C++ autograd rule"
CPP_RULE_AND_ENTRY = "selu_vectorized, C++ rule and C++ entry"


def measure_dispatch(device=None, sizes=DISPATCH_SIZES, rounds: int = DISPATCH_ROUNDS) -> dict:
    """Per-call time of ``torch.selu``; of the course's operator called as
    :func:`helpers.ops.selu_vectorized` through ``torch.ops`` with its Python and with its
    C++ autograd rule, and through the C++ entry with the C++ rule; of a CUDA graph of one
    course call; and of the Triton operator; at each size, in float32 on a tensor that does
    not require grad (grad mode on, as in a training script). The variants take turns,
    ``rounds`` times, so that a slow spell of the host falls on all of them; each row keeps
    the median of its rounds and their range. The rule and the entry change twice a round
    (a change loads or unloads a library), not at every size."""
    device = _device(device)
    inputs = {numel: bench.random_input(numel, torch.float32, device, seed=9) for numel in sizes}
    timed: dict[tuple[str, int], list[float]] = {}

    def time_each_size(variant: str, call: Callable[[torch.Tensor], Callable[[], object]]) -> None:
        for numel, x in inputs.items():
            timed.setdefault((variant, numel), []).append(bench.per_call_us(call(x), device, DISPATCH_MIN_RUN_S,
                                                                           block_s=DISPATCH_BLOCK_S))

    for _ in range(rounds):
        with autograd_rule("python"), cpp_entry(False):
            time_each_size(PYTHON_RULE, lambda x: lambda: ops.selu_vectorized(x))
        with autograd_rule("cpp"):
            with cpp_entry(False):
                time_each_size("torch.selu", lambda x: lambda: torch.selu(x))
                time_each_size(CPP_RULE, lambda x: lambda: ops.selu_vectorized(x))
            with cpp_entry(True):
                time_each_size(CPP_RULE_AND_ENTRY, lambda x: lambda: ops.selu_vectorized(x))
                if device.type == "cuda":
                    time_each_size("selu_vectorized in a CUDA graph", lambda x: _graph_replay(ops.selu_vectorized, x))
                if triton_selu.register():
                    time_each_size("selu_triton (Triton op)", lambda x: lambda: triton_selu.selu_triton(x))
    rows = [{"variant": variant, "numel": numel, "us": statistics.median(us), "rounds_us": us}
            for (variant, numel), us in sorted(timed.items(), key=lambda item: item[0][1])]
    return {"device": bench.device_name(device), "device_slug": env.device_slug(device), "torch": torch.__version__,
            "dtype": "float32", "rounds": rounds, "block_s": DISPATCH_BLOCK_S, "min_run_time_s": DISPATCH_MIN_RUN_S,
            "rows": rows}


def dispatch() -> tuple[dict | None, Markdown]:
    """:func:`measure_dispatch` on this GPU (saved), or the committed H100 table; and the table
    of per-call times in µs, one column per size."""
    table, source = results.here_or_reference_table(measure_dispatch, DISPATCH_FILE)
    if table is None:
        return None, Markdown(f"*{source}*")
    sizes = sorted({r["numel"] for r in table["rows"]})
    variants = list(dict.fromkeys(r["variant"] for r in table["rows"]))
    us = {(r["variant"], r["numel"]): r["us"] for r in table["rows"]}
    spread = {(r["variant"], r["numel"]): max(r["rounds_us"]) - min(r["rounds_us"]) for r in table["rows"]}
    rows = [[v] + [f"{us[v, n]:.2f} ± {spread[v, n] / 2:.2f}" if (v, n) in us else "" for n in sizes]
            for v in variants]
    lines = _table(["µs per call"] + [f"2^{n.bit_length() - 1}" for n in sizes], ["---"] + ["---:"] * len(sizes), rows)
    blocks = (f", each the median of blocks of {table['block_s'] * 1e3:.0f} ms of calls back to back"
              if table.get("block_s") else "")
    return table, Markdown(f"*{source}; float32, grad mode on, an input that does not require grad; the median "
                           f"of {table['rounds']} rounds ± half their range{blocks}*\n\n" + "\n".join(lines))


def dispatch_goal(table: dict | None, numel: int = DISPATCH_GOAL_NUMEL, goal: float = DISPATCH_GOAL) -> Markdown:
    """The goal: at ``numel`` elements the course's operator, as notebook 05 leaves it (C++
    rule, C++ entry), costs at most ``goal`` × torch.selu per call; the other ways of calling
    it are listed beside it."""
    if table is None:
        return Markdown("*no table: nothing to judge*")
    rounds = {(r["variant"], r["numel"]): r.get("rounds_us", [r["us"]]) for r in table["rows"]}
    base = rounds.get(("torch.selu", numel))
    lines, verdict = [], f"**MISS**: no row for {CPP_RULE_AND_ENTRY} at {numel:,} elements"
    for variant in (PYTHON_RULE, CPP_RULE, CPP_RULE_AND_ENTRY):
        if base is None or (variant, numel) not in rounds:
            continue
        # The variants take turns within a round, so a round's ratio compares calls made
        # seconds apart, under the same state of the host.
        ratios = [a / b for a, b in zip(rounds[variant, numel], base)]
        ratio = statistics.median(ratios)
        lines.append(f"- {variant}: {ratio:.2f}× torch.selu's per-call time, the median of {len(ratios)} rounds' "
                     f"ratios ({min(ratios):.2f}–{max(ratios):.2f}×)")
        if variant == CPP_RULE_AND_ENTRY:
            verdict = f"**{'PASS' if ratio <= goal else 'MISS'}**: {ratio:.2f}× (goal ≤ {goal}×)"
    return Markdown(f"*{table['device']}, {numel:,} elements*\n\n" + "\n".join(lines)
                    + f"\n\nThe course's operator, C++ rule and C++ entry: {verdict}")


def dispatch_figure(table: dict | None, save: bool = True) -> Figure | None:
    """Per-call time against size, log-log, one line per variant; saved as ``05_dispatch``."""
    if table is None:
        return None
    fig, ax = plt.subplots(figsize=plot.THROUGHPUT_SIZE, layout="constrained")
    for variant in dict.fromkeys(r["variant"] for r in table["rows"]):
        points = sorted((r["numel"], r["us"]) for r in table["rows"] if r["variant"] == variant)
        ax.plot(*zip(*points), marker="o", ms=3, label=variant)
    ax.set(xscale="log", yscale="log", xlabel="elements (float32)", ylabel="µs per call (wall clock)",
           title=f"per-call cost, {table['device']}")
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=8)
    plt.close(fig)
    if save:
        plot.save_figure(fig, table, results.figure_path(DISPATCH_FIGURE, slug=table["device_slug"]))
    return fig
