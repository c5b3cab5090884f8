"""Issue 35: from which width fp8 training pays. The ladder's GPT-2 with its sizes changed (as `tcperf models gpt2
--sizes` changes them): widths 768 to 8192, heads of 64, LAYERS layers, BATCH x 1024 tokens, trained at the compile
rung (amp_bf16 + torch.compile) and the fp8 rung (the same with the nn.Linear layers in torchao's float8), each
cell through the ladder's worker and its training check (models_gpu.run_ladders, the one mechanism), in one call.
Prints each width's tokens/s at both rungs, fp8 / compile, and the narrowest width from which fp8 is at least
MARGIN faster at that width and every wider one measured (an fp8 row that failed its check or did not run counts
as not faster).

    python3 benchmarks/fp8_width_gpu.py [--widths 768,1024,2048,4096,8192] [--layers 2] [--batch 8] [--out DIR]

At GPT-2 small's own width fp8 gave no gain (411k tokens/s on an H200, 2026-11-22): its Linear layers are too
narrow for the float8 casts to pay. Expected: about 2 minutes a width on an H100 (two compiles, fp32's reference
for the checks; the widest, 8192, holds about 2 billion parameters at 2 layers); --widths splits a sweep over calls.
Needs torchao (carried as a wheel on the GPU machine). Writes OUT/fp8_width_gpu.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from models_gpu import run_ladders  # beside this script
from tcperf import env, models
from tcperf.commands.common import positive_ints
from tcperf.errors import UserError
from tcperf.store import Store

RUNGS = ["compile", "fp8"]
MARGIN = 0.03                  # fp8 pays where it is at least 3% faster than compile (about the cells' spread)
HEAD = 64                      # a head's width, as GPT-2's


def widths_of(text: str) -> list[int]:
    """'768,2048' -> [768, 2048]: positive multiples of HEAD, in increasing order; UserError otherwise."""
    widths = sorted(set(positive_ints(text, "--widths", "768,2048,4096")))
    if any(w % HEAD for w in widths):
        raise UserError(f"bad --widths {text!r}; give widths that are multiples of {HEAD}, e.g. 768,2048,4096")
    return widths


def config_of(width: int, layers: int, batch: int) -> str:
    """The ladder's configuration name for one width (models.config checks it)."""
    name = f"full:dim={width},heads={width // HEAD},layers={layers},batch={batch}"
    models.config(models.get("gpt2"), name)
    return name


def throughputs(rows: list[dict]) -> dict:
    """One width's rows -> {rung: tokens/s of a row whose check passed, or None}."""
    return {rung: next((r["metrics"]["throughput"] for r in rows if r["precision"] == rung and r["status"] == "ok"),
                       None) for rung in RUNGS}


def crossover(by_width: dict[int, dict], margin: float = MARGIN) -> int | None:
    """The narrowest width from which fp8 is at least `margin` faster than compile at every wider width measured
    (None where fp8 is not ahead at the widest)."""
    found = None
    for width in sorted(by_width, reverse=True):
        t = by_width[width]
        if t.get("fp8") and t.get("compile") and t["fp8"] >= (1 + margin) * t["compile"]:
            found = width
        else:
            break
    return found


def lines(by_width: dict[int, dict], margin: float = MARGIN) -> list[str]:
    out = [f"{'width':>6} {'compile tokens/s':>17} {'fp8 tokens/s':>13} {'fp8 / compile':>14}"]
    for width, t in sorted(by_width.items()):
        ratio = t["fp8"] / t["compile"] if t.get("fp8") and t.get("compile") else None
        out.append(f"{width:>6} {t.get('compile') or 0:>17,.0f} {t.get('fp8') or 0:>13,.0f} "
                   f"{f'{ratio:.3f}' if ratio else 'n/a':>14}")
    w = crossover(by_width, margin)
    out.append(f"fp8 pays (>= {margin:.0%} faster) from width {w} on" if w else
               f"fp8 is not >= {margin:.0%} faster at the widest width measured")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--db", default=None)
    ap.add_argument("--widths", default="768,1024,2048,4096,8192")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8, help="sequences of 1024 tokens a step")
    ap.add_argument("--rep-ms", type=float, default=600.0, help="timing budget of one cell's timed steps")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a cell may take, compiling included")
    args = ap.parse_args()
    try:
        if args.layers < 1 or args.batch < 1:
            raise UserError("--layers and --batch take positive whole numbers")
        configs = {w: config_of(w, args.layers, args.batch) for w in widths_of(args.widths)}
    except UserError as e:
        print(f"fp8_width_gpu.py: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("fp8_width_gpu.py needs a CUDA GPU (fp8 Tensor Cores: compute capability 8.9 or later)", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    device = torch.device("cuda")
    store = Store.open(args.db or os.path.join(args.out, "models.db"))
    environment = env.collect(device)
    ceilings = store.ceilings(environment["gpu"]["name"])
    run_id = store.start_run("models", "python benchmarks/fp8_width_gpu.py --widths " + args.widths, environment)
    t0, rows, by_width, status = time.time(), {}, {}, "interrupted"
    try:
        for width, config in configs.items():
            print(f"-- width {width} ({config})", flush=True)
            rows[width] = run_ladders(store, run_id, {"train": {"gpt2": RUNGS}}, config, device, args.rep_ms,
                                      ceilings, ["gpt2"], ["train"], timeout=args.timeout)
            by_width[width] = throughputs(rows[width])
        status = "done"
    finally:
        store.finish_run(run_id, status)
    for line in lines(by_width):
        print(line)
    report = {"run": store.run(run_id), "widths": by_width, "crossover": crossover(by_width), "margin": MARGIN,
              "layers": args.layers, "batch": args.batch, "rows": rows, "wall_s": time.time() - t0}
    with open(os.path.join(args.out, "fp8_width_gpu.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    print(f"wall {report['wall_s']:.0f} s; wrote {os.path.join(args.out, 'fp8_width_gpu.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
