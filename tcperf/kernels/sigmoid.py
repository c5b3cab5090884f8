"""Lesson 3, sigmoid: y = 1 / (1 + exp(-x)), elementwise.

Four operations per element instead of one (negate, exp, add, divide), yet the kernel runs exactly as fast as the
vector add per byte: the arithmetic happens in registers while the program waits for memory, so it is free. This is
why frameworks fuse elementwise operations into the kernel before or after them (lesson 7, the dense layer, fuses
this very sigmoid into a matmul). NumPy, in contrast, makes a pass over memory for each of the four operations.

    python -m tcperf lab --kernels sigmoid
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def sigmoid_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)    # compute in fp32 whatever the storage type
    y = 1.0 / (1.0 + tl.exp(-x))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def triton_fn(x: torch.Tensor) -> torch.Tensor:
    assert x.is_contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    sigmoid_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK)
    return y


def torch_fn(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x)


def numpy_fn(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """In place in `out`: four passes over memory, no temporaries."""
    out = np.negative(x, out=out)
    np.exp(out, out=out)
    out += 1.0
    return np.reciprocal(out, out=out)


def make_inputs(n: int, dtype: torch.dtype, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    from ..ops.base import randn
    return (randn((n,), dtype, "cpu", gen, scale=4.0),)    # x: [n], spread over sigmoid's curved range


def flops(n: int) -> float:
    return 4.0 * n                                  # negate, exp, add, divide (exp counted as one)


def bytes_moved(n: int, itemsize: int) -> float:
    return 2.0 * n * itemsize                       # x read once, y written once
