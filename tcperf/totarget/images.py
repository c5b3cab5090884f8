"""Classification on tensors resident on the device: the fast ResNet of the airbench lineage, flip and translate
on the GPU, label-smoothed cross-entropy, top-1 accuracy on a fixed held-out set. CIFAR-10, ImageFolder
directories, .npz arrays and a user's factory all become a Task here.

The network follows KellerJordan/cifar10-airbench (airbench94; tcperf.totarget.cifar10 has its figures) in shape:
a 2x2 stem conv, three groups of conv-pool-BN-GELU-conv-BN-GELU at widths 64/256/256, a global max pool and a
bias-free linear head scaled by 1/9; without its whitening init, Lookahead, TTA or Muon.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import UserError
from . import Task

LABEL_SMOOTHING = 0.2        # airbench94's
EVAL_BATCH = 2000
TARGET, BATCH = 0.9, 256     # your data's (an ImageFolder, an .npz): the default accuracy and batch
HOLD_OUT = 5                 # your data as one set: every 5th example validates


def conv_group(cin: int, cout: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.MaxPool2d(2), nn.BatchNorm2d(cout), nn.GELU(),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.GELU()]


class Scale(nn.Module):
    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


def fast_resnet(channels: int, classes: int, widths=(64, 256, 256)) -> nn.Sequential:
    """(B, channels, H, W) -> (B, classes) logits; any H, W >= 8 (the pool at the end is global)."""
    layers = [nn.Conv2d(channels, 24, 2, bias=True), nn.GELU()]       # airbench's 2x2 stem (31x31 on CIFAR)
    for cin, cout in zip((24, *widths), widths):
        layers += conv_group(cin, cout)
    return nn.Sequential(*layers, nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(widths[-1], classes, bias=False),
                         Scale(1 / 9))


def mlp(features: int, classes: int, hidden: int = 256) -> nn.Sequential:
    return nn.Sequential(nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                         nn.Linear(hidden, classes))


def augment(x: torch.Tensor, gen: torch.Generator, pad: int = 2) -> torch.Tensor:
    """Random horizontal flip and translation by up to `pad` pixels (reflect padding), per image, on x's device."""
    b, c, h, w = x.shape
    flip = torch.rand(b, device=x.device, generator=gen) < 0.5
    x = torch.where(flip[:, None, None, None], x.flip(3), x)
    padded = F.pad(x, (pad, pad, pad, pad), mode="reflect")                       # (B, C, H+2p, W+2p)
    dy, dx = (torch.randint(0, 2 * pad + 1, (2, b), device=x.device, generator=gen))
    rows = (dy[:, None] + torch.arange(h, device=x.device))[:, :, None]           # (B, H, 1)
    cols = (dx[:, None] + torch.arange(w, device=x.device))[:, None, :]           # (B, 1, W)
    picked = padded[torch.arange(b, device=x.device)[:, None, None], :, rows, cols]   # (B, H, W, C)
    return picked.permute(0, 3, 1, 2)                 # (B, C, H, W) in channels_last memory


