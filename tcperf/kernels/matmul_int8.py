"""Lesson 8 (stretch), int8 matmul: int8 operands, exact int32 accumulation on the Tensor Cores.

Lesson 6's kernel once more: given int8 operands, `matmul_tc_kernel` takes an int32 accumulator and exact ("ieee")
products, and `tl.dot` on int8 tiles compiles to integer Tensor Core instructions (`mma ... .s8` on Ampere,
`wgmma ... .s8` on Hopper, twice the fp16 rate on paper: H100 SXM 1979 TOPS). The weight is stored as nn.Linear
stores it, W [N, K], so both operands are K-major in memory, the layout 8-bit Tensor Core instructions read
directly; the kernel computes C = A @ W^T.

The library baseline is `torch._int_mm(A, W.t())` (cuBLASLt, B column-major). On an H200 (2026-11-22, 8192^3)
it ran at 923 TOPS and this kernel at 1130 (1.22x); with B row-major cuBLAS falls back to an sm80 WMMA kernel at
126 TOPS (anchors.md): the layout, not the library, costs 7x there.

    python -m tcperf lab --kernels matmul_int8 --sizes 4096,8192
"""
from __future__ import annotations

from functools import partial

import numpy as np
import torch

from .matmul_naive import flops  # noqa: F401
from .matmul_tc import autotuned, chosen_config, launch, matmul_tc_kernel

matmul_int8_kernel = matmul_tc_kernel                              # int8 pointers: the int32 accumulator
matmul_int8_tuned = autotuned(matmul_int8_kernel, block_k=128)     # lesson 6's tiles, 128 bytes of K a step


def triton_fn(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """C [M, N] int32 = A [M, K] int8 @ W [N, K]^T int8."""
    assert a.dtype == w.dtype == torch.int8 and a.shape[1] == w.shape[1]
    c = torch.empty((a.shape[0], w.shape[0]), dtype=torch.int32, device=a.device)
    launch(matmul_int8_kernel, matmul_int8_tuned, a, w.t(), c)    # w.t(): a [K, N] view, K contiguous
    return c


tuned_config = partial(chosen_config, matmul_int8_tuned)


def torch_fn(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch._int_mm(a, w.t())                  # cuBLASLt int8 x int8 -> int32


def numpy_fn(a: np.ndarray, w: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    return np.matmul(a, w.T, out=out)               # given float64 arrays: exact for int8 products


def make_inputs(n: int, dtype: torch.dtype, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    from ..ops.base import rand_int8
    return rand_int8((n, n), "cpu", gen), rand_int8((n, n), "cpu", gen)    # A: [n, n] (M x K), W: [n, n] (N x K)


def bytes_moved(n: int, itemsize: int) -> float:
    return 2.0 * n * n * itemsize + 4.0 * n * n     # A and W read once (1 byte each), C written once (int32)


