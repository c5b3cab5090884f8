"""`tcperf advise --nproc N` against plain loops of every option it times, in one call (issue 60).

For each model (GPT-2 small under `fused`: amp_bf16 + torch.compile + fused AdamW; ResNet-50 under `channels_last`)
and each rank count N: `tcperf advise examples/MODEL.py:factory --mode train --nproc N --recipes RECIPE --json`,
then the plain loop of each option it timed (benchmarks/ddp_gpu.py's plain DDP / FSDP2 loops with the options set
by hand: 25 or 100 MB buckets, gradients as bucket views or copied, FSDP2 resharding after forward or not). The
advice passes where the plain loop of its pick reaches at least 0.97 of the fastest plain loop's throughput.

    python benchmarks/strategy_gpu.py --out DIR [--models gpt2,resnet50] [--world 2,4] [--budget 540] [--db PATH]
    python benchmarks/strategy_gpu.py --check --out DIR     # CPU: gloo, ResNet-50's tiny factory, 2 ranks

Writes strategy_gpu.json under --out after every part; exit 0 when every advice passes (--check: when each side ran).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

# beside this script: the plain loops, a part recorded, a command timed out whole
from ddp_gpu import OPTION_FIELDS, ROWS, STRATEGY_RECIPES, plain, rank_counts, strategy_row
from comm_gpu import recorder, tcperf

WITHIN = 0.03
FACTORY = {"gpt2": "examples/gpt2_small.py", "resnet50": "examples/resnet50.py"}


def advice(model: str, world: int, kind: str, db: list[str], timeout: float) -> dict:
    """tcperf's advice for `model` at `world` ranks: its pick and every option's throughput."""
    factory = f"{FACTORY[model]}:{'tiny' if kind == 'cpu' else 'factory'}"
    argv = ["advise", factory, "--mode", "train", "--nproc", str(world), "--recipes", STRATEGY_RECIPES[model]["recipe"],
            "--timeout", str(int(timeout)), *(["--device", "cpu", "--check-steps", "1"] if kind == "cpu" else []), *db]
    found = tcperf(argv, timeout)
    rows = [r for r in found["results"] if (r.get("shape") or {}).get("nproc")]
    pick = next((r for r in found["results"] if r["op"].endswith(".pick")), {})
    return {"pick": (pick.get("metrics") or {}).get("pick"),
            "options": {r["shape"]["parallel"]: (r.get("metrics") or {}).get("throughput") for r in rows}}


def judge(advised: dict, plains: dict) -> dict:
    """The pick's plain loop against the fastest plain loop: ratio, and whether it is within WITHIN."""
    done = {option: p["throughput"] for option, p in plains.items() if (p or {}).get("throughput")}
    if not done or advised.get("pick") not in done:
        return {"ratio": None, "passes": False, "best_plain": max(done, key=done.get) if done else None}
    best = max(done, key=done.get)
    ratio = done[advised["pick"]] / done[best]
    return {"ratio": ratio, "passes": ratio >= 1 - WITHIN, "best_plain": best}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out")
    p.add_argument("--db", default=None)
    p.add_argument("--models", default=None, help="gpt2,resnet50 (default both; --check: resnet50, no compile)")
    p.add_argument("--world", default=None, help="rank counts, e.g. 2,4 (default: every visible GPU; --check: 2)")
    p.add_argument("--budget", type=float, default=540.0, help="seconds for all parts (no part starts with < 30 s)")
    p.add_argument("--part-timeout", type=float, default=400.0)
    p.add_argument("--check", action="store_true", help="CPU: gloo, the tiny factories (does it run?)")
    a = p.parse_args()
    kind = "cpu" if a.check else "gpu"
    worlds, why = rank_counts(a.world or ("2" if a.check else None), kind)
    models = (a.models or ("resnet50" if a.check else "gpt2,resnet50")).split(",")
    unknown = [m for m in models if m not in FACTORY]
    if unknown:
        why = f"unknown model {unknown[0]!r}; choose from {', '.join(FACTORY)}"
    if why:
        print(f"strategy_gpu.py: {why}", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    report = {"device": torch.cuda.get_device_name(0) if kind == "gpu" else "cpu (gloo)", "torch": torch.__version__,
              "parts": {}, "advice": {}}
    part, start = recorder(report, os.path.join(a.out, "strategy_gpu.json")), time.time()
    left = lambda: min(a.part_timeout, a.budget - (time.time() - start))   # noqa: E731
    config, db = ("small" if kind == "cpu" else "full"), (["--db", a.db] if a.db else [])
    rows = {r.name: r for r in ROWS}
    for model in models:
        for world in worlds:
            key = f"{model} x{world}"
            advised = part(f"advise {key}", lambda: advice(model, world, kind, db, left())) or {}
            plains = {option: part(f"plain {key} {option}", lambda: plain(
                rows[strategy_row(model, option)], world, kind, config, a.out, left())) for option in OPTION_FIELDS}
            verdict = judge(advised, plains)
            report["advice"][key] = {**advised, "plain": {o: (p or {}).get("throughput") for o, p in plains.items()},
                                     **verdict}
            part(f"judge {key}", lambda: None)
            print(f"  {key}: pick {advised.get('pick')}, fastest plain loop {verdict['best_plain']}; the pick's plain "
                  f"loop / the fastest {verdict['ratio'] or 0:.3f}: {'PASS' if verdict['passes'] else 'FAIL'}",
                  flush=True)
    results = report["advice"].values()
    if a.check:
        return 0 if all(r.get("pick") and r["best_plain"] for r in results) else 1
    return 0 if all(r["passes"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
