"""Triton weight-only matmuls for decode (M = batch, 1 to ~64 rows): y = x W^T with W held in int8 or int4 and
dequantised in registers, so each weight byte is read from memory once, as a GEMV reads it.

    int8_weight_mm(x, w8, scales)                 x (M, K) bf16, w8 (N, K) int8, scales (N,) -> y (M, N)
    int4_weight_mm(x, q4, scales, zeros, group)   q4 (N, K/2) uint8, the even k in the high nibble; scales and
                                                  zeros (N, K/group): W = (q - 8) * scale + zero -> y (M, N)

Both are torch.library.triton_op's (torch.ops.tcperf.*), so torch.compile(fullgraph=True) traces into them and
CUDA graphs capture them; tcperf.quant's weight-only layers run them with kernel="triton".

The kernels. int8 at M = 1 (the decode GEMV, int8_gemv_kernel): each program owns BLOCK_N weight rows and walks K
in BLOCK_K steps into a (BLOCK_N, BLOCK_K) fp32 accumulator, the row sums taken once, after the loop (summing every
step, a cross-thread reduction a step, ran at 1.09x bf16's cuBLAS time over Llama-3.2-1B's layers). Both int8
kernels widen their weights by XOR, PRMT and a float subtract under 2^23 (_widen), not the quarter-rate I2F. int8
above one row (int8_kernel): BLOCK_M rows of x a program and a Tensor Core tl.dot with W as the left operand (W x^T:
the weight's BLOCK_N fills the MMA's wide side, the batch the narrow one, padded to 16).

int4 at every M (int4_kernel): one group of K a step, the tile dequantised to bf16 eight weights a 32-bit word
(DEQUANT_ASM), then a Tensor Core tl.dot, M padded to 16 at one row: 6.6-10.2 instructions a weight byte in its loop
at 16 rows (SASS for sm_90, scripts/sass_loop.py), where widening each nibble to fp32 on the CUDA cores took 19-25
and was issue-bound. On an H100 its tl.dot path, not the dequantising, holds it at a third of the copy bandwidth
(benchmarks/int4_probe.py). Narrow layers split K over SPLIT programs (split_k), whose fp32 sums torch adds.

BLOCK_M is the "M bucket" of M (block_m); N and K (and the bucket) key triton.autotune over a few configurations
(~1 s of compiling each), each timed briefly (AUTOTUNE_MS) so that a benchmark tuning 40 shapes stays within
seconds. In the Triton interpreter (TRITON_INTERPRET=1 before this module is imported, CPU tensors) one small
configuration runs untuned, in fp32 (the interpreter multiplies bf16 as raw bits and runs no PTX).

Speeds on an H100 against cuBLAS bf16, tinygemm and Inductor's fused GEMV: benchmarks/gemv_gpu.py.
"""
from __future__ import annotations

import inspect

import torch
import triton
import triton.language as tl
from torch.library import triton_op

from ..env import launchable, triton_interpreting

INTERPRETING = triton_interpreting()    # as Triton read it when it was imported
AUTOTUNE_MS = (5, 20)                  # warm-up and timing budget per configuration (triton's default: 25, 100)
MAX_BLOCK_M = 64                       # rows of x a program holds; more rows take more programs along M


