"""Are tcperf's timer and its ceilings honest? Both held against triton.testing.do_bench on the same operands in the
same process, for tf32, bf16, fp16 and fp8 GEMMs of 4096^3 and 8192^3. Target: within 3% for each.

- timer: tcperf's `time_fn` median against do_bench's median, alternating three times; the median ratio.
- ceiling: what `tcperf ceilings` stores (its worker task, in this process: the best median of repeats until it
  stops improving) against the best of do_bench medians repeated the same way; the ratio of the two TFLOPS.

    python benchmarks/fidelity.py [--precision tf32,bf16,fp16,fp8] [--size 4096,8192] [--out DIR]

Needs a CUDA GPU. Prints one line per case and writes fidelity.json under --out; exit 1 if a case misses.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics

import torch

TARGET = 0.03


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", default="tf32,bf16,fp16,fp8")
    ap.add_argument("--size", default="4096,8192")
    ap.add_argument("--out", default="out")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("fidelity.py needs a CUDA GPU")
        return 1
    device = torch.device("cuda", 0)
    cases = [(p, int(n)) for p in args.precision.split(",") for n in args.size.split(",")]
    rows = [fidelity(p, n, device) for p, n in cases]
    for r in rows:
        print(f"{r['precision']} {r['size']}^3: timer ratio {r['timer_ratio']:.4f}; ceiling {r['ceiling_tflops']:.0f} "
              f"TFLOPS ({r['repeats']} repeats) vs do_bench {r['do_bench_tflops']:.0f} ({r['do_bench_repeats']}): "
              f"ratio {r['ceiling_ratio']:.4f} -> {r['verdict']}")
    passed = sum(r["verdict"] == "PASS" for r in rows)
    print(f"{torch.cuda.get_device_name()}: {passed}/{len(rows)} within {TARGET:.0%} of do_bench")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "fidelity.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "target": TARGET, "rows": rows},
                  f, indent=1)
    return 0 if passed == len(rows) else 1


def fidelity(precision: str, n: int, device) -> dict:
    from tcperf.commands.ceilings import UNTIL_STABLE, cases, measure_ceiling
    [case] = [c for c in cases([precision], (n,), 1) if c["op"] == "gemm"]
    job = {"timing": {"warmup_ms": 25, "rep_ms": 300}, "until_stable": UNTIL_STABLE, "profile": False}
    ceiling = measure_ceiling(case, device, job)
    assert ceiling["status"] == "ok", ceiling.get("message")
    timer, theirs = _against_do_bench(case, device)
    ratio = ceiling["tflops"] / theirs["tflops"]
    ok = abs(ratio - 1) <= TARGET and abs(timer["ratio"] - 1) <= TARGET
    return {"precision": precision, "size": n, "error": ceiling["error"], "ceiling_tflops": ceiling["tflops"],
            "repeats": ceiling["metrics"]["repeats"], "repeat_medians_ms": ceiling["metrics"]["repeat_medians_ms"],
            "do_bench_tflops": theirs["tflops"], "do_bench_repeats": len(theirs["medians"]),
            "do_bench_medians_ms": theirs["medians"], "ceiling_ratio": ratio, "timer_ratio": timer["ratio"],
            "timer_rounds": timer["rounds"], "verdict": "PASS" if ok else "FAIL"}


def _against_do_bench(case: dict, device) -> tuple[dict, dict]:
    """The same GEMM prepared again: tcperf's timer and do_bench alternating, then do_bench until stable."""
    import triton.testing

    from tcperf import ops, precision
    from tcperf.commands.ceilings import UNTIL_STABLE
    from tcperf.timing import repeat_until_stable, time_fn

    op, prec = ops.get(case["op"]), precision.get(case["precision"])
    with precision.apply(prec, device.type, benchmark_cudnn=True):     # as tcperf.ops.case runs the suites
        prep = op.prepare(case["shape"], prec, device)
        bench = lambda: triton.testing.do_bench(prep.run, warmup=25, rep=300, return_mode="median")
        rounds = [(time_fn(prep.run, device, warmup_ms=25, rep_ms=300).median_ms, bench()) for _ in range(3)]
        medians = repeat_until_stable(bench, **UNTIL_STABLE)   # the rule tcperf's ceilings use
    timer = {"rounds": rounds, "ratio": statistics.median(ours / theirs for ours, theirs in rounds)}
    return timer, {"medians": medians, "tflops": op.flops(case["shape"]) / (min(medians) * 1e-3) / 1e12}


if __name__ == "__main__":
    raise SystemExit(main())
