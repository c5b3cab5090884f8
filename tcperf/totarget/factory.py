"""Your model (`file.py:factory`, loaded by tcperf.source exactly as `tcperf advise` loads it) trained on
your classification data (--data: an ImageFolder directory or an .npz file) to a target accuracy. The factory may
return the model alone (the data brings the inputs). The model takes a batch of inputs and returns (B, classes)
logits; the loss is label-smoothed cross-entropy.

Each seeded run starts from the factory's model with every layer that has `reset_parameters()` re-drawn at the
run's seed, so runs differ in initialisation as well as data order.

    tcperf train-to-target examples/my_net.py:factory --data digits.npz --target accuracy=0.95
"""
from __future__ import annotations

import copy

import torch

from ..errors import UserError, one_line
from ..source import load_spec
from . import folder, need_data, npz


def build(options: dict, device):
    spec = load_spec(options["workload"], fallback_inputs=())     # the data brings the inputs
    path = need_data(options, "DIR or FILE.npz (the classification data the model trains on)")
    task = (folder if path.is_dir() else npz).build(options, device, model=_maker(spec.model))
    _check_output(task, spec.model)
    task.info["factory"] = options["workload"]
    return task


def _maker(model: torch.nn.Module):
    def make() -> torch.nn.Module:
        fresh = copy.deepcopy(model)
        for m in fresh.modules():
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()          # drawn at the caller's seed
        return fresh
    return make


def _check_output(task, model: torch.nn.Module) -> None:
    """The model must map a batch of the data to (B, classes) logits; UserError saying what it returned."""
    x = task.batch.x[:2]
    classes = task.info["classes"]
    try:
        with torch.no_grad():
            out = copy.deepcopy(model).to(x.device).eval()(x[:2])
    except Exception as e:
        raise UserError(f"{task.workload}: the model rejects the data's inputs {tuple(x.shape[1:])}: "
                        f"{one_line(e)}") from None
    if not torch.is_tensor(out) or tuple(out.shape) != (len(x[:2]), classes):
        shape = tuple(out.shape) if torch.is_tensor(out) else type(out).__name__
        raise UserError(f"{task.workload}: the model returns {shape}; it must return logits (batch, {classes})")
