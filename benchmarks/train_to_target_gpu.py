"""Time to accuracy on a GPU (issues 13 and 35): `tcperf train-to-target` on the default bytes-gpt workload for a
few recipes with N seeded runs each, then the time to a ladder of targets read back from the stored traces (every
evaluation is stored, so any target the runs passed is answered after the fact), where each recipe's time went
(data preparation, warm-up with its compile, training steps, evaluations), and the checks of issue 35: the best
recipe at least 3x faster to target than fp32 strict, medians of 3 seeded runs each, with steps to target within
10% of fp32's.

    python benchmarks/train_to_target_gpu.py [--out DIR] [--db PATH] [--recipes fp32,amp_bf16,compile] [--runs 3]
                                             [--max-minutes 4] [--target bpb=1.4] [--size gpu] [--merge]

fp32 strict's three runs take most of one 10-minute device call at the "gpu" size (about 2 minutes each), so the
recipes can be split over calls: `--recipes fp32` in one, `--recipes amp_bf16,compile --merge` in the next with
the same --db; --merge reads the earlier calls' seeded runs on the same GPU, workload, size and target.

Then CIFAR-10's epoch time on same-shaped data (issue 13: CIFAR-10 cannot be downloaded here): 50,000 + 10,000
random 32x32 images written in the official binary format, the fast ResNet trained --cifar-steps steps per recipe
(--cifar-recipes, default 0 steps: off); no accuracy is claimed from them.

Writes train_to_target_gpu.json (the run, every row, the table per target, the checks, wall time),
convergence.png and report.html under --out (default ./out). On an H200 the narrow size (--size gpu-narrow,
fp32,compile, 0.8 minutes a run) took 241 s (2026-11-23: docs/results/2026-11-23-h200-train-to-target.md).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

from tcperf import cli
from tcperf.report.convergence import chart
from tcperf.store import Store
from tcperf.totarget import clock as clocks
from tcperf.totarget import stats

TARGETS = (3.0, 2.6, 2.4, 2.2, 2.0, 1.9, 1.8, 1.7, 1.6, 1.5, 1.4)      # bits per byte, read from the traces after the runs


def table(rows: list[dict], clock_name: str) -> list[dict]:
    """Per target and recipe: median time, share reached, steps to target."""
    clock = clocks.get(clock_name)
    by_recipe: dict[str, list[dict]] = {}
    for r in rows:
        if r["op"] == "totarget.run":
            by_recipe.setdefault(r["precision"], []).append(r)
    out = []
    for target in TARGETS:
        for recipe, runs in by_recipe.items():
            s = stats.summarize(runs, clock, target, False, None)
            out.append({"target_bpb": target, "recipe": recipe, "median_s": s.get("median_s"),
                        "reached": f"{s['reached']}/{s['runs']}", "steps": s.get("steps"), "times_s": s["times_s"],
                        "split": s.get("split") if s.get("split_at") == "target" else None})
    return out


def checks(per_target: list[dict]) -> list[dict]:
    """At each target fp32 reached: best recipe's speed-up over fp32 (>= 3x), over how many runs each, and steps
    within 10% of fp32's."""
    found = []
    for target in TARGETS:
        rows = {r["recipe"]: r for r in per_target if r["target_bpb"] == target and r["median_s"]}
        if "fp32" not in rows or len(rows) < 2:
            continue
        best = min((r for name, r in rows.items() if name != "fp32"), key=lambda r: r["median_s"])
        speedup = rows["fp32"]["median_s"] / best["median_s"]
        steps = best["steps"] / rows["fp32"]["steps"] - 1
        found.append({"target_bpb": target, "best": best["recipe"], "speedup_vs_fp32": speedup,
                      "steps_vs_fp32": steps, "speedup_ok": speedup >= 3.0, "steps_ok": abs(steps) <= 0.10,
                      "runs": (len(best["times_s"]), len(rows["fp32"]["times_s"])),
                      "tell_apart": stats.tell_apart(rows["fp32"]["times_s"], best["times_s"])})
    return found


def cifar_shaped(folder: str) -> str:
    """CIFAR-10's binary layout (cifar-10-batches-bin: records of a label byte and 3072 channel-major pixels) filled
    with random images and labels: the real archive's shape and size, none of its content."""
    root = os.path.join(folder, "cifar-10-batches-bin")
    os.makedirs(root)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        records = rng.integers(0, 256, (10_000, 3073), dtype=np.uint8)
        records[:, 0] %= 10
        records.tofile(os.path.join(root, name))
    return root


