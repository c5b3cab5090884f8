"""ResNet-50 (torchvision, random init, weights=None) on synthetic ImageNet-shaped images: the CNN of the ladder.

Training step: cross-entropy on random labels, AdamW (fused from the ladder's fused rung on). Inference: logits.
On an H200 (hand-written loops, anchors.md): batch 256 training fp32 1,064 img/s, amp_bf16 + channels_last +
torch.compile 6,751 img/s.

    tcperf models resnet50 --mode train --batch 256
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import torchvision
from torchvision.models.resnet import Bottleneck, ResNet

KIND = "cnn"
UNIT = "img/s"
OPTIMIZER = {"lr": 1e-3}
CONFIGS = {
    "full": {"layers": (3, 4, 6, 3), "image": 224, "classes": 1000, "batch": 256},
    # the same torchvision code with one block a stage, 1/16 of the widths, 32x32 images: a CPU test in ms
    "small": {"layers": (1, 1, 1, 1), "narrow": 16, "image": 32, "classes": 10, "batch": 2},
}


class NarrowResNet(ResNet):
    """torchvision's ResNet with every stage's width divided by `narrow` (the stem keeps its 64 channels)."""

    def __init__(self, layers, classes: int, narrow: int):
        self.narrow = narrow
        super().__init__(Bottleneck, list(layers), num_classes=classes)
        self.fc = torch.nn.Linear(self.inplanes, classes)    # inplanes = the last stage's output channels

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
        return super()._make_layer(block, planes // self.narrow, blocks, stride, dilate)


def build(cfg: dict) -> torch.nn.Module:
    if cfg.get("narrow", 1) == 1 and tuple(cfg["layers"]) == (3, 4, 6, 3) and cfg["classes"] == 1000:
        return torchvision.models.resnet50(weights=None)
    return NarrowResNet(cfg["layers"], cfg["classes"], cfg.get("narrow", 1))


def make_batch(cfg: dict, batch: int, device, gen: torch.Generator):
    images = torch.randn(batch, 3, cfg["image"], cfg["image"], generator=gen, device=device)   # (B, 3, H, W)
    labels = torch.randint(0, cfg["classes"], (batch,), generator=gen, device=device)           # (B,)
    return (images,), labels


loss_fn = F.cross_entropy          # loss_fn(logits (B, classes), labels (B,))


def items_per_batch(cfg: dict, batch: int) -> int:
    return batch
