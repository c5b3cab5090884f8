"""Is tcperf's timer honest? tcperf's bf16 8192^3 GEMM median against triton.testing.do_bench's median, measured in
the same process on the same operands, alternating three times. Target: within 3%.

    python benchmarks/fidelity.py [--size 8192] [--out DIR]

Needs a CUDA GPU. Prints one line per round and the ratio; writes fidelity.json under --out.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics

import torch


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--out", default="out")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("fidelity.py needs a CUDA GPU")
        return 1
    import triton.testing

    from tcperf.ops.gemm import OP
    from tcperf.ops.base import check
    from tcperf.precision import apply, get
    from tcperf.timing import time_fn

    device, n = torch.device("cuda"), args.size
    prec = get(args.precision)
    shape = {"m": n, "n": n, "k": n, "a_t": "N", "b_t": "N"}
    rounds = []
    with apply(prec):
        prep = OP.prepare(shape, prec, device)
        err = check(prep)
        assert err <= prec.tolerance, f"GEMM wrong: {err}"
        for i in range(3):
            ours = time_fn(prep.run, device, warmup_ms=25, rep_ms=200)
            theirs = triton.testing.do_bench(prep.run, warmup=25, rep=200, return_mode="median")
            rounds.append({"tcperf_ms": ours.median_ms, "tcperf_iqr_ms": ours.iqr_ms, "tcperf_n": ours.n,
                           "do_bench_ms": theirs, "ratio": ours.median_ms / theirs})
            r = rounds[-1]
            print(f"round {i}: tcperf {r['tcperf_ms']:.4f} ms (IQR {r['tcperf_iqr_ms']:.4f}, n={r['tcperf_n']})  "
                  f"do_bench {r['do_bench_ms']:.4f} ms  ratio {r['ratio']:.4f}")
    ratio = statistics.median(r["ratio"] for r in rounds)
    tflops = 2 * n**3 / (statistics.median(r["tcperf_ms"] for r in rounds) * 1e-3) / 1e12
    verdict = "PASS" if abs(ratio - 1) <= 0.03 else "FAIL"
    print(f"{torch.cuda.get_device_name()} {args.precision} {n}^3: tcperf/do_bench median ratio {ratio:.4f} "
          f"({tflops:.0f} TFLOPS, rel err {err:.2e}) -> {verdict} (target within 3%)")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "fidelity.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "size": n,
                   "precision": args.precision, "rounds": rounds, "ratio": ratio, "verdict": verdict}, f, indent=1)
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
