"""Tensor Core rules: alignment, hard limits, tile and wave quantization, and the padding fix.

The rules (anchors.md, from the cuBLAS and PyTorch documentation): every dimension a multiple of 16 bytes
(8 elements fp16/bf16, 4 tf32, 16 int8/fp8, 2 fp64) for full speed; torch._int_mm needs M > 16 and K, N
multiples of 8; torch._scaled_mm (fp8) needs K and N multiples of 16. Strict fp32 never uses Tensor Cores.

    gemm_verdict(8191, 8191, 8191, "bf16", sm_count=132)["fix"]   # 'pad m, n, k to 8192'
"""
from __future__ import annotations

import math

from .precision import get

NOMINAL_TILE = (128, 128)   # a typical cuBLAS output tile on sm80/sm90; the real one varies by kernel
POOR_WAVE = 0.75            # flag when the last wave leaves more than a quarter of the SMs idle


def pad_to(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def uses_tensor_cores(precision: str) -> bool:
    """Can this precision reach Tensor Cores at all? (fp64 does on sm80+ through DMMA; strict fp32 never.)"""
    return precision != "fp32"


def gemm_hard_limit(m: int, n: int, k: int, precision: str) -> str | None:
    """A limit the kernel refuses to run past (not just runs slower), or None."""
    if precision == "int8":
        if m <= 16:
            return f"torch._int_mm needs M > 16 (M={m})"
        if k % 8 or n % 8:
            return f"torch._int_mm needs K and N multiples of 8 (K={k}, N={n})"
    if precision == "fp8" and (k % 16 or n % 16):
        return f"torch._scaled_mm (fp8) needs K and N multiples of 16 (K={k}, N={n})"
    return None


def misaligned(dims: dict, precision: str) -> list[str]:
    """The dimensions that miss the 16-byte rule, e.g. ['k=8191 (not a multiple of 8)']."""
    align = get(precision).align
    return [f"{d}={v} (not a multiple of {align})" for d, v in dims.items() if v % align]


def wave_quantization(m: int, n: int, sm_count: int | None, tile=NOMINAL_TILE) -> dict:
    """Output tiles against the SM count: the share of the last wave's SMs that have work."""
    tiles = math.ceil(m / tile[0]) * math.ceil(n / tile[1])
    if not sm_count:
        return {"tiles": tiles}
    waves = math.ceil(tiles / sm_count)
    efficiency = tiles / (waves * sm_count)
    return {"tiles": tiles, "waves": waves, "wave_efficiency": round(efficiency, 3)}


def gemm_verdict(m: int, n: int, k: int, precision: str, sm_count: int | None = None) -> dict:
    """Everything tcperf can say about a GEMM's Tensor Core eligibility without running it."""
    p = get(precision)
    bad = misaligned({"m": m, "n": n, "k": k}, precision) if uses_tensor_cores(precision) else []
    waves = wave_quantization(m, n, sm_count)
    issues = list(bad)
    if waves.get("wave_efficiency", 1.0) < POOR_WAVE and waves.get("waves", 99) <= 4:
        issues.append(f"{waves['tiles']} tiles of {NOMINAL_TILE[0]}x{NOMINAL_TILE[1]} over {sm_count} SMs: "
                      f"last wave {waves['wave_efficiency']:.0%} busy")
    limit = gemm_hard_limit(m, n, k, precision)
    padded = {d: pad_to(v, p.align) for d, v in (("m", m), ("n", n), ("k", k)) if v % p.align}
    return {
        "tensor_cores": uses_tensor_cores(precision),
        "aligned": not bad,
        "misaligned": bad,
        "hard_limit": limit,
        "issues": issues,
        "fix": ("pad " + ", ".join(f"{d} {v}->{padded[d]}" for d, v in (("m", m), ("n", n), ("k", k)) if d in padded))
               if padded and uses_tensor_cores(precision) else None,
        **waves,
    }
