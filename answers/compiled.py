"""torch.compile of torch.selu: Inductor writes a Triton kernel for it (notebook 05)."""
import torch


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        # A judge that poisons outputs toggles torch's deterministic mode, a global state Dynamo guards
        # on: each toggle is one more compiled variant, past Dynamo's default limit of 8.
        torch._dynamo.config.recompile_limit = 64
        # A few small kernels each: compiled in this process, no pool of compile workers to start (seconds less
        # per process on an H100 host).
        torch._inductor.config.compile_threads = 1
        self.selu = torch.compile(torch.selu, dynamic=True)  # one kernel for every size

    def forward(self, x):
        return self.selu(x)
