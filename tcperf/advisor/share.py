"""Tensor Core share: the part of a step's GPU kernel time spent in Tensor Core kernels, from torch.profiler
(tcperf.kernels), under the fp32 baseline and under the recommended recipe.

    share, top = profile(step, device)         # 0.87, [{name, time_us, tensor_core}, ...]
    summary(results, chosen)                    # {'baseline': 0.0, 'recommended': 0.87, ...}
"""
from __future__ import annotations

import torch

from ..kernels import profile_kernels, tensor_core_share

TOP = 5


def profile(step, device: torch.device, calls: int = 3) -> tuple[float | None, list[dict]]:
    """Run `step` a few times under the profiler: (Tensor Core share of kernel time, the top kernels)."""
    kernels = profile_kernels(step, device, calls=calls)
    top = [{"name": k["name"][:120], "time_us": round(k["time_us"], 1), "tensor_core": k["tensor_core"]}
           for k in kernels[:TOP]]
    return tensor_core_share(kernels), top


def summary(results: list, chosen) -> dict:
    """The baseline's and the chosen recipe's shares (None where not profiled: on a CPU, or skipped)."""
    base = next((r for r in results if r.recipe == "fp32"), None)
    return {"baseline": base.tc_share if base else None,
            "baseline_kernels": base.kernels if base else [],
            "recommended_recipe": chosen.recipe if chosen else None,
            "recommended": chosen.tc_share if chosen else None,
            "recommended_kernels": chosen.kernels if chosen else []}
