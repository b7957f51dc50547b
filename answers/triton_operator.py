"""The course's Triton operator (notebook 05), a torch.library operator around a Triton kernel."""
import torch

from helpers import triton_selu

if not triton_selu.register():
    raise RuntimeError("the Triton operator needs a GPU and triton")


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return triton_selu.selu_triton(x)
