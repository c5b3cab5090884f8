"""torchvision's VisionTransformer at a tiny size (random weights). torchvision zero-initialises the classifier
head, so a freshly built ViT outputs all zeros: every recipe "matches" fp32 trivially, and the advisor must say
that its reference output is degenerate rather than vouch for the accuracy.

    tcperf advise tests/thirdparty/tv_vit.py:factory --device cpu
"""
import torch
from torchvision.models import VisionTransformer

CONFIG = dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10)


def factory():
    torch.manual_seed(0)
    model = VisionTransformer(**CONFIG)
    return model, torch.randn(2, 3, 32, 32)
