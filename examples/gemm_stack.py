"""The plainest GEMM-bound model: a stack of 4096 x 4096 nn.Linear layers (no bias, no activation) fed a batch of
4096 rows. Nearly every nanosecond of its step is cuBLAS at the GEMM's best shape, so the step should run close
to its speed of light (FLOPs at the measured Tensor Core ceiling): `tcperf advise` prints that share, and
benchmarks/speed_of_light.py holds it above 0.8 beside a hand loop of the same GEMMs.

    tcperf advise examples/gemm_stack.py:factory              # GPU size: 8 layers, 4096 x 4096, batch 4096
    tcperf advise examples/gemm_stack.py:small --device cpu   # the same at CPU size
"""
import torch
import torch.nn as nn

WIDTH, LAYERS, BATCH = 4096, 8, 4096


def stack(width: int = WIDTH, layers: int = LAYERS) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(width, width, bias=False) for _ in range(layers)))
    with torch.no_grad():
        for layer in model:
            layer.weight.mul_(width ** -0.5 / layer.weight.std())    # unit gain: activations keep their scale
    return model.eval()


def factory():
    return stack(), torch.randn(BATCH, WIDTH)


def small():
    return stack(64, 2), torch.randn(32, 64)
