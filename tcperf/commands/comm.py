"""`tcperf comm`: collective bandwidth through torch.distributed, NCCL on GPUs and gloo on the CPU. all_reduce,
all_gather, reduce_scatter, broadcast and all_to_all from 1 KiB to 1 GiB in fp32 and bf16, each checked (the reduced
values verified on every rank) before it is timed, reported as time, algbw and busbw with nccl-tests' conventions,
with the link between the GPUs named (NVLink or PCIe), stored as a run of kind "comm".

    tcperf comm                                   # every GPU visible, the five collectives, 1 KiB .. 1 GiB by x2
    tcperf comm --ops all_reduce -b 1M -e 1G -f 16 --dtypes fp32
    tcperf comm --suite deepbench                 # DeepBench's all-reduce sizes
    tcperf comm --device cpu --nproc 2 -e 1M      # gloo on 2 processes
    torchrun --nnodes 2 --nproc-per-node 8 ... -m tcperf comm    # many hosts: rank 0 writes the store

On 2 x H200 (NVLink NV18, torch 2.11) a plain all_reduce loop gives fp32 busbw 39 GB/s at 1 MiB, 328 at 1 GiB.
"""
from __future__ import annotations

import functools
import statistics

from rich.table import Table

from .. import env as envmod
from ..distributed import collectives, launch, link
from .common import add_db, add_device, add_json, console, job_from, measure_into_store, positive_number, print_json

CPU_END = "16M"      # the default largest size on a CPU (gloo over shared memory on a few cores)


def add_parser(sub) -> None:
    p = sub.add_parser("comm",
                       description="Collectives through torch.distributed on N ranks of this host (or under "
                                   "torchrun), checked then timed; nccl-tests' -b/-e/-f size sweep.")
    p.add_argument("--ops", default="all", help=f"{', '.join(collectives.COLLECTIVES)} or all (default: all)")
    p.add_argument("--dtypes", default="fp32,bf16", help=f"{', '.join(collectives.DTYPES)} (default: fp32,bf16)")
    p.add_argument("-b", "--begin", default="1K", help="smallest size in bytes, e.g. 1K (default 1K)")
    p.add_argument("-e", "--end", default=None, help=f"largest size (default: 1G on GPUs, {CPU_END} on a CPU)")
    p.add_argument("-f", "--factor", type=positive_number, default=2.0,
                   help="size multiplier between steps (default 2)")
    p.add_argument("--suite", choices=("sweep", "deepbench"), default="sweep",
                   help="sweep (-b .. -e) or deepbench (DeepBench's all-reduce sizes, in floats)")
    p.add_argument("--nproc", type=int, default=None, help="ranks to start (default: every GPU; 2 on a CPU)")
    p.add_argument("--timeout", type=positive_number, default=120.0,
                   help="seconds a case may go without progress before its ranks are stopped (default 120)")
    p.add_argument("--rep-ms", type=positive_number, default=100.0,
                   help="time budget for the timed calls of one case")
    add_device(p)
    add_db(p)
    add_json(p)
    p.set_defaults(no_flush_l2=True, graph=False)


def plan(args, device, nproc: int, where: dict | None = None) -> list:
    """The cases the options ask for (tcperf.records.Case); UserError for a bad collective, dtype or size. where: the
    link between the ranks, stored with each row."""
    names = collectives.parse_names(args.ops, collectives.COLLECTIVES, "collective")
    dtypes = collectives.parse_names(args.dtypes, collectives.DTYPES, "dtype")
    if args.suite == "deepbench":
        return collectives.deepbench(names, dtypes, nproc, where)
    end = args.end or ("1G" if device.type == "cuda" else CPU_END)
    sizes = collectives.sizes(collectives.parse_size(args.begin), collectives.parse_size(end), args.factor)
    return collectives.cases(names, dtypes, sizes, nproc, where)


