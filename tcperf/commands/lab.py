"""`tcperf lab`: the Triton kernels of tcperf/lab against NumPy on the CPU and torch/cuBLAS on the GPU, over a
sweep of sizes, with the copies to and from the GPU counted; a table and a stored run of kind `lab`.

    tcperf lab                                          # every kernel, default sweep (a few minutes on an H100)
    tcperf lab --kernels vector_add,matmul_tc --sizes 1e4,1e6,4096

Without a GPU the kernels run in the Triton interpreter on CPU tensors at small sizes: they are checked against
NumPy and the CPU side is timed, but the interpreter's time is no GPU's and there is no crossover.
"""
from __future__ import annotations

import os
import tempfile

import torch
from rich.table import Table

from .. import env as envmod
from .. import lab, peaks
from ..lab import bench
from ..store import Store
from ..table import fmt_ms, rate_cell, status_cell
from .common import add_measuring, console, err_console, measure_into_store, print_json


def add_parser(sub) -> None:
    p = sub.add_parser("lab")
    p.add_argument("--kernels", default=None,
                   help=f"comma-separated, from: {', '.join(lab.names())} (default: all)")
    p.add_argument("--sizes", default=None,
                   help="comma-separated sizes, e.g. 1e3,1e6 or 1024,4096: elements for vector kernels, n of n x n "
                        "matrices for the others (default: 1e3..1e8 and 128..8192; small ones without a GPU)")
    p.add_argument("--quick", action="store_true",
                   help="a shorter default sweep: vectors to 1e7, matrices to 4096")
    add_measuring(p)


def main(args) -> int:
    store, run_id, rows = measure(args)
    if args.json:
        print_json({"run": store.run(run_id), "results": store.results(run_id)})
    else:
        console.print(table(rows, title=f"run {run_id} · lab · {store.run(run_id)['device']}"))
        for r in rows:
            if r["shape"].get("summary") == "crossover":
                console.print(f"[bold]{r['op']} {r['precision']}[/]: {r['message']}")
    return 0


def measure(args) -> tuple[Store, int, list[dict]]:
    """Parse the selection, measure every case in workers, add the crossover rows; returns the stored rows."""
    kernels, sizes = bench.parse_kernels(args.kernels), bench.parse_sizes(args.sizes)
    device = envmod.parse_device(args.device)
    interpreted = device.type == "cpu"
    if interpreted:
        err_console.print("No GPU: the kernels run in the Triton interpreter on CPU tensors, at small sizes. "
                          "They are checked against NumPy; the interpreter's times are not a GPU's speed.")
    with tempfile.TemporaryDirectory() as tmp, bench.interpreter(interpreted):
        shared = bench.LabArgs(_ceilings(args, device), os.path.join(tmp, "numpy.json"))
        run_id, results, store = measure_into_store("lab", bench.cases(kernels, sizes, interpreted, args.quick, shared),
                                                    args, label="lab")
    for row in [] if interpreted else bench.crossovers(results):
        store.add_result(run_id, row)
    rows = store.results(run_id)
    summaries = [r for r in rows if r["shape"].get("summary")]
    return store, run_id, sorted((r for r in rows if not r["shape"].get("summary")), key=_tutorial_order) + summaries


def _tutorial_order(r: dict) -> tuple:
    name = r["op"][4:]
    return lab.names().index(name), lab.get(name).precisions.index(r["precision"]), r["shape"].get("n", 0)


def _ceilings(args, device: torch.device) -> dict:
    """The ceilings rates are held against: measured by `tcperf ceilings` if it ran here, and the datasheet's."""
    if device.type != "cuda":
        return {}
    return {"measured": peaks.measured(args.db, device),
            "datasheet": peaks.datasheet(torch.cuda.get_device_name(device))}


# --- the table ------------------------------------------------------------------------------------------------------
def _ms(value) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else ""


def _pct(m: dict) -> str:
    return f"{m['pct_ceiling']:.0f}% {m['ceiling']['source']}" if m.get("pct_ceiling") else ""


def _note(r: dict, m: dict) -> str:
    parts = [] if m.get("interpreted") else [r.get("message") or ""]
    return "; ".join(p for p in [*parts, *(r.get("warnings") or []), m.get("config", "")] if p)


# (header, cell) in order; the GPU columns are left out of a table of interpreted rows.
COLUMNS = (("kernel", lambda r, m: r["op"][4:]), ("size", lambda r, m: m.get("label", "")),
           ("prec", lambda r, m: r["precision"]),
           ("status", lambda r, m: status_cell(r["status"])),
           ("NumPy ms", lambda r, m: _ms(m.get("numpy_ms"))), ("kernel ms ± IQR", lambda r, m: fmt_ms(r)),
           ("torch ms", lambda r, m: _ms(m.get("torch_ms"))))
GPU_COLUMNS = (("e2e pageable ms", lambda r, m: _ms(m.get("e2e_pageable_ms"))),
               ("e2e pinned ms", lambda r, m: _ms(m.get("e2e_pinned_ms"))), ("rate", lambda r, m: rate_cell(r)),
               ("% ceiling", lambda r, m: _pct(m)),
               ("vs torch", lambda r, m: f"{m['vs_torch']:.2f}x" if m.get("vs_torch") else ""))
LEFT = ("kernel", "size", "prec", "status", "note")


def table(rows: list[dict], title: str = "") -> Table:
    rows = [r for r in rows if not r["shape"].get("summary")]
    interpreted = any((r.get("metrics") or {}).get("interpreted") for r in rows)
    columns = (*COLUMNS, *(() if interpreted else GPU_COLUMNS), ("note", _note))
    if interpreted:
        title += " · Triton interpreter on the CPU: kernels checked; 'kernel ms' is the interpreter's, not a speed"
    t = Table(title=title)
    for header, _ in columns:
        t.add_column(header, justify="left" if header in LEFT else "right", overflow="fold")
    for r in rows:
        m = r.get("metrics") or {}
        t.add_row(*(cell(r, m) for _, cell in columns))
    return t
