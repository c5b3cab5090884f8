"""Fp32 islands: named modules of a low-precision model that run in float32, each as a visible wrapper module in its
parent's place (the user's module and its class stay as they were; it becomes the island's child `module`, so its
state_dict keys gain ".module").

    keep_fp32(model, ["block.2.norm"], "cuda")     # model.block[2].norm is now Fp32Island(LayerNorm(...))

Under autocast an island turns autocast off and casts its floating-point inputs to float32. A weight-cast recipe
(tcperf.recipes) keeps an island's weights in float32 and sets its `out_dtype`, so it hands its outputs back in the
model's dtype. The advisor prints this file's keep_fp32 and Fp32Island in its code snippets, so they use torch alone.
"""
from __future__ import annotations

import torch

from .spec import map_tensors


def cast_floats(x, dtype):
    """Every floating-point tensor in x (any output structure) cast to dtype; the rest as it was."""
    return map_tensors(lambda t: t.to(dtype) if t.is_floating_point() else t, x)


class Fp32Island(torch.nn.Module):
    """`module` run in float32: autocast off, floating-point inputs cast to float32, outputs cast to `out_dtype`
    when set (a model whose weights were cast to fp16/bf16)."""

    def __init__(self, module, device_type="cuda"):
        super().__init__()
        self.module, self.device_type, self.out_dtype = module, device_type, None

    def forward(self, *args, **kwargs):
        with torch.autocast(self.device_type, enabled=False):
            out = self.module(*cast_floats(args, torch.float32), **cast_floats(kwargs, torch.float32))
        return out if self.out_dtype is None else cast_floats(out, self.out_dtype)


def keep_fp32(model, names, device_type="cuda"):
    """Run the named submodules in float32: each is replaced in its parent by an Fp32Island around it. The deepest
    go first, so that a name inside another kept module still resolves."""
    for name in sorted(names, key=lambda n: -n.count(".")):
        parent, _, child = name.rpartition(".")
        owner = model.get_submodule(parent)
        setattr(owner, child, Fp32Island(getattr(owner, child), device_type))
    return model