# (BLOCK_N, BLOCK_K). int8 GEMV: few rows a program, long K steps, 2-4 KiB of weight a step; the accumulator is
# BLOCK_N x BLOCK_K fp32, 16-32 registers a thread. MM: the Tensor Core path, whose tl.dot wants BLOCK_N >= 16 and
# whose accumulator grows with BLOCK_M. int4: BLOCK_N >= 64 takes Hopper's wgmma (64 rows a warp group) with the
# dequantised tile in registers; a step is one group.
GEMV_CONFIGS = [triton.Config({"BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=3)
                for n, k, w in ((2, 1024, 4), (4, 512, 4), (4, 1024, 8), (8, 512, 4), (8, 256, 4), (16, 256, 8))]
MM_CONFIGS = [triton.Config({"BLOCK_N": n, "BLOCK_K": k}, num_warps=4, num_stages=3)
              for n, k in ((16, 256), (32, 128), (64, 128), (128, 128))]
INT4_CONFIGS = [triton.Config({"BLOCK_N": n}, num_warps=w, num_stages=1) for n, w in ((64, 4), (128, 4), (128, 8),
                                                                                     (256, 8))]
INTERPRETER_CONFIG = {"BLOCK_N": 16, "BLOCK_K": 32}     # every path, M = 1 included: small awkward shapes
MIN_GROUPS_A_SHARE = 4                 # int4 split over K: each program sums at least this many groups


def _bench(fn, quantiles=None):
    return triton.testing.do_bench(fn, warmup=AUTOTUNE_MS[0], rep=AUTOTUNE_MS[1], quantiles=quantiles)


def tuned(kernel, configs, key=("BLOCK_M", "N", "K")):
    """Autotuned on `key` (the M bucket, N, K by default), each configuration timed for AUTOTUNE_MS where this
    triton takes do_bench (tcperf.kernels.maxpool tunes its kernels so too)."""
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


# int8 -> float32 four weights a 32-bit word, exact, without I2F (int-to-float runs at a quarter of the integer and
# float rate, 16 a multiprocessor a clock on Hopper): one XOR makes each byte q + 128, one PRMT a weight sets it under
# the exponent of 2^23 (0x4B), one FADD takes 2^23 + 128 off.
WIDEN_ASM = tl.constexpr(
    "{ .reg .b32 u, m; mov.b32 m, 0x4B000000; xor.b32 u, $4, 0x80808080; "
    "prmt.b32 $0, u, m, 0x7540; prmt.b32 $1, u, m, 0x7541; prmt.b32 $2, u, m, 0x7542; prmt.b32 $3, u, m, 0x7543; "
    "sub.f32 $0, $0, 0f4B000080; sub.f32 $1, $1, 0f4B000080; sub.f32 $2, $2, 0f4B000080; "
    "sub.f32 $3, $3, 0f4B000080; }")
PTX = tl.constexpr(not INTERPRETING)      # the interpreter runs no PTX: it widens by the same arithmetic in numpy


@triton.jit
def _widen(w):
    """int8 (any shape, four consecutive a thread) -> float32, exact: WIDEN_ASM."""
    if PTX:
        return tl.inline_asm_elementwise(WIDEN_ASM, "=r,=r,=r,=r,r", [w], dtype=tl.float32, is_pure=True, pack=4)
    return (w.to(tl.int32) + 0x4B000080).to(tl.float32, bitcast=True) - 8388736.0


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
        acc = _product(_widen(w), x, acc, UPCAST)        # int8 -> fp32 (and bf16) is exact
    scale = tl.load(s_ptr + offs_n, mask=offs_n < N, other=0).to(tl.float32)
    _store(y_ptr, acc * scale[:, None], offs_m, offs_n, M, N, stride_ym)


@triton.jit
def int8_gemv_kernel(x_ptr, w_ptr, s_ptr, y_ptr, N, K, stride_wn, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """y (N,) = (w8 (N, K) @ x (K,)) * scales: products summed elementwise per step, the rows summed once."""
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows = w_ptr + offs_n[:, None] * stride_wn
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        w = tl.load(rows + k[None, :], mask=(offs_n[:, None] < N) & (k[None, :] < K), other=0)   # int8
        x = tl.load(x_ptr + k, mask=k < K, other=0)
        acc += _widen(w) * x.to(tl.float32)[None, :]
    scale = tl.load(s_ptr + offs_n, mask=offs_n < N, other=0).to(tl.float32)
    tl.store(y_ptr + offs_n, (tl.sum(acc, axis=1) * scale).to(y_ptr.dtype.element_ty), mask=offs_n < N)


# int4 dequantisation, eight weights a 32-bit word (q4 read as int32: nibble i of a word is bits 4i..4i+3; byte
# b = nibbles 2b (odd k) and 2b + 1 (even k)). The magic number of 128.0 in bf16, 0x4300, ORed over a nibble in the
# low 7 mantissa bits gives 128 + q exactly; one LOP3 does it for two nibbles 16 bits apart (a bf16x2 pair), one
# packed FMA takes off 136 (exact) and one more scales and shifts: (q - 8) * s + z rounded once to bf16, as
# tinygemm dequantises. 11 + 4 instructions for 8 weights, where widening each nibble to fp32 took about 5 a weight.
DEQUANT_ASM = tl.constexpr(  # one line: Inductor copies the kernel's source into its own, where a newline breaks it
    "{ .reg .b32 t<4>; .reg .b32 one, off; mov.b32 one, 0x3F803F80; mov.b32 off, 0xC308C308; "
    "shr.b32 t1, $4, 4; shr.b32 t2, $4, 8; shr.b32 t3, $4, 12; "
    "lop3.b32 t0, $4, 0x000F000F, 0x43004300, 0xEA; lop3.b32 t1, t1, 0x000F000F, 0x43004300, 0xEA; "
    "lop3.b32 t2, t2, 0x000F000F, 0x43004300, 0xEA; lop3.b32 t3, t3, 0x000F000F, 0x43004300, 0xEA; "
    "fma.rn.bf16x2 t0, t0, one, off; fma.rn.bf16x2 t1, t1, one, off; fma.rn.bf16x2 t2, t2, one, off; "
    "fma.rn.bf16x2 t3, t3, one, off; fma.rn.bf16x2 $0, t0, $5, $6; fma.rn.bf16x2 $1, t1, $5, $6; "
    "fma.rn.bf16x2 $2, t2, $5, $6; fma.rn.bf16x2 $3, t3, $5, $6; } ")


@triton.jit
def _columns(l0, h0, l1, h1, l2, h2, l3, h3, BLOCK_N: tl.constexpr, GROUP: tl.constexpr):
    """Eight (BLOCK_N, GROUP/8) tensors, pair p's low (nibble p) and high (nibble p + 4) halves of each word, into
    (BLOCK_N, GROUP): column 8j + 2p + e holds nibble p + 4e of word j (a pair's halves side by side, as an MMA
    operand register holds them)."""
    lo = tl.reshape(tl.join(tl.join(l0, l2), tl.join(l1, l3)), (BLOCK_N, GROUP // 8, 4))
    hi = tl.reshape(tl.join(tl.join(h0, h2), tl.join(h1, h3)), (BLOCK_N, GROUP // 8, 4))
    return tl.reshape(tl.join(lo, hi), (BLOCK_N, GROUP))


@triton.jit
def _halves(pair):
    return pair.to(tl.int16), (pair >> 16).to(tl.int16)


@triton.jit
def _dequant_pairs(w, s, z):
    """w (BLOCK_N, W) int32, s and z (BLOCK_N,) bf16 -> four int32 tensors, pair p holding nibbles p and p + 4 of
    each word as bf16 (q - 8) * s + z (DEQUANT_ASM)."""
    s2 = s.to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    z2 = z.to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    return tl.inline_asm_elementwise(
        DEQUANT_ASM, "=r,=r,=r,=r,r,r,r", [w, (s2 | (s2 << 16))[:, None], (z2 | (z2 << 16))[:, None]],
        dtype=(tl.int32, tl.int32, tl.int32, tl.int32), is_pure=True, pack=1)


@triton.jit
def _share(K, GROUP: tl.constexpr, SPLIT: tl.constexpr):
    """The groups [first, last) of K this program sums (its share along axis 1 of the grid)."""
    groups = K // GROUP
    first = tl.program_id(1) * tl.cdiv(groups, SPLIT)
    return first, tl.minimum(groups, first + tl.cdiv(groups, SPLIT))


@triton.jit
def _int4_words(w, s, z, BLOCK_N: tl.constexpr, GROUP: tl.constexpr, UPCAST: tl.constexpr):
    """w (BLOCK_N, GROUP/8) int32, s and z (BLOCK_N,) bf16 -> W (BLOCK_N, GROUP) = (q - 8) * s + z in bf16 (fp32 in
    the interpreter, which cannot run PTX), its columns in _columns's order."""
    if UPCAST:
        s, z = s.to(tl.float32)[:, None], z.to(tl.float32)[:, None]
        return _columns(((w & 15).to(tl.float32) - 8) * s + z, (((w >> 16) & 15).to(tl.float32) - 8) * s + z,
                        (((w >> 4) & 15).to(tl.float32) - 8) * s + z, (((w >> 20) & 15).to(tl.float32) - 8) * s + z,
                        (((w >> 8) & 15).to(tl.float32) - 8) * s + z, (((w >> 24) & 15).to(tl.float32) - 8) * s + z,
                        (((w >> 12) & 15).to(tl.float32) - 8) * s + z, (((w >> 28) & 15).to(tl.float32) - 8) * s + z,
                        BLOCK_N, GROUP)
    p0, p1, p2, p3 = _dequant_pairs(w, s, z)
    l0, h0 = _halves(p0)
    l1, h1 = _halves(p1)
    l2, h2 = _halves(p2)
    l3, h3 = _halves(p3)
    return _columns(l0, h0, l1, h1, l2, h2, l3, h3, BLOCK_N, GROUP).to(tl.bfloat16, bitcast=True)


@triton.jit
def _int4_group(x_ptr, q_ptr, s_ptr, z_ptr, g, last, offs_n, offs_m, k_of_c, n_ok, m_ok, stride_xm, stride_qn,
                stride_sn, WORDS: tl.constexpr, GROUP: tl.constexpr):
    """Group g's words (BLOCK_N, WORDS), scales and zeros (BLOCK_N,) and x (BLOCK_M, GROUP) in the columns' order;
    zeros past `last`."""
    n_in, m_in = n_ok & (g < last), m_ok & (g < last)
    w = tl.load(q_ptr + offs_n[:, None] * stride_qn + g * WORDS + tl.arange(0, WORDS)[None, :], mask=n_in[:, None],
                other=0)
    s = tl.load(s_ptr + offs_n * stride_sn + g, mask=n_in, other=0)
    z = tl.load(z_ptr + offs_n * stride_sn + g, mask=n_in, other=0)
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + g * GROUP + k_of_c[None, :], mask=m_in[:, None], other=0)
    return w, s, z, x


@triton.jit
def int4_kernel(x_ptr, q_ptr, s_ptr, z_ptr, y_ptr, M, N, K, stride_xm, stride_qn, stride_sn, stride_ym, stride_ys,
                GROUP: tl.constexpr, SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                UPCAST: tl.constexpr):
    """y = x W^T, one group of K a step: W's tile dequantised to bf16 (BLOCK_N, GROUP) and a Tensor Core tl.dot with
    x's rows (BLOCK_M, at least 16: one row is padded). x is read in the dequantised columns' order. SPLIT > 1:
    program (n, k) sums its share of the groups into y (SPLIT, M, N) fp32 at k, the caller adds the shares."""
    WORDS: tl.constexpr = GROUP // 8
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.arange(0, GROUP)
    nibble = (c % 8) // 2 + 4 * (c % 2)
    k_of_c = (c // 8) * 8 + 2 * (nibble // 2) + 1 - nibble % 2        # an even k is a byte's high nibble
    n_ok, m_ok = offs_n < N, offs_m < M
    first, last = _share(K, GROUP, SPLIT)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    # two groups loaded ahead of the one multiplied (registers): one step alone in flight left a program waiting
    # out the memory latency every step (33% of the copy bandwidth on an H100, 8B's gate+up, 2026-11-26)
    w0, s0, z0, x0 = _int4_group(x_ptr, q_ptr, s_ptr, z_ptr, first, last, offs_n, offs_m, k_of_c, n_ok, m_ok,
                                 stride_xm, stride_qn, stride_sn, WORDS, GROUP)
    w1, s1, z1, x1 = _int4_group(x_ptr, q_ptr, s_ptr, z_ptr, first + 1, last, offs_n, offs_m, k_of_c, n_ok, m_ok,
                                 stride_xm, stride_qn, stride_sn, WORDS, GROUP)
    for g in range(first, last):
        w2, s2, z2, x2 = _int4_group(x_ptr, q_ptr, s_ptr, z_ptr, g + 2, last, offs_n, offs_m, k_of_c, n_ok, m_ok,
                                     stride_xm, stride_qn, stride_sn, WORDS, GROUP)
        w = _int4_words(w0, s0, z0, BLOCK_N, GROUP, UPCAST)
        if UPCAST:
            acc = tl.dot(w, tl.trans(x0.to(tl.float32)), acc, input_precision="ieee")
        else:
            acc = tl.dot(w, tl.trans(x0.to(tl.bfloat16)), acc)
        w0, s0, z0, x0 = w1, s1, z1, x1
        w1, s1, z1, x1 = w2, s2, z2, x2
    ptrs = y_ptr + tl.program_id(1) * stride_ys + offs_m[None, :] * stride_ym + offs_n[:, None]
    tl.store(ptrs, acc.to(y_ptr.dtype.element_ty), mask=m_ok[None, :] & n_ok[:, None])


KERNELS = {  # (name, "gemv" at one row or "mm" above) -> (the kernel as written, autotuned)
    ("int8", "gemv"): (int8_gemv_kernel, tuned(int8_gemv_kernel, GEMV_CONFIGS, key=["N", "K"])),
    ("int8", "mm"): (int8_kernel, tuned(int8_kernel, MM_CONFIGS)),
    ("int4", "mm"): (int4_kernel, tuned(int4_kernel, INT4_CONFIGS, key=("BLOCK_M", "N", "K", "GROUP", "SPLIT"))),
}


def block_m(m) -> int:
    """The M bucket: 1 (the GEMV), else the power of two >= m from 16 (tl.dot's least) to MAX_BLOCK_M. Comparisons
    only: under a dynamic batch m is symbolic, and each comparison becomes a guard (a graph a bucket)."""
    return 1 if m == 1 else next(b for b in (16, 32, MAX_BLOCK_M) if m <= b or b == MAX_BLOCK_M)


def _launch(name: str, args: tuple, gemv_args: tuple, m: int, n: int, **constexprs) -> None:
    """One row: the GEMV kernel on gemv_args, a program per BLOCK_N columns; more: the Tensor Core kernel on args,
    a program per BLOCK_N columns and BLOCK_M rows. Autotuned on a GPU, a fixed small block interpreted."""
    bm = block_m(m)
    plain, tuned = KERNELS[name, "gemv" if bm == 1 else "mm"]
    batched = {} if bm == 1 else {"BLOCK_M": bm, "UPCAST": INTERPRETING}
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_N"]), triton.cdiv(m, bm))
    fixed = INTERPRETER_CONFIG if INTERPRETING else {}
    launchable(plain if INTERPRETING else tuned)[grid](*(gemv_args if bm == 1 else args), **batched, **fixed,
                                                       **constexprs)


def split_k(n: int, groups: int, sms: int) -> int:
    """How many programs share K in the int4 kernel: doubled while N's 64-column tiles times it give fewer than two
    programs a multiprocessor and each share keeps MIN_GROUPS_A_SHARE groups (Llama-3.1-8B's o and down: 8, qkv:
    4, gate+up and the output layer: 1). Narrow layers otherwise leave SMs idle: 4096 columns are 64 programs."""
    split = 1
    while triton.cdiv(n, 64) * split < 2 * sms and groups // (2 * split) >= MIN_GROUPS_A_SHARE:
        split *= 2
    return split


def int4_mm(x: torch.Tensor, q4: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group: int,
            split: int | None = None) -> torch.Tensor:
    """int4_weight_mm's body (tests pass `split`; by default split_k's): a program per BLOCK_N columns, share of K
    and BLOCK_M rows (16 at least: one decode row is a padded MMA); with SPLIT > 1 the shares' fp32 sums are added
    here, in torch (one more kernel in eager mode)."""
    n, k, m = q4.shape[0], 2 * q4.shape[1], x.shape[0]
    _check(x, (n, k), k)
    if k % 8 or k % group or group % 8 or scales.dtype != torch.bfloat16 or zeros.dtype != torch.bfloat16:
        raise ValueError(f"int4 weights need K a multiple of 8 and of the group, groups of a multiple of 8 and bf16 "
                         f"scales and zeros: K {k}, group {group}, {scales.dtype} and {zeros.dtype}")
    x, scales, zeros = x.contiguous(), scales.contiguous(), zeros.contiguous()
    words = q4.contiguous().view(torch.int32)                       # (N, K/8): eight nibbles a word
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.device.type == "cuda" else 132
    split = split or split_k(n, k // group, sms)
    y = torch.empty((split, m, n) if split > 1 else (m, n), dtype=torch.float32 if split > 1 else x.dtype,
                    device=x.device)
    bm = max(16, block_m(m))
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_N"]), split, triton.cdiv(m, bm))
    args = (x, words, scales, zeros, y, m, n, k, x.stride(0), words.stride(0), scales.stride(0), y.stride(-2),
            y.stride(0) if split > 1 else 0)
    plain, tuned = KERNELS["int4", "mm"]
    fixed = {"UPCAST": True, "BLOCK_N": 16} if INTERPRETING else {"UPCAST": False}
    launchable(plain if INTERPRETING else tuned)[grid](*args, GROUP=group, SPLIT=split, BLOCK_M=bm, **fixed)
    return y.sum(0).to(x.dtype) if split > 1 else y


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
    """x (M, K) @ W^T with W = (q - 8) * scale + zero, q two a byte in q4 (N, K/2) (even k high), bf16 scales and
    zeros (N, K/group) -> (M, N) in x's dtype, fp32 sums over bf16 weights (as tinygemm's). K a multiple of 8 and
    of the group, the group a multiple of 8."""
    return int4_mm(x, q4, scales, zeros, group)


def chosen(name: str, m: int) -> str | None:
    """The configuration the autotuner kept for the last shape it ran at this M bucket (None before any)."""
    cfg = getattr(KERNELS[name, "gemv" if block_m(m) == 1 and name == "int8" else "mm"][1], "best_config", None)
    return None if cfg is None else " ".join(f"{k}={v}" for k, v in cfg.kwargs.items()) + f" warps={cfg.num_warps}"
