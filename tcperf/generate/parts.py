"""Where a decode step's time goes: the step run a few times under the profiler (tcperf.profiler.profile_kernels, the
one profiling mechanism), each kernel sorted into one of three parts by its name, beside the step's own time:

    linear      the weight matmuls: cuBLAS, tinygemm, tcperf.kernels.gemv's, Inductor's kernels that fused an `mm`
    attention   SDPA's kernels (flash, memory-efficient, cuDNN) or what Inductor made of them (bmm, softmax)
    other       norms, rotary embedding, residual adds, the KV cache's writes, sampling
    gaps        the step's time less its kernels' time: launches and host work between kernels (or graph nodes)

The floor beside it is what the bytes allow: the weights one step reads at the measured copy bandwidth. The linear
kernels' share of that bandwidth says how near the weight-only kernels run to it; the rest of the step is what a
decode step spends beyond its matmuls.

    profile_step(step, tok, pos, device, step_ms=1.43, weight_bytes=2.47e9, bandwidth_gbs=3000)
    # Llama-3.2-1B bf16 on an H100 (2026-11-26): {"linear_ms": 1.27, "attention_ms": 0.13, "other_ms": 0.013,
    #  "gaps_ms": 0.01, "floor_ms": 0.824, "linear_bw_share": 0.65, ...}
"""
from __future__ import annotations

import re

import torch

from .. import profiler

CALLS = 10          # decode steps profiled: a step is ~1-10 ms, so the profile costs well under a second
TOP = 5             # the longest kernels kept by name
PARTS = ("linear", "attention", "other")
_INDUCTOR_ATTENTION = re.compile(r"softmax|(?<![a-z])bmm(?![a-z])", re.IGNORECASE)   # SDPA as Inductor lowers it


def part(name: str) -> str:
    """The part (PARTS, the module's doc says what each holds) a kernel's time counts in, from its kind
    (tcperf.profiler.kind, the one reading of kernel names) and, for attention, the names Inductor gives it."""
    k = profiler.kind(name)
    if k == "attention" or _INDUCTOR_ATTENTION.search(name):
        return "attention"
    return "linear" if k == "matmul" else "other"


def parts_of(found: list[dict], calls: int, step_ms: float, weight_bytes: float, bandwidth_gbs: float | None) -> dict:
    """profile_kernels' kernels over `calls` steps -> a step's ms in each part, the gaps, the byte floor, and the
    TOP longest kernels (name, us a step, launches a step, part, launch: its grid, block and registers)."""
    ms = dict.fromkeys(PARTS, 0.0)
    for k in found:
        ms[part(k["name"])] += k["time_us"] / calls / 1e3
    kernel_ms = sum(ms.values())
    floor = weight_bytes / (bandwidth_gbs * 1e9) * 1e3 if bandwidth_gbs else None
    return {**{f"{p}_ms": v for p, v in ms.items()}, "kernel_ms": kernel_ms, "step_ms": step_ms,
            "gaps_ms": max(0.0, step_ms - kernel_ms), "floor_ms": floor,
            "linear_bw_share": floor / ms["linear"] if floor and ms["linear"] else None,
            "top": [{"name": k["name"][:100], "us": k["time_us"] / calls, "launches": k["calls"] / calls,
                     "part": part(k["name"]), "launch": profiler.launch_text(k.get("launch_configs") or [])}
                    for k in found[:TOP]]}


def profile_step(step, token: torch.Tensor, pos: torch.Tensor, device: torch.device, step_ms: float,
                 weight_bytes: float, bandwidth_gbs: float | None) -> dict:
    """The warm decode step (step(token, pos), as the loop calls it) profiled CALLS times, sorted into parts."""
    found = profiler.profile_kernels(lambda: step(token, pos), device, calls=CALLS, launch_configs=True)
    return parts_of(found, CALLS, step_ms, weight_bytes, bandwidth_gbs)


def sentence(p: dict) -> str:
    """One line: 'step 1.43 ms = linear 1.27 (the weights at 65% of the copy bandwidth) + attention 0.13 + other
    0.013 + gaps 0.01; the weights alone take 0.824 ms at the copy bandwidth' (Llama-3.2-1B bf16, H100)."""
    share = f" (the weights at {p['linear_bw_share']:.0%} of the copy bandwidth)" if p.get("linear_bw_share") else ""
    floor = f"; the weights alone take {p['floor_ms']:.3g} ms at the copy bandwidth" if p.get("floor_ms") else ""
    return (f"step {p['step_ms']:.3g} ms = linear {p['linear_ms']:.3g}{share} + attention {p['attention_ms']:.2g} + "
            f"other {p['other_ms']:.2g} + gaps {p['gaps_ms']:.2g}{floor}")
