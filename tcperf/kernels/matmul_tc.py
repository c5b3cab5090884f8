"""Lesson 6, Tensor Core matmul: the tiled kernel with fp16 or bf16 operands and an fp32 accumulator.

Nothing in the K loop changes (it is lesson 5's `tile_product`): given 16-bit operands, `tl.dot` compiles to Tensor
Core instructions, `mma.sync` on Ampere (compute capability 8.x) and the warpgroup `wgmma` on Hopper (9.0), which
do a whole 64 x N x 16 tile product per instruction. The fp32 accumulator keeps the sum accurate; C is rounded to
fp16/bf16 once, at the end. What changes is everything around the loop, because at ~700 TFLOPS the kernel is fed
by memory only if the tiles are big and the loads are pipelined:

- big tiles (128 x 256 x 64): each byte loaded from memory serves hundreds of FLOPs;
- `num_stages` 3-4: the loads of the next K steps are in flight while the Tensor Cores work on this one;
- grouped program order (`tile_order`): programs that run at the same time share rows of A and columns of B,
  so those tiles are read from L2 rather than from memory;
- a handful of configurations tried once per shape by `triton.autotune`, the fastest kept.

Against cuBLAS (torch.matmul) at 4096^3 and 8192^3, see docs/lab.md. Run it:

    python -m tcperf lab --kernels matmul_tc --sizes 4096,8192
"""
from __future__ import annotations

from functools import partial

import torch
import triton
import triton.language as tl

from . import interpreting
from .matmul_naive import bytes_moved, flops, make_inputs, numpy_fn  # noqa: F401  (same maths as every matmul)
from .matmul_tiled import store_tile, tile_product


# (BLOCK_M, BLOCK_N, num_stages, num_warps) tried once per (M, N, K, dtype) by triton.autotune; a configuration that
# does not fit this GPU's shared memory is skipped by the tuner. The first is Triton's matmul tutorial's first.
TILES = ((128, 256, 3, 8), (128, 256, 4, 8), (256, 128, 3, 8), (128, 128, 4, 4), (64, 128, 4, 4))
# The interpreter runs programs one after another on the CPU: small tiles, no tuning.
INTERPRETER_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2}


@triton.jit
def tile_order(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Program id -> (tile row, tile column), in groups of GROUP_M tile rows walked column by column."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_pid_n                 # programs in one group of GROUP_M tile rows
    first_m = (pid // per_group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)     # the last group may be shorter
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m
    return pid_m, pid_n


@triton.jit
def matmul_tc_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                     stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr, UPCAST: tl.constexpr):
    pid_m, pid_n = tile_order(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    INT8: tl.constexpr = a_ptr.dtype.element_ty == tl.int8     # lesson 8: exact sums of int8 products in int32
    acc = tile_product(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, pid_m, pid_n,
                       BLOCK_M, BLOCK_N, BLOCK_K, tl.int32 if INT8 else tl.float32, "ieee" if INT8 else "tf32",
                       UPCAST)                                  # [BLOCK_M, BLOCK_N] fp32 (int8 operands: int32)
    store_tile(c_ptr, acc.to(c_ptr.dtype.element_ty), M, N, stride_cm, stride_cn, pid_m, pid_n, BLOCK_M, BLOCK_N)


def autotuned(kernel, block_k: int = 64):
    """`kernel` autotuned over TILES, BLOCK_K elements of K a step (64 16-bit ones: 128 bytes, as int8's 128)."""
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": block_k, "GROUP_M": 8}, num_stages=stages,
                             num_warps=warps) for m, n, stages, warps in TILES]
    return triton.autotune(configs, key=["M", "N", "K"])(kernel)


matmul_tc_tuned = autotuned(matmul_tc_kernel)


def launch(kernel, tuned, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *extra, **constexprs) -> None:
    """Start one program per tile of c = a @ b (+ epilogue): autotuned on a GPU, a fixed small tile in the
    interpreter. `extra` are the kernel's arguments between c_ptr and M (dense: the bias)."""
    (M, K), (_, N) = a.shape, b.shape
    args = (a, b, c, *extra, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)   # 1-D: tile_order
    if interpreting():
        kernel[grid](*args, UPCAST=a.dtype == torch.bfloat16, **INTERPRETER_CONFIG, **constexprs)
    else:
        tuned[grid](*args, UPCAST=False, **constexprs)


def chosen_config(tuned) -> str | None:
    """The configuration the autotuner kept for the last shape it ran (None before any run)."""
    cfg = getattr(tuned, "best_config", None)
    return None if cfg is None else (" ".join(f"{k}={v}" for k, v in cfg.kwargs.items())
                                     + f" warps={cfg.num_warps} stages={cfg.num_stages}")


def triton_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    assert a.dtype == b.dtype and a.dtype in (torch.float16, torch.bfloat16)
    c = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    launch(matmul_tc_kernel, matmul_tc_tuned, a, b, c)
    return c


tuned_config = partial(chosen_config, matmul_tc_tuned)


def torch_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b                                    # cuBLAS, fp32 accumulate