def main(args) -> int:
    device = envmod.parse_device(args.device)
    nproc = launch.check_nproc(args.nproc, device)
    plan(args, device, nproc)                    # bad options: one line, before the link is probed
    where = link.describe(nproc) if device.type == "cuda" else {"link": "one host (gloo, CPU)", "detail": ""}
    cases = plan(args, device, nproc, where)
    runner = functools.partial(launch.run_cases, nproc=nproc)
    job = job_from(args)
    if launch.rank() != 0:            # under torchrun: rank 0 writes the store and prints
        runner(cases, device, job)
        return 0
    run_id, _, store = measure_into_store("comm", cases, args, job, label="collectives", runner=runner)
    results = store.results(run_id)
    if args.json:
        print_json({"run": store.run(run_id), "link": where, "results": results})
    else:
        print_comm(results, where, console)
    return 0


def print_comm(results: list[dict], where: dict, out) -> None:
    """The ranks and the link between them, then one table per collective (comm_table)."""
    n = (results[0]["shape"].get("nproc") if results else None) or "?"
    out.print(f"{n} ranks · link: {where['link']}" + (f" ({where['detail']})" if where.get("detail") else ""))
    by_op: dict[str, list[dict]] = {}
    for r in results:
        by_op.setdefault(r["op"], []).append(r)
    for op, rows in by_op.items():
        out.print(comm_table(op.removeprefix("comm."), rows))
        for dtype in dict.fromkeys(r["precision"] for r in rows):
            out.print(f"  {dtype}: {regimes_line([r for r in rows if r['precision'] == dtype])}")


def regimes_line(rows: list[dict]) -> str:
    """collectives.regimes over the sizes timed stably (an unstable time reads no floor); what was left out said."""
    timed = [r for r in rows if r.get("median_ms") is not None]
    stable = [r for r in timed if not (r.get("metrics") or {}).get("unstable")]
    found = collectives.regimes([(r.get("bytes") or r["shape"]["bytes"], r["median_ms"] * 1e3,
                                  (r.get("metrics") or {}).get("busbw_gbps")) for r in stable])
    n = len(timed) - len(stable)
    left = f" ({n} unstable size{'s' if n > 1 else ''} left out)" if n else ""
    return (collectives.regimes_sentence(found, _floor_host_us(stable, found)) if found else
            "no latency floor read: fewer than 2 sizes timed stably") + left


def _floor_host_us(rows: list[dict], found: dict) -> float | None:
    """The host's median time to issue a call over the floor's sizes, where every one of them waited on it."""
    floor = [(r.get("metrics") or {}) for r in rows
             if (r.get("bytes") or r["shape"]["bytes"]) <= found["latency_bound_to"]]
    if not floor or not all(m.get("host_bound") for m in floor):
        return None
    return statistics.median(m["host_us"] for m in floor)


def comm_table(title: str, rows: list[dict]) -> Table:
    t = Table(title=title)
    for col in ("size", "dtype", "status", "time µs ± IQR", "host µs", "calls × repeats", "algbw GB/s",
                "busbw GB/s", "note"):
        t.add_column(col, justify="left" if col in ("size", "dtype", "status", "note") else "right")
    for r in rows:
        m = r.get("metrics") or {}
        ok = r.get("median_ms") is not None
        t.add_row(collectives.label(r.get("bytes") or r["shape"]["bytes"]), r["precision"],
                  r["status"], f"{r['median_ms'] * 1e3:,.1f} ± {(r.get('iqr_ms') or 0) * 1e3:,.1f}" if ok else "",
                  _host(m) if ok else "", f"{m.get('iters')} × {m.get('repeats')}" if ok else "",
                  f"{m['algbw_gbps']:,.2f}" if ok else "", f"{m['busbw_gbps']:,.2f}" if ok else "",
                  r.get("message") or "; ".join(r.get("warnings") or []))
    return t


def _host(m: dict) -> str:
    """The host's time to issue a call, marked where the loop waited on it (rows stored before it was kept: blank)."""
    if m.get("host_us") is None:
        return ""
    return f"{m['host_us']:,.1f}" + (" host-bound" if m.get("host_bound") else "")
