"""Data-parallel scaling on 2 GPUs (issue 14): `tcperf models --nproc 2` for ResNet-50 (bf16 + channels_last,
batch 256 a GPU, eager and compiled) and GPT-2 small (amp_bf16 + torch.compile, batch 16 x 1024 a GPU) under DDP,
then GPT-2 under FSDP2: each recipe on one GPU and on two, scaling efficiency = 2-GPU throughput / (2 x one GPU's),
and the share of a step spent in exposed communication (torch.profiler).

    python benchmarks/ddp_gpu.py --out DIR [--db PATH] [--budget 320] [--steps 4]

Target: scaling efficiency >= 0.97 for both models at their best recipe. Anchor on 2 x H200 (NVLink, torch 2.11):
ResNet-50 bf16 + channels_last eager, DDP: 4,641 img/s on one GPU, 9,254 on two. Writes ddp_gpu.json under --out
after every part (a part that fails or runs out of time is recorded, the next one runs). About 5 minutes on
2 x H200 (torch.compile of each model, once on one GPU and once on the ranks, is most of it).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from comm_gpu import tcperf  # noqa: E402  (one way to run a tcperf command with a timeout, killed whole)

TARGET = 0.97
PARTS = (  # name, model, recipes, parallel (one GPU's cells run once a part)
    ("resnet50", "resnet50", "channels_last,compile", "ddp"),
    ("gpt2", "gpt2", "compile", "ddp,fsdp2"),
)


def rows_of(result: dict) -> list[dict]:
    out = []
    for r in result["results"]:
        m, s = r.get("metrics") or {}, r.get("shape") or {}
        out.append({"model": s.get("model"), "recipe": r["precision"], "nproc": s.get("nproc", 1),
                    "parallel": s.get("parallel"), "batch": s.get("batch"), "status": r["status"],
                    "message": r.get("message"), "throughput": m.get("throughput"), "unit": m.get("unit"),
                    "step_ms": r.get("mean_ms"), "scaling_efficiency": m.get("scaling_efficiency"),
                    "exposed_comm_share": m.get("exposed_comm_share"), "comm_ms": m.get("comm_ms"),
                    "compile_s": m.get("compile_s")})
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="out")
    p.add_argument("--db", default=None)
    p.add_argument("--budget", type=float, default=320.0, help="seconds for all parts (each gets what is left, "
                   "and at most --part-timeout)")
    p.add_argument("--part-timeout", type=float, default=200.0)
    p.add_argument("--steps", default="4", help="training steps the accuracy check compares (speed is the point)")
    p.add_argument("--parts", default=",".join(name for name, *_ in PARTS))
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "ddp_gpu.json")
    report: dict = {"parts": {}, "rows": [], "target": TARGET}
    start = time.time()
    for name, model, recipes, par in PARTS:
        if name not in a.parts.split(","):
            continue
        t0 = time.time()
        limit = min(a.part_timeout, a.budget - (t0 - start))
        argv = ["models", model, "--recipes", recipes, "--nproc", "2", "--parallel", par, "--steps", a.steps,
                "--rep-ms", "600", "--timeout", str(limit), *(["--db", a.db] if a.db else [])]
        try:
            if limit < 30:
                raise TimeoutError(f"only {limit:.0f} s of the budget left: not started")
            rows = rows_of(tcperf(argv, limit))
            report["rows"] += rows
            report["parts"][name] = {"ok": True, "seconds": round(time.time() - t0, 1)}
        except Exception as e:     # recorded; the next part runs
            report["parts"][name] = {"ok": False, "seconds": round(time.time() - t0, 1),
                                     "error": f"{type(e).__name__}: {e}"[:800]}
        report["best"] = best(report["rows"])
        with open(path, "w") as f:
            json.dump(report, f, indent=2, default=str)
        print(f"{name}: {report['parts'][name]}", flush=True)
        for r in report["rows"]:
            if r["model"] == model:
                print(f"  {r['recipe']} x{r['nproc']} {r['parallel'] or ''}: {r['status']} "
                      f"{r['throughput'] or 0:,.0f} {r['unit'] or ''} eff {r['scaling_efficiency'] or 0:.3f} "
                      f"exposed comm {r['exposed_comm_share'] or 0:.1%} {r['message'] or ''}"[:200], flush=True)
    ok = all(b["scaling_efficiency"] >= TARGET for b in report["best"].values())
    return 0 if report["best"] and ok else 1


def best(rows: list[dict]) -> dict:
    """Per model and parallel, the 2-GPU row of the fastest recipe (total throughput)."""
    out: dict = {}
    for r in rows:
        if r["nproc"] > 1 and r["throughput"] and r["scaling_efficiency"]:
            key = f"{r['model']}-{r['parallel']}"
            if key not in out or r["throughput"] > out[key]["throughput"]:
                out[key] = r
    return out


if __name__ == "__main__":
    sys.exit(main())
