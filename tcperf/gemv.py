"""Triton weight-only matmuls for decode (M = batch, 1 to ~64 rows): y = x W^T with W held in int8 or int4 and
dequantised in registers, so each weight byte is read from memory once, as a GEMV reads it.

    int8_weight_mm(x, w8, scales)                 x (M, K) bf16, w8 (N, K) int8, scales (N,) -> y (M, N)
    int4_weight_mm(x, q4, scales, zeros, group)   q4 (N, K/2) uint8, the even k in the high nibble; scales and
                                                  zeros (N, K/group): W = (q - 8) * scale + zero -> y (M, N)

Both are torch.library.triton_op's (torch.ops.tcperf.*), so torch.compile(fullgraph=True) traces into them and
CUDA graphs capture them; tcperf.quant's weight-only layers run them with kernel="triton".

The kernels. At M = 1 (the decode GEMV: int8_gemv_kernel, int4_gemv_kernel) each program owns BLOCK_N weight rows
and walks K in BLOCK_K steps: one load of the weight tile, widened (int8) or unpacked (two nibbles a byte, kept as
the even and the odd half of the step so no interleaving is needed) and scaled, multiplied by x elementwise into a
(BLOCK_N, BLOCK_K) fp32 accumulator; the row sums are taken once, after the loop (summing every step costs a
cross-thread reduction per step: the first version, which did, ran slower than bf16's cuBLAS GEMV on an H100,
1.09x its time over Llama-3.2-1B's layers, where the bytes allow 0.5x). No split-K: BLOCK_N down to 2 gives 4096
columns 2048 programs, enough for 132 SMs, and split-K's partial sums would cost a zeroing and a cast kernel a
layer. Above one row (int8_kernel, int4_kernel): BLOCK_M rows of x a program and a Tensor Core tl.dot with W as
the left operand (W x^T: the weight's BLOCK_N fills the MMA's wide side, the batch the narrow one, padded to 16).

BLOCK_M comes from M (1, 16, 32, 64: the "M bucket"); N and K (and BLOCK_M above one row) key triton.autotune over
a few configurations (GEMV_CONFIGS, INT4_GEMV_CONFIGS at M = 1: 6 and 4; MM_CONFIGS above: 4; ~1 s of compiling
each), each timed briefly (AUTOTUNE_MS) so that a benchmark tuning 40 shapes stays within seconds. In the Triton
interpreter (TRITON_INTERPRET=1 before this module is imported, CPU tensors) one small configuration runs
untuned, in fp32 (the interpreter multiplies bf16 as raw bits).

Speeds on an H100 against cuBLAS bf16, tinygemm and Inductor's fused GEMV: benchmarks/gemv_gpu.py.
"""
from __future__ import annotations

import inspect

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

from .env import triton_interpreting

INTERPRETING = triton_interpreting()    # as Triton read it when it was imported
AUTOTUNE_MS = (5, 20)                  # warm-up and timing budget per configuration (triton's default: 25, 100)
MAX_BLOCK_M = 64                       # rows of x a program holds; more rows take more programs along M


def _configs(blocks: tuple, warps: int, stages: int) -> list[triton.Config]:
    return [triton.Config({"BLOCK_N": n, "BLOCK_K": k}, num_warps=warps, num_stages=stages) for n, k in blocks]


