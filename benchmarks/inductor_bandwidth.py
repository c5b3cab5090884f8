"""Issue 35: how near the memory bandwidth Inductor's own kernels run in one compiled training step, kernel by
kernel and by kind, and how many passes over the normalization layers' inputs its normalization kernels make.

The ladder's profile says what a step's kernel time is spent on (ResNet-50 on an H200, 2026-11-27: normalization
17.4 ms, 48%); it cannot say whether those kernels are slow or many. Inductor can: with TORCHINDUCTOR_PROFILE=1
each Triton kernel is timed once, alone, and set against the bytes it must move (its inputs and outputs read or
written once: Inductor's own count), and TORCHINDUCTOR_PROFILE_OUTPUT collects the kernels of each compiled graph.
This script runs one model's compiled training step (amp_bf16, channels_last for convolutions, torch.compile,
fused AdamW: the `fused` rung, the ladder's best without CUDA graphs, whose kernels the whole-step graph replays)
in a child process with those variables, and prints, against this GPU's copy bandwidth measured in the same call
(tcperf.peaks.measure_now):

    by kind        Triton kernel ms a step, GB they must move, GB/s, share of the copy bandwidth, and the ms they
                   would take at copy bandwidth: the most a better kernel of the same fusion could save
    passes         the normalization kernels' GB over the bytes the model's normalization layers take in (their
                   inputs, counted by forward hooks at the same batch and dtype): forward and backward need about
                   8 passes without fusing the statistics into the convolutions; many more says fusion is missing
    the kernels    the largest gaps to copy bandwidth, kernel by kernel

A kernel's time here is Inductor's benchmark of it alone (L2 cleared), not its time inside the step; convolutions
and matmuls (cuDNN, cuBLAS) are not Triton kernels and are not in it. The kernels run only while they are timed,
so the step's own outputs mean nothing: this measures, it does not train.

    python3 benchmarks/inductor_bandwidth.py [--model resnet50] [--batch 256] [--out DIR]

Writes OUT/inductor_bandwidth.json (the kernels, the kinds, the passes, the copy bandwidth) and Inductor's own
report OUT/inductor_bandwidth.txt. Its first GPU run (H200, torch 2.11, 2026-11-27, 4e3799d) stopped in the
compile: torch 2.11's harness call, now turned off in the child (see child()). Not yet run since
(`BW_ARGS="--model resnet50" bash scripts/gpu_session.sh bandwidth`).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import torch
from rich.console import Console
from rich.table import Table

from hand_loops import plain_step  # beside this script: the hand-written step
from tcperf import env, models, peaks
from tcperf import profiler as kernels
from tcperf.errors import UserError

SECTION = re.compile(r"^TRITON KERNELS BANDWIDTH INFO \((.*)\)$")
KERNEL = re.compile(r"^\s*([\d.]+)ms\s+([\d.]+) GB\s+([\d.]+)GB/s\s+([\d.]+)%\s+(\S+)\s*$")
NORMS = (torch.nn.modules.batchnorm._NormBase, torch.nn.LayerNorm, torch.nn.GroupNorm)
PASSES_NEEDED = 8      # forward: statistics, normalize (read, write); backward: two reductions, the gradient
TOP = 12


# --- Inductor's report --------------------------------------------------------------------------------------------
def read_report(text: str) -> list[dict]:
    """Inductor's TORCHINDUCTOR_PROFILE_OUTPUT text -> the kernels of the last section of each compiled graph (a
    graph writes a section each time it runs): [{graph, name, ms, gb, gbs}]."""
    sections: dict[str, list[dict]] = {}
    graph = None
    for line in text.splitlines():
        head = SECTION.match(line.strip())
        if head:
            graph = head.group(1)
            sections[graph] = []
            continue
        row = KERNEL.match(line)
        if row and graph is not None:
            ms, gb, gbs, _, name = row.groups()
            sections[graph].append({"graph": os.path.basename(graph), "name": name, "ms": float(ms),
                                    "gb": float(gb), "gbs": float(gbs)})
    return [k for rows in sections.values() for k in rows]


def summarize(rows: list[dict], copy_gbs: float) -> dict[str, dict]:
    """Kernels -> {kind: ms, gb, gbs, copy_share, ms_at_copy, gap_ms, kernels}, the largest time first."""
    out: dict[str, dict] = {}
    for r in rows:
        k = out.setdefault(kernels.kind(r["name"]), {"ms": 0.0, "gb": 0.0, "kernels": 0})
        k["ms"] += r["ms"]
        k["gb"] += r["gb"]
        k["kernels"] += 1
    for k in out.values():
        k["gbs"] = k["gb"] / (k["ms"] * 1e-3) if k["ms"] else 0.0
        k["copy_share"] = k["gbs"] / copy_gbs
        k["ms_at_copy"] = k["gb"] / copy_gbs * 1e3
        k["gap_ms"] = max(0.0, k["ms"] - k["ms_at_copy"])
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["ms"]))


def gaps(rows: list[dict], copy_gbs: float, top: int = TOP) -> list[dict]:
    """The kernels furthest (in ms) from what their bytes take at copy bandwidth."""
    each = [{**r, "kind": kernels.kind(r["name"]), "copy_share": r["gbs"] / copy_gbs,
             "gap_ms": max(0.0, r["ms"] - r["gb"] / copy_gbs * 1e3)} for r in rows]
    return sorted(each, key=lambda r: -r["gap_ms"])[:top]


# --- the step (in the child) --------------------------------------------------------------------------------------
def norm_input_bytes(model: torch.nn.Module, inputs: tuple, autocast: torch.dtype) -> int:
    """Bytes the model's normalization layers take in during one forward (inputs at the dtype they arrive in)."""
    seen = []
    hooks = [m.register_forward_hook(lambda m, args, out: seen.append(args[0].numel() * args[0].element_size()))
             for m in model.modules() if isinstance(m, NORMS)]
    try:
        with torch.no_grad(), torch.autocast(inputs[0].device.type, dtype=autocast):
            model(*inputs)
    finally:
        for h in hooks:
            h.remove()
    return sum(seen)


