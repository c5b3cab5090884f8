"""A model whose activations pass fp16's largest finite value (65504): amp_fp16 turns them into inf and the
outputs into NaN. `tcperf advise` says so, finds the module (`encoder.energy`), and measures amp_fp16 again with
that module kept in fp32, beside amp_bf16 (whose range is fp32's, at 8 bits of mantissa).

The model reads physical inputs and projects them to energies in eV (values near 1e5) before a LayerNorm brings
them back to unit scale: exact in fp32, fine in bf16, inf in fp16.

    tcperf advise examples/fp16_overflow.py:factory                 # GPU
    tcperf advise examples/fp16_overflow.py:factory --mode train    # fp16: NaN loss, GradScaler skips every step
"""
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F

EV_SCALE = 1e5       # features to energies: values near 1e5 > 65504, fp16's largest


class Energy(nn.Module):
    """Projection to energies: in fp16 the product overflows to inf."""

    def __init__(self, dim: int):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return self.proj(x) * EV_SCALE


class EnergyNet(nn.Module):
    def __init__(self, features: int = 256, dim: int = 1024, classes: int = 16):
        super().__init__()
        self.encoder = nn.Sequential(OrderedDict(embed=nn.Linear(features, dim), act=nn.GELU(),
                                                 energy=Energy(dim)))
        self.norm = nn.LayerNorm(dim)            # back to unit scale: fine in fp32 and bf16, NaN after an inf
        self.head = nn.Linear(dim, classes)

    def forward(self, x):                        # (B, features) -> (B, classes)
        return self.head(self.norm(self.encoder(x)))


def _make(batch: int, features: int, dim: int, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    model = EnergyNet(features, dim)
    x = torch.randn(batch, features)
    y = torch.randint(0, 16, (batch,))
    return {"model": model, "inputs": (x,), "targets": y, "loss_fn": F.cross_entropy,
            "metric_fn": lambda logits: float(logits.float().softmax(-1).max(-1).values.mean())}


def factory() -> dict:
    """GPU size: 8192 samples, width 4096 (the energy projection is an 8192 x 4096 x 4096 GEMM)."""
    return _make(batch=8192, features=1024, dim=4096)


def small() -> dict:
    """CPU size: 32 samples, width 64."""
    return _make(batch=32, features=32, dim=64)
