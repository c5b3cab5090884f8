"""Your arrays: an .npz file for classification to a target accuracy.

Keys: x_train, y_train, x_test, y_test (Keras' layout); or x, y (every 5th example is then held out). x is images
(N, H, W, C), (N, C, H, W) or (N, H, W), or features (N, F); y integer labels 0..classes-1. Images train the fast
ResNet, features an MLP, with AdamW.

    tcperf train-to-target npz --data digits.npz --target accuracy=0.97
"""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch

from ..errors import UserError
from . import images, need_data


def build(options: dict, device, model=None):
    path = need_data(options, "FILE.npz (x_train, y_train, x_test, y_test; or x, y)")
    data = load(path)
    classes = int(max(data["train_y"].max(), data["test_y"].max())) + 1 if len(data["train_y"]) else 0
    return images.task(options["workload"], data, device, classes=max(classes, 2), batch=options.get("batch"),
                       model=model, info={"data": str(path)})


def load(path: Path) -> dict:
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise UserError(f"--data {path}: not a readable .npz file: {str(e).splitlines()[0]}") from None
    if {"x_train", "y_train", "x_test", "y_test"} <= set(arrays):
        parts = {"train_x": arrays["x_train"], "train_y": arrays["y_train"], "test_x": arrays["x_test"],
                 "test_y": arrays["y_test"]}
    elif {"x", "y"} <= set(arrays):
        parts = images.held_out(arrays["x"], arrays["y"])              # every 5th example validates
    else:
        raise UserError(f"--data {path}: needs arrays x_train, y_train, x_test, y_test (or x, y); has "
                        f"{', '.join(sorted(arrays)) or 'none'}")
    return {k: _labels(v, path) if k.endswith("_y") else _inputs(v, path) for k, v in parts.items()}


def _inputs(x: np.ndarray, path: Path) -> torch.Tensor:
    if x.dtype.kind not in "uif" or x.ndim not in (2, 3, 4):
        raise UserError(f"--data {path}: x must be numbers shaped (N, F), (N, H, W) or images; got {x.dtype} "
                        f"{x.shape}")
    t = torch.from_numpy(np.ascontiguousarray(x)).float()
    if t.dim() == 3:
        return t[:, None]                                   # (N, 1, H, W)
    if t.dim() == 4 and t.shape[-1] in (1, 3, 4) and t.shape[1] not in (1, 3, 4):
        return t.permute(0, 3, 1, 2).contiguous()           # NHWC -> NCHW
    return t


def _labels(y: np.ndarray, path: Path) -> torch.Tensor:
    if y.dtype.kind not in "iu" or y.ndim != 1:
        raise UserError(f"--data {path}: labels must be integers shaped (N,); got {y.dtype} {y.shape}")
    return torch.from_numpy(y.astype(np.int64))
