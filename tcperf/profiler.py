"""Which GPU kernels a call launched, and whether they ran on Tensor Cores.

torch.profiler records the kernel names; `classify` reads the markers NVIDIA's libraries put in them (_RULES, in
order: the first rule that matches decides):

1. CUDA-core math, named: `ffma`/`dfma`/`hfma2`, `simt`, cuDNN's SIMT kernels (`scudnn`/`dcudnn`,
   `implicit_convolve_sgemm`), CUTLASS `OpClassSimt`, the helpers around attention kernels. -> not TC
2. Tensor Core instructions or tiles, named: `wgmma`/`gmma`, `hmma`/`imma`/`dmma`/`wmma`, `tensorop`, xmma and
   cuBLAS/CUTLASS tiles (`tensor16x8x16`, `s16816`, `warpgroupsize`), `nvjet`, `cutlass3x_sm90`, flash /
   memory-efficient / cuDNN attention, cuDNN's persistent RNN kernels with `_HMMA`. -> TC
3. xmma kernels by their operand types: `f16`, `bf16`, `tf32`, `i8`, `e4m3`, `e5m2`, `f64` (sm80+ DMMA) -> TC;
   all-`f32` -> not TC.
4. Everything else (elementwise, reductions, copies, `gemv`, `sgemm`, softmax, cuDNN RNN kernels without `_HMMA`)
   -> not TC.

The tests (tests/test_kernels.py) check it against names from public sm80/sm90 profiles and against 246 names
profiled on an H200 with torch 2.11 (tests/data/kernels_h200.tsv, 2026-11-22).

    classify("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT")     # (True, 'nvjet')
    classify("ampere_sgemm_128x64_nn")                        # (False, 'no Tensor Core marker')
"""
from __future__ import annotations

import os
import re

import torch

_RULES = (   # (pattern, uses Tensor Cores): the first match decides
    (r"ffma|dfma|hfma2|simt|[sd]cudnn|implicit_convolve[a-z0-9]*_sgemm|opclasssimt"
     r"|flash_bwd_(?:dot_do_o|convert|clear)|flash_fwd_splitkv_combine", False),
    (r"wgmma|gmma|hmma|imma|dmma|wmma|mma_sync|tensorop|opclasstensorop|tensor\d+x\d+x\d+|sptensor"
     r"|(?<![a-z])[hsid]\d{3,5}(?:gemm|cudnn|fprop|dgrad|wgrad|conv)"
     r"|warpgroupsize|nvjet|cutlass3x_sm\d+|flash_fwd|flash_bwd|flashattention|fmha_|sdpa_\w*flash"
     r"|sparsegemm|sparsemma|_hmma", True),
)
_COMPILED = [(re.compile(p, re.IGNORECASE), tc) for p, tc in _RULES]
# xmma names spell their types after the operation: sm90_xmma_gemm_f32f32_tf32f32_f32_... = A/B f32, math tf32
_XMMA_TYPES = re.compile(r"xmma_[a-z_]*?_((?:[a-z]+\d+)+)_((?:[a-z]+\d+)+)_", re.IGNORECASE)


def classify(name: str) -> tuple[bool, str]:
    """(runs on Tensor Cores, the marker that decided it)."""
    for pattern, tc in _COMPILED:
        hit = pattern.search(name)
        if hit:
            return tc, hit.group(0)
    types = _XMMA_TYPES.search(name)
    if types:
        codes = re.findall(r"[a-z]+\d+", "".join(types.groups()), re.IGNORECASE)
        return any(c.lower() != "f32" for c in codes), "xmma types " + "_".join(types.groups())
    return False, "no Tensor Core marker"


_MATMUL = re.compile(r"gemm|gemv|conv|cudnn|cutlass|xmma|nvjet|flash|fmha|attention|rnn|lstm", re.IGNORECASE)

# What a kernel does, by its name: the first kind whose pattern matches decides. Library kernels say it (cuDNN's
# bn_bw_*, ATen's cunn_SoftMaxBackward); Inductor's name the operations they fused, so they are read by those words
# alone: "convolution" in a pointwise kernel's name is the bias or ReLU fused after one (only templates,
# triton_tem_*, are matmuls; so is a one-row `mm` decomposed into a reduction).
KINDS = ("matmul", "attention", "normalization", "pooling", "softmax/loss", "optimizer", "copies", "elementwise",
         "reductions", "communication", "other")
