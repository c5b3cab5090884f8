"""timm's EfficientNet-B0 (random weights, nothing downloaded): depthwise convolutions, squeeze-and-excitation,
SiLU and BatchNorm; a CNN, so the channels_last recipe applies.

One code path, two sizes (the factory's name picks it): the same efficientnet_b0, only the classes and the batch
differ.
    factory        CPU size: 10 classes, 2 x 3 x 32 x 32 (4.0M params)
    gpu_factory    GPU size: 1000 classes, 128 x 3 x 224 x 224 (5.3M params)

    tcperf advise tests/thirdparty/timm_effnet.py:factory --device cpu
    tcperf advise tests/thirdparty/timm_effnet.py:gpu_factory
"""
import timm
import torch

SIZES = {"cpu": (10, 2, 32), "gpu": (1000, 128, 224)}   # size -> (classes, batch, image side)


def _make(size: str):
    classes, batch, side = SIZES[size]
    torch.manual_seed(0)
    model = timm.create_model("efficientnet_b0", pretrained=False, num_classes=classes)
    return model, torch.randn(batch, 3, side, side, generator=torch.Generator().manual_seed(1))


def factory():
    return _make("cpu")


def gpu_factory():
    return _make("gpu")
