"""Lesson 4, naive matmul: C = A @ B with one output element per program and no tiling.

Program (i, j) walks row i of A and column j of B, BLOCK_K elements at a time, and sums their products: the
textbook triple loop with the two outer loops turned into the launch grid. It is correct, and it is slow: every
program reads 2K values from memory to do 2K FLOPs, so the whole product reads 2 n^3 values where n^2 * 3 would
do, and a column of B is BLOCK_K scattered addresses. The caches soften it; they do not save it. Lesson 5 (tiled)
fixes the reuse, lesson 6 (Tensor Cores) the arithmetic.

FLOPs of an (M x K) @ (K x N) product: 2 * M * N * K (a multiply and an add per term), the same for every matmul
module, and the same as NumPy's or cuBLAS's.

    python -m tcperf lab --kernels matmul_naive --sizes 256,1024
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

BLOCK_K = 128      # elements of the dot product each step loads from the row of A and the column of B


@triton.jit
def matmul_naive_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                        BLOCK_K: tl.constexpr):
    i = tl.program_id(0)                            # the row of C this program computes ...
    j = tl.program_id(1)                            # ... and its column: one element
    partial = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        k = step * BLOCK_K + tl.arange(0, BLOCK_K)  # [BLOCK_K]
        a = tl.load(a_ptr + i * stride_am + k * stride_ak, mask=k < K, other=0.0)     # A[i, k0:k0+BLOCK_K]
        b = tl.load(b_ptr + k * stride_bk + j * stride_bn, mask=k < K, other=0.0)     # B[k0:k0+BLOCK_K, j]
        partial += a * b
    tl.store(c_ptr + i * stride_cm + j * stride_cn, tl.sum(partial, axis=0))


def triton_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Launch wrapper: an M x N grid, one program per element of C."""
    (M, K), (_, N) = a.shape, b.shape
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    matmul_naive_kernel[(M, N)](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                c.stride(0), c.stride(1), BLOCK_K=BLOCK_K, num_warps=4)
    return c


def torch_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b                                    # cuBLAS (TF32 off: the lab runs fp32 as strict fp32)


def numpy_fn(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    return np.matmul(a, b, out=out)                 # BLAS on every CPU core


def make_inputs(n: int, dtype: torch.dtype, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    from ..ops.base import randn
    return randn((n, n), dtype, "cpu", gen), randn((n, n), dtype, "cpu", gen)     # A: [n, n], B: [n, n]


def flops(n: int) -> float:
    return 2.0 * n ** 3                             # M = N = K = n


def bytes_moved(n: int, itemsize: int) -> float:
    return 3.0 * n * n * itemsize                   # the fewest: A and B read once, C written once
