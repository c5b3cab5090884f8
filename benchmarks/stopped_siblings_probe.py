"""Does a sibling process that holds a CUDA context slow a launch-bound loop on the same GPU, idle or stopped?

Issue 57, 2026-11-28 on an H100: with the advisor's stream-stage workers started ahead (their CUDA contexts made, the
model loaded) and stopped with SIGSTOP while a recipe was timed, T5's eager steps read 37 ms (fp32) and 21 ms (bf16)
where its plain loops read 14 ms, and the detector's 23 ms where its plain loop reads 15.5 ms. This times one
launch-bound loop (many small kernels a step) alone, beside K idle siblings and beside K stopped siblings, in
alternating rounds, CUDA events after warm-up, its output checked against float64 first.

    python benchmarks/stopped_siblings_probe.py --siblings 4 --rounds 3
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys

import torch

SIBLING = ("import sys, torch; torch.zeros(1, device='cuda'); torch.cuda.current_blas_handle(); "
           "torch.cuda.synchronize(); print('up', flush=True); sys.stdin.read()")


def step(x, w, layers):
    for _ in range(layers):
        x = torch.tanh(x @ w)
    return x


def check(x, w, layers) -> float:
    got = step(x, w, layers).double()
    want = step(x.double(), w.double(), layers)
    return float((got - want).abs().max() / want.abs().max())


def time_ms(x, w, layers, steps) -> float:
    for _ in range(5):
        step(x, w, layers)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step(x, w, layers)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / steps


def siblings(count: int) -> list[subprocess.Popen]:
    procs = [subprocess.Popen([sys.executable, "-c", SIBLING], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for _ in range(count)]
    for p in procs:
        assert p.stdout.readline().strip() == "up"
    return procs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--siblings", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=200, help="small matmul + tanh pairs a step (launch-bound)")
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    torch.manual_seed(0)
    x = torch.randn(64, 64, device="cuda")
    w = torch.randn(64, 64, device="cuda") / 8
    torch.backends.cuda.matmul.allow_tf32 = False
    err = check(x, w, args.layers)
    print(f"{torch.cuda.get_device_name()} · torch {torch.__version__} · pid {os.getpid()} · "
          f"cores {len(os.sched_getaffinity(0))} · check max rel. error vs float64 {err:.2e}")
    assert err < 1e-4, "the loop's output is wrong: nothing timed"
    found = {"alone": [], "idle": [], "stopped": []}
    procs = siblings(args.siblings)
    try:
        for _ in range(args.rounds):
            for p in procs:
                os.kill(p.pid, signal.SIGSTOP)
            found["stopped"].append(time_ms(x, w, args.layers, args.steps))
            for p in procs:
                os.kill(p.pid, signal.SIGCONT)
            found["idle"].append(time_ms(x, w, args.layers, args.steps))
            for p in procs:
                p.stdin.close()
                p.wait()
            found["alone"].append(time_ms(x, w, args.layers, args.steps))
            procs = siblings(args.siblings)
    finally:
        for p in procs:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
    base = statistics.median(found["alone"])
    for name, ms in found.items():
        med = statistics.median(ms)
        print(f"{name:8s} {args.siblings if name != 'alone' else 0} siblings: {med:.3f} ms a step "
              f"(min {min(ms):.3f}, max {max(ms):.3f}, {len(ms)} rounds) = {med / base:.2f}x alone")


if __name__ == "__main__":
    main()
