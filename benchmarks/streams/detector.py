"""A dense one-stage detector served images of varying size: torchvision's ResNet-50 + FPN backbone (P3-P7, as
RetinaNet builds it) and RetinaNet's classification and box-regression heads, random weights, nothing downloaded;
in eval mode, on batches of 8 images whose height and width are each drawn from 320..800 px in steps of 32 (the
stride a detector's images are padded to) at every step, as an aspect-ratio-grouping loader gives them. About 59
distinct shapes in a stream of 64 steps.

The outputs are the heads' dense maps before any box decoding or NMS (data-dependent, host work):
{"cls_logits": (8, A, 91), "bbox_regression": (8, A, 4)}, A = 9 anchors x the cells of P3..P7 (H/8 x W/8 + ... +
H/128 x W/128). Their varying dimension (A) follows no input dimension, so a recipe that pads the images cannot cut
the outputs back to the real image's cells: padding is refused for this model.

    tcperf advise benchmarks/streams/detector.py:factory --steps 10000      # GPU: batch 8, sides 320..800
    tcperf advise benchmarks/streams/detector.py:tiny --device cpu          # the same code at CPU size
"""
import functools

import torch
from torch import nn
from torchvision.models.detection.backbone_utils import BackboneWithFPN
from torchvision.models.detection.retinanet import RetinaNetHead
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet
from torchvision.ops.feature_pyramid_network import LastLevelP6P7
from torchvision.ops.misc import FrozenBatchNorm2d

SIZES = {  # size -> (ResNet block and depths, FPN width, classes, batch, (shortest, longest) side, step)
    "full": ((Bottleneck, [3, 4, 6, 3]), 256, 91, 8, (320, 800), 32),      # ResNet-50, RetinaNet's FPN
    "tiny": ((BasicBlock, [1, 1, 1, 1]), 32, 5, 2, (64, 128), 32),
}
ANCHORS = 9         # 3 scales x 3 aspect ratios a cell, as RetinaNet


class DenseDetector(nn.Module):
    def __init__(self, resnet: tuple, width: int, classes: int):
        super().__init__()
        body = ResNet(*resnet, norm_layer=FrozenBatchNorm2d)            # torchvision's detectors freeze BN
        stages = [64 * body.layer1[0].expansion * 2 ** i for i in (1, 2, 3)]   # layer2..layer4's channels
        self.backbone = BackboneWithFPN(body, {"layer2": "0", "layer3": "1", "layer4": "2"}, stages, width,
                                        extra_blocks=LastLevelP6P7(width, width))
        self.head = RetinaNetHead(width, ANCHORS, classes)

    def forward(self, images):                                    # (B, 3, H, W)
        features = list(self.backbone(images).values())           # P3..P7: (B, 256, H/8, W/8) .. H/128, W/128
        return self.head(features)                # {"cls_logits": (B, A, C), "bbox_regression": (B, A, 4)}


def batch_at(step: int, batch: int, sides: tuple[int, int], stride: int) -> torch.Tensor:
    """Step `step`'s images: height and width each drawn from sides (both ends included) in steps of `stride`."""
    g = torch.Generator().manual_seed(step)
    choices = (sides[1] - sides[0]) // stride + 1
    h, w = (sides[0] + stride * int(torch.randint(choices, (), generator=g)) for _ in range(2))
    return torch.randn(batch, 3, h, w, generator=g)                                  # (B, 3, H, W)


def _make(size: str) -> dict:
    resnet, width, classes, batch, sides, stride = SIZES[size]
    torch.manual_seed(0)
    model = DenseDetector(resnet, width, classes).eval()
    workload = functools.partial(batch_at, batch=batch, sides=sides, stride=stride)  # pickles
    return {"model": model, "inputs": workload(0), "workload": workload}


def factory():
    """ResNet-50 FPN + RetinaNet heads, batch 8, each side 320..800 px."""
    return _make("full")


def tiny():
    """The same code at CPU size: a ResNet of one basic block a stage, FPN 32 wide, 5 classes, batch 2, sides
    64..128 px."""
    return _make("tiny")
