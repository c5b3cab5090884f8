"""The operation registry: name -> Op. Adding an operation is one module and one line here.

A case may also name an op as 'package.module:ATTR' (used by the tests to inject broken, crashing and hanging
ops into real worker processes).
"""
from __future__ import annotations

import importlib

from ..errors import choices
from .base import Op

_MODULES = {
    "gemm": "tcperf.ops.gemm",
    "copy": "tcperf.ops.copy",
    "conv": "tcperf.ops.conv",
    "rnn": "tcperf.ops.rnn",
    "attention": "tcperf.ops.attention",
    "sparse": "tcperf.ops.sparse",
}


def names() -> list[str]:
    return list(_MODULES)


def get(name: str) -> Op:
    if ":" in name:
        module, attr = name.split(":", 1)
        return getattr(importlib.import_module(module), attr)
    if name not in _MODULES:
        raise choices("operation", name, _MODULES)
    return importlib.import_module(_MODULES[name]).OP
