"""timm's ConvNeXt at a tiny size (random weights, nothing downloaded): depthwise 7x7 convs, LayerNorm2d, layer
scale. A CNN, so the advisor's channels_last rung applies to it.

    tcperf advise tests/thirdparty/timm_convnext.py:factory --device cpu
"""
import timm
import torch

CONFIG = dict(pretrained=False, num_classes=10, depths=(1, 1, 1, 1), dims=(16, 32, 64, 128))


def factory():
    torch.manual_seed(0)
    model = timm.create_model("convnext_tiny", **CONFIG)
    return model, torch.randn(2, 3, 32, 32)
