"""Where tcperf.kernels.gemv's int4 kernel spends its time (issue 33): the kernel against two cut-down copies of itself on
Llama-3.1-8B's decode layers at batch 1, each timed as a CUDA graph replay (triton.testing.do_bench_cudagraph) of
calls on copies of the layer whose weights add up to twice the L2 cache, so each call reads its weights from DRAM
(before 2026-11-26 22:30 UTC one copy was replayed, and layers under the L2's size read from it):

    words S   the weights' words, scales and zeros alone, S groups a load (64 S bytes a row), two loads ahead
    load      the kernel's own loads (words, scales, zeros and x in the kernel's column order) with its prefetch,
              XORed into accumulators shaped as the tiles (until 2026-11-27 each step's x was summed, a reduction
              the kernel does not do)
    dequant   load + DEQUANT_ASM, its bf16x2 pairs XORed (no tl.dot: no trip into the MMA's operand layout)
    full      tcperf.kernels.gemv.int4_kernel as shipped (dequant + tl.dot)

GB/s counts the int4 words and the bf16 scales and zeros; the copy bandwidth is timed in the same process. The full
kernel is checked against the layer's dequantised weights before it is timed.

    python benchmarks/int4_probe.py
"""
from __future__ import annotations

import argparse
import math
import sys

import torch
import triton
import triton.language as tl

from tcperf import quant
from tcperf.kernels import gemv
from tcperf.kernels.gemv import _dequant_pairs, _int4_group, _share

SHAPES = (("qkv", 4096, 6144), ("o", 4096, 4096), ("gate+up", 4096, 28672), ("down", 14336, 4096))
GROUP = 128


