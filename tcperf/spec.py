"""A model spec: a model, the inputs it is called with, and how it trains; and how a worker process gets the same
one back. The model ladder's built-in models and the user's own (`tcperf advise file.py:factory`) are both specs,
and tcperf.engine runs recipes on either in the same way.

    spec = builtin("gpt2", "small", batch=2, seed=0, device="cpu")    # a ladder model at a fixed seed
    source = save_source(spec, folder, target="examples/awkward_mlp.py:factory")   # for the workers
    spec = load_source(source, device)                                # in a worker: the same weights and inputs

Outputs are whatever the model returns: a tensor, a tuple or list, a dict, a Hugging Face `ModelOutput` (a dict
that is also indexed by position), a dataclass or a named tuple. `map_tensors` rebuilds each with its own type, so
code that rewrites outputs (casting, cloning, moving) hands the model's next layer what it expects.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
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


def detach_clone(x):
    return map_tensors(lambda t: t.detach().clone(), x)


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


# --- built-in models ------------------------------------------------------------------------------------------------
def builtin(name: str, config: str, batch: int, seed: int, device) -> Spec:
    """A model of the ladder (tcperf.models) at `seed`, made on the device, with its synthetic batch."""
    from . import models
    mod = models.get(name)
    cfg = models.config(mod, config)
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    inputs, targets = mod.make_batch(cfg, batch, device, gen)
    torch.manual_seed(seed)
    with device:
        model = mod.build(cfg)
    formula = getattr(mod, "flops", None)
    return Spec(model, tuple(inputs), {}, mod.loss_fn, None, name, targets,
                optimizer=lambda params: models.make_optimizer(mod, params),
                items=mod.items_per_batch(cfg, batch), unit=mod.UNIT,
                flops=(lambda mode: formula(cfg, batch, mode)) if formula else None)


# --- the same spec in a worker --------------------------------------------------------------------------------------
def save_source(spec: Spec, folder, target: str | None = None) -> dict:
    """What a worker needs to rebuild `spec`: the factory target (its functions come back by calling it again) plus
    the parent's weights and inputs, so that every worker measures the very same model; without a target, the whole
    spec pickled (cloudpickle where installed). Raises when the spec cannot be pickled (without cloudpickle: a
    lambda, a class defined in a function)."""
    folder = Path(folder)
    if target:
        path = folder / "spec-state.pt"
        torch.save({"state": spec.model.state_dict(), "args": spec.args, "kwargs": spec.kwargs,
                    "targets": spec.targets}, path)
        return {"kind": "file", "target": target, "state": str(path), "name": spec.name}
    path = folder / "spec.pt"
    torch.save(spec, path, pickle_module=_pickler())
    return {"kind": "pickle", "path": str(path), "files": _user_files()}


def _user_files() -> list[str]:
    """The users' files imported by tcperf (advisor.load): a pickled model whose class lives in one refers to it
    by its module name, so a worker imports them under the same names before unpickling."""
    import sys
    return [m.__file__ for name, m in list(sys.modules.items())
            if name.startswith("tcperf_user_") and getattr(m, "__file__", None)]


def _pickler():
    """cloudpickle where it is installed (it carries lambdas, and classes defined in a script, by value); else
    the standard library's pickle."""
    try:
        import cloudpickle
        return cloudpickle
    except ImportError:
        import pickle
        return pickle


def load_source(source: dict, device) -> Spec:
    """The spec a source names, on `device`."""
    device = torch.device(device)
    kind = source["kind"]
    if kind == "builtin":
        return builtin(source["model"], source.get("config", "full"), source["batch"], source.get("seed", 0), device)
    if kind == "pickle":
        from .advisor.load import import_file
        for file in source.get("files", []):
            import_file(Path(file))
        spec = torch.load(source["path"], weights_only=False)
    elif kind == "file":
        from .advisor.load import load_spec
        spec = load_spec(source["target"])
        saved = torch.load(source["state"], weights_only=False)
        spec.model.load_state_dict(saved["state"])
        spec.args, spec.kwargs, spec.targets = saved["args"], saved["kwargs"], saved["targets"]
        spec.name = source.get("name", spec.name)
    else:
        raise ValueError(f"unknown spec source {kind!r}")
    return on_device(spec, device)


def on_device(spec: Spec, device) -> Spec:
    """The spec with its model (moved in place, as .to() does) and inputs on `device`."""
    spec.model = spec.model.to(device)
    spec.args, spec.kwargs, spec.targets = (to_device(x, device) for x in (spec.args, spec.kwargs, spec.targets))
    return spec


def module_name(path: Path) -> str:
    """A module name for a user's file, the same in every process (sys.modules and pickles refer to it)."""
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    return f"tcperf_user_{path.stem}_{digest}"