def has_conv(name: str) -> bool:
    """Whether the model has 2-D convolutions (then it trains in channels_last): looked at on the meta device."""
    mod = models.get(name)
    with torch.device("meta"):
        model = mod.build(mod.CONFIGS["full"])
    return any(isinstance(m, torch.nn.Conv2d) for m in model.modules())


def child(name: str, batch: int, steps: int, out_json: str) -> None:
    """The fused rung's step of `name` (hand_loops.plain_step: amp_bf16, channels_last for convolutions, compile,
    fused AdamW), `steps` times, under Inductor's bandwidth profile (set by the parent); writes the normalization
    layers' input bytes to out_json. The bytes are counted on the model before its first (compiling) step."""
    # torch 2.11 runs each compiled module's benchmark harness once at compile time when a profile output is set,
    # calling benchmark_compiled_module() without the args it takes (a TypeError; fixed by 2.14): the harness is
    # not what this reads (the kernels write their lines as the step runs them), so it is turned off
    torch._inductor.config.benchmark_harness = False
    how = {"autocast": torch.bfloat16, "channels_last": has_conv(name), "compile": True, "fused": True}
    step, model, inputs, _ = plain_step(name, "full", batch, how, torch.device("cuda"))
    norm_bytes = norm_input_bytes(model, inputs, torch.bfloat16)
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    with open(out_json, "w") as f:
        json.dump({"norm_input_bytes": norm_bytes}, f)


# --- the parent ---------------------------------------------------------------------------------------------------
def profiled(name: str, batch: int, out: str, timeout: float) -> tuple[str, dict]:
    """Run the child under Inductor's bandwidth profile in a fresh cache: (Inductor's report, the child's facts)."""
    report, facts = os.path.join(out, "inductor_bandwidth.txt"), os.path.join(out, "child.json")
    if os.path.exists(report):
        os.remove(report)           # Inductor appends
    with tempfile.TemporaryDirectory() as cache:
        environ = {**os.environ, "TORCHINDUCTOR_PROFILE": "1", "TORCHINDUCTOR_PROFILE_OUTPUT": report,
                   "TORCHINDUCTOR_CACHE_DIR": cache, "TORCHINDUCTOR_FX_GRAPH_CACHE": "0"}
        subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--model", name, "--batch",
                        str(batch), "--out", out], env=environ, check=True, timeout=timeout)
    with open(report) as f, open(facts) as g:
        return f.read(), json.load(g)


