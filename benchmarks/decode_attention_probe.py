"""Which attention a decode step should run (issue 33: Llama-3.2-1B's bf16 step spends 0.13 ms of 1.34 in attention,
about 8 us a layer, where its keys and values are 0.5 MB a layer, 0.2 us at the copy bandwidth).

One layer's decode attention as tcperf.generate.model runs it: q (B, 32 heads, 1, 64), the static cache's keys and
values (B, 8 heads, 256 positions, 64) in bf16, the causal mask's row (B, 1, 1, 256), grouped-query attention. Each
variant is checked against float32 math first (relative error), then captured in a CUDA graph of CALLS calls and
replayed (triton.testing.do_bench_cudagraph, so launches cost what they cost inside the decode step's graph):

  cudnn / efficient / math      F.scaled_dot_product_attention under one SDPA backend (torch.nn.attention)
  default                       the backend PyTorch picks (what the decode step runs today)
  compiled                      the same call compiled by Inductor with the math backend (its own kernels)
  flex                          torch.nn.attention.flex_attention compiled, the mask as a block mask (decoding)

    python3 benchmarks/decode_attention_probe.py [--batches 1,8] [--context 256,1024] [--out DIR]

Prints us a call, the bytes' share of a copy timed in the same call (tcperf.peaks.measure_now), and the error; writes
OUT/decode_attention_probe.json. A variant this torch lacks or refuses is a row saying why.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

from tcperf import peaks
from tcperf.commands.common import positive_ints
from tcperf.errors import UserError

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 64          # Llama-3.2-1B's attention
CALLS = 16                                     # calls a graph: one layer's attention, 16 layers a step


def inputs(batch: int, context: int, device) -> tuple:
    """q, k, v and the mask of one decode step at position context // 2 (the rest of the cache is masked out)."""
    gen = torch.Generator(device=device).manual_seed(batch * 7919 + context)
    q = torch.randn(batch, HEADS, 1, HEAD_DIM, device=device, dtype=torch.bfloat16, generator=gen)
    k, v = (torch.randn(batch, KV_HEADS, context, HEAD_DIM, device=device, dtype=torch.bfloat16, generator=gen)
            for _ in range(2))
    mask = (torch.arange(context, device=device) <= context // 2).view(1, 1, 1, context).expand(batch, 1, 1, context)
    return q, k, v, mask


def reference(q, k, v, mask) -> torch.Tensor:
    """float32 attention written out (grouped heads repeated)."""
    rep = HEADS // KV_HEADS
    kf, vf = (t.float().repeat_interleave(rep, dim=1) for t in (k, v))
    s = (q.float() @ kf.transpose(-1, -2)) / HEAD_DIM ** 0.5
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ vf


def sdpa(backend=None):
    def run(q, k, v, mask):
        if backend is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        from torch.nn.attention import sdpa_kernel
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return run


def compiled_math():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def attend(q, k, v, mask):
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return torch.compile(attend, fullgraph=True, dynamic=False)


def flex():
    """Built at its first call, so that a torch without FlexAttention makes this variant's row an error, not the
    probe's end."""
    compiled, masks = [], {}

    def run(q, k, v, mask):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        if not compiled:
            compiled.append(torch.compile(flex_attention, fullgraph=True, dynamic=False))
        key = (q.shape[0], k.shape[2])
        if key not in masks:
            last = k.shape[2] // 2
            masks[key] = create_block_mask(lambda b, h, qi, ki: ki <= last, B=None, H=None, Q_LEN=1,
                                           KV_LEN=k.shape[2], device=q.device)
        return compiled[0](q, k, v, block_mask=masks[key], enable_gqa=True)
    return run


def variants() -> dict:
    from torch.nn.attention import SDPBackend
    return {"default": sdpa(), "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
            "efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION), "math": sdpa(SDPBackend.MATH),
            "compiled": compiled_math(), "flex": flex()}


def one(name: str, fn, batch: int, context: int, copy: float) -> dict:
    import triton
    q, k, v, mask = inputs(batch, context, torch.device("cuda"))
    row = {"variant": name, "batch": batch, "context": context}
    try:
        want = reference(q, k, v, mask)
        got = fn(q, k, v, mask).float()
        row["rel_error"] = float((got - want).norm() / want.norm())
        if not row["rel_error"] < 2e-2:
            return {**row, "status": "wrong"}
        ms = triton.testing.do_bench_cudagraph(lambda: [fn(q, k, v, mask) for _ in range(CALLS)], rep=100)
        us = ms * 1e3 / CALLS
        moved = (k.numel() + v.numel() + 2 * q.numel()) * 2
        return {**row, "status": "ok", "us": us, "share": moved / (us * 1e-6) / 1e9 / copy}
    except Exception as e:      # noqa: BLE001 - a backend this torch refuses for these shapes is a row
        return {**row, "status": "error", "why": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:150]}"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", default="1,8")
    p.add_argument("--context", default="256,1024", help="cache positions (the step attends to the first half)")
    p.add_argument("--out", default="out")
    a = p.parse_args()
    try:
        batches = positive_ints(a.batches, "--batches", "1,8")
        contexts = positive_ints(a.context, "--context", "256,1024")
    except UserError as e:
        print(f"decode_attention_probe.py: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("decode_attention_probe.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    copy = peaks.measure_now(torch.device("cuda"))["bandwidth"] or float("nan")     # tcperf's copy, now
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_gbps": copy, "rows": []}
    print(f"copy {copy:,.0f} GB/s", flush=True)
    fns = variants()
    for batch in batches:
        for context in contexts:
            for name, fn in fns.items():
                r = one(name, fn, batch, context, copy)
                report["rows"].append(r)
                said = (f"{r['us']:7.2f} us a call, {r['share']:.1%} of the copy" if r["status"] == "ok"
                        else r.get("why", r["status"]))
                print(f"b={batch:<3} ctx={context:<5} {name:9} {said}  err {r.get('rel_error', float('nan')):.1e}",
                      flush=True)
    with open(os.path.join(a.out, "decode_attention_probe.json"), "w") as f:
        json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
