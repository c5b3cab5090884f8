"""Lesson 2, matrix add: C = A + B on n x n matrices, with a 2-D grid of 2-D blocks.

Program (pid_m, pid_n) adds the BLOCK_M x BLOCK_N tile whose top-left corner is (pid_m * BLOCK_M, pid_n * BLOCK_N).
Rows and columns are reached through strides, so the same kernel adds transposed or sliced views; the mask is now
2-D (rows past M, columns past N). A row of a tile is BLOCK_N contiguous elements, so the threads of a warp read
neighbouring addresses (coalesced) as long as the matrices are row-major.

Still one add per 12 bytes: a memory-bound kernel, rated in GB/s, that should match vector_add's rate.

    python -m tcperf lab --kernels matrix_add --sizes 1024,8192
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .vector_add import numpy_fn, torch_fn  # noqa: F401  (the same add, element by element)

BLOCK_M, BLOCK_N = 16, 256     # 4096 elements per program; a tile row is 1 KiB of fp32


@triton.jit
def matrix_add_kernel(a_ptr, b_ptr, c_ptr, M, N,
                      stride_am, stride_an, stride_bm, stride_bn, stride_cm, stride_cn,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)                                # which block row
    pid_n = tl.program_id(1)                                # which block column
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)          # [BLOCK_M]
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)          # [BLOCK_N]
    mask = (rows[:, None] < M) & (cols[None, :] < N)        # [BLOCK_M, BLOCK_N]
    a = tl.load(a_ptr + rows[:, None] * stride_am + cols[None, :] * stride_an, mask=mask)
    b = tl.load(b_ptr + rows[:, None] * stride_bm + cols[None, :] * stride_bn, mask=mask)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, a + b, mask=mask)


def triton_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Launch wrapper: one program per BLOCK_M x BLOCK_N tile of C."""
    assert a.shape == b.shape and a.dim() == 2
    M, N = a.shape
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    matrix_add_kernel[grid](a, b, c, M, N, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                            c.stride(0), c.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
    return c


def make_inputs(n: int, dtype: torch.dtype, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    from ..ops.base import randn
    return randn((n, n), dtype, "cpu", gen), randn((n, n), dtype, "cpu", gen)     # A, B: [n, n]


def flops(n: int) -> float:
    return float(n * n)                             # one add per element


def bytes_moved(n: int, itemsize: int) -> float:
    return 3.0 * n * n * itemsize                   # A and B read once, C written once
