"""How long must a whole-model step be timed for a fair choice between recipes? For each recipe of the advisor on
a model, time the same prepared step in three ways, several times each, in one process:

  short loop   CUDA events around 20 back-to-back calls, median of 5 (the hand loop benchmarks/advise_gpu.py
               used on 2026-11-22), repeated 6 times
  300 ms       tcperf.timing.time_fn, an event pair per call, median over 300 ms (the advisor's timing on
               2026-11-22), repeated 6 times
  sustained    time_fn(back_to_back=True) over 2 s, the mean (the advisor's timing now), repeated 3 times

and print each one's range, the medians of 250 ms windows across the sustained runs, and the SM clock and power
(nvidia-smi every 20 ms) while they ran.
On 2026-11-22 the advisor timed fp16_overflow's fp8 recipe at 0.559 ms a call and the hand loop at 0.804 ms;
a short window can catch a GPU at its power cap in one of two speeds, and this script shows it.

    python benchmarks/step_timing.py [--models fp16_overflow,awkward] [--recipes amp_bf16,compile,cuda_graphs,fp8]
                                     [--out DIR]
--models: examples/ files by name (awkward is awkward_mlp.py) or cases of benchmarks/advise_gpu.py (llama_infer).
Writes step_timing.json (every figure, the clock log) under --out. About 20 s a recipe.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import advise_gpu  # beside this script: its cases
from hand_loops import window
from tcperf import engine, recipes, source
from tcperf.timing import time_fn

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SHORT = {"awkward": "awkward_mlp"}      # --models names of the example files
REPEATS = {"short loop": 6, "300 ms": 6, "sustained": 3}


class ClockLog:
    """nvidia-smi's SM clock and power every 20 ms in the background; `between(t0, t1)` summarises a span."""

    def __init__(self):
        self.path = Path(tempfile.mkstemp(suffix=".csv")[1])
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits",
                 "-lms", "20"], stdout=self.path.open("w"), stderr=subprocess.DEVNULL)
        except OSError:
            self.proc = None

    def rows(self) -> list[tuple[float, float, float]]:
        out = []
        for line in self.path.read_text().splitlines():
            parts = [p.strip() for p in line.split(",")]
            try:
                stamp, frac = (parts[0].split(".") + ["0"])[:2]
                t = time.mktime(time.strptime(stamp, "%Y/%m/%d %H:%M:%S")) + float("0." + frac)
                out.append((t, float(parts[1]), float(parts[2])))
            except (ValueError, IndexError):
                continue
        return out

    def between(self, t0: float, t1: float) -> dict:
        span = [(c, p) for t, c, p in self.rows() if t0 <= t <= t1]
        if not span:
            return {}
        return {"sm_mhz": [min(c for c, _ in span), max(c for c, _ in span)],
                "watts": [min(p for _, p in span), max(p for _, p in span)]}

    def close(self):
        if self.proc:
            self.proc.terminate()


def short_loop(step, calls: int = 20, repeats: int = 5) -> float:
    """The 2026-11-22 hand loop: median over `repeats` of (events around `calls` calls) / calls."""
    for _ in range(3):
        step()
    return statistics.median(window(step, "cuda", calls=calls)[0] / calls for _ in range(repeats))


def load_model(name: str):
    """A --models name: an example file's factory (fp16_overflow, awkward: examples/awkward_mlp.py, linear_head)
    or a case of benchmarks/advise_gpu.py at GPU size; a spec on the CPU."""
    if name in advise_gpu.CASES:
        return advise_gpu.build_spec(name)[0]
    return source.load_spec(f"{EXAMPLES / SHORT.get(name, name)}.py:factory")


def windows(samples: list[float], ms: float = 250.0) -> list[float]:
    """Medians of consecutive windows of `ms` of back-to-back samples."""
    out, acc = [], []
    for x in samples:
        acc.append(x)
        if sum(acc) >= ms:
            out.append(statistics.median(acc))
            acc = []
    return out


def one_recipe(spec, name: str, device, log: ClockLog) -> dict:
    step = engine._prepare(spec, recipes.get(name), "infer", device)
    step()
    torch.cuda.synchronize()     # sync point: compiled and ready
    row = {"recipe": name, "t0": time.time()}
    row["short loop"] = [short_loop(step) for _ in range(REPEATS["short loop"])]
    row["300 ms"] = [time_fn(step, device, warmup_ms=50, rep_ms=300, flush_l2=False).median_ms
                     for _ in range(REPEATS["300 ms"])]
    runs = [time_fn(step, device, **engine.TIMING) for _ in range(REPEATS["sustained"])]
    row["sustained"] = [m.mean_ms for m in runs]
    row["windows"] = windows([x for m in runs for x in m.samples_ms])
    row["clock"] = log.between(row["t0"], time.time())
    step = None      # the recipe's model and outputs go before the next recipe compiles
    engine._release(device)
    return row


def one_model(model: str, names: list[str], device, log: ClockLog) -> list[dict]:
    spec = source.on_device(load_model(model), device)
    rows = []
    for name in names:
        try:
            row = {"model": model, **one_recipe(spec, name, device, log)}
        except recipes.NotApplicable as e:
            print(f"{model} {name}: skipped ({e})")
            continue
        rows.append(row)
        print_row(row)
    return rows


def _range(xs: list[float]) -> str:
    return f"{min(xs):.3f}-{max(xs):.3f} ({max(xs) / min(xs) - 1:+.0%})"


def print_row(r: dict) -> None:
    print(f"{r['model']} {r['recipe']}: ms a call, range over repeats: short loop {_range(r['short loop'])}  "
          f"300 ms {_range(r['300 ms'])}  sustained 2 s {_range(r['sustained'])}", flush=True)
    clock = r["clock"]
    print(f"    250 ms windows {_range(r['windows'])}; SM clock {clock.get('sm_mhz')} MHz, power "
          f"{clock.get('watts')} W", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="fp16_overflow,awkward")
    ap.add_argument("--recipes", default="amp_bf16,compile,cuda_graphs,fp8")
    ap.add_argument("--out", default="out")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("step_timing.py needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    log = ClockLog()
    rows = []
    try:
        for model in args.models.split(","):
            rows += one_model(model, args.recipes.split(","), device, log)
    finally:
        log.close()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "step_timing.json")
    with open(path, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows,
                   "clock": log.rows()}, f, indent=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
