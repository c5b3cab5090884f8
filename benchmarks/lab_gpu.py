"""The kernel lab on a GPU: the sweep of `tcperf lab`, stored, then the figures issue 6 is judged by.

- Tensor Core matmul (Triton, fp16 and bf16) against cuBLAS at 4096^3 and 8192^3: TFLOPS and ratio (goal >= 0.90);
- the fused dense layer against torch.sigmoid(x @ W + b): ratio (goal > 1);
- the int8 matmul (stretch) against torch._int_mm at the largest size: TOPS and ratio (goal >= 4 at 8192^3);
- the crossover sizes: from where the GPU, copies included, beats NumPy on the CPU.

    python benchmarks/lab_gpu.py --out out/lab              # the full sweep: estimated 3-4 minutes on an H100
    python benchmarks/lab_gpu.py --quick --out out/lab      # vectors to 1e7, matrices to 4096

Writes OUT/lab_gpu.json (every stored row and the summary) and stores the run in --db (default OUT/lab.db).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
from rich.console import Console
from rich.table import Table

from tcperf.commands import lab as lab_command

console = Console(width=200)


def measure(db: str, quick: bool, kernels: str | None):
    parser = argparse.ArgumentParser()
    lab_command.add_parser(parser.add_subparsers())
    argv = ["lab", "--db", db] + (["--quick"] if quick else []) + (["--kernels", kernels] if kernels else [])
    return lab_command.measure(parser.parse_args(argv))


def find(rows, op, prec, n):
    return next((r for r in rows if r["op"] == op and r["precision"] == prec and r["shape"].get("n") == n), None)


def versus(rows, op, precs, sizes, goal, unit="TFLOPS") -> list[dict]:
    """One line per precision and size: the Triton kernel's rate, the library's, their ratio and the verdict."""
    out = []
    for prec in precs:
        for n in sizes:
            r = find(rows, op, prec, n)
            if r is None:
                continue
            m = r.get("metrics") or {}
            lib = r["flops"] / (m["torch_ms"] * 1e-3) / 1e12 if m.get("torch_ms") else None
            ratio = m.get("vs_torch")
            out.append({"kernel": op[4:], "precision": prec, "n": n, "status": r["status"], "unit": unit,
                        "triton": r.get("tflops"), "library": lib, "ratio": ratio, "goal": goal,
                        "met": bool(ratio and ratio >= goal), "config": m.get("config"), "message": r.get("message")})
    return out


def summarize(rows: list[dict]) -> dict:
    sizes = sorted({r["shape"]["n"] for r in rows if r["op"] == "lab.matmul_int8" and "n" in r["shape"]})
    return {
        "tensor_core_vs_cublas": versus(rows, "lab.matmul_tc", ("fp16", "bf16"), (4096, 8192), 0.90),
        "dense_vs_torch": versus(rows, "lab.dense", ("fp16", "bf16"), (1024, 4096, 8192), 1.0),
        "int8_vs_int_mm": versus(rows, "lab.matmul_int8", ("int8",), sizes[-1:], 4.0, unit="TOPS"),
        "crossovers": [{"kernel": r["op"][4:], "precision": r["precision"], **r["metrics"]["crossover"],
                        "text": r["message"]} for r in rows if r["shape"].get("summary") == "crossover"],
        "failed": [{"kernel": r["op"][4:], "precision": r["precision"], "n": r["shape"].get("n"),
                    "status": r["status"], "message": r.get("message")}
                   for r in rows if r["status"] not in ("ok", "skipped")],
    }


def print_versus(title: str, lines: list[dict]) -> None:
    t = Table(title=title)
    for col in ("kernel", "prec", "n", "Triton", "library", "ratio", "goal", "met", "config"):
        t.add_column(col)
    for x in lines:
        fmt = lambda v: f"{v:.1f} {x['unit']}" if v else ""
        t.add_row(x["kernel"], x["precision"], str(x["n"]), fmt(x["triton"]), fmt(x["library"]),
                  f"{x['ratio']:.3f}" if x["ratio"] else x["status"], f">= {x['goal']}", "yes" if x["met"] else "NO",
                  x["config"] or "")
    console.print(t)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out", help="folder for lab_gpu.json (default ./out)")
    p.add_argument("--db", default=None, help="results store (default OUT/lab.db)")
    p.add_argument("--quick", action="store_true", help="vectors to 1e7 and matrices to 4096 only")
    p.add_argument("--kernels", default=None, help="a comma-separated subset (default: all)")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("lab_gpu.py needs a CUDA GPU; `tcperf lab --device cpu` runs the interpreter checks", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    store, run_id, rows = measure(a.db or os.path.join(a.out, "lab.db"), a.quick, a.kernels)
    wall = time.time() - t0
    run = store.run(run_id)
    console.print(lab_command.table(rows, title=f"run {run_id} · lab · {run['device']} · {wall:.0f} s"))
    summary = summarize(rows)
    print_versus("Tensor Core matmul (Triton) vs cuBLAS (torch.matmul)", summary["tensor_core_vs_cublas"])
    print_versus("fused dense vs torch.sigmoid(x @ W + b)", summary["dense_vs_torch"])
    print_versus("int8 matmul (Triton) vs torch._int_mm", summary["int8_vs_int_mm"])
    for c in summary["crossovers"]:
        console.print(f"crossover {c['kernel']} {c['precision']}: {c['text']}")
    for f in summary["failed"]:
        console.print(f"[red]{f['status']}[/] {f['kernel']} {f['precision']} n={f['n']}: {f['message']}")
    path = os.path.join(a.out, "lab_gpu.json")
    with open(path, "w") as fh:
        json.dump({"device": run["device"], "run_id": run_id, "wall_s": wall, "env": run["env"],
                   "summary": summary, "rows": store.results(run_id)}, fh, indent=1, default=str)
    console.print(f"wrote {path} ({wall:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
