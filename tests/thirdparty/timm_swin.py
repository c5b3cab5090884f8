"""timm's Swin Transformer (random weights, nothing downloaded): shifted-window attention with relative position
biases, patch merging between stages.

One code path, two sizes (the factory's name picks it):
    factory        CPU size: swin_tiny_patch4_window7_224 with 32 x 32 images, window 4, 2 stages of 1 block,
                   16 wide, 10 classes, batch 2
    gpu_factory    GPU size: swin_tiny_patch4_window7_224 as it is (28M params), batch 64 x 3 x 224 x 224

    tcperf advise tests/thirdparty/timm_swin.py:factory --device cpu
    tcperf advise tests/thirdparty/timm_swin.py:gpu_factory
"""
import timm
import torch

NAME = "swin_tiny_patch4_window7_224"
SIZES = {  # size -> (overrides of the model's arguments, batch, image side)
    "cpu": (dict(img_size=32, window_size=4, embed_dim=16, depths=(1, 1), num_heads=(1, 2), num_classes=10), 2, 32),
    "gpu": ({}, 64, 224),
}


def _make(size: str):
    overrides, batch, side = SIZES[size]
    torch.manual_seed(0)
    model = timm.create_model(NAME, pretrained=False, **overrides)
    return model, torch.randn(batch, 3, side, side, generator=torch.Generator().manual_seed(1))


def factory():
    return _make("cpu")


def gpu_factory():
    return _make("gpu")