@triton.jit
def probe_kernel(x_ptr, q_ptr, s_ptr, z_ptr, y_ptr, M, N, K, stride_xm, stride_qn, stride_sn,
                 GROUP: tl.constexpr, SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 DEQUANT: tl.constexpr):
    WORDS: tl.constexpr = GROUP // 8
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.arange(0, GROUP)                                            # x read as the kernel reads it
    nibble = (c % 8) // 2 + 4 * (c % 2)
    k_of_c = (c // 8) * 8 + 2 * (nibble // 2) + 1 - nibble % 2
    n_ok, m_ok = offs_n < N, offs_m < M
    first, last = _share(K, GROUP, SPLIT)
    acc = tl.zeros((BLOCK_N, WORDS), dtype=tl.int32)
    x_acc = tl.zeros((BLOCK_M, GROUP), dtype=tl.int32)                # x kept alive elementwise, summed once
    w0, s0, z0, x0 = _int4_group(x_ptr, q_ptr, s_ptr, z_ptr, first, last, offs_n, offs_m, k_of_c, n_ok, m_ok,
                                 stride_xm, stride_qn, stride_sn, WORDS, GROUP)
    w1, s1, z1, x1 = _int4_group(x_ptr, q_ptr, s_ptr, z_ptr, first + 1, last, offs_n, offs_m, k_of_c, n_ok, m_ok,
                                 stride_xm, stride_qn, stride_sn, WORDS, GROUP)
    for g in range(first, last):
        w2, s2, z2, x2 = _int4_group(x_ptr, q_ptr, s_ptr, z_ptr, g + 2, last, offs_n, offs_m, k_of_c, n_ok, m_ok,
                                     stride_xm, stride_qn, stride_sn, WORDS, GROUP)
        x_acc ^= x0.to(tl.int16, bitcast=True).to(tl.int32)
        if DEQUANT:
            p0, p1, p2, p3 = _dequant_pairs(w0, s0, z0)
            acc ^= p0 ^ p1 ^ p2 ^ p3
        else:
            sz = s0.to(tl.int16, bitcast=True).to(tl.int32) ^ z0.to(tl.int16, bitcast=True).to(tl.int32)
            acc ^= w0 ^ sz[:, None]
        w0, s0, z0, x0 = w1, s1, z1, x1
        w1, s1, z1, x1 = w2, s2, z2, x2
    y = tl.sum(acc, axis=1) + tl.sum(tl.sum(x_acc, axis=1), axis=0)
    tl.store(y_ptr + tl.program_id(1) * N + offs_n, y.to(tl.float32), mask=n_ok)


@triton.jit
def _words(q_ptr, s_ptr, z_ptr, g, last, offs_n, n_ok, stride_qn, stride_sn, WORDS: tl.constexpr,
           STEP: tl.constexpr):
    """Groups g .. g + STEP - 1: their words (BLOCK_N, STEP * WORDS), scales and zeros (BLOCK_N, STEP); zeros
    past `last`."""
    cols = tl.arange(0, STEP * WORDS)
    groups = g + tl.arange(0, STEP)
    w = tl.load(q_ptr + offs_n[:, None] * stride_qn + g * WORDS + cols[None, :],
                mask=n_ok[:, None] & (g + cols // WORDS < last)[None, :], other=0)
    sz_mask = n_ok[:, None] & (groups < last)[None, :]
    s = tl.load(s_ptr + offs_n[:, None] * stride_sn + groups[None, :], mask=sz_mask, other=0)
    z = tl.load(z_ptr + offs_n[:, None] * stride_sn + groups[None, :], mask=sz_mask, other=0)
    return w, s.to(tl.int16, bitcast=True).to(tl.int32) ^ z.to(tl.int16, bitcast=True).to(tl.int32)


@triton.jit
def words_kernel(q_ptr, s_ptr, z_ptr, y_ptr, N, K, stride_qn, stride_sn, GROUP: tl.constexpr, SPLIT: tl.constexpr,
                 BLOCK_N: tl.constexpr, STEP: tl.constexpr):
    WORDS: tl.constexpr = GROUP // 8
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    first, last = _share(K, GROUP, SPLIT)
    acc = tl.zeros((BLOCK_N, STEP * WORDS), dtype=tl.int32)
    acc_sz = tl.zeros((BLOCK_N, STEP), dtype=tl.int32)
    w0, sz0 = _words(q_ptr, s_ptr, z_ptr, first, last, offs_n, n_ok, stride_qn, stride_sn, WORDS, STEP)
    w1, sz1 = _words(q_ptr, s_ptr, z_ptr, first + STEP, last, offs_n, n_ok, stride_qn, stride_sn, WORDS, STEP)
    for g in range(first, last, STEP):
        w2, sz2 = _words(q_ptr, s_ptr, z_ptr, g + 2 * STEP, last, offs_n, n_ok, stride_qn, stride_sn, WORDS, STEP)
        acc ^= w0
        acc_sz ^= sz0
        w0, sz0 = w1, sz1
        w1, sz1 = w2, sz2
    y = tl.sum(acc, axis=1) + tl.sum(acc_sz, axis=1)
    tl.store(y_ptr + tl.program_id(1) * N + offs_n, y.to(tl.float32), mask=n_ok)


CONFIGS = ((64, 4), (128, 4), (128, 8), (256, 8))      # (BLOCK_N, warps): tcperf.kernels.gemv.INT4_CONFIGS's


def variants(x, q4, s, z, y, n, k, split) -> list:
    """(label, a call) for each copy and configuration."""
    words = q4.view(torch.int32)

    def probe(dequant, bn, warps):
        return lambda: probe_kernel[(triton.cdiv(n, bn), split, 1)](
            x, words, s, z, y, 1, n, k, x.stride(0), words.stride(0), s.stride(0), GROUP=GROUP, SPLIT=split,
            BLOCK_M=16, BLOCK_N=bn, DEQUANT=dequant, num_warps=warps, num_stages=1)

    def words_only(step, bn, warps):
        return lambda: words_kernel[(triton.cdiv(n, bn), split)](
            words, s, z, y, n, k, words.stride(0), s.stride(0), GROUP=GROUP, SPLIT=split, BLOCK_N=bn, STEP=step,
            num_warps=warps, num_stages=1)

    out = [("full", lambda: torch.ops.tcperf.int4_weight_mm(x, q4, s, z, GROUP))]
    out += [(f"words {step} BN{bn} w{wp}", words_only(step, bn, wp)) for step in (1, 2, 4) for bn, wp in CONFIGS]
    out += [(f"{'dequant' if d else 'load'} BN{bn} w{wp}", probe(d, bn, wp)) for d in (False, True)
            for bn, wp in CONFIGS]
    return out


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    if not torch.cuda.is_available():
        print("int4_probe.py needs a CUDA GPU", file=sys.stderr)
        return 2
    from tcperf import peaks
    dev = torch.device("cuda")
    bw = peaks.measure_now(dev)["bandwidth"]
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    print(f"{torch.cuda.get_device_name(dev)}, copy {bw:,.0f} GB/s, {sms} SMs")
    gen = torch.Generator().manual_seed(0)
    for name, k, n in SHAPES:
        w = (torch.randn(n, k, generator=gen) * 0.02).to(dev, torch.bfloat16)
        q, s, z = quant.int4_quantize(w, GROUP)
        q4 = quant.nibbles(q)
        x = torch.randn(1, k, generator=gen).to(dev, torch.bfloat16)
        want = x.float() @ quant.int4_dequantize(q, s, z, GROUP).T
        got = torch.ops.tcperf.int4_weight_mm(x, q4, s, z, GROUP).float()
        err = float((got - want).norm() / want.norm())
        nbytes = q4.numel() + 2 * (s.numel() + z.numel())
        split = gemv.split_k(n, k // GROUP, sms)
        y = torch.empty(split, n, device=dev)
        copies = math.ceil(2 * torch.cuda.get_device_properties(dev).L2_cache_size / nbytes)
        layers = [(q4.clone(), s.clone(), z.clone()) for _ in range(copies)]
        line = [f"{name} ({k}x{n}) split {split}, {copies} copies, error {err:.4f}:"]
        for same in zip(*(variants(x, *layer, y, n, k, split) for layer in layers)):   # one variant, each copy
            label, fns = same[0][0], [fn for _, fn in same]
            run = lambda fns=fns: [f() for f in fns]
            run()
            ms = triton.testing.do_bench_cudagraph(run, rep=50) / copies
            line.append(f"{label} {ms * 1e3:.1f} us ({nbytes / ms / 1e6 / bw:.0%})")
        print("  ".join(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
