"""The course's operator (notebooks 03 and 04), registered by the course's build."""
import torch

from helpers import build

build.load("selu_vectorized")


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.ops.selu_course.selu_vectorized(x)
