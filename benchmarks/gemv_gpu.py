"""Issue 33's kernels side by side: one decode-shaped Linear at batch 1..64, bf16 cuBLAS against every weight-only
int8 and int4 kernel tcperf can run, and the batch from which each stops beating bf16 (over a decode step's linear
layers: each block's four, the output layer once).

Kernels (KERNELS): bf16 `F.linear` (cuBLAS); int8 Inductor (Int8WeightOnlyLinear's forward under torch.compile
with coordinate-descent tuning, as `tcperf generate` compiles it: batch 1 a static graph, the larger batches one
graph with a dynamic batch); int8 triton and int4 triton (tcperf.kernels.gemv); int4
tinygemm (torch._weight_int4pack_mm); torchao's int8 and int4 weight-only where torchao imports (one line says so
otherwise). Shapes (MODELS, K x N): Llama-3.1-8B's and Llama-3.2-1B's decode layers (qkv, o, gate+up fused, down,
the vocabulary head). int4 in groups of 128 (GROUP).

Each kernel is first checked at the batch it is timed at against the layer's reference() (its own dequantised
weights in float32, tcperf.quant.KERNEL_TOLERANCE; torchao's and bf16 against the bf16 weights, TOLERANCE_BF16):
a failing kernel is reported, not timed. Timing: tcperf.timing.time_fn(graph=True, flush_l2=False) on one callable
that calls copies of the layer in turn, whose weights add up to ROTATE_L2 times the L2 cache, so every call reads its
weights from memory as a decode step does. The callable makes whole rounds over the copies, about GRAPH_MS of calls
(at most MAX_CALLS; a first time_fn replay of one round sets the count), so one sample is one replay of its CUDA
graph and a call's time is a sample over the calls in it: the median over REPLAYS replays, the IQR (p25-p75) beside
it. GB/s counts weights and scales only; "% BW" is that against the copy bandwidth timed in the same process
(tcperf.peaks.measure_now).

    python benchmarks/gemv_gpu.py --out out/gemv            # both models, batch 1..64
    python benchmarks/gemv_gpu.py --quick --out out/gemv    # Llama-3.2-1B's shapes at batch 1, 4, 16
    python benchmarks/gemv_gpu.py --kernels int4 --batches 1,4   # bf16 and the int4 kernels only

Time on one H100: the full sweep took 115 s on 2026-11-25, before its timing went through time_fn (whose warm-up of
each measurement adds an estimated ~15 s); --quick ~40 s (an estimate from the work done). Most of it is compiling
(Inductor: two graphs a shape; Triton: 6 configurations for the int8 GEMV, 4 for the int4 GEMV and for each
batched path, a shape and M bucket).
Writes OUT/gemv_gpu.json: every row, the crossing batches, the copy bandwidth, the environment.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table

from tcperf import peaks
from tcperf.errors import one_line
from tcperf.quant import KERNEL_TOLERANCE, Int4WeightOnlyLinear, Int8WeightOnlyLinear, QuantLinear
from tcperf.timing import UNSTABLE_SPREAD, Measurement, time_fn

console = Console(width=160)
GROUP = 128
MODELS = {  # model -> its decode layers: (name, K, N)
    "Llama-3.1-8B": (("qkv", 4096, 6144), ("o", 4096, 4096), ("gate+up", 4096, 28672), ("down", 14336, 4096),
                     ("output", 4096, 128256)),
    "Llama-3.2-1B": (("qkv", 2048, 3072), ("o", 2048, 2048), ("gate+up", 2048, 16384), ("down", 8192, 2048),
                     ("output", 2048, 128256)),
}
BLOCKS = {"Llama-3.1-8B": 32, "Llama-3.2-1B": 16}    # transformer blocks: qkv, o, gate+up and down run once each
BATCHES = (1, 2, 4, 8, 16, 32, 64)
QUICK = ("Llama-3.2-1B", (1, 4, 16))
INDUCTOR = {"coordinate_descent_tuning": True}       # tcperf.generate.loop's options, less the CUDA graphs
TOLERANCE_BF16 = {16: 0.01, 8: 0.03, 4: 0.2}          # against the bf16 weights: quantization's own error included
ROTATE_L2 = 4                                         # weights rotated through a graph: this many L2 caches
MAX_COPIES, MAX_CALLS, GRAPH_MS, REPLAYS = 64, 200, 3.0, 9


@dataclass(frozen=True)
class Kernel:
    name: str
    bits: int                                   # weight bits: 16, 8, 4
    make: Callable[[nn.Linear], nn.Module]      # the bf16 Linear -> the layer that runs this kernel
    compiled: bool = False                      # through torch.compile (INDUCTOR)
    own_reference: bool = True                  # checked against layer.reference() (else the bf16 weights)


def _torchao(bits: int):
    """A maker for torchao's weight-only layer, None when torchao does not import."""
    try:
        import torchao.quantization as q
    except Exception:         # noqa: BLE001 - missing or broken: its rows are skipped with a line
        return None
    config = q.Int8WeightOnlyConfig() if bits == 8 else q.Int4WeightOnlyConfig(group_size=GROUP)

    def make(lin: nn.Linear) -> nn.Module:
        mod = nn.Sequential(copy.deepcopy(lin))
        q.quantize_(mod, config)
        return mod
    return make


