"""Which GPU kernels a call launched, and whether they ran on Tensor Cores.

torch.profiler records the kernel names; `is_tensor_core` classifies a name by the markers NVIDIA's libraries put
in them: Hopper's warpgroup MMA (`wgmma`, `gmma`), the `HMMA`/`mma` instruction families, CUTLASS/cuBLAS tile
names (`s16816gemm`, `xmma`, `tensorop`, `sm90_xmma`, `sm80_xmma`), cuDNN's `implicit_convolve_sgemm` (no TC) vs
`xmma_fprop` (TC) and flash attention. The list of names the tests check it against was recorded on an H100/H200.
"""
from __future__ import annotations

import re

import torch

# Markers of Tensor Core kernels. Ordered loosely by how often they appear on sm80/sm90 builds.
_TC = re.compile(r"wgmma|gmma|hmma|imma|dmma|qgmma|xmma|tensorop|s16816|h16816|i16832|i8816|bf16816|"
                 r"tf32|tst_|_tn_|sm90_|sm80_.*(?:gemm|conv)|cutlass.*(?:sm80|sm90)|flash|fmha|"
                 r"nvjet|cublaslt.*(?:bf16|f16|e4m3)", re.IGNORECASE)
# Markers that rule Tensor Cores out even when a TC marker also matches (plain SIMT fp32 kernels).
_NOT_TC = re.compile(r"sgemm(?!.*tf32)|dgemm(?!.*dmma)|simt|implicit_convolve_sgemm|gemv|gemvx|"
                     r"elementwise|reduce_kernel|vectorized|copy|fill|memset|softmax", re.IGNORECASE)


def is_tensor_core(name: str) -> bool:
    """True when a kernel name says it runs on Tensor Cores."""
    if _NOT_TC.search(name) and not re.search(r"tensorop|xmma|gmma|hmma|s16816|nvjet", name, re.IGNORECASE):
        return False
    return bool(_TC.search(name))


def profile_kernels(fn, device: torch.device, calls: int = 3) -> list[dict]:
    """Run fn under torch.profiler; return [{name, calls, time_us, tensor_core}] for each CUDA kernel."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize(device)   # sync point: kernels must finish before the profiler stops
    kernels: dict[str, dict] = {}
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA or _is_runtime_event(ev.name):
            continue
        k = kernels.setdefault(ev.name, {"name": ev.name, "calls": 0, "time_us": 0.0,
                                         "tensor_core": is_tensor_core(ev.name)})
        k["calls"] += 1
        k["time_us"] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
    return sorted(kernels.values(), key=lambda k: -k["time_us"])


def _is_runtime_event(name: str) -> bool:
    return name.startswith(("Memcpy", "Memset", "cuda", "Activity Buffer"))


def tensor_core_share(kernels: list[dict]) -> float | None:
    """Share of kernel time spent in Tensor Core kernels (None without kernels)."""
    total = sum(k["time_us"] for k in kernels)
    return sum(k["time_us"] for k in kernels if k["tensor_core"]) / total if total > 0 else None
