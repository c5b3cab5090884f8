"""Time to accuracy (`tcperf train-to-target`): train until a validation metric first reaches a target, per
precision recipe, over N seeded runs; DAWNBench's end-to-end measure.

A workload is one module with `build(options: dict, device) -> Task`; WORKLOADS maps names to modules of this
package (adding one is one module and one entry). `file.py:factory` (a user's model, loaded by tcperf.source like
`advise`) trains on the classification data given with --data (an ImageFolder directory or an .npz file).

    task = build({"workload": "bytes-gpt", "size": "small"}, "cpu")
    row = loop.train_to_target(task, "amp_bf16", "cuda", seed=0, budget=Budget(max_steps=2000))
"""
from __future__ import annotations

import importlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from ..errors import UserError, choices

WORKLOADS = {"bytes-gpt": "bytes_gpt", "cifar10": "cifar10", "imagefolder": "folder", "npz": "npz"}
DEFAULT = "bytes-gpt"


@dataclass
class Task:
    """One workload, ready to train on a device: data resident there, a model maker, a fixed validation set."""
    workload: str
    metric: str                                   # "bpb" (bits per byte) | "accuracy"
    higher_is_better: bool
    target: float                                 # the default target
    bounds: tuple[float, float]                   # every value the metric can take lies in [lo, hi]
    make_model: Callable[[], torch.nn.Module]     # random init at the current torch seed
    batch: Callable[[torch.Generator], tuple]     # one training batch (inputs, targets) on the device
    evaluate: Callable[[torch.nn.Module], float]  # the metric on the fixed validation set
    loss_fn: Callable
    optimizer: Callable                           # params -> optimizer
    steps_per_epoch: float
    items_per_step: int
    unit: str                                     # tokens/s | img/s | samples/s
    eval_every: int                               # steps between evaluations (the fixed schedule)
    lr_at: Callable[[int], float] | None = None   # LR multiplier at a step (LambdaLR); None: constant
    info: dict = field(default_factory=dict)      # what to store: data files, checksum, model size, config


def is_factory(name: str) -> bool:
    return name.endswith(".py") or ".py:" in name


def module_for(name: str):
    """The workload module for a name or a `file.py:factory`; UserError naming the valid choices."""
    if is_factory(name):
        return importlib.import_module(f"{__name__}.factory")
    if name not in WORKLOADS:
        raise choices("workload", name, [*WORKLOADS, "file.py:factory"])
    return importlib.import_module(f"{__name__}.{WORKLOADS[name]}")


def build(options: dict, device) -> Task:
    """The task `options` name (workload, data, size, ...) on `device`."""
    return module_for(options["workload"]).build(options, torch.device(device))


def need_data(options: dict, what: str) -> Path:
    """The --data path a workload needs; UserError when it is missing or absent."""
    if not options.get("data"):
        raise UserError(f"workload {options['workload']} needs --data {what}")
    path = Path(options["data"]).expanduser()
    if not path.exists():
        raise UserError(f"--data {path}: no such file or directory")
    return path


_TARGET = re.compile(r"^\s*([A-Za-z_][\w]*)\s*=\s*([-+0-9.eE]+)\s*(%?)\s*$")


def parse_target(text: str | None, task: Task) -> float:
    """'bpb=1.9' | 'accuracy=0.94' | 'accuracy=94%' -> the value; the task's default when None. UserError for a
    malformed target, another metric, or a value the metric can never take."""
    if text is None:
        return task.target
    m = _TARGET.match(text)
    if not m:
        raise UserError(f"bad --target {text!r}; give METRIC=VALUE, e.g. {task.metric}={task.target:g}")
    name, value = m.group(1), float(m.group(2)) / (100 if m.group(3) else 1)
    if name != task.metric:
        raise UserError(f"--target {text!r}: workload {task.workload} measures {task.metric}, not {name}")
    lo, hi = task.bounds
    if not math.isfinite(value) or not lo < value <= hi:
        raise UserError(f"--target {text!r}: {task.metric} can never reach it (it lies in [{lo:g}, {hi:g}])")
    return value


def reached(value: float, target: float, higher_is_better: bool) -> bool:
    """Has the metric reached the target? (NaN never has.)"""
    return value >= target if higher_is_better else value <= target