# (BLOCK_N, BLOCK_K). int8 GEMV: few rows a program, long K steps, 2-4 KiB of weight a step; the accumulator is
# BLOCK_N x BLOCK_K fp32, 16-32 registers a thread. int4 GEMV: BLOCK_K = 128 keeps a step inside one group of 128
# or 256 (a scale and a zero a row, not a weight; smaller groups take the gathered path). MM: the Tensor Core path,
# whose tl.dot wants BLOCK_N >= 16 and whose accumulator grows with BLOCK_M.
GEMV_CONFIGS = [triton.Config({"BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=3)
                for n, k, w in ((2, 1024, 4), (4, 512, 4), (4, 1024, 8), (8, 512, 4), (8, 256, 4), (16, 256, 8))]
INT4_GEMV_CONFIGS = [triton.Config({"BLOCK_N": n, "BLOCK_K": 128}, num_warps=w, num_stages=3)
                     for n, w in ((8, 4), (16, 4), (32, 4), (64, 8))]
MM_CONFIGS = _configs(((16, 256), (32, 128), (64, 128), (128, 128)), warps=4, stages=3)
INTERPRETER_CONFIG = {"BLOCK_N": 16, "BLOCK_K": 32}     # every path, M = 1 included: small awkward shapes


def _bench(fn, quantiles=None):
    return triton.testing.do_bench(fn, warmup=AUTOTUNE_MS[0], rep=AUTOTUNE_MS[1], quantiles=quantiles)


def _tuned(kernel, configs, key=("BLOCK_M", "N", "K")):
    """Autotuned on (M bucket, N, K), each configuration timed for AUTOTUNE_MS where this triton takes do_bench."""
    brief = {"do_bench": _bench} if "do_bench" in inspect.signature(triton.autotune).parameters else {}
    return triton.autotune(configs, key=list(key), **brief)(kernel)


@triton.jit
def _product(w, x, acc, UPCAST: tl.constexpr):
    """acc (BLOCK_N, BLOCK_M) += w (BLOCK_N, BK) fp32 @ x (BLOCK_M, BK)^T on the Tensor Cores (BLOCK_M >= 16)."""
    if UPCAST:          # interpreter only: it keeps bf16 as raw bits and multiplies them wrongly
        return tl.dot(w, tl.trans(x.to(tl.float32)), acc, input_precision="ieee")
    return tl.dot(w.to(x.dtype), tl.trans(x), acc)


@triton.jit
def _store(y_ptr, acc, offs_m, offs_n, M, N, stride_ym):
    """acc (BLOCK_N, BLOCK_M) into y (M, N), transposed back."""
    ptrs = y_ptr + offs_m[None, :] * stride_ym + offs_n[:, None]
    tl.store(ptrs, acc.to(y_ptr.dtype.element_ty), mask=(offs_m[None, :] < M) & (offs_n[:, None] < N))


@triton.jit
def int8_kernel(x_ptr, w_ptr, s_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, UPCAST: tl.constexpr):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        w = tl.load(w_ptr + offs_n[:, None] * stride_wn + k[None, :],
                    mask=(offs_n[:, None] < N) & (k[None, :] < K), other=0)                 # (BLOCK_N, BLOCK_K) int8
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :],
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0)                 # (BLOCK_M, BLOCK_K)
        acc = _product(w.to(tl.float32), x, acc, UPCAST)        # int8 -> fp32 (and bf16) is exact
    scale = tl.load(s_ptr + offs_n, mask=offs_n < N, other=0).to(tl.float32)
    _store(y_ptr, acc * scale[:, None], offs_m, offs_n, M, N, stride_ym)


@triton.jit
def _dequantised(q, s_ptr, z_ptr, offs_n, k0, k, N, stride_sn, GROUP: tl.constexpr, BLOCK_K: tl.constexpr):
    """q (BLOCK_N, H) in [0, 15] at columns k of the step from k0 -> (q - 8) * scale + zero in fp32. A step inside
    one group loads a scale and a zero a row; a step over several groups, one a weight (gathered, from cache)."""
    mask = offs_n < N
    if GROUP % BLOCK_K == 0:
        g = offs_n * stride_sn + k0 // GROUP
        s = tl.load(s_ptr + g, mask=mask, other=0).to(tl.float32)[:, None]
        z = tl.load(z_ptr + g, mask=mask, other=0).to(tl.float32)[:, None]
    else:
        g = offs_n[:, None] * stride_sn + k[None, :] // GROUP
        s = tl.load(s_ptr + g, mask=mask[:, None], other=0).to(tl.float32)
        z = tl.load(z_ptr + g, mask=mask[:, None], other=0).to(tl.float32)
    return (q.to(tl.float32) - 8.0) * s + z


