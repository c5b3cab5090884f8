"""`tcperf show [RUN]`: one run as a table (the latest by default)."""
from __future__ import annotations

import datetime

from ..rows import FAILED
from ..store import Store
from ..table import results_table
from .common import add_db, add_json, console, print_stored


def add_parser(sub) -> None:
    p = sub.add_parser("show")
    p.add_argument("run", nargs="?", type=int, help="run id (see `tcperf runs`)")
    add_db(p)
    add_json(p)
    p.set_defaults(func=main)


def main(args) -> int:
    store = Store.open(args.db)
    run_id = store.run(args.run)["id"]             # the latest when none is given
    return print_stored(args, store, run_id, lambda: print_run(store, run_id, console))


def print_run(store: Store, run_id: int, out) -> None:
    run = store.run(run_id)
    if run["kind"] == "train-to-target":
        from .train_to_target import print_run as print_time_to_target
        return print_time_to_target(store, run_id, out)
    results = store.results(run_id)
    when = datetime.datetime.fromtimestamp(run["started"]).strftime("%Y-%m-%d %H:%M")
    lib = run["env"].get("libraries", {})
    title = (f"run {run['id']} · {run['kind']} · {run['device']} · {when} · torch {lib.get('torch')} "
             f"· {run['status']}")
    ordinary = [r for r in results if r.get("median_ms") is not None or r["status"] != "ok"]
    out.print(results_table(ordinary, run["env"].get("gpu", {}).get("name"), store.ceilings(run["device"]),
                            title=title))
    for w in run.get("warnings") or []:
        out.print(f"[yellow]warning:[/] {w}")
    bad = [r for r in results if r["status"] in FAILED]
    if bad:
        out.print(f"[red]{len(bad)} case(s) failed or were wrong[/]: see the note column")
    spent = time_spent(run, results)
    if spent:
        parts = " + ".join(f"{name} {s:.1f} s" for name, s in spent.items() if name != "total")
        out.print(f"time: {spent['total']:.1f} s = {parts}")


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
