"""`tcperf show [RUN]`: one run as a table (the latest by default), every column; --verbose adds where each case's
seconds went."""
from __future__ import annotations

import datetime

from rich.table import Table

from ..rows import FAILED, merge_repeats
from ..store import Store
from ..table import ALL, results_table
from .ceilings import of_run
from .common import add_db, add_json, console, print_stored

PHASES = ("prepare", "check", "time", "kernels", "pad")   # tcperf.worker.measure_case's, in order


def add_parser(sub) -> None:
    p = sub.add_parser("show")
    p.add_argument("run", nargs="?", type=int, help="run id (see `tcperf runs`)")
    add_db(p)
    add_json(p)
    add_verbose(p)


def add_verbose(p) -> None:
    p.add_argument("--verbose", action="store_true",
                   help="also each case's seconds: prepare, check, time, kernels (the profiler), pad")


def main(args) -> int:
    store = Store.open(args.db)
    run_id = store.run(args.run)["id"]             # the latest when none is given
    return print_stored(args, store, run_id, lambda: print_run(store, run_id, console, verbose=args.verbose))


def print_run(store: Store, run_id: int, out, columns=ALL, verbose: bool = False) -> None:
    """The run's table (`columns` of tcperf.table.COLUMNS), its warnings, and where its time went."""
    run = store.run(run_id)
    if run["kind"] == "train-to-target":
        from .train_to_target import print_run as print_time_to_target
        return print_time_to_target(store, run_id, out)
    timed = store.results(run_id)
    results = merge_repeats(timed)              # a case timed twice (a CPU `tcperf run`): one row
    when = datetime.datetime.fromtimestamp(run["started"]).strftime("%Y-%m-%d %H:%M")
    lib = run["env"].get("libraries", {})
    title = (f"run {run['id']} · {run['kind']} · {run['device']} · {when} · torch {lib.get('torch')} "
             f"· {run['status']}")
    ordinary = [r for r in results if r.get("median_ms") is not None or r["status"] != "ok"]
    ceilings, caption = ceilings_for(store, run, results)
    out.print(results_table(ordinary, run["env"].get("gpu", {}).get("name"), ceilings, title=title,
                            columns=columns, caption=caption))
    for w in run.get("warnings") or []:
        out.print(f"[yellow]warning:[/] {w}")
    bad = [r for r in results if r["status"] in FAILED]
    if bad:
        out.print(f"[red]{len(bad)} case(s) failed or were wrong[/]: see the note column")
    for line in time_lines(run, timed):
        out.print(line, highlight=False)
    if verbose:
        out.print(phases_table(results))


def ceilings_for(store: Store, run: dict, results: list[dict]) -> tuple[dict, str]:
    """The ceilings '% ceiling' reads, and a caption saying where they come from: `tcperf ceilings`' stored ones;
    for a `tcperf run` on a GPU, where none is stored for a precision, the run's own best aligned GEMM
    (ceilings.of_run). Not on a CPU: there a GEMM timed once is no peak (a bf16 GEMM ran at 0.01x fp32 on a CPU
    without bf16 instructions, and a busy core slows any one timing), so '% ceiling' waits for `tcperf ceilings`."""
    stored = store.ceilings(run["device"])
    if run["kind"] != "run":
        return stored, ""
    if not run["env"].get("device", "").startswith("cuda"):
        missing = sorted({r["precision"] for r in results} - set(stored))
        return stored, (f"% ceiling: none for {', '.join(missing)} on this CPU until `tcperf ceilings` measures "
                        f"them until stable" if missing else "")
    quick = {k: v for k, v in of_run(results, run["env"]["device"]).items() if k not in stored}
    if not quick:
        return stored, ""
    return {**quick, **stored}, (f"% ceiling ({', '.join(quick)}): of this run's best aligned square GEMM of "
                                 f"each precision and its copy, each timed once; `tcperf ceilings` measures "
                                 f"ceilings until stable")


def time_lines(run: dict, results: list[dict]) -> list[str]:
    """'time: 21.0 s = start-up 8.1 + fp64 1.1 + ...', then what the workers' start-up and the cases spent it on
    ([] for a run without per-case times)."""
    spent = time_spent(run, results)
    if not spent:
        return []
    parts = " + ".join(f"{name} {s:.1f}" for name, s in spent.items() if name != "total")
    detail = [*_startup(results), *_cases(results)]
    return [f"time: {spent['total']:.1f} s = {parts}"] + (["  " + "; ".join(detail)] if detail else [])


def _startup(results: list[dict]) -> list[str]:
    """'worker start-up: imports 2.0 s, device 3.0 s' (tcperf.worker's metrics.worker_start_s), summed."""
    started = [r["metrics"]["worker_start_s"] for r in results if (r.get("metrics") or {}).get("worker_start_s")]
    if not started:
        return []
    who = "worker start-up" if len(started) == 1 else f"{len(started)} workers' start-up"
    return [f"{who}: " + ", ".join(f"{k} {sum(s[k] for s in started):.1f} s" for k in ("imports", "device"))]


def _cases(results: list[dict]) -> list[str]:
    inside = phases_spent(results)
    return ["cases: " + ", ".join(f"{name} {s:.1f} s" for name, s in inside.items())] if inside else []


def phases_spent(results: list[dict]) -> dict[str, float]:
    """Seconds the cases spent in each phase (tcperf.worker's metrics.phases_s), summed; 'other' is the rest of
    their wall time (skips, NVML, the result's own bookkeeping)."""
    out = {name: 0.0 for name in PHASES}
    wall = 0.0
    for r in results:
        metrics = r.get("metrics") or {}
        wall += metrics.get("wall_s", 0.0)
        for name, s in (metrics.get("phases_s") or {}).items():
            out[name] = out.get(name, 0.0) + s
    if not any(out.values()):
        return {}
    return {**{k: v for k, v in out.items() if v}, "other": max(0.0, wall - sum(out.values()))}


def phases_table(results: list[dict]) -> Table:
    """One row a case: its wall seconds and each phase's."""
    t = Table(title="seconds a case")
    for col in ("case", "prec", "wall", *PHASES):
        t.add_column(col, justify="left" if col in ("case", "prec") else "right", overflow="fold")
    for r in results:
        metrics = r.get("metrics") or {}
        t.add_row(f"{r['op']} {metrics.get('label', '')}", r["precision"], _seconds(metrics.get("wall_s")),
                  *(_seconds((metrics.get("phases_s") or {}).get(name)) for name in PHASES))
    return t


def _seconds(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else ""


def time_spent(run: dict, results: list[dict]) -> dict[str, float]:
    """Where a finished run's wall time went, from what the store holds: start-up (from the run's start to its first
    case, less that case's own time), each precision (the time between its results arriving), and the end. {} for a
    run without the per-case times (`metrics.wall_s`, written by the worker) or not finished."""
    timed = sorted((r for r in results if "wall_s" in (r.get("metrics") or {})), key=lambda r: r["created"])
    if not timed or len(timed) != len(results) or not run.get("finished"):
        return {}
    first = timed[0]
    spent = {"start-up": first["created"] - first["metrics"]["wall_s"] - run["started"]}
    before = first["created"] - first["metrics"]["wall_s"]
    for r in timed:
        spent[r["precision"]] = spent.get(r["precision"], 0.0) + r["created"] - before
        before = r["created"]
    spent["end"] = run["finished"] - before
    spent["total"] = run["finished"] - run["started"]
    return spent
