"""`tcperf generate` on a GPU (the issue's targets), beside a decode loop written by hand in this file.

    python benchmarks/generate_gpu.py [--out DIR] [--db PATH] [--quick]

What it runs, each `tcperf` command in its own process (the store is --db, default OUT/generate.db):
  1. `tcperf ceilings --precision bf16` when this GPU has no copy bandwidth stored yet (the figures are shares of it)
  2. Llama-3.2-1B's shape (random weights) at batch 1, prompt 128, 128 new tokens, the plain loop compiled
     (torch.compile mode="reduce-overhead"): bf16, int8wo, int4wo-128, fp8-row, each with its accuracy
  3. the bf16 decode step over batch 1..1024 (prompt 64, 32 new tokens, the eager step in a CUDA graph): where it
     turns compute-bound, measured and on the roofline of the measured ceilings
  4. transformers' generate (static cache, compiled by transformers) at batch 1 in bf16: the loop users run
  5. a plain bf16 decode loop written inline below (no tcperf): one CUDA graph a step, the same model shape
Targets on an H200: bf16 decode at batch 1 >= 0.85 of the measured copy bandwidth; int8wo >= 1.6x and int4wo-128
>= 2.5x bf16's tokens/s; the measured compute-bound batch within 25% of the roofline's; every accuracy shown.
Writes OUT/generate_gpu.json (every row, the checks, the hand loop, the wall time). Expected: about 6-7 minutes
on one H200 (torch.compile of the 1B model, once a precision, is most of it); --quick about 3 minutes (fewer
precisions, tokens and batches: a smoke test of every path).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from tcperf.store import Store

FULL = {"precisions": "bf16,int8wo,int4wo-128,fp8-row", "output": "128", "sweep": "1,2,4,8,16,32,64,128,"
        "192,256,384,512,768,1024", "sweep_output": "32", "hf": True, "rep_ms": "1000", "size": "8192"}
QUICK = {"precisions": "bf16,int8wo,int4wo-128", "output": "32", "sweep": "1,16,64,256", "sweep_output": "16",
         "hf": False, "rep_ms": "200", "size": "4096"}


def tcperf(db: str, *argv: str, timeout: int = 480) -> dict | None:
    """Run one tcperf command in its own process; its --json output (None for commands without one)."""
    cmd = [sys.executable, "-m", "tcperf", *argv, "--db", db]
    print("$", " ".join(cmd[2:]), flush=True)
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        print(done.stderr[-3000:], flush=True)
        raise SystemExit(f"tcperf {argv[0]} failed (exit {done.returncode})")
    return json.loads(done.stdout) if "--json" in argv else None


def generate(db: str, out: str, *argv: str) -> list[dict]:
    """One `tcperf generate` call; its own plot goes under `out` (main() draws all the rows in one at the end)."""
    rows = tcperf(db, "generate", "llama-1b", "--json", "--plot-dir", out, *argv)["results"]
    for r in rows:
        m = r.get("metrics") or {}
        if r["op"] == "generate":
            acc = m.get("accuracy") or {}
            print(f"  {r['precision']:<12} {r['shape']['loop']:<5} b={r['shape']['batch']:<5} {r['status']:<7} "
                  f"ITL {r.get('median_ms') or 0:.3f} ms  {m.get('tokens_s_user') or 0:,.0f} tok/s/user  "
                  f"{(m.get('decode') or {}).get('gbps') or 0:,.0f} GB/s  "
                  f"err {acc.get('rel_error', float('nan')):.3g} top1 {acc.get('top1_agree', float('nan')):.0%} "
                  f"{r.get('message') or ''}"[:200], flush=True)
    return rows


# --- a decode loop written by hand: bf16, batch 1, one CUDA graph a step ------------------------------------------
def hand_loop(dim=2048, layers=16, heads=32, kv_heads=8, mlp=8192, vocab=128256, context=256, steps=200) -> dict:
    """Llama-3.2-1B's shape: per layer a fused qkv, an output projection, a fused gate/up and a down projection,
    RMSNorm, attention over a static cache; the tied output layer; greedy. Timed as graph replays with events."""
    dev, dt, hd = torch.device("cuda"), torch.bfloat16, dim // heads
    torch.manual_seed(0)
    w = [[torch.randn(n, k, device=dev, dtype=dt) * 0.02 for n, k in
          (((heads + 2 * kv_heads) * hd, dim), (dim, dim), (2 * mlp, dim), (dim, mlp))] for _ in range(layers)]
    emb = torch.randn(vocab, dim, device=dev, dtype=dt) * 0.02
    kc = [torch.zeros(1, kv_heads, context, hd, device=dev, dtype=dt) for _ in range(2 * layers)]
    tok, pos = torch.ones(1, 1, dtype=torch.long, device=dev), torch.tensor([context // 2], device=dev)
    mask = torch.arange(context, device=dev)[None, None, None] <= pos

    def norm(x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(dt)

    def step():
        x = emb[tok]                                                   # (1, 1, dim)
        for i, (wqkv, wo, w13, w2) in enumerate(w):
            q, k, v = (norm(x) @ wqkv.t()).split([heads * hd, kv_heads * hd, kv_heads * hd], -1)
            kc[2 * i][:, :, pos] = k.view(1, 1, kv_heads, hd).transpose(1, 2)
            kc[2 * i + 1][:, :, pos] = v.view(1, 1, kv_heads, hd).transpose(1, 2)
            y = torch.nn.functional.scaled_dot_product_attention(q.view(1, 1, heads, hd).transpose(1, 2), kc[2 * i],
                                                                 kc[2 * i + 1], attn_mask=mask, enable_gqa=True)
            x = x + y.transpose(1, 2).reshape(1, 1, dim) @ wo.t()
            g, u = (norm(x) @ w13.t()).chunk(2, -1)
            x = x + (torch.nn.functional.silu(g) * u) @ w2.t()
        tok.copy_((norm(x) @ emb.t()).argmax(-1))

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    for _ in range(20):
        g.replay()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    ev[0].record()
    for e in ev[1:]:
        g.replay()
        e.record()
    torch.cuda.synchronize()
    ms = sorted(a.elapsed_time(b) for a, b in zip(ev, ev[1:]))
    weight_bytes = 2 * (sum(t.numel() for ws in w for t in ws) + emb.numel())
    kv_bytes = 2 * layers * kv_heads * hd * 2 * (context // 2 + 1)
    med = ms[len(ms) // 2]
    return {"median_ms": med, "iqr_ms": ms[3 * len(ms) // 4] - ms[len(ms) // 4], "tokens_s": 1e3 / med,
            "gbps": (weight_bytes + kv_bytes) / (med * 1e-3) / 1e9, "bytes": weight_bytes + kv_bytes}


# --- checks -----------------------------------------------------------------------------------------------------
def one(rows: list[dict], precision: str, loop: str = "plain", batch: int = 1) -> dict | None:
    return next((r for r in rows if r["op"] == "generate" and r["precision"] == precision and
                 r["shape"]["loop"] == loop and r["shape"]["batch"] == batch and r["status"] in ("ok", "wrong")), None)


def checks(targets: list[dict], sweep: list[dict], hand: dict, bandwidth: float | None) -> dict:
    bf16 = one(targets, "bf16")
    tps = {p: (one(targets, p) or {}).get("metrics", {}).get("tokens_s_user")
           for p in ("bf16", "int8wo", "int4wo-128", "int4wo-32", "fp8-row")}
    share = (bf16 or {}).get("metrics", {}).get("decode", {}).get("bw_share")
    crossing = next((r for r in sweep if r["op"] == "generate.crossing"), None)
    ratio = crossing["metrics"].get("ratio") if crossing else None
    out = {
        "bf16 decode share of copy bandwidth >= 0.85": {"value": share, "ok": bool(share and share >= 0.85),
                                                         "copy_gbps": bandwidth},
        "int8wo / bf16 tokens/s >= 1.6": _ratio(tps, "int8wo", 1.6),
        "int4wo-128 / bf16 tokens/s >= 2.5": _ratio(tps, "int4wo-128", 2.5),
        "measured crossing within 25% of the roofline's": {
            "value": ratio, "ok": bool(ratio and 0.75 <= ratio <= 1.25),
            "roofline": crossing["metrics"].get("roofline_batch") if crossing else None,
            "measured": crossing["metrics"]["measured"] if crossing else None},
        "tcperf bf16 / hand loop tokens/s": {"value": tps["bf16"] / hand["tokens_s"] if tps["bf16"] else None,
                                             "ok": None, "hand": hand},
        "accuracy": {r["precision"]: r["metrics"].get("accuracy") for r in targets
                     if r["op"] == "generate" and (r.get("metrics") or {}).get("accuracy")},
        "int4wo-32 / bf16 tokens/s": {"value": tps["int4wo-32"] / tps["bf16"] if tps["int4wo-32"] and tps["bf16"]
                                      else None, "ok": None},
        "fp8-row / bf16 tokens/s": {"value": tps["fp8-row"] / tps["bf16"] if tps["fp8-row"] and tps["bf16"] else None,
                                    "ok": None},
    }
    return out


def _ratio(tps: dict, name: str, target: float) -> dict:
    value = tps[name] / tps["bf16"] if tps.get(name) and tps.get("bf16") else None
    return {"value": value, "ok": bool(value and value >= target)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out")
    p.add_argument("--db", default=None)
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    plan = QUICK if a.quick else FULL
    os.makedirs(a.out, exist_ok=True)
    db = a.db or os.path.join(a.out, "generate.db")
    t0 = time.time()
    gpu = torch.cuda.get_device_name(0)
    if not Store.open(db).ceilings(gpu).get("bandwidth"):
        tcperf(db, "ceilings", "--precision", "bf16", "--size", plan["size"])
    bandwidth = Store.open(db).ceilings(gpu).get("bandwidth")
    print(f"ceilings: {Store.open(db).ceilings(gpu)}  ({time.time() - t0:.0f} s)", flush=True)
    targets = generate(db, os.path.join(a.out, "targets"), "--precision", plan["precisions"], "--kv", "bf16", "--batch", "1", "--prompt",
                       "128", "--output", plan["output"], "--loop", "plain", "--rep-ms", plan["rep_ms"])
    print(f"batch 1 done ({time.time() - t0:.0f} s)", flush=True)
    sweep = generate(db, os.path.join(a.out, "sweep"), "--precision", "bf16", "--kv", "bf16", "--batch", plan["sweep"], "--prompt", "64",
                     "--output", plan["sweep_output"], "--loop", "plain", "--no-compile", "--rep-ms", "300")
    print(f"sweep done ({time.time() - t0:.0f} s)", flush=True)
    hf_rows = generate(db, os.path.join(a.out, "hf"), "--precision", "bf16", "--kv", "bf16", "--batch", "1", "--prompt", "128",
                       "--output", "64", "--loop", "hf", "--rep-ms", "500") if plan["hf"] else []
    hand = hand_loop()
    results = {"gpu": gpu, "quick": a.quick, "ceilings": Store.open(db).ceilings(gpu),
               "checks": checks(targets, sweep, hand, bandwidth), "targets": targets, "sweep": sweep, "hf": hf_rows,
               "wall_s": time.time() - t0}
    for name, c in results["checks"].items():
        if name != "accuracy":
            value = c.get("value")
            print(f"{name}: {value:.3g}" if isinstance(value, float) else f"{name}: {value}",
                  "" if c.get("ok") is None else ("PASS" if c["ok"] else "FAIL"))
    for prec, acc in results["checks"]["accuracy"].items():
        print(f"accuracy {prec}: rel err {acc['rel_error']:.3g} (tol {acc['tolerance']:.3g}) top-1 "
              f"{acc['top1_agree']:.0%} {'pass' if acc['passed'] else 'FAIL'}")
    print(f"hand loop bf16 b=1: {hand['tokens_s']:,.0f} tok/s, {hand['gbps']:,.0f} GB/s; "
          f"wall {results['wall_s']:.0f} s")
    with open(os.path.join(a.out, "generate_gpu.json"), "w") as f:
        json.dump(results, f, indent=2, default=str)
    from tcperf.commands.generate import plot
    print(f"plot: {plot(targets + sweep + hf_rows, 'llama-1b', a.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
