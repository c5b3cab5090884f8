"""An image classifier evaluated at varying resolution: timm's ConvNeXt-Tiny (random weights, nothing downloaded),
in eval mode, on batches of 32 square images whose side is drawn from 160..384 px in steps of 32 at every step (a
model served at the resolution each client sends, or evaluated across test-time sizes): 8 distinct shapes, few
enough that compiling once a shape is a plain loop's option too.

The output is (32, 1000) logits at every size: nothing in it varies, so padded images give outputs of the right
shape; whether their values survive the padding is the accuracy check's question (global pooling averages the
padded cells in).

    tcperf advise benchmarks/streams/classifier.py:factory --steps 10000      # GPU: batch 32, sides 160..384
    tcperf advise benchmarks/streams/classifier.py:tiny --device cpu          # the same code at CPU size
"""
import functools

import timm
import torch

SIZES = {  # size -> (timm arguments, batch, (shortest, longest) side, step)
    "full": (dict(model_name="convnext_tiny", num_classes=1000), 32, (160, 384), 32),
    "tiny": (dict(model_name="convnext_tiny", num_classes=10, depths=(1, 1, 1, 1), dims=(16, 32, 64, 128)), 2,
             (32, 96), 32),
}


def batch_at(step: int, batch: int, sides: tuple[int, int], stride: int) -> torch.Tensor:
    """Step `step`'s images: one side drawn from sides (both ends included) in steps of `stride`, square."""
    g = torch.Generator().manual_seed(step)
    side = sides[0] + stride * int(torch.randint((sides[1] - sides[0]) // stride + 1, (), generator=g))
    return torch.randn(batch, 3, side, side, generator=g)                            # (B, 3, S, S)


def _make(size: str) -> dict:
    config, batch, sides, stride = SIZES[size]
    torch.manual_seed(0)
    model = timm.create_model(pretrained=False, **config).eval()
    workload = functools.partial(batch_at, batch=batch, sides=sides, stride=stride)  # pickles
    return {"model": model, "inputs": workload(0), "workload": workload}


def factory():
    """ConvNeXt-Tiny, batch 32, square sides 160..384 px."""
    return _make("full")


def tiny():
    """The same code at CPU size: one block a stage, 16..128 wide, 10 classes, batch 2, sides 32..96 px."""
    return _make("tiny")