def show(console: Console, kinds: dict, worst: list[dict], passes: float | None, copy_gbs: float) -> None:
    t = Table(title=f"Inductor's Triton kernels a step, against a copy at {copy_gbs:,.0f} GB/s")
    for col in ("kind", "kernels", "ms", "GB", "GB/s", "of copy", "ms at copy", "gap ms"):
        t.add_column(col, justify="left" if col == "kind" else "right")
    for kind, k in kinds.items():
        t.add_row(kind, str(k["kernels"]), f"{k['ms']:.2f}", f"{k['gb']:.2f}", f"{k['gbs']:,.0f}",
                  f"{k['copy_share']:.0%}", f"{k['ms_at_copy']:.2f}", f"{k['gap_ms']:.2f}")
    console.print(t)
    if passes is not None:
        console.print(f"normalization kernels: {passes:.1f} passes over the normalization layers' inputs "
                      f"(about {PASSES_NEEDED} needed without fusing the statistics into the convolutions)")
    console.print("largest gaps to copy bandwidth:")
    for r in worst:
        console.print(f"  {r['ms']:.3f} ms, {r['gb']:.3f} GB, {r['copy_share']:.0%} of copy, gap {r['gap_ms']:.3f} ms"
                      f"  {r['kind']}  {r['name']}")


def main() -> int:
    a = parse()
    if a.child:
        child(a.model, a.batch, a.steps, os.path.join(a.out, "child.json"))
        return 0
    try:
        mod = models.get(a.model)
        if a.batch is not None and a.batch < 1:
            raise UserError("--batch takes a positive whole number")
    except UserError as e:
        print(f"inductor_bandwidth.py: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("inductor_bandwidth.py needs a CUDA GPU (Inductor's bandwidth profile times Triton kernels)",
              file=sys.stderr)
        return 2
    batch = a.batch or mod.CONFIGS["full"]["batch"]
    os.makedirs(a.out, exist_ok=True)
    device, started = torch.device("cuda"), time.time()
    copy_gbs = peaks.measure_now(device).get("bandwidth")
    if not copy_gbs:
        print("inductor_bandwidth.py: this GPU's copy bandwidth could not be measured", file=sys.stderr)
        return 1
    try:
        text, facts = profiled(a.model, batch, a.out, a.timeout)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        print(f"inductor_bandwidth.py: the profiled step of {a.model} did not finish: {e}", file=sys.stderr)
        return 1
    rows = read_report(text)
    kinds = summarize(rows, copy_gbs)
    norm = kinds.get("normalization")
    passes = norm["gb"] * 1e9 / facts["norm_input_bytes"] if norm and facts["norm_input_bytes"] else None
    worst = gaps(rows, copy_gbs)
    show(Console(width=160), kinds, worst, passes, copy_gbs)
    with open(os.path.join(a.out, "inductor_bandwidth.json"), "w") as f:
        json.dump({"model": a.model, "batch": batch, "copy_gbs": copy_gbs, "kinds": kinds, "passes": passes,
                   "norm_input_bytes": facts["norm_input_bytes"], "kernels": rows, "gaps": worst,
                   "env": env.collect(device), "wall_s": time.time() - started}, f, indent=1)
    print(f"wrote {os.path.join(a.out, 'inductor_bandwidth.json')} ({len(rows)} kernels)")
    return 0


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet50", help=f"one of {', '.join(models.NAMES)}")
    p.add_argument("--batch", type=int, default=None, help="default: the model's own (ResNet-50 256, GPT-2 16)")
    p.add_argument("--steps", type=int, default=2, help=argparse.SUPPRESS)
    p.add_argument("--timeout", type=float, default=500.0, help="seconds for the profiled child")
    p.add_argument("--out", default="out")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


if __name__ == "__main__":
    sys.exit(main())
