"""Does `tcperf advise` say how far a step is from its speed of light, and is that share right? On the plainest
GEMM-bound model (examples/gemm_stack.py: 8 bf16 Linear layers of 4096 x 4096, batch 4096, nearly every
nanosecond in cuBLAS) the advised bf16 step must read above TARGET (0.8) of its speed of light, and a hand loop of
the same model in the same call must read the same share within 5%.

By hand: the stack cast to bf16, its forward under no_grad; hand_loops.WINDOWS windows of --hand-seconds of
back-to-back calls between CUDA events; FLOPs 2 x batch x 4096 x 4096 a layer, written out here; the ceiling is the
one the advice used (its verdict's limit: `tcperf ceilings` from the store, else its own quick GEMM).

    python benchmarks/speed_of_light.py [--out DIR] [--db PATH] [--hand-seconds S] [--device cuda]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from hand_loops import WINDOWS, window

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.8
AGREE = 0.05


def hand_share(ceiling_tflops: float, device, seconds: float) -> dict:
    sys.path.insert(0, str(ROOT / "examples"))
    import gemm_stack
    model, x = gemm_stack.factory()
    model, x = model.to(device, torch.bfloat16), x.to(device, torch.bfloat16)
    flops = 2 * gemm_stack.BATCH * gemm_stack.WIDTH * gemm_stack.WIDTH * gemm_stack.LAYERS

    def step():
        with torch.no_grad():
            return model(x)
    with torch.no_grad():
        ref = model.float()(x.float())
        model.to(torch.bfloat16)
        err = float((step().float() - ref).norm() / ref.norm())      # checked before it is timed
    window(step, device, calls=5)                                      # warm-up
    readings = [window(step, device, seconds=seconds) for _ in range(WINDOWS)]
    ms = sorted(t / n for t, n in readings)
    step_ms = ms[len(ms) // 2]
    return {"step_ms": step_ms, "spread": (ms[-1] - ms[0]) / step_ms, "rel_error": err, "flops": flops,
            "share": flops / (step_ms * 1e9) / ceiling_tflops}


def advise(db: str | None, device: str) -> tuple[dict, float]:
    cmd = [sys.executable, "-m", "tcperf", "advise", "examples/gemm_stack.py:factory", "--recipes", "bf16",
           "--json", "--device", device] + (["--db", db] if db else [])
    t0 = time.perf_counter()
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)    # the caller's too
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path})
    if out.returncode:
        raise SystemExit(f"advise failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout), time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None)
    p.add_argument("--db", default=None)
    p.add_argument("--device", default="cuda")
    p.add_argument("--hand-seconds", type=float, default=1.0)
    args = p.parse_args(argv)
    advice, wall = advise(args.db, args.device)
    found = advice["verdict"].get("limit")
    if not found:
        print(f"no speed of light in the advice (verdict: {advice['verdict'].get('recommended')})")
        return 1
    hand = hand_share(found["ceiling_tflops"], torch.device(args.device), args.hand_seconds)
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  {time.strftime('%Y-%m-%d')}")
    print(f"ceiling {found['ceiling_tflops']:.0f} TFLOPS {found['precision']} ({found['ceilings_from']}), "
          f"bandwidth {found['bandwidth_gbs']:.0f} GB/s")
    print(f"advice : {advice['verdict']['recommended']} {found['step_ms']:.3f} ms a step, speed of light "
          f"{found['sol_ms']:.3f} ms ({found['bound']}-bound): share {found['share']:.3f}; parts {found.get('parts')}; "
          f"advise took {wall:.0f} s")
    print(f"by hand: {hand['step_ms']:.3f} ms a step (spread {hand['spread']:.1%}, rel. error {hand['rel_error']:.2g}):"
          f" share {hand['share']:.3f}")
    ok_target = found["share"] > TARGET
    ok_agree = abs(found["share"] - hand["share"]) <= AGREE * hand["share"]
    print(f"{'PASS' if ok_target else 'FAIL'}: advised share {found['share']:.3f} > {TARGET}")
    print(f"{'PASS' if ok_agree else 'FAIL'}: advised share within {AGREE:.0%} of the hand loop's {hand['share']:.3f}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "speed_of_light.json").write_text(json.dumps(
            {"limit": found, "hand": hand, "advise_s": wall, "pass": ok_target and ok_agree}, indent=2))
    return 0 if ok_target and ok_agree else 1


if __name__ == "__main__":
    sys.exit(main())
