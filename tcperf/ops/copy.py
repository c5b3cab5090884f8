"""Device-to-device copy: the memory-bandwidth ceiling. Bytes: the source read once and the destination written
once (2 * n * element size), the convention of anchors.md (H200: ~4.25 TB/s). FLOPs: none.
"""
from __future__ import annotations

import torch

from ..precision import Precision
from .base import Op, Prepared, generator, randn


class Copy(Op):
    name = "copy"
    precisions = ("fp32", "fp16", "bf16", "fp64")
    shape_keys = ("n",)

    def flops(self, shape: dict) -> float:
        return 0.0

    def bytes(self, shape: dict, prec: Precision) -> float:
        return 2.0 * shape["n"] * prec.element_bytes

    def label(self, shape: dict) -> str:
        return f"{shape['n'] * 4 / 2**20:.0f} MiB copy" if shape["n"] >= 2**20 else f"{shape['n']} elements"

    def prepare(self, shape: dict, prec: Precision, device: torch.device, seed: int = 0) -> Prepared:
        x = randn((shape["n"],), prec.dtype, device, generator(device, seed))
        y = torch.empty_like(x)
        return Prepared(run=lambda: y.copy_(x), reference=lambda: x.double(), out=y)


OP = Copy()
