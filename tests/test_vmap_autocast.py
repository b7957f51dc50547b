"""The operators under torch.vmap and torch.autocast, and their pointwise tag (helpers/schemas.py).

* vmap calls an operator once on the whole batch (its batching rule), wherever the batch
  dimension is (the fallback would call it once per sample), and gives what the
  operator gives on each sample;
* under autocast a one-input operator runs in its input's dtype, as torch.selu does; a
  backward operator given two dtypes runs in the wider one, and outside autocast refuses;
* the functional elementwise operators carry ``torch.Tag.pointwise``, as torch.selu does.

Each test runs on the CPU and, where there is a GPU (``gpu`` marker), on CUDA.
"""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import build, check, ops

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
UNARY = {"selu_naive": (), "selu_naive_unrolled": (4,), "selu_vectorized": (),
         "selu_vectorized_with_config": (128, 2, 0), "copy_vectorized": ()}


@pytest.fixture(scope="module", params=DEVICES)
def device(request) -> str:
    for kernel in build.KERNELS:
        build.load(kernel, backend=request.param)
    return request.param


def normal(shape, device, seed, dtype=torch.float32) -> torch.Tensor:
    return check.make_input("normal", shape, dtype, device, torch.Generator().manual_seed(seed))


class CourseCalls(TorchDispatchMode):
    """Records the input shapes of every selu_course operator call below vmap."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "selu_course":
            self.shapes.append(tuple(args[0].shape))
        return func(*args, **(kwargs or {}))


def in_one_call(fn, *args):
    """fn(*args), checking that the operator ran once, on the whole batch: without a batching rule
    vmap falls back to one call per sample (and only warns on stderr)."""
    with CourseCalls() as calls:
        result = fn(*args)
    assert len(calls.shapes) == 1, f"the operator ran {len(calls.shapes)} times, on {calls.shapes}"
    return result


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("batch_dim", [0, 1, -1])
def test_vmap_of_a_unary_operator_is_one_call_per_batch(device, name, batch_dim):
    op, extra = ops.overload(name), UNARY[name]
    x = normal((6, 5, 7), device, seed=batch_dim + 1)
    batched = in_one_call(torch.vmap(lambda t: op(t, *extra), in_dims=batch_dim), x)
    per_sample = torch.stack([op(sample, *extra) for sample in x.unbind(batch_dim)])
    assert torch.equal(batched, per_sample)


@pytest.mark.parametrize("name", ops.BACKWARD_OPS)
@pytest.mark.parametrize("in_dims", [(0, 0), (1, 1), (0, None), (None, 1), (1, 0)])
def test_vmap_of_a_backward_operator_pairs_the_samples(device, name, in_dims):
    op = ops.overload(name)
    grad, saved = normal((4, 4, 9), device, seed=1), normal((4, 4, 9), device, seed=2)
    grad, saved = (t if d is not None else t[0] for t, d in zip((grad, saved), in_dims))
    batched = in_one_call(torch.vmap(op, in_dims=in_dims), grad, saved)
    samples = [t.unbind(d) if d is not None else [t] * 4 for t, d in zip((grad, saved), in_dims)]
    assert torch.equal(batched, torch.stack([op(g, s) for g, s in zip(*samples)]))


def test_vmap_of_the_operator_with_its_gradient(device):
    ops.enable_backward()
    try:
        x = normal((3, 17), device, seed=3).requires_grad_()
        in_one_call(torch.vmap(ops.selu_vectorized), x).sum().backward()
        assert torch.equal(x.grad, ops.selu_backward(torch.ones_like(x), x.detach()))
    finally:
        ops.disable_backward()


def test_under_autocast_selu_keeps_its_inputs_dtype(device):
    x = normal((33,), device, seed=4)
    with torch.autocast(device, dtype=torch.bfloat16):
        expected = torch.selu(x).dtype
        for name, extra in UNARY.items():
            assert ops.overload(name)(x, *extra).dtype == expected == torch.float32


@pytest.mark.parametrize("name", ops.BACKWARD_OPS)
def test_under_autocast_a_backward_operator_runs_in_the_wider_dtype(device, name):
    op = ops.overload(name)
    grad, saved = normal((65,), device, seed=5, dtype=torch.bfloat16), normal((65,), device, seed=6)
    with torch.autocast(device, dtype=torch.bfloat16):
        mixed = op(grad, saved)
    assert mixed.dtype == torch.float32 and torch.equal(mixed, op(grad.float(), saved))
    with pytest.raises(RuntimeError, match="grad is BFloat16 but the saved tensor is Float"):
        op(grad, saved)  # outside autocast, two dtypes are a mistake to report


def test_the_functional_elementwise_operators_are_tagged_pointwise_as_torch_selu_is():
    assert torch.Tag.pointwise in torch.ops.aten.selu.default.tags
    tagged = {name for name in ops.SCHEMAS if torch.Tag.pointwise in ops.overload(name).tags}
    assert tagged == {*UNARY, *ops.BACKWARD_OPS}
