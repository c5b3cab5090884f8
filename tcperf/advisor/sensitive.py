"""Sensitive layers: when an autocast recipe misses the tolerance, find the modules that cause it, and the fix that
keeps just those in float32.

The search runs the model in float32 with exactly one subtree in low precision (under autocast for the amp recipes;
cast to fp16/bf16, weights and inputs, for the weight-cast recipes) and descends the module tree: a child whose
subtree alone breaks the tolerance is searched further; a failing module none of whose children fails alone is the
culprit (its own code, or its children together). One forward per module tested, so a 12-block transformer costs
a few dozen forwards, not a bisection over every combination. Whatever a module returns (a tensor, a tuple, a
Hugging Face ModelOutput, a dataclass) is handed on with its own type.

    names = find(model, run, torch.bfloat16, "cuda", error_of, tolerance)   # ['block.2.norm']
    keep_fp32(model, names, "cuda")       # the fix (tcperf.islands), also printed in the verdict's code snippets
"""
from __future__ import annotations

import contextlib
import copy
from typing import Callable

import torch

from ..islands import cast_floats


class LowpOnly(torch.nn.Module):
    """`module` in low precision inside a float32 model (autocast, or with cast_weights a copy cast to dtype, inputs
    too); its floating-point outputs go on as float32, as the rest of the model takes them in fp32."""

    def __init__(self, module, dtype, device_type, cast_weights=False):
        super().__init__()
        self.module = copy.deepcopy(module).to(dtype) if cast_weights else module
        self.dtype, self.device_type, self.cast_weights = dtype, device_type, cast_weights

    def forward(self, *args, **kwargs):
        if self.cast_weights:
            out = self.module(*cast_floats(args, self.dtype), **cast_floats(kwargs, self.dtype))
        else:
            with torch.autocast(self.device_type, dtype=self.dtype):
                out = self.module(*args, **kwargs)
        return cast_floats(out, torch.float32)     # rounded to low precision by the module, handed on as float32


@contextlib.contextmanager
def lowp_only(model: torch.nn.Module, name: str, dtype: torch.dtype, device_type: str, cast_weights: bool = False):
    """Inside: the model runs in float32 except the named subtree, swapped for a LowpOnly around it in its parent;
    the original is put back on the way out."""
    parent, _, child = name.rpartition(".")
    owner = model.get_submodule(parent)
    module = getattr(owner, child)
    setattr(owner, child, LowpOnly(module, dtype, device_type, cast_weights))
    try:
        yield model
    finally:
        setattr(owner, child, module)


def _children(model: torch.nn.Module, name: str) -> list[str]:
    return [f"{name}.{child}" if name else child for child, _ in model.get_submodule(name).named_children()]


def find(model: torch.nn.Module, run: Callable[[], object], dtype: torch.dtype, device_type: str,
         error_of: Callable[[object], float], tolerance: float, max_tests: int = 400,
         cast_weights: bool = False) -> dict:
    """Descend the module tree from the top; `run()` is one float32 forward returning the outputs and `error_of`
    their error against float32. Returns {modules: [culprits], errors: {name: error alone}, tests: forwards run}."""
    errors: dict[str, float] = {}

    def alone(name: str) -> float:
        if name not in errors and len(errors) < max_tests:
            with lowp_only(model, name, dtype, device_type, cast_weights), torch.no_grad():
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
