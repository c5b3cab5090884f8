"""Your images: an ImageFolder directory (one sub-folder a class) for classification to a target accuracy.

DIR/train and DIR/val (or DIR/test) are the two sets when present; otherwise every 5th image of each class is
held out for validation. Images are resized to --image-size (default 32) and kept on the device, as CIFAR-10 is.

    tcperf train-to-target imagefolder --data ~/data/flowers --target accuracy=0.8
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..errors import UserError
from . import images, need_data


def build(options: dict, device, model=None):
    path = need_data(options, "DIR (an ImageFolder: one sub-folder per class)")
    data, classes = load(path, options.get("image_size") or 32)
    return images.task(options["workload"], data, device, classes=len(classes), batch=options.get("batch"),
                       model=model, info={"data": str(path), "class_names": classes})


def load(path: Path, size: int) -> tuple[dict, list[str]]:
    """({train_x, train_y, test_x, test_y}, class names): float images (N, 3, size, size) in [0, 1]."""
    if not path.is_dir():
        raise UserError(f"--data {path}: an ImageFolder is a directory with one sub-folder per class")
    val = next((path / n for n in ("val", "test") if (path / n).is_dir()), None)
    if (path / "train").is_dir() and val is not None:
        train, names = _read(path / "train", size)
        test, test_names = _read(val, size)
        if test_names != names:
            raise UserError(f"--data {path}: train/ and {val.name}/ have different classes")
        return {"train_x": train[0], "train_y": train[1], "test_x": test[0], "test_y": test[1]}, names
    (x, y), names = _read(path, size)
    return images.held_out(x, y), names                         # no val/ folder: every 5th image validates


def _read(folder: Path, size: int):
    from torchvision import datasets, transforms
    prep = transforms.Compose([transforms.Resize(size), transforms.CenterCrop(size), transforms.ToTensor()])
    try:
        ds = datasets.ImageFolder(str(folder), transform=prep,
                                  loader=lambda p: datasets.folder.default_loader(p).convert("RGB"))
        pairs = [ds[i] for i in range(len(ds))]
    except (FileNotFoundError, OSError, ValueError) as e:
        raise UserError(f"--data {folder}: {str(e).splitlines()[0]}") from None
    x = torch.stack([p[0] for p in pairs])                        # (N, 3, size, size)
    return (x, torch.tensor([p[1] for p in pairs], dtype=torch.int64)), list(ds.classes)
