"""Tensor Core share: the part of a step's GPU kernel time spent in Tensor Core kernels, from torch.profiler
(tcperf.kernels), under the fp32 baseline and under the recommended recipe; and how busy the GPU is in a step
(kernel time over step time: well under 1 means the host sets the pace, and CUDA graphs are the cure).

    share, top, kernel_ms = profile(step, device)   # 0.87, [{name, time_us, tensor_core}, ...], 1.9
    summary(results, chosen)                         # {'baseline': 0.0, 'recommended': 0.87, ...}
"""
from __future__ import annotations

import torch

from ..kernels import is_matmul, profile_kernels, tensor_core_share

TOP = 5


def profile(step, device: torch.device, calls: int = 3) -> tuple[float | None, list[dict], float, float]:
    """Run `step` a few times under the profiler: (Tensor Core share of kernel time, the top kernels, kernel
    time a step in ms, matrix-multiply kernel time a step in ms)."""
    kernels = profile_kernels(step, device, calls=calls)
    top = [{"name": k["name"][:120], "time_us": round(k["time_us"], 1), "tensor_core": k["tensor_core"]}
           for k in kernels[:TOP]]
    matmul = sum(k["time_us"] for k in kernels if is_matmul(k["name"]))
    return tensor_core_share(kernels), top, sum(k["time_us"] for k in kernels) / 1e3 / calls, matmul / 1e3 / calls


def gpu_busy(kernel_ms: float | None, step_ms: float | None) -> float | None:
    """Kernel time over step time, at most 1 (kernels of one stream do not overlap; the profiler's clock and the
    events' differ by a few percent)."""
    if not kernel_ms or not step_ms:
        return None
    return min(1.0, kernel_ms / step_ms)


def summary(results: list, chosen) -> dict:
    """The baseline's and the chosen recipe's shares (None where not profiled: on a CPU, or skipped)."""
    base = next((r for r in results if r.recipe == "fp32"), None)
    return {"baseline": base.tc_share if base else None,
            "baseline_kernels": base.kernels if base else [],
            "recommended_recipe": chosen.recipe if chosen else None,
            "recommended": chosen.tc_share if chosen else None,
            "recommended_kernels": chosen.kernels if chosen else []}
