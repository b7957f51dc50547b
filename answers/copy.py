"""The yardstick, not an answer: a copy moves the bytes a SELU moves (read once, written once)."""
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x.clone()
