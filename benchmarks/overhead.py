"""tcperf's overhead on whole-model steps: ResNet-50 and GPT-2 training throughput as the model ladder measures it
(tcperf.ladder.measure_cell: recipes.prepare's step, timed per step with CUDA events by tcperf.timing.time_fn)
against a plain hand-written loop (benchmarks/hand_loops.py: the same model definition, AdamW as the rung has it,
autocast, CUDA events around K steps) in the same process, alternating. Target: tcperf within 3% of the plain loop.

    python benchmarks/overhead.py [--out DIR] [--rounds 3] [--steps 30] [--quick]

Prints one line per model and round and the median ratio; writes overhead.json to --out (default ./out).
--quick: the small model configurations at small batches (a smoke test of the script; the ratio means little).
Expected on an H100: about 1.5 minutes (ResNet-50 batch 256 amp_bf16 + channels_last, GPT-2 16x1024 amp_bf16).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

from hand_loops import plain_loop  # beside this script
from tcperf import env, ladder, models

TARGET = 0.03
CASES = (  # model, tcperf recipe, batch, what the plain loop does the same way
    ("resnet50", "channels_last", 256, {"autocast": torch.bfloat16, "channels_last": True}),
    ("gpt2", "amp_bf16", 16, {"autocast": torch.bfloat16, "channels_last": False}),
)


def tcperf_cell(name: str, recipe: str, config: str, batch: int, rep_ms: float, device) -> dict:
    r = ladder.measure_cell(name, "train", recipe, batch, device, config=config, check=False,
                            timing={"warmup_ms": 200.0, "rep_ms": rep_ms})
    torch.cuda.empty_cache()
    return r.to_row()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30, help="steps the plain loop times per round")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("overhead.py needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    config = "small" if args.quick else "full"
    os.makedirs(args.out, exist_ok=True)
    report = {"env": env.collect(device), "target": TARGET, "config": config, "models": {}}
    t0 = time.time()
    for name, recipe, batch, how in CASES:
        batch = models.get(name).CONFIGS["small"]["batch"] * 4 if args.quick else batch
        rounds = []
        for i in range(args.rounds):          # alternate, so that clock drift hits both alike
            plain = plain_loop(name, config, batch, how, args.steps, device)
            torch.cuda.empty_cache()          # the loop's model and optimizer are gone with its frame
            r = tcperf_cell(name, recipe, config, batch, 1500.0 if not args.quick else 100.0, device)
            mine = r["metrics"].get("throughput") or float("nan")
            rounds.append({"plain": plain, "tcperf": mine, "ratio": mine / plain, "iqr_ms": r.get("iqr_ms"),
                           "n": r.get("n"), "status": r["status"]})
            print(f"{name} {recipe} b={batch} round {i}: plain {plain:,.0f}  tcperf {mine:,.0f} "
                  f"{r['metrics'].get('unit', '')} (IQR {r.get('iqr_ms') or 0:.2g} ms, n={r.get('n')})  "
                  f"ratio {mine / plain:.4f}")
        ratio = statistics.median(x["ratio"] for x in rounds)
        verdict = "PASS" if ratio >= 1 - TARGET else "FAIL"
        print(f"{name}: median tcperf/plain = {ratio:.4f} (overhead {max(0.0, 1 - ratio):.1%}, target <= "
              f"{TARGET:.0%}): {verdict}")
        report["models"][name] = {"recipe": recipe, "batch": batch, "rounds": rounds, "median_ratio": ratio,
                                  "verdict": verdict}
    report["wall_s"] = time.time() - t0
    with open(os.path.join(args.out, "overhead.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    print(f"wrote {os.path.join(args.out, 'overhead.json')} ({report['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