@triton.jit
def int4_kernel(x_ptr, q_ptr, s_ptr, z_ptr, y_ptr, M, N, K, stride_xm, stride_qn, stride_sn, stride_ym,
                GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                UPCAST: tl.constexpr):
    HALF: tl.constexpr = BLOCK_K // 2
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_b = tl.arange(0, HALF)                          # bytes of a K step: byte j holds k = 2j (high), 2j + 1
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    x_rows = x_ptr + offs_m[:, None] * stride_xm
    for b0 in range(0, K // 2, HALF):
        b = b0 + offs_b
        p = tl.load(q_ptr + offs_n[:, None] * stride_qn + b[None, :],
                    mask=(offs_n[:, None] < N) & (b[None, :] < K // 2), other=0)          # (BLOCK_N, HALF) uint8
        even, odd = 2 * b, 2 * b + 1
        x_mask = (offs_m[:, None] < M) & (b[None, :] < K // 2)
        x_even = tl.load(x_rows + even[None, :], mask=x_mask, other=0)                    # (BLOCK_M, HALF)
        x_odd = tl.load(x_rows + odd[None, :], mask=x_mask, other=0)
        acc = _product(_dequantised(p >> 4, s_ptr, z_ptr, offs_n, 2 * b0, even, N, stride_sn, GROUP, BLOCK_K),
                       x_even, acc, UPCAST)
        acc = _product(_dequantised(p & 15, s_ptr, z_ptr, offs_n, 2 * b0, odd, N, stride_sn, GROUP, BLOCK_K),
                       x_odd, acc, UPCAST)
    _store(y_ptr, acc, offs_m, offs_n, M, N, stride_ym)


@triton.jit
def int8_gemv_kernel(x_ptr, w_ptr, s_ptr, y_ptr, N, K, stride_wn,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """y (N,) = (w8 (N, K) @ x (K,)) * scales: products summed elementwise per step, the rows summed once."""
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows = w_ptr + offs_n[:, None] * stride_wn
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        w = tl.load(rows + k[None, :], mask=(offs_n[:, None] < N) & (k[None, :] < K), other=0)   # int8
        x = tl.load(x_ptr + k, mask=k < K, other=0)
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    scale = tl.load(s_ptr + offs_n, mask=offs_n < N, other=0).to(tl.float32)
    tl.store(y_ptr + offs_n, (tl.sum(acc, axis=1) * scale).to(y_ptr.dtype.element_ty), mask=offs_n < N)


@triton.jit
def int4_gemv_kernel(x_ptr, q_ptr, s_ptr, z_ptr, y_ptr, N, K, stride_qn, stride_sn,
                     GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """y (N,) = W (N, K) @ x (K,), W = (q - 8) * scale + zero unpacked from q4 (N, K/2): the even k of a step
    and the odd k in two accumulators, the rows summed once."""
    HALF: tl.constexpr = BLOCK_K // 2
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_b = tl.arange(0, HALF)                          # bytes of a K step: byte j holds k = 2j (high), 2j + 1
    rows = q_ptr + offs_n[:, None] * stride_qn
    acc = tl.zeros((BLOCK_N, HALF), dtype=tl.float32)
    for b0 in range(0, K // 2, HALF):
        b = b0 + offs_b
        p = tl.load(rows + b[None, :], mask=(offs_n[:, None] < N) & (b[None, :] < K // 2), other=0)  # uint8
        even, odd = 2 * b, 2 * b + 1
        x_even = tl.load(x_ptr + even, mask=b < K // 2, other=0).to(tl.float32)
        x_odd = tl.load(x_ptr + odd, mask=b < K // 2, other=0).to(tl.float32)
        acc += _dequantised(p >> 4, s_ptr, z_ptr, offs_n, 2 * b0, even, N, stride_sn, GROUP, BLOCK_K) * x_even[None, :]
        acc += _dequantised(p & 15, s_ptr, z_ptr, offs_n, 2 * b0, odd, N, stride_sn, GROUP, BLOCK_K) * x_odd[None, :]
    tl.store(y_ptr + offs_n, tl.sum(acc, axis=1).to(y_ptr.dtype.element_ty), mask=offs_n < N)


KERNELS = {  # (name, "gemv" at one row or "mm" above) -> (the kernel as written, autotuned)
    ("int8", "gemv"): (int8_gemv_kernel, _tuned(int8_gemv_kernel, GEMV_CONFIGS, key=["N", "K"])),
    ("int8", "mm"): (int8_kernel, _tuned(int8_kernel, MM_CONFIGS)),
    ("int4", "gemv"): (int4_gemv_kernel, _tuned(int4_gemv_kernel, INT4_GEMV_CONFIGS, key=["N", "K"])),
    ("int4", "mm"): (int4_kernel, _tuned(int4_kernel, MM_CONFIGS)),
}


def block_m(m) -> int:
    """The M bucket: 1 (the GEMV), else the power of two >= m from 16 (tl.dot's least) to MAX_BLOCK_M. Comparisons
    only: under a dynamic batch m is symbolic, and each comparison becomes a guard (a graph a bucket)."""
    if m == 1:
        return 1
    return next(b for b in (16, 32, MAX_BLOCK_M) if m <= b or b == MAX_BLOCK_M)


def _launch(name: str, args: tuple, gemv_args: tuple, m: int, n: int, **constexprs) -> None:
    """One row: the GEMV kernel on gemv_args, a program per BLOCK_N columns; more: the Tensor Core kernel on args,
    a program per BLOCK_N columns and BLOCK_M rows. Autotuned on a GPU, a fixed small block interpreted."""
    bm = block_m(m)
    path = "gemv" if bm == 1 else "mm"
    plain, tuned = KERNELS[name, path]
    batched = {} if bm == 1 else {"BLOCK_M": bm, "UPCAST": INTERPRETING}
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_N"]), triton.cdiv(m, bm))
    if INTERPRETING:
        wrap_triton(plain)[grid](*(gemv_args if bm == 1 else args), **batched, **INTERPRETER_CONFIG, **constexprs)
    else:
        wrap_triton(tuned)[grid](*(gemv_args if bm == 1 else args), **batched, **constexprs)


def _check(x: torch.Tensor, n_k: tuple, k: int) -> None:
    if x.dim() != 2 or x.shape[1] != k or x.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"x must be (M, {k}) bf16 or fp16, got {tuple(x.shape)} {x.dtype} for weights {n_k}")


@triton_op("tcperf::int8_weight_mm", mutates_args=())
def int8_weight_mm(x: torch.Tensor, w8: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """x (M, K) @ (w8 (N, K) int8 * scales (N,)[:, None])^T -> (M, N) in x's dtype, fp32 sums."""
    (n, k), m = w8.shape, x.shape[0]
    _check(x, (n, k), k)
    x, w8 = x.contiguous(), w8.contiguous()
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    _launch("int8", (x, w8, scales, y, m, n, k, x.stride(0), w8.stride(0), y.stride(0)),
            (x, w8, scales, y, n, k, w8.stride(0)), m, n)
    return y


@triton_op("tcperf::int4_weight_mm", mutates_args=())
def int4_weight_mm(x: torch.Tensor, q4: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor,
                   group: int) -> torch.Tensor:
    """x (M, K) @ W^T with W = (q - 8) * scale + zero, q two a byte in q4 (N, K/2) (even k high), scales and
    zeros (N, K/group) -> (M, N) in x's dtype, fp32 sums. K must be a multiple of group, group even."""
    n, k = q4.shape[0], 2 * q4.shape[1]
    m = x.shape[0]
    _check(x, (n, k), k)
    x, q4, scales, zeros = x.contiguous(), q4.contiguous(), scales.contiguous(), zeros.contiguous()
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    _launch("int4", (x, q4, scales, zeros, y, m, n, k, x.stride(0), q4.stride(0), scales.stride(0), y.stride(0)),
            (x, q4, scales, zeros, y, n, k, q4.stride(0), scales.stride(0)), m, n, GROUP=group)
    return y


def chosen(name: str, m: int) -> str | None:
    """The configuration the autotuner kept for the last shape it ran at this M bucket (None before any)."""
    cfg = getattr(KERNELS[name, "gemv" if block_m(m) == 1 else "mm"][1], "best_config", None)
    return None if cfg is None else " ".join(f"{k}={v}" for k, v in cfg.kwargs.items()) + f" warps={cfg.num_warps}"