_KIND_RULES = (   # a kernel that fused a matmul with a norm (bf16 decode: add_mean_mm_mul_pow_rsqrt) is the matmul's
    ("communication", r"nccl|gloo"),
    ("attention", r"flash|fmha|attention|sdpa"),
    ("matmul", r"^triton_tem|(?<![a-z])b?mm(?![a-z])|addmm|tinygemm|int[48]_kernel|splitkreduce"),
    ("softmax/loss", r"softmax|logsumexp|nll_loss|cross_entropy"),
    ("normalization", r"batch_norm|batchnorm|bn_fw|bn_bw|layer_norm|layernorm|group_norm|rms_?norm|rsqrt|var_mean"),
    ("pooling", r"pool"),
    ("optimizer", r"adam|sgd|multi_tensor_apply|fused_optim"),
)
_KINDS = [(kind, re.compile(p, re.IGNORECASE)) for kind, p in _KIND_RULES]
_LATE_KINDS = [(kind, re.compile(p, re.IGNORECASE)) for kind, p in (
    ("copies", r"copy|memcpy|memset|transpose|permute|catarray|index|embedding|scatter|gather"),
    ("elementwise", r"elementwise|triton_poi|pointwise|fill"),
    ("reductions", r"reduce|triton_red|triton_per|sum|mean|norm|max|min"),
)]


def kind(name: str) -> str:
    """One of KINDS for a kernel name: the profile's "where the time goes" (tcperf.generate.parts groups these
    into a decode step's parts)."""
    for k, pattern in _KINDS:
        if pattern.search(name):
            return k
    if not name.startswith("triton_") and _MATMUL.search(name):
        return "matmul"
    for k, pattern in _LATE_KINDS:
        if pattern.search(name):
            return k
    return "other"


def by_kind(kernels: list[dict], calls: int) -> dict[str, float]:
    """profile_kernels' kernels -> ms a call in each kind that has any, the longest first."""
    ms: dict[str, float] = {}
    for k in kernels:
        which = kind(k["name"])
        ms[which] = ms.get(which, 0.0) + k["time_us"] / calls / 1e3
    return dict(sorted(ms.items(), key=lambda item: -item[1]))


def leaders(kernels: list[dict], calls: int, each: int = 2) -> dict[str, list[dict]]:
    """profile_kernels' kernels -> the `each` longest kernels of every kind ({name, ms a call}), kinds in by_kind's
    order: which kernels a kind's time is, so that "copies 4 ms" names the copy to remove."""
    out: dict[str, list[dict]] = {}
    for k in sorted(kernels, key=lambda k: -k["time_us"]):
        group = out.setdefault(kind(k["name"]), [])
        if len(group) < each:
            group.append({"name": k["name"][:120], "ms": round(k["time_us"] / calls / 1e3, 4)})
    order = by_kind(kernels, calls)
    return {which: out[which] for which in order}


def kinds_line(kinds: dict[str, float]) -> str:
    """'matmul 21.3 ms (52%), normalization 6.10 (15%), ...' for a profile's kernel kinds."""
    total = sum(kinds.values()) or 1.0
    return ", ".join(f"{k} {v:.3g} ms ({v / total:.0%})" if i == 0 else f"{k} {v:.3g} ({v / total:.0%})"
                     for i, (k, v) in enumerate(kinds.items()))


def is_matmul(name: str) -> bool:
    """True for the matrix-multiply class of kernels (GEMMs, convolutions, attention, cuDNN RNNs, on Tensor Cores
    or not): the work torch.compile hands to the same libraries and cannot fuse away, so their time in an eager
    step bounds the compiled step from below (the advisor prunes with it)."""
    return is_tensor_core(name) or bool(_MATMUL.search(name))


def is_tensor_core(name: str) -> bool:
    """True when a kernel name says it runs on Tensor Cores."""
    return classify(name)[0]


def detach_after_profiling() -> None:
    """Have Kineto finalize CUPTI when a profile ends (TEARDOWN_CUPTI=1), unless this process already says otherwise
    (torch.compile with mode="reduce-overhead" sets 0: CUDA before 12.6 crashed re-attaching CUPTI after a teardown).
    Left attached, CUPTI slows every later kernel launch (pytorch/pytorch#144455): BERT-base's eager step read 5.90
    ms a batch after one empty profile, 5.32 with teardown, 5.31 with none (an H100, 2026-11-26). Called by the
    processes that time again after a profile (tcperf.worker's sessions), not everywhere: a teardown costs a heavy
    re-init at the next profile, and after it a process profiles once (H100, 2026-11-27: five profiles of one matmul
    in a row listed 2, 0, 2, 0, 2 kernels, then the run hung)."""
    os.environ.setdefault("TEARDOWN_CUPTI", "1")


