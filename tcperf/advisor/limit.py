"""How far the pick is from what this GPU could do: its step against its speed of light, and where the rest goes.

    speed of light = the larger of  FLOPs / the measured Tensor Core ceiling of the pick's precision
                                    bytes / the measured copy bandwidth
    FLOPs   a step's (torch.utils.flop_counter on the example input, or averaged over the workload's stream: the
            real positions only, so padding shows as lost time); training counts the backward as twice the forward
    bytes   the parameters at the precision the pick holds them in, read once a step (training: read, gradient
            written, updated: three times), the least a step must move
The larger of the two, not their sum: a step that overlaps its loads with its math (every GEMM does) can reach
the larger, so the sum would let a step beat its own limit. Ceilings come from the store (`tcperf ceilings`) where
this GPU was measured, else a quick measurement here: one 8192^3 GEMM at the precision, one 1 GiB copy
(tcperf.peaks.measure_now).

    found = of(pick, flops, params, "infer", ceilings={"bf16": 744.0, "bandwidth": 4210.0})
    found["share"]      # 0.83: the step runs at 83% of its speed of light; found["parts"]: where the step goes
"""
from __future__ import annotations

from ..recipes import get as get_recipe

BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}


def weights_bytes(params: int, name: str, mode: str) -> float:
    """The parameters' bytes a step must move (the module's docstring); autocast keeps fp32 weights."""
    r = get_recipe(name)
    held = "bf16" if r.weights == "bfloat16" else "fp16" if r.weights == "float16" else \
        r.peak_precision if (r.fp8 or r.int8) and mode == "infer" else "fp32"
    return params * BYTES[held] * (3 if mode == "train" else 1)


def floor(name: str, flops_forward: float | None, params: int, mode: str, ceilings: dict) -> dict | None:
    """A step's speed of light at recipe `name`: {"sol_ms", "math_ms", "memory_ms", ...}; None without FLOPs or a
    ceiling. Also the least a step can take: the advisor stops a warm-up whose job could not win even there."""
    prec = get_recipe(name.split("@")[0]).peak_precision
    tflops, gbs = ceilings.get(prec), ceilings.get("bandwidth")
    if not (flops_forward and tflops and gbs):
        return None
    flops = flops_forward * (3 if mode == "train" else 1)
    moved = weights_bytes(params, name.split("@")[0], mode)
    math_ms, memory_ms = flops / (tflops * 1e9), moved / (gbs * 1e6)
    return {"precision": prec, "flops": flops, "bytes": moved, "ceiling_tflops": tflops, "bandwidth_gbs": gbs,
            "ceilings_from": ceilings.get("from", "store"), "math_ms": math_ms, "memory_ms": memory_ms,
            "sol_ms": max(math_ms, memory_ms), "bound": "math" if math_ms >= memory_ms else "memory"}


def of(pick, flops_forward: float | None, params: int, mode: str, ceilings: dict) -> dict | None:
    """The pick's speed of light and where its step goes; None without FLOPs, a ceiling or a step time."""
    out = floor(pick.runs, flops_forward, params, mode, ceilings)
    if out is None or not pick.step_ms:
        return None
    out.update(step_ms=pick.step_ms, share=out["sol_ms"] / pick.step_ms, parts=parts(pick, out["flops"],
                                                                                     out["ceiling_tflops"]))
    return out


def parts(pick, flops: float, tflops: float) -> dict | None:
    """Where the step goes (ms a step), from its profile: GEMM/conv/attention kernels (and the share of the ceiling
    their FLOPs reach), other kernels (memory-bound: normalisation, elementwise, copies), host gaps between kernels."""
    if pick.kernel_ms is None or pick.matmul_ms is None:
        return None
    step = pick.step_ms
    kernels = min(pick.kernel_ms, step)
    matmul = min(pick.matmul_ms, kernels)
    reach = flops / (matmul * 1e9) / tflops if matmul > 0 else None
    return {"matmul_ms": matmul, "matmul_ceiling_share": reach, "other_kernels_ms": kernels - matmul,
            "host_gaps_ms": step - kernels}


def sentence(found: dict | None) -> str | None:
    if not found:
        return None
    text = (f"{found['share']:.0%} of its speed of light ({found['sol_ms']:.3g} ms: {found['bound']}-bound at "
            f"{found['ceiling_tflops']:.0f} TFLOPS {found['precision']} and {found['bandwidth_gbs']:.0f} GB/s)")
    p = found.get("parts")
    if p:
        reach = f" at {p['matmul_ceiling_share']:.0%} of the ceiling" if p["matmul_ceiling_share"] else ""
        text += (f"; the step: GEMM/conv/attention kernels {p['matmul_ms']:.3g} ms{reach}, other kernels "
                 f"{p['other_kernels_ms']:.3g} ms, host gaps {p['host_gaps_ms']:.3g} ms")
    return text
