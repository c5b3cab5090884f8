"""A Vision Transformer served images of varying size and aspect: timm's ViT-Base/16 built with dynamic_img_size=True
(the position embedding resampled to each image's patch grid at every call, as FlexiViT- and NaViT-style serving
does), random weights, nothing downloaded; 86M parameters. In eval mode, on batches of 16 images whose height and
width are each drawn from 224..384 px in steps of 16 (one patch) at every step: 196..576 tokens a sequence, about
50 distinct shapes in a stream of 64 steps.

The output is (16, 1000) logits at every size; a padded image changes the patch grid the position embedding is
resampled to, so whether padding survives is the accuracy check's question. The patch embedding is a 2-D
convolution: channels_last applies to it, as the advisor decides from the layers.

    tcperf advise benchmarks/streams/vit.py:factory --steps 10000      # GPU: batch 16, sides 224..384
    tcperf advise benchmarks/streams/vit.py:tiny --device cpu          # the same code at CPU size
"""
import functools

import timm
import torch

SIZES = {  # size -> (timm arguments, batch, (shortest, longest) side, step)
    "full": (dict(model_name="vit_base_patch16_224", num_classes=1000), 16, (224, 384), 16),
    "tiny": (dict(model_name="vit_base_patch16_224", num_classes=10, img_size=32, patch_size=8, embed_dim=32,
                  depth=2, num_heads=4), 2, (32, 64), 8),
}


def batch_at(step: int, batch: int, sides: tuple[int, int], stride: int) -> torch.Tensor:
    """Step `step`'s images: height and width each drawn from sides (both ends included) in steps of `stride`."""
    g = torch.Generator().manual_seed(step)
    choices = (sides[1] - sides[0]) // stride + 1
    h, w = (sides[0] + stride * int(torch.randint(choices, (), generator=g)) for _ in range(2))
    return torch.randn(batch, 3, h, w, generator=g)                                  # (B, 3, H, W)


def _make(size: str) -> dict:
    config, batch, sides, stride = SIZES[size]
    torch.manual_seed(0)
    model = timm.create_model(pretrained=False, dynamic_img_size=True, **config).eval()
    workload = functools.partial(batch_at, batch=batch, sides=sides, stride=stride)  # pickles
    return {"model": model, "inputs": workload(0), "workload": workload}


def factory():
    """ViT-Base/16 at dynamic image size, batch 16, sides 224..384 px."""
    return _make("full")


def tiny():
    """The same code at CPU size: patch 8, 32 wide, 2 layers, 10 classes, batch 2, sides 32..64 px."""
    return _make("tiny")
