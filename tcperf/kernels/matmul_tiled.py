"""Lesson 5, tiled matmul on CUDA cores: each program computes a BLOCK_M x BLOCK_N tile of C.

The program walks K in steps of BLOCK_K, loading a BLOCK_M x BLOCK_K tile of A and a BLOCK_K x BLOCK_N tile of B
and multiplying them with `tl.dot`. Each loaded value now serves BLOCK_N (or BLOCK_M) multiply-adds instead of one,
so memory traffic falls by the tile size and the kernel becomes limited by arithmetic, not by memory.

`input_precision="ieee"` keeps fp32 operands as fp32: the multiply-adds run on the ordinary CUDA cores (FFMA),
not on the Tensor Cores, which would round fp32 operands to TF32. The compiled PTX holds no `mma`/`wgmma`
instruction (tests/test_lab.py checks it). The ceiling is the GPU's fp32 rate (H100 SXM: 67 TFLOPS on paper).

`tile_product` (the K loop) is shared with lessons 6-8: only the operand type and the program order change there.

    python -m tcperf lab --kernels matmul_tiled --sizes 1024,4096
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import interpreting
from .matmul_naive import bytes_moved, flops, make_inputs, numpy_fn, torch_fn  # noqa: F401  (same maths)


CONFIG = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3)


@triton.jit
def tile_product(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, pid_m, pid_n,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 ACC_DTYPE: tl.constexpr, INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """A[pid_m tile rows, :] @ B[:, pid_n tile columns] as a BLOCK_M x BLOCK_N accumulator."""
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M      # rows of A (wrapped: no mask needed on M)
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N      # columns of B (wrapped: no mask needed on N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak   # [BLOCK_M, BLOCK_K]
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn   # [BLOCK_K, BLOCK_N]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_DTYPE)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K                    # the last step may be a partial tile: mask it
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0)
        if UPCAST:      # interpreter only: it keeps bf16 as raw bits and multiplies them wrongly
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION, out_dtype=ACC_DTYPE)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def store_tile(c_ptr, tile, M, N, stride_cm, stride_cn, pid_m, pid_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Write a BLOCK_M x BLOCK_N tile of C, masking rows past M and columns past N."""
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, tile, mask=mask)


@triton.jit
def matmul_tiled_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tile_product(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, pid_m, pid_n,
                       BLOCK_M, BLOCK_N, BLOCK_K, tl.float32, "ieee", False)    # [BLOCK_M, BLOCK_N] fp32
    store_tile(c_ptr, acc, M, N, stride_cm, stride_cn, pid_m, pid_n, BLOCK_M, BLOCK_N)


def triton_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Launch wrapper: one program per BLOCK_M x BLOCK_N tile of C, in row-major order."""
    assert a.dtype == b.dtype == torch.float32, "the CUDA-core lesson is fp32; matmul_tc takes fp16/bf16"
    (M, K), (_, N) = a.shape, b.shape
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    cfg = CONFIG if not interpreting() else dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]))
    matmul_tiled_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                              c.stride(0), c.stride(1), **cfg)
    return c
