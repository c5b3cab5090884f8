"""The operation registry: name -> Op, the `OP` of module tcperf.ops.NAME. Adding an operation is one module and one
name here.

A case may also name an op as 'package.module:ATTR' (used by the tests to inject broken, crashing and hanging
ops into real worker processes).
"""
from __future__ import annotations

import importlib

from ..errors import choices
from .base import Op

NAMES = ("gemm", "copy", "conv", "rnn", "attention", "sparse")


def names() -> list[str]:
    return list(NAMES)


def get(name: str) -> Op:
    if ":" in name:
        module, attr = name.split(":", 1)
        return getattr(importlib.import_module(module), attr)
    if name not in NAMES:
        raise choices("operation", name, NAMES)
    return importlib.import_module(f"{__name__}.{name}").OP
