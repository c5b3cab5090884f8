"""Sensitive layers: when an autocast recipe misses the tolerance, find the modules that cause it, and the fix that
keeps just those in float32.

The search runs the model in float32 with exactly one subtree under autocast and descends the module tree: a child
whose subtree alone breaks the tolerance is searched further; a failing module none of whose children fails alone
is the culprit (its own code, or its children together). One forward per module tested, so a 12-block transformer
costs a few dozen forwards, not a bisection over every combination.

    names = find(model, args, kwargs, torch.bfloat16, "cuda", error_of, tolerance)   # ['block.2.norm']
    keep_fp32(model, names, "cuda")       # the fix, also printed in the verdict's code snippets
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch


def keep_fp32(model, names, device_type="cuda"):
    """Run the named submodules in float32 under autocast: autocast is off inside them and their floating-point
    inputs are cast to float32. Names and state_dict keys stay as they were."""
    def fp32_forward(forward):
        def wrapped(self, *args, **kwargs):
            cast = lambda x: x.float() if torch.is_tensor(x) and x.is_floating_point() else x  # noqa: E731
            with torch.autocast(device_type, enabled=False):
                return forward(self, *map(cast, args), **{k: cast(v) for k, v in kwargs.items()})
        return wrapped

    for name in names:
        module = model.get_submodule(name)
        cls = type(module)
        module.__class__ = type(cls.__name__, (cls,), {"forward": fp32_forward(cls.forward)})
    return model


@contextlib.contextmanager
def autocast_only(model: torch.nn.Module, names: list[str], dtype: torch.dtype, device_type: str):
    """Inside: the model runs in float32 except the named subtrees, which run under autocast(dtype); their
    floating-point outputs are cast back to float32, so the rest of the model takes them as it would in fp32."""
    modules = [model.get_submodule(n) for n in names]
    saved = [m.__class__ for m in modules]
    for module, cls in zip(modules, saved):
        module.__class__ = type(cls.__name__, (cls,), {"forward": _autocast_forward(cls.forward, dtype, device_type)})
    try:
        yield model
    finally:
        for module, cls in zip(modules, saved):
            module.__class__ = cls


def _autocast_forward(forward, dtype, device_type):
    def wrapped(self, *args, **kwargs):
        with torch.autocast(device_type, dtype=dtype):
            out = forward(self, *args, **kwargs)
        return _to_float32(out)     # rounded to low precision by the module, handed on as float32
    return wrapped


def _to_float32(x):
    if torch.is_tensor(x):
        return x.float() if x.is_floating_point() else x
    if isinstance(x, (tuple, list)):
        return type(x)(_to_float32(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_float32(v) for k, v in x.items()}
    return x


def _children(model: torch.nn.Module, name: str) -> list[str]:
    module = model.get_submodule(name)
    return [f"{name}.{child}" if name else child for child, _ in module.named_children()]


def find(model: torch.nn.Module, run: Callable[[], object], dtype: torch.dtype, device_type: str,
         error_of: Callable[[object], float], tolerance: float, max_tests: int = 400) -> dict:
    """Descend the module tree from the top; `run()` is one float32 forward returning the outputs and `error_of`
    their error against float32. Returns {modules: [culprits], errors: {name: error alone}, tests: forwards run}."""
    errors: dict[str, float] = {}

    def alone(name: str) -> float:
        if name not in errors and len(errors) < max_tests:
            with autocast_only(model, [name], dtype, device_type), torch.no_grad():
                errors[name] = error_of(run())
        return errors.get(name, 0.0)

    def descend(name: str) -> list[str]:
        failing = [c for c in _children(model, name) if not alone(c) <= tolerance]   # NaN counts as failing
        if not failing:
            return [name] if name else []
        return [found for child in failing for found in descend(child)]

    culprits = descend("")
    return {"modules": culprits, "errors": {n: errors[n] for n in culprits if n in errors},
            "tests": len(errors), "dtype": str(dtype).replace("torch.", "")}