def profile_kernels(fn, device: torch.device, calls: int = 3, launch_configs: bool = False) -> list[dict]:
    """Run fn under torch.profiler; return [{name, calls, time_us, tensor_core}] for each CUDA kernel. What is
    timed after it in the same process is slowed unless detach_after_profiling was called first. launch_configs: each
    kernel also gets `launch_configs`, its distinct launch configurations (launch_configs_in)."""
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
    if launch_configs:
        configs = launch_configs_in(_chrome_trace(prof))
        for name, k in kernels.items():
            k["launch_configs"] = configs.get(name, [])
    return sorted(kernels.values(), key=lambda k: -k["time_us"])


def _chrome_trace(prof) -> dict:
    """The finished profile as Chrome's trace format (the one place torch.profiler gives each kernel's grid)."""
    import json
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            return json.load(f)


def launch_configs_in(trace: dict) -> dict[str, list[dict]]:
    """Each kernel's distinct launch configurations in a Chrome trace, by name: grid and block (x, y, z), registers
    a thread, shared memory bytes. Two runs of the same compiled code that differ here ran differently tuned
    kernels; the same here, the difference lies elsewhere (a Triton kernel's reduction block is not in it)."""
    found: dict[str, list[dict]] = {}
    for ev in trace.get("traceEvents", []):
        if ev.get("cat") != "kernel":
            continue
        a = ev.get("args") or {}
        config = {"grid": a.get("grid"), "block": a.get("block"), "registers": a.get("registers per thread"),
                  "shared_bytes": a.get("shared memory")}
        seen = found.setdefault(ev.get("name", ""), [])
        if config not in seen:
            seen.append(config)
    return found


def launch_text(configs: list[dict]) -> str:
    """'grid 3072x1x1 block 128 regs 40' for a kernel's first configuration ('+1' more where it had others)."""
    if not configs:
        return ""
    c = configs[0]
    grid = "x".join(str(v) for v in c.get("grid") or []) or "?"
    block = "x".join(str(v) for v in (c.get("block") or [])).removesuffix("x1").removesuffix("x1") or "?"
    more = f" +{len(configs) - 1}" if len(configs) > 1 else ""
    return f"grid {grid} block {block} regs {c.get('registers', '?')}{more}"


def _is_runtime_event(name: str) -> bool:
    return name.startswith(("Memcpy", "Memset", "cuda", "Activity Buffer"))


def tensor_core_share(kernels: list[dict]) -> float | None:
    """Share of kernel time spent in Tensor Core kernels (None without kernels)."""
    total = sum(k["time_us"] for k in kernels)
    return sum(k["time_us"] for k in kernels if k["tensor_core"]) / total if total > 0 else None


TOP = 5


def profile(fn, device: torch.device, calls: int = 3) -> dict:
    """The one Tensor Core share measurement, for kernel cases and model steps alike: fn run a few times under the
    profiler -> {tc_share (of kernel time), top (the TOP longest kernels), kernel_ms and matmul_ms (a call's kernel
    time, all and matrix-multiply only), kinds (by_kind), leaders (leaders)}."""
    kernels = profile_kernels(fn, device, calls=calls)
    top = [{"name": k["name"][:160], "time_us": round(k["time_us"], 1), "tensor_core": k["tensor_core"]}
           for k in kernels[:TOP]]
    matmul = sum(k["time_us"] for k in kernels if is_matmul(k["name"]))
    return {"tc_share": tensor_core_share(kernels), "top": top,
            "kernel_ms": sum(k["time_us"] for k in kernels) / 1e3 / calls, "matmul_ms": matmul / 1e3 / calls,
            "kinds": by_kind(kernels, calls), "leaders": leaders(kernels, calls)}


def gpu_busy(kernel_ms: float | None, step_ms: float | None) -> float | None:
    """Kernel time over step time, at most 1 (kernels of one stream do not overlap; the profiler's clock and the
    events' differ by a few percent). Well under 1: the host sets the pace, and CUDA graphs are the cure."""
    if not kernel_ms or not step_ms:
        return None
    return min(1.0, kernel_ms / step_ms)