KERNELS = [k for k in (
    Kernel("bf16 cuBLAS", 16, lambda lin: lin, own_reference=False),
    Kernel("int8 inductor", 8, Int8WeightOnlyLinear, compiled=True),
    Kernel("int8 triton", 8, lambda lin: Int8WeightOnlyLinear(lin, kernel="triton")),
    Kernel("int4 tinygemm", 4, lambda lin: Int4WeightOnlyLinear(lin, GROUP)),
    Kernel("int4 triton", 4, lambda lin: Int4WeightOnlyLinear(lin, GROUP, kernel="triton")),
    Kernel("int8 torchao", 8, _torchao(8), compiled=True, own_reference=False) if _torchao(8) else None,
    Kernel("int4 torchao", 4, _torchao(4), own_reference=False) if _torchao(4) else None,
) if k is not None]


def weight_bytes(bits: int, n: int, k: int) -> int:
    """What a call must read: the weights and their bf16 scales (int8: one a row; int4: a scale and zero a group)."""
    scales = {16: 0, 8: 2 * n, 4: 2 * 2 * n * (k // GROUP)}[bits]
    return n * k * bits // 8 + scales


# --- one kernel at one shape and batch --------------------------------------------------------------------------
def _shell(layer: nn.Module) -> nn.Module:
    """The layer's code without its memory (a copy on the meta device) for functional_call to fill."""
    try:
        return copy.deepcopy(layer).to("meta")
    except Exception:         # noqa: BLE001 - a tensor subclass that will not go to meta: a real copy
        return copy.deepcopy(layer)


def runner(kernel: Kernel, layers: list[nn.Module]) -> Callable:
    """run(i, x): copy i of the layer on x. Compiled kernels share one compiled function across copies
    (functional_call: the buffers are inputs) and batches: batch 1 a static graph, the others one graph with a
    dynamic batch, as tcperf.generate.loop's compiled step is from its second batch size."""
    if not kernel.compiled:
        return lambda i, x: layers[i](x)
    torch._dynamo.reset()                  # a new function a shape: Dynamo's recompile limit stays far
    base = _shell(layers[0])               # none of the states: a state that is base's own would be a second graph
    fn = torch.compile(lambda state, x: torch.func.functional_call(base, state, (x,)), fullgraph=True,
                       options=INDUCTOR)
    states = [{**dict(layer.named_parameters()), **dict(layer.named_buffers())} for layer in layers]
    return lambda i, x: fn(states[i], x)


def error(kernel: Kernel, layer: nn.Module, lin: nn.Linear, out: torch.Tensor, x: torch.Tensor) -> float:
    """Relative norm error against the layer's reference (own dequantised weights) or the bf16 weights."""
    with torch.no_grad():
        want = layer.reference(x) if kernel.own_reference and isinstance(layer, QuantLinear) else \
            F.linear(x.float(), lin.weight.float())
    got = out.double()
    if not torch.isfinite(got).all():
        return math.inf
    return float(torch.linalg.vector_norm(got - want.double()) / torch.linalg.vector_norm(want.double()))


def rotation(fns: list[Callable], calls: int) -> Callable:
    """One callable: `calls` calls, copy after copy of the layer (fns), round after round."""
    def run():
        for i in range(calls):
            fns[i % len(fns)]()
    return run


def graph_calls(fns: list[Callable], device: torch.device) -> int:
    """Calls a graph holds: whole rounds over fns lasting about GRAPH_MS, at most MAX_CALLS, at least one round;
    a round's time is one replay of a graph of one round."""
    once = time_fn(rotation(fns, len(fns)), device, graph=True, flush_l2=False, warmup_ms=0, min_reps=1, max_reps=1)
    each_ms = max(once.median_ms / len(fns), 1e-3)
    return max(1, min(MAX_CALLS, int(GRAPH_MS / each_ms)) // len(fns)) * len(fns)


def replays(fns: list[Callable], device: torch.device) -> tuple[Measurement, int]:
    """REPLAYS replays of a CUDA graph of calls rotating over fns, timed by time_fn; and the calls in the graph."""
    calls = graph_calls(fns, device)
    m = time_fn(rotation(fns, calls), device, graph=True, flush_l2=False, min_reps=REPLAYS, max_reps=REPLAYS)
    return m, calls


def measured(kernel: Kernel, lin: nn.Linear, layers: list[nn.Module], run: Callable, batch: int,
             gen: torch.Generator) -> dict:
    """One batch, checked, then timed: {status, error, tolerance, us, iqr_us, spread, unstable, replays, calls,
    samples}; us and iqr_us: a call's microseconds, the median and IQR over the replays (samples: one a replay)."""
    x = torch.randn(batch, lin.in_features, generator=gen).to(lin.weight.device, torch.bfloat16)     # (M, K)
    if kernel.compiled and batch > 1:
        torch._dynamo.mark_dynamic(x, 0)
    fns = [lambda i=i: run(i, x) for i in range(len(layers))]
    tolerance = KERNEL_TOLERANCE if kernel.own_reference else TOLERANCE_BF16[kernel.bits]
    with torch.no_grad():
        err = error(kernel, layers[0], lin, fns[0](), x)        # compiles and autotunes, outside the graph
        if not err <= tolerance:
            return {"status": "wrong", "error": err, "tolerance": tolerance}
        m, calls = replays(fns, x.device)
    per_call = 1e3 / calls                                      # a replay's ms -> a call's us
    return {"status": "ok", "error": err, "tolerance": tolerance, "us": m.median_ms * per_call,
            "iqr_us": m.iqr_ms * per_call, "spread": m.spread, "unstable": m.unstable, "replays": m.n,
            "calls": calls, "samples": [ms * per_call for ms in m.samples_ms]}


def kernel_rows(kernel: Kernel, lin: nn.Linear, batches, copies: int, gen: torch.Generator) -> list[dict]:
    """Every batch on one kernel: the layer made once, copied, run; a failure is that batch's row."""
    try:
        layers = [kernel.make(lin)]
        layers += [copy.deepcopy(layers[0]) for _ in range(copies - 1)]
        run = runner(kernel, layers)
    except Exception as e:        # noqa: BLE001 - one kernel's failure is rows, not the end of the sweep
        return [{"status": "error", "message": one_line(e)} for _ in batches]
    out = []
    for batch in batches:
        try:
            out.append(measured(kernel, lin, layers, run, batch, gen))
        except Exception as e:    # noqa: BLE001
            out.append({"status": "error", "message": one_line(e)})
    return out


def shape_rows(model: str, name: str, k: int, n: int, batches, bandwidth: float | None, l2: int,
               kernels: list[Kernel]) -> list[dict]:
    gen = torch.Generator().manual_seed(0)
    lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(n, k, generator=gen).mul_(0.02))
    out = []
    for kernel in kernels:
        nbytes = weight_bytes(kernel.bits, n, k)
        copies = max(1, min(MAX_COPIES, math.ceil(ROTATE_L2 * l2 / nbytes)))
        for batch, r in zip(batches, kernel_rows(kernel, lin, batches, copies, gen)):
            if r.get("us"):
                r["gbps"] = nbytes / (r["us"] * 1e-6) / 1e9
                r["bw_share"] = r["gbps"] / bandwidth if bandwidth else None
            out.append({"model": model, "layer": name, "k": k, "n": n, "batch": batch, "kernel": kernel.name,
                        "bits": kernel.bits, "bytes": nbytes, "copies": copies, **r})
        torch.cuda.empty_cache()
    return out


# --- against bf16 -----------------------------------------------------------------------------------------------
def add_ratios(rows: list[dict]) -> None:
    """Each row's time over bf16's at the same shape and batch (> 1: slower than bf16)."""
    bf16 = {(r["model"], r["layer"], r["batch"]): r.get("us") for r in rows if r["bits"] == 16}
    for r in rows:
        ref = bf16.get((r["model"], r["layer"], r["batch"]))
        r["vs_bf16"] = r["us"] / ref if r.get("us") and ref else None


def step_us(rows: list[dict], blocks: int) -> float | None:
    """The linear layers' time in one decode step: each block's four layers, then the output layer once."""
    if not rows or not all(r.get("us") for r in rows):
        return None
    return sum(r["us"] * (1 if r["layer"] == "output" else blocks) for r in rows)


def crossings(rows: list[dict]) -> list[dict]:
    """Per model and quantized kernel: the linear layers' time in a decode step (step_us) at each batch against
    bf16's, and the smallest batch from which it no longer beats bf16 (None: faster at every batch measured)."""
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        layers = len({r["layer"] for r in mine})
        for kernel in [k.name for k in KERNELS if k.bits < 16]:
            ratios = {}
            for batch in sorted({r["batch"] for r in mine}):
                times = [r for r in mine if r["kernel"] == kernel and r["batch"] == batch]
                ref = [r for r in mine if r["bits"] == 16 and r["batch"] == batch]
                t, t_ref = step_us(times, BLOCKS.get(model, 1)), step_us(ref, BLOCKS.get(model, 1))
                if len(times) == len(ref) == layers and t and t_ref:
                    ratios[batch] = t / t_ref
            if not ratios:
                continue
            slower = [b for b, x in sorted(ratios.items()) if x >= 1]
            out.append({"model": model, "kernel": kernel, "ratio_by_batch": ratios,
                        "stops_beating_bf16_at": slower[0] if slower else None,
                        "incomplete": len(ratios) < len({r["batch"] for r in mine})})
    return out


# --- the report -------------------------------------------------------------------------------------------------
def table(rows: list[dict], model: str) -> Table:
    t = Table(title=f"{model}: weight-only kernels against bf16 cuBLAS (us a call, median over {REPLAYS} graph "
                    f"replays, IQR: yellow above {UNSTABLE_SPREAD:.0%} of the median)")
    for col in ("layer (K x N)", "batch", "kernel", "us", "IQR", "GB/s", "% BW", "vs bf16", "error"):
        t.add_column(col, justify="left" if col in ("layer (K x N)", "kernel") else "right")
    for r in (r for r in rows if r["model"] == model):
        if r["status"] != "ok":
            note = r.get("message") or f"{r['error']:.2g} > {r['tolerance']:g}: not timed"
            t.add_row(f"{r['layer']} ({r['k']}x{r['n']})", str(r["batch"]), r["kernel"], f"[red]{r['status']}[/]",
                      "", "", "", "", note)
            continue
        t.add_row(f"{r['layer']} ({r['k']}x{r['n']})", str(r["batch"]), r["kernel"], f"{r['us']:.1f}",
                  f"[yellow]{r['iqr_us']:.2g}[/]" if r["unstable"] else f"{r['iqr_us']:.2g}", f"{r['gbps']:,.0f}",
                  f"{r['bw_share']:.0%}" if r.get("bw_share") else "",
                  f"{r['vs_bf16']:.2f}" if r.get("vs_bf16") else "", f"{r['error']:.1g}")
    return t


def crossing_line(c: dict) -> str:
    ratios = " ".join(f"b{b}:{x:.2f}" for b, x in c["ratio_by_batch"].items())
    at = c["stops_beating_bf16_at"]
    verdict = f"stops beating bf16 at batch {at}" if at else "beats bf16 at every batch measured"
    more = " (some shapes failed or were not timed: batches missing)" if c["incomplete"] else ""
    return f"  {c['model']} · {c['kernel']}: {verdict}{more}; a decode step's linear layers against bf16's: {ratios}"


def environment(device) -> dict:
    import triton
    p = torch.cuda.get_device_properties(device)
    return {"gpu": p.name, "sms": p.multi_processor_count, "l2_bytes": p.L2_cache_size, "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out", help="folder for gemv_gpu.json (default ./out)")
    p.add_argument("--quick", action="store_true", help="Llama-3.2-1B's shapes at batch 1, 4, 16 only")
    p.add_argument("--models", default=None, help=f"a comma list of {', '.join(MODELS)} (default: all; --quick: 1B)")
    p.add_argument("--batches", default=None, help="a comma list of batches (default: "
                   f"{','.join(map(str, BATCHES))}; --quick: {','.join(map(str, QUICK[1]))})")
    p.add_argument("--kernels", default=None, help="a comma list of words; the kernels whose names hold one "
                   "(e.g. bf16,int4; default: all; bf16 cuBLAS is always kept: the ratios are against it)")
    a = p.parse_args()
    models, batches = ((QUICK[0],), QUICK[1]) if a.quick else (tuple(MODELS), BATCHES)
    models = tuple(m.strip() for m in a.models.split(",")) if a.models else models
    if unknown := [m for m in models if m not in MODELS]:
        print(f"unknown model {unknown[0]!r}; choose from: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    if a.batches and not all(b.strip().isdigit() and int(b) > 0 for b in a.batches.split(",")):
        print(f"--batches takes positive whole numbers, e.g. 1,4,16; got {a.batches!r}", file=sys.stderr)
        return 2
    batches = tuple(int(b) for b in a.batches.split(",")) if a.batches else batches
    words = [w.strip() for w in a.kernels.split(",") if w.strip()] if a.kernels else []
    kernels = [k for k in KERNELS if not words or k.bits == 16 or any(w in k.name for w in words)]
    if len(kernels) == 1 and words:
        print(f"no kernel's name holds any of {words}; the kernels: {', '.join(k.name for k in KERNELS)}",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gemv_gpu.py needs a CUDA GPU", file=sys.stderr)
        return 2
    device, t0 = torch.device("cuda"), time.time()
    missing = [name for name in ("int8 torchao", "int4 torchao") if name not in {k.name for k in KERNELS}]
    if missing:
        console.print(f"torchao does not import here: {', '.join(missing)} skipped (pip install torchao)")
    env = environment(device)
    bandwidth = peaks.measure_now(device)["bandwidth"]
    torch.cuda.empty_cache()
    rows, found = [], []
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "gemv_gpu.json")
    save = lambda: _save(path, {"env": env, "bandwidth_gbs": bandwidth, "wall_s": time.time() - t0, "quick": a.quick,
                                "group": GROUP, "crossings": found, "rows": rows})
    for model in models:
        for name, k, n in MODELS[model]:
            shape = shape_rows(model, name, k, n, batches, bandwidth, env["l2_bytes"], kernels)
            rows += shape
            add_ratios(rows)
            console.print(f"{model} {name} ({k}x{n}) done at {time.time() - t0:.0f} s: " + "; ".join(
                shape_line(r) for r in shape), highlight=False)
            save()                   # a call cut short keeps every shape it finished
    for model in models:
        console.print(table(rows, model))
    found = crossings(rows)
    console.print(f"Copy bandwidth measured now: {bandwidth or 0:,.0f} GB/s. Where each quantized kernel stops "
                  "beating bf16:\n" + "\n".join(crossing_line(c) for c in found), highlight=False)
    save()
    console.print(f"wrote {path} ({time.time() - t0:.0f} s)")
    return 1 if any(r["status"] != "ok" for r in rows) else 0


def shape_line(r: dict) -> str:
    """One kernel at one batch, as it finishes: 'int8 triton b1 12.3 us 87% BW 0.55x bf16' (or its status)."""
    if not r.get("us"):
        return f"{r['kernel']} b{r['batch']} {r['status']}"
    share = f" {r['bw_share']:.0%} BW" if r.get("bw_share") else ""
    ratio = f" {r['vs_bf16']:.2f}x bf16" if r.get("vs_bf16") and r["bits"] < 16 else ""
    return f"{r['kernel']} b{r['batch']} {r['us']:.1f} us{share}{ratio}"


def _save(path: str, doc: dict) -> None:
    with open(path, "w") as fh:
        json.dump(doc, fh, indent=1, default=str)


if __name__ == "__main__":
    sys.exit(main())
