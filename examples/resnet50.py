"""ResNet-50 as a user's factory, for `tcperf advise --nproc N` (which way to train it on N GPUs):

    tcperf advise examples/resnet50.py:factory --mode train --nproc 4 --recipes channels_last
    tcperf advise examples/resnet50.py:tiny --mode train --nproc 2 --device cpu    # 1/16 of the widths: a CPU test

The model (torchvision's) and its synthetic batch come from tcperf.models (`tcperf models resnet50`): 256 images
of 224 x 224 a GPU, in img/s.
"""
from tcperf import models


def _made(config: str) -> dict:
    mod = models.get("resnet50")
    cfg = mod.CONFIGS[config]
    model = mod.build(cfg)
    inputs, targets = mod.make_batch(cfg, cfg["batch"], "cpu", None)      # (B, 3, H, W) images, (B,) labels
    return {"model": model, "inputs": inputs, "targets": targets, "loss_fn": mod.loss_fn}


def factory() -> dict:
    return _made("full")


def tiny() -> dict:
    return _made("small")