class Batches:
    """Epochs of shuffled batches drawn without replacement from tensors on the device, augmented if images."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch: int, augment_images: bool):
        self.x, self.y, self.size, self.augment = x, y, min(batch, len(x)), augment_images and x.dim() == 4
        self.order, self.at = None, len(x)

    def __call__(self, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        if self.at + self.size > len(self.x):
            self.order, self.at = torch.randperm(len(self.x), device=self.x.device, generator=gen), 0
        idx = self.order[self.at:self.at + self.size]
        self.at += self.size
        x = self.x[idx]
        return (augment(x, gen) if self.augment else x), self.y[idx]


def accuracy(x: torch.Tensor, y: torch.Tensor):
    """model -> top-1 accuracy on (x, y), in batches of EVAL_BATCH."""
    def evaluate(model: nn.Module) -> float:
        correct = sum(int((model(x[i:i + EVAL_BATCH]).argmax(-1) == y[i:i + EVAL_BATCH]).sum())
                      for i in range(0, len(x), EVAL_BATCH))      # sync point: one per eval batch
        return correct / len(x)
    return evaluate


def check_labels(y: torch.Tensor, classes: int, where: str) -> None:
    if len(y) == 0:
        raise UserError(f"{where}: no examples")
    if int(y.min()) < 0 or int(y.max()) >= classes:
        raise UserError(f"{where}: labels out of range: {int(y.min())}..{int(y.max())} for {classes} classes")


def held_out(x, y) -> dict:
    """One labelled set (tensors or arrays) split in two: every HOLD_OUT-th example validates."""
    held = np.arange(len(y)) % HOLD_OUT == HOLD_OUT - 1
    return {"train_x": x[~held], "train_y": y[~held], "test_x": x[held], "test_y": y[held]}


def normalize(train_x: torch.Tensor, test_x: torch.Tensor):
    """Both sets scaled by the training set's per-channel mean and std (dim 1 is the channel or feature)."""
    dims = [d for d in range(train_x.dim()) if d != 1]
    mean, std = train_x.mean(dims, keepdim=True), train_x.std(dims, keepdim=True).clamp(min=1e-6)
    return (train_x - mean) / std, (test_x - mean) / std


def sgd_schedule(steps: int, warmup: float = 0.2, floor: float = 0.02):
    """LR multiplier: linear warm-up over the first `warmup` share of `steps`, linear decay to `floor` at the end
    (airbench's triangle), then held at `floor` for runs that go on."""
    top = max(1, int(steps * warmup))

    def lr_at(step: int) -> float:
        return (step + 1) / top if step < top else max(floor, 1 - (1 - floor) * (step - top) / max(1, steps - top))
    return lr_at


def task(name: str, data: dict, device, *, classes: int, batch: int | None = None, target: float = TARGET,
         model=None, sgd_epochs=None, info: dict | None = None) -> Task:
    """A classification Task from CPU tensors data = {train_x, train_y, test_x, test_y} (float images (N, C, H, W)
    or features (N, F); int64 labels). The model: `model` (a factory's) or the fast ResNet / an MLP. sgd_epochs:
    airbench's SGD and schedule planned over that many epochs; None: AdamW at lr 1e-3, constant."""
    batch = batch or BATCH
    check_labels(data["train_y"], classes, f"{name} training set")
    check_labels(data["test_y"], classes, f"{name} test set")
    train_x, test_x = normalize(data["train_x"].float(), data["test_x"].float())
    train_x, test_x = train_x.to(device), test_x.to(device)
    train_y, test_y = data["train_y"].long().to(device), data["test_y"].long().to(device)
    images = train_x.dim() == 4
    make = model or ((lambda: fast_resnet(train_x.shape[1], classes)) if images else
                     (lambda: mlp(train_x[0].numel(), classes)))
    per_epoch = len(train_x) / min(batch, len(train_x))
    optimizer, lr_at = _optimizer(sgd_epochs, per_epoch, batch, device)
    return Task(workload=name, metric="accuracy", higher_is_better=True, target=target, bounds=(0.0, 1.0),
                make_model=make, batch=Batches(train_x, train_y, batch, augment_images=True),
                evaluate=accuracy(test_x, test_y),
                loss_fn=lambda logits, y: F.cross_entropy(logits.float(), y, label_smoothing=LABEL_SMOOTHING),
                optimizer=optimizer, steps_per_epoch=per_epoch, items_per_step=min(batch, len(train_x)),
                unit="img/s" if images else "samples/s", eval_every=max(1, round(per_epoch)), lr_at=lr_at,
                info={"classes": classes, "train": len(train_x), "test": len(test_x),
                      "shape": list(train_x.shape[1:]), "batch": batch, **(info or {})})


def _optimizer(sgd_epochs, per_epoch: float, batch: int, device):
    fused = torch.device(device).type == "cuda"
    if sgd_epochs is None:
        return (lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=5e-4, fused=fused)), None
    lr = 0.2 * batch / 512            # the linear scaling rule from a batch-512 base

    def make(params):
        return torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4 * 512 / batch)
    return make, sgd_schedule(round(sgd_epochs * per_epoch))
