"""The ladder's kernel rungs past the whole-step graph as model transforms (a Recipe's `transform`), each one thing
on top of the one before, applied in place to the recipe's copy of the model:

    pool_kernel    every nn.MaxPool2d(3, 2, 1) on tcperf's Triton kernels (tcperf.kernels.maxpool.MaxPool3s2)
    bn_relu_pool   + each batch norm -> ReLU -> such a pool as one (tcperf.kernels.maxpool.BatchNormReluPool2d)
    bn_relu        + each other batch norm whose only user is a ReLU as one, ReLU's mask taken from the batch
                   norm's input in the backward (tcperf.kernels.batchnorm.BatchNormRelu2d)

Each returns notes for the ladder's row and raises LookupError when the model has nothing of its kind, which the
ladder records as the rung not applying (tcperf.recipes). The kernels are imported when a transform runs, not with
this module: tcperf.recipes names these functions, and importing it must not import Triton's kernels (the
interpreter is chosen as they are decorated).
"""
from __future__ import annotations

import torch.nn as nn


def pool_kernel(model: nn.Module, mode: str = "train") -> list[str]:
    """Every nn.MaxPool2d(3, 2, 1) becomes MaxPool3s2."""
    from .batchnorm import replace_module
    from .maxpool import MaxPool3s2, is_stem_pool
    names = [name for name, m in model.named_modules() if is_stem_pool(m)]
    if not names:
        raise LookupError("no nn.MaxPool2d(3, stride=2, padding=1) in the model")
    for name in names:
        replace_module(model, name, MaxPool3s2())
    return [f"max-pool 3x3/2 on tcperf's kernels: {', '.join(names)}"]


def bn_relu_pool(model: nn.Module, mode: str = "train") -> list[str]:
    """Each batch norm -> ReLU -> such a pool chain becomes a BatchNormReluPool2d, then pool_kernel on the rest."""
    from .maxpool import fuse_batch_norm_relu_pool
    fused = fuse_batch_norm_relu_pool(model)
    if not fused:
        raise LookupError("no batch norm -> ReLU -> nn.MaxPool2d(3, stride=2, padding=1) chain in the model's "
                          "torch.fx trace (or the model does not trace)")
    notes = [f"batch norm + ReLU + max-pool 3x3/2 as one on tcperf's kernels: {', '.join(fused)}"]
    return notes + _optional(pool_kernel, model, mode)


def bn_relu(model: nn.Module, mode: str = "train") -> list[str]:
    """bn_relu_pool (or pool_kernel) where they apply, then each other batch norm -> ReLU pair as one."""
    from .batchnorm import fuse_batch_norm_relu
    notes = _optional(bn_relu_pool, model, mode) or _optional(pool_kernel, model, mode)
    fused = fuse_batch_norm_relu(model)
    if not fused:
        raise LookupError("no batch norm whose only user is a ReLU in the torch.fx traces of the model's blocks "
                          "(or they do not trace)")
    return notes + [f"batch norm + ReLU as one, ReLU's mask from the batch norm's input: {len(fused)} pairs "
                    f"({', '.join(fused[:3])}{', ...' if len(fused) > 3 else ''})"]


def _optional(transform, model: nn.Module, mode: str) -> list[str]:
    """transform's notes, or none where the model has nothing of its kind."""
    try:
        return transform(model, mode)
    except LookupError:
        return []
