"""Lesson 8 (stretch), int8 matmul: int8 operands, exact int32 accumulation on the Tensor Cores.

The same K loop once more (`tile_product`), now with an int32 accumulator: `tl.dot` on int8 tiles compiles to
integer Tensor Core instructions (`mma ... .s8` on Ampere, `wgmma ... .s8` on Hopper, twice the fp16 rate on paper:
H100 SXM 1979 TOPS). The weight is stored as nn.Linear stores it, W [N, K], so both operands are K-major in memory,
the layout 8-bit Tensor Core instructions read directly; the kernel computes C = A @ W^T.

The library baseline is `torch._int_mm(A, W.t())` (cuBLASLt, B column-major). On an H200 (2026-11-22, 8192^3)
it ran at 923 TOPS and this kernel at 1130 (1.22x). The 126 TOPS of anchors.md is `torch._int_mm` with B
row-major, where cuBLAS falls back to an sm80 WMMA kernel (tcperf's GEMM suite: 128 TOPS): the layout, not the
library, is what costs 7x there.

    python -m tcperf lab --kernels matmul_int8 --sizes 4096,8192
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from .matmul_naive import flops  # noqa: F401
from .matmul_tc import chosen_config, launch, tile_order
from .matmul_tiled import store_tile, tile_product

CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8}, num_stages=3, num_warps=8),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8}, num_stages=4, num_warps=8),
    triton.Config({"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8}, num_stages=3, num_warps=8),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8}, num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8}, num_stages=4, num_warps=4),
]


@triton.jit
def matmul_int8_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                       stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP_M: tl.constexpr, UPCAST: tl.constexpr):
    pid_m, pid_n = tile_order(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tile_product(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, pid_m, pid_n,
                       BLOCK_M, BLOCK_N, BLOCK_K, tl.int32, "ieee", False)      # [BLOCK_M, BLOCK_N] int32
    store_tile(c_ptr, acc, M, N, stride_cm, stride_cn, pid_m, pid_n, BLOCK_M, BLOCK_N)


matmul_int8_tuned = triton.autotune(CONFIGS, key=["M", "N", "K"])(matmul_int8_kernel)


def triton_fn(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """C [M, N] int32 = A [M, K] int8 @ W [N, K]^T int8."""
    assert a.dtype == w.dtype == torch.int8 and a.shape[1] == w.shape[1]
    c = torch.empty((a.shape[0], w.shape[0]), dtype=torch.int32, device=a.device)
    launch(matmul_int8_kernel, matmul_int8_tuned, a, w.t(), c)    # w.t(): a [K, N] view, K contiguous
    return c


def tuned_config() -> str | None:
    return chosen_config(matmul_int8_tuned)


def torch_fn(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch._int_mm(a, w.t())                  # cuBLASLt int8 x int8 -> int32


def numpy_fn(a: np.ndarray, w: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    return np.matmul(a, w.T, out=out)               # given float64 arrays: exact for int8 products


def make_inputs(n: int, dtype: torch.dtype, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Random non-zero int8 in [-64, 64]: n * 64 * 64 stays far inside int32 (and float64's exact range)."""
    def int8(rows, cols):
        mag = torch.randint(1, 65, (rows, cols), generator=gen, dtype=torch.int32)
        sign = torch.randint(0, 2, (rows, cols), generator=gen, dtype=torch.int32) * 2 - 1
        return (mag * sign).to(torch.int8)
    return int8(n, n), int8(n, n)                   # A: [n, n] (M x K), W: [n, n] (N x K)


def bytes_moved(n: int, itemsize: int) -> float:
    return 2.0 * n * n * itemsize + 4.0 * n * n     # A and W read once (1 byte each), C written once (int32)


