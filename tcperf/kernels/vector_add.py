"""Lesson 1, vector add: z = x + y, the "hello world" of GPU kernels.

A Triton kernel is a function that one *program* runs on one block of the data; the launch *grid* says how many
programs run. Here program `pid` adds elements [pid * BLOCK, (pid + 1) * BLOCK) and a mask keeps the last program
inside the vector. There is no loop over the data: the GPU runs the programs in parallel, many per SM.

The arithmetic is one add per 12 bytes moved (two fp32 reads, one write): any GPU is starved by its memory here, so
the kernel is rated in GB/s against the memory ceiling, and the question of the lab is whether copying x and y to
the GPU and z back costs more than NumPy's whole add on the CPU (docs/lab.md has the measured answer).

    python -m tcperf lab --kernels vector_add
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

BLOCK = 1024          # elements per program: 4 warps x 32 threads x 8 elements each


@triton.jit
def add_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)                          # which block of the vector this program adds
    offs = pid * BLOCK + tl.arange(0, BLOCK)        # [BLOCK] element indices
    mask = offs < n                                 # the last block may stick out past the end
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(z_ptr + offs, x + y, mask=mask)


def triton_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Launch wrapper: allocate z and start one program per BLOCK elements."""
    assert x.shape == y.shape and x.is_contiguous() and y.is_contiguous()
    z = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, BLOCK),)
    add_kernel[grid](x, y, z, n, BLOCK=BLOCK)
    return z


def torch_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def numpy_fn(x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    return np.add(x, y, out=out)


def make_inputs(n: int, dtype: torch.dtype, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    from ..ops.base import randn
    return randn((n,), dtype, "cpu", gen), randn((n,), dtype, "cpu", gen)     # x, y: [n]


def flops(n: int) -> float:
    return float(n)                                 # one add per element


def bytes_moved(n: int, itemsize: int) -> float:
    return 3.0 * n * itemsize                       # x and y read once, z written once