def cifar_epochs(recipes: str, steps: int, db: str) -> list[dict]:
    """The fast ResNet's steady step time per recipe on same-shaped data -> seconds an epoch (50,000 images)."""
    with tempfile.TemporaryDirectory() as folder:
        data = cifar_shaped(folder)
        code = cli.main(["train-to-target", "cifar10", "--data", data, "--recipe", recipes, "--runs", "1",
                         "--max-steps", str(steps), "--target", "accuracy=0.999", "--db", db])
    store = Store.open(db)
    rows = [r for r in store.results(store.run(None)["id"]) if r["op"] == "totarget.run"]
    out = []
    for r in rows:
        m = r["metrics"] or {}
        step_ms, batch = m.get("step_ms"), (m.get("info") or {}).get("batch", 1024)
        out.append({"recipe": r["precision"], "status": r["status"], "message": r["message"], "step_ms": step_ms,
                    "batch": batch, "epoch_s": step_ms / 1e3 * 50_000 / batch if step_ms else None,
                    "compile_s": m.get("compile_s"), "exit": code})
    return out


def earlier_rows(store: Store, run: dict, rows: list[dict]) -> list[dict]:
    """--merge: the seeded runs of earlier train-to-target runs in this store on the same GPU, workload, size, target
    and clock as this run's (a recipe measured in another device call), for recipes this run did not measure; a
    recipe's latest call only."""
    def key(r: dict) -> tuple:
        shape = {k: v for k, v in r["shape"].items() if k != "seed"}
        return json.dumps(shape, sort_keys=True), ((r.get("metrics") or {}).get("info") or {}).get("size")

    mine = [r for r in rows if r["op"] == "totarget.run"]
    keys, taken, found = {key(r) for r in mine}, {r["precision"] for r in mine}, []
    for other in store.runs(limit=200):              # newest first
        if other["id"] == run["id"] or other["kind"] != "train-to-target" or other["device"] != run["device"]:
            continue
        new = [r for r in store.results(other["id"])
               if r["op"] == "totarget.run" and key(r) in keys and r["precision"] not in taken]
        found += new
        taken |= {r["precision"] for r in new}
    return found


def print_result(result: dict) -> None:
    for r in result["cifar_epoch"]:
        print(f"cifar10-shaped {r['recipe']}: {r['status']} step {r['step_ms']} ms at batch {r['batch']} -> "
              f"epoch {r['epoch_s']} s; compile {r['compile_s']} s {r['message']}")
    for r in result["per_target"]:
        print(f"bpb {r['target_bpb']}: {r['recipe']:>10} median {r['median_s'] or float('nan'):.1f} s, "
              f"reached {r['reached']}, steps {r['steps']}"
              + ("; " + ", ".join(f"{k[:-2]} {v:.1f} s" for k, v in r["split"].items() if v is not None)
                 if r["split"] else ""))
    for c in result["checks"]:
        print(f"check at bpb {c['target_bpb']}: {c['best']} {c['speedup_vs_fp32']:.2f}x vs fp32 strict, medians of "
              f"{c['runs'][0]} and {c['runs'][1]} seeded runs (target >= 3x: {'met' if c['speedup_ok'] else 'MISSED'}),"
              f" steps {c['steps_vs_fp32']:+.1%} (within 10%: {'met' if c['steps_ok'] else 'MISSED'}); "
              f"{c['tell_apart']}")
    if not result["checks"]:
        print("check: fp32 strict reached none of the targets beside another recipe: no speed-up to state")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--db", default=None)
    ap.add_argument("--recipes", default="fp32,amp_bf16,compile")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-minutes", type=float, default=4.0)
    ap.add_argument("--target", default=None, help="default: the size's own (bpb 1.4)")
    ap.add_argument("--size", default="gpu")
    ap.add_argument("--clock", default="dawnbench")
    ap.add_argument("--merge", action="store_true", help="add earlier calls' seeded runs of other recipes (same db)")
    ap.add_argument("--cifar-recipes", default="channels_last,compile")
    ap.add_argument("--cifar-steps", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    db = args.db or os.path.join(args.out, "train_to_target.db")
    t0 = time.time()
    argv = ["train-to-target", "--recipe", args.recipes, "--runs", str(args.runs), "--max-minutes",
            str(args.max_minutes), "--size", args.size, "--clock", args.clock, "--db", db, "--usd-per-hour", "3",
            *(["--target", args.target] if args.target else [])]
    code = cli.main(argv)
    store = Store.open(db)
    run = store.run(None)
    rows = store.results(run["id"])
    merged = earlier_rows(store, run, rows) if args.merge else []
    per_target = table(rows + merged, args.clock)
    result = {"argv": argv, "exit": code, "run": run, "rows": rows, "merged": merged, "per_target": per_target,
              "checks": checks(per_target), "wall_s": time.time() - t0}
    png = chart(rows + merged, f"bytes-gpt on {run['device']}")
    if png:
        with open(os.path.join(args.out, "convergence.png"), "wb") as f:
            f.write(png)
    cli.main(["report", str(run["id"]), "--db", db, "--out", os.path.join(args.out, "train_to_target.html")])
    result["cifar_epoch"] = cifar_epochs(args.cifar_recipes, args.cifar_steps, db) if args.cifar_steps else []
    with open(os.path.join(args.out, "train_to_target_gpu.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    print_result(result)
    return code


if __name__ == "__main__":
    sys.exit(main())
