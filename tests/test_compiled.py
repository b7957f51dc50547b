"""The course's operator inside compiled models and CUDA graphs (notebook 05), tested against
the operator itself.

* A network with ``selu_course::selu_vectorized`` as its activation compiles with
  ``fullgraph=True`` into one graph with no break, the operator traced once per layer, and
  its output and every gradient agree with eager.
* On a GPU (``gpu`` marker): a captured CUDA graph of the operator, replayed on fresh inputs
  of every dtype copied into the captured input, gives torch.selu's results in its
  NaN-poisoned output; so does the network under ``mode="reduce-overhead"``.
"""
from __future__ import annotations

import pytest
import torch

from helpers import build, check, ops

DEPTH, WIDTH, INPUTS = 3, 64, 32


@pytest.fixture(scope="module", autouse=True)
def registered():
    loaded = [build.load(kernel) for kernel in ("selu_vectorized", "selu_backward")]
    ops.enable_backward()
    yield loaded
    ops.disable_backward()


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class CourseSELU(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.selu_vectorized(x)


def _network(device: torch.device) -> torch.nn.Sequential:
    torch.manual_seed(0)
    layers = []
    for i in range(DEPTH):
        layers += [torch.nn.Linear(INPUTS if i == 0 else WIDTH, WIDTH), CourseSELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 1)).to(device)


def _output_and_gradients(model, x, grad_out) -> list[torch.Tensor]:
    leaf = x.detach().requires_grad_()
    out = model(leaf)
    return [out.detach(), *torch.autograd.grad(out, [leaf, *model.parameters()], grad_out)]


def test_the_network_compiles_into_one_graph_with_eager_gradients():
    device = _device()
    model = _network(device)
    x = torch.randn(64, INPUTS, device=device)
    grad_out = torch.randn(64, 1, device=device)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    assert sum(graph.code.count("selu_course.selu_vectorized") for graph in explained.graphs) == DEPTH
    eager = _output_and_gradients(model, x, grad_out)
    compiled_model = _output_and_gradients(torch.compile(model, fullgraph=True), x, grad_out)
    torch._dynamo.reset()
    assert len(eager) == 2 + len(list(model.parameters()))
    for got, expected in zip(compiled_model, eager):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", check.DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_a_cuda_graph_replays_the_operator_on_fresh_inputs(dtype):
    numel = (1 << 16) + 3
    static_x = check.harness_input(numel, dtype, "cuda", seed=100)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture
        ops.selu_vectorized(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = ops.selu_vectorized(static_x)
    for seed in (101, 102, 103):
        x = check.harness_input(numel, dtype, "cuda", seed=seed)
        static_x.copy_(x)
        static_y.fill_(float("nan"))  # a replay that writes nothing cannot pass
        graph.replay()
        match = check.agreement(static_y, torch.selu(x))
        assert match.identical == match.numel, str(match)


@pytest.mark.gpu
def test_reduce_overhead_gives_eager_results_on_fresh_inputs():
    model = _network(torch.device("cuda"))
    parameters = list(model.parameters())
    torch._dynamo.reset()
    graphed = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    for seed in (200, 201, 202):
        generator = torch.Generator().manual_seed(seed)
        x = torch.randn(256, INPUTS, generator=generator).cuda()
        grad_out = torch.randn(256, 1, generator=generator).cuda()
        # Clone what a replay returns: the next replay overwrites those buffers.
        got = [g.clone() for g in torch.autograd.grad(graphed(x), parameters, grad_out)]
        expected = torch.autograd.grad(model(x), parameters, grad_out)
        # Not bit for bit: compiled linear layers round differently from eager's; a replay
        # that read a stale input or wrote nothing would be off by far more.
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()
