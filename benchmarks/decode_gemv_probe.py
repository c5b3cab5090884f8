"""Which matrix-vector kernels a compiled bf16 decode step should use (issue 33: bf16 at Llama-3.2-1B reads 0.595
of the copy bandwidth, its linear layers 67%).

Inductor turns a one-row matmul into a reduction kernel of its own (mul + sum, the RMS norm fused in front) only
under coordinate-descent tuning (torch/_inductor/decomposition.py, `mm`); without it the GEMV is cuBLAS's. The hand
decode step of generate_gpu.py (torch only, CUDA graphs) is compiled four ways and timed in one process:

  decomposed   coordinate-descent tuning, the one-row matmuls as Inductor reductions (what tcperf and gpt-fast run)
  cublas       no coordinate-descent tuning: cuBLAS GEMVs, Inductor's other kernels untuned
  tuned+cublas coordinate-descent tuning with aten.mm left out of Inductor's decompositions: cuBLAS GEMVs and tuned
               kernels around them
  decomposed+pdl  decomposed, and Inductor's programmatic dependent launch (triton.enable_pdl, Hopper): a kernel
               starts while the one before it drains and waits (griddepcontrol.wait) only where it reads that
               kernel's output, so the next GEMV's set-up overlaps the last one's tail (skipped where this torch
               has no such option)

    python benchmarks/decode_gemv_probe.py [--models llama-1b,llama-8b] [--out DIR]

Prints each variant's step (median of 200 CUDA-event-timed steps, IQR), the weights' GB/s and its share of a copy
timed in the same call (tcperf's copy case, tcperf.peaks.measure_now), and whether its token equals the eager
step's. Writes OUT/decode_gemv_probe.json.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

import torch
import torch._inductor.config

from generate_gpu import HAND_OPTIONS, hand_loop  # beside this script

from tcperf import peaks

VARIANTS = {"decomposed": HAND_OPTIONS, "cublas": {"triton.cudagraphs": True},
            "tuned+cublas": HAND_OPTIONS, "decomposed+pdl": {**HAND_OPTIONS, "triton.enable_pdl": True}}


@contextlib.contextmanager
def mm_not_decomposed(on: bool):
    """aten.mm out of Inductor's decomposition table while the step compiles (restored after)."""
    from torch._inductor import decomposition
    table, key = decomposition.decompositions, torch.ops.aten.mm.default
    saved = table.pop(key, None) if on else None
    try:
        yield
    finally:
        if saved is not None:
            table[key] = saved


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="llama-1b")
    p.add_argument("--out", default="out")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("decode_gemv_probe.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    torch._inductor.config.fx_graph_cache = False   # its key holds the options, not the decomposition table
    copy = peaks.measure_now(torch.device("cuda"))["bandwidth"] or float("nan")     # tcperf's copy, now
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_gbps": copy, "rows": []}
    print(f"copy {copy:,.0f} GB/s", flush=True)
    for model in a.models.split(","):
        for name, options in VARIANTS.items():
            if not all(hasattr(torch._inductor.config.triton, k.split(".")[1]) for k in options if "." in k):
                print(f"{model:9} {name:13} skipped: this torch's Inductor has no {sorted(options)}", flush=True)
                continue
            with mm_not_decomposed(name == "tuned+cublas"):
                r = hand_loop(model, options=options)
            r.update(variant=name, share=r["gbps"] / copy)
            report["rows"].append(r)
            print(f"{model:9} {name:13} {r['median_ms']:.3f} ms (IQR {r['iqr_ms']:.3f}) {r['tokens_s']:7.0f} tok/s "
                  f"{r['gbps']:6,.0f} GB/s = {r['share']:.3f} of the copy; agrees {r['agrees']}; "
                  f"compile {r['compile_s']:.0f} s", flush=True)
            with open(os.path.join(a.out, "decode_gemv_probe.json"), "w") as f:
                json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
