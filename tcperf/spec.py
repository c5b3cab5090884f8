"""A model spec: a model, the inputs it is called with, and how it trains. The model ladder's built-in models and
the user's own (`tcperf advise file.py:factory`) are both specs (tcperf.source loads them and ships them to workers),
and tcperf.engine runs recipes on either in the same way.

Outputs are whatever the model returns: a tensor, a tuple or list, a dict, a Hugging Face `ModelOutput` (a dict
that is also indexed by position), a dataclass or a named tuple. `map_tensors` rebuilds each with its own type, so
code that rewrites outputs (casting, cloning, moving) hands the model's next layer what it expects.
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import torch


@dataclass
class Spec:
    model: torch.nn.Module
    args: tuple                   # positional example inputs
    kwargs: dict = field(default_factory=dict)
    loss_fn: Callable | None = None
    metric_fn: Callable | None = None
    name: str = "model"
    targets: Any = None           # passed to loss_fn(outputs, targets) when given
    optimizer: Callable | None = None   # params -> optimizer (default: AdamW, lr 1e-3)
    items: int | None = None      # images, tokens or samples one step processes (throughput)
    unit: str | None = None       # img/s | tokens/s | samples/s
    flops: Callable | None = None  # mode -> FLOPs of one step, where FlopCounterMode cannot see them (cuDNN RNNs)
    workload: list | None = None  # the stream of per-step inputs [(args, kwargs)] (tcperf.workload), or None

    @property
    def example_inputs(self):
        """As recipes.prepare and the user gave them: positional tuple, or a dict of keyword arguments."""
        return self.kwargs if self.kwargs else self.args

    def forward(self):
        return self.model(*self.args, **self.kwargs)


# --- outputs of any shape -------------------------------------------------------------------------------------------
def map_tensors(fn, x):
    """fn applied to every tensor inside x, each container rebuilt with its own type (ModelOutput, dataclass and
    named tuple included)."""
    if torch.is_tensor(x):
        return fn(x)
    if isinstance(x, tuple) and hasattr(x, "_fields"):                      # named tuple
        return type(x)(*(map_tensors(fn, v) for v in x))
    if isinstance(x, (tuple, list)):
        return type(x)(map_tensors(fn, v) for v in x)
    if isinstance(x, dict):
        out = copy.copy(x)       # keeps a ModelOutput a ModelOutput (it is indexed by position too: out[1])
        for k, v in x.items():
            out[k] = map_tensors(fn, v)
        return out
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.replace(x, **{f.name: map_tensors(fn, getattr(x, f.name))
                                         for f in dataclasses.fields(x) if f.init})
    return x


def all_tensors(x) -> list[torch.Tensor]:
    """Every tensor inside x, in order (containers as map_tensors sees them)."""
    if torch.is_tensor(x):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in all_tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in all_tensors(v)]
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return [t for f in dataclasses.fields(x) for t in all_tensors(getattr(x, f.name))]
    return []


def tensors(x) -> list[torch.Tensor]:
    """Every floating-point tensor in an output, in order."""
    return [t for t in all_tensors(x) if t.is_floating_point() or t.is_complex()]


def to_device(x, device):
    return map_tensors(lambda t: t.to(device), x)


class Bound(torch.nn.Module):
    """The model called with the spec's inputs, taking only their top-level tensors positionally (what
    recipes.prepare passes): keyword inputs and non-tensor arguments are bound here."""

    def __init__(self, model: torch.nn.Module, args: tuple, kwargs: dict):
        super().__init__()
        self.model = model
        self.args = [None if torch.is_tensor(a) else a for a in args]
        self.kwargs = {k: None if torch.is_tensor(v) else v for k, v in kwargs.items()}
        self.tensor_args = [i for i, a in enumerate(args) if torch.is_tensor(a)]
        self.tensor_kwargs = [k for k, v in kwargs.items() if torch.is_tensor(v)]

    def forward(self, *tensors):
        args, kwargs = list(self.args), dict(self.kwargs)
        for i, t in zip(self.tensor_args, tensors):
            args[i] = t
        for k, t in zip(self.tensor_kwargs, tensors[len(self.tensor_args):]):
            kwargs[k] = t
        return self.model(*args, **kwargs)


def tensor_inputs(spec: Spec) -> tuple:
    return (*(a for a in spec.args if torch.is_tensor(a)), *(v for v in spec.kwargs.values() if torch.is_tensor(v)))


def callable_model(spec: Spec, model: torch.nn.Module | None = None) -> torch.nn.Module:
    """The model as recipes.prepare calls it, with positional tensors only."""
    model = spec.model if model is None else model
    plain = not spec.kwargs and all(torch.is_tensor(a) for a in spec.args)
    return model if plain else Bound(model, spec.args, spec.kwargs)
