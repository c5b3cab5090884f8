"""Lesson 7, the fused dense layer: y = sigmoid(x @ W + b), with x [M, K], W [K, N], b [N].

PyTorch runs `torch.sigmoid(x @ W + b)` as three kernels: the matmul writes x @ W to memory, the add reads it and
writes it again, the sigmoid reads it and writes y. Here the bias and the sigmoid run in the matmul's *epilogue*:
on the fp32 accumulator tile while it is still in registers, before the one store of y. The two extra round trips
through memory (4 x M x N x 2 bytes) and two kernel launches are gone, and the sigmoid is computed from the fp32
accumulator rather than from a rounded fp16/bf16 copy, so the fused layer is also the more accurate one.

The K loop and the program order are lesson 6's (`tile_product`, `tile_order`); only the epilogue is new.

    python -m tcperf lab --kernels dense --sizes 4096,8192
"""
from __future__ import annotations

from functools import partial

import numpy as np
import torch
import triton
import triton.language as tl

from . import sigmoid
from .matmul_tc import autotuned, chosen_config, launch, tile_order
from .matmul_tiled import store_tile, tile_product


@triton.jit
def dense_kernel(x_ptr, w_ptr, y_ptr, bias_ptr, M, N, K,
                 stride_xm, stride_xk, stride_wk, stride_wn, stride_ym, stride_yn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 GROUP_M: tl.constexpr, UPCAST: tl.constexpr):
    pid_m, pid_n = tile_order(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tile_product(x_ptr, w_ptr, M, N, K, stride_xm, stride_xk, stride_wk, stride_wn, pid_m, pid_n,
                       BLOCK_M, BLOCK_N, BLOCK_K, tl.float32, "tf32", UPCAST)    # [BLOCK_M, BLOCK_N] fp32
    # --- epilogue: bias and sigmoid on the accumulator, still in registers ---
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    bias = tl.load(bias_ptr + cols, mask=cols < N, other=0).to(tl.float32)      # [BLOCK_N]
    z = acc + bias[None, :]
    y = 1.0 / (1.0 + tl.exp(-z))
    store_tile(y_ptr, y.to(y_ptr.dtype.element_ty), M, N, stride_ym, stride_yn, pid_m, pid_n, BLOCK_M, BLOCK_N)


dense_tuned = autotuned(dense_kernel)


def triton_fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    assert x.dtype == w.dtype == b.dtype and b.shape == (w.shape[1],) and b.is_contiguous()
    y = torch.empty((x.shape[0], w.shape[1]), dtype=x.dtype, device=x.device)
    launch(dense_kernel, dense_tuned, x, w, y, b)
    return y


tuned_config = partial(chosen_config, dense_tuned)


def torch_fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x @ w + b)                 # three kernels: matmul, add, sigmoid


def numpy_fn(x: np.ndarray, w: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    out = np.matmul(x, w, out=out)
    out += b
    return sigmoid.numpy_fn(out, out=out)           # in place


def make_inputs(n: int, dtype: torch.dtype, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """x [n, n], W [n, n] scaled by 1/sqrt(n) so that x @ W + b is of order 1 (not saturating the sigmoid), b [n]."""
    from ..ops.base import randn
    return (randn((n, n), dtype, "cpu", gen), randn((n, n), dtype, "cpu", gen, scale=n ** -0.5),
            randn((n,), dtype, "cpu", gen))


def flops(n: int) -> float:
    return 2.0 * n ** 3 + 5.0 * n * n               # the matmul, then add bias + sigmoid's four per element


def bytes_moved(n: int, itemsize: int) -> float:
    return (3.0 * n * n + n) * itemsize             # x, W and b read once, y written once
