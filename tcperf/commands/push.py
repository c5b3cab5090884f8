"""`tcperf push --to URL [RUN ...]`: copy runs from the local store (--db) to a shared one, e.g. PostgreSQL.

A GPU host that is offline stores locally and pushes later. Runs get new ids in the target; each run is matched
by its uid, so pushing twice copies nothing twice, and a run pushed while unfinished is replaced by its complete
version on the next push.

    tcperf push --to postgresql+psycopg://ann@db.lab/tcperf
    run 3 -> 41 copied (40 results)
    run 4 -> 42 already there
    pushed 2 run(s) to postgresql+psycopg://ann@db.lab/tcperf: 1 copied, 1 already there
"""
from __future__ import annotations

from collections import Counter

from ..errors import UserError
from ..store import Store
from .common import add_db, add_json, console, print_json


def add_parser(sub) -> None:
    p = sub.add_parser("push")
    p.add_argument("runs", nargs="*", type=int, metavar="RUN", help="run ids (default: every run)")
    p.add_argument("--to", required=True, metavar="URL", help="the target store: a SQLAlchemy URL or a path")
    add_db(p)
    add_json(p)


def main(args) -> int:
    source, target = Store.open(args.db), Store.open(args.to)
    if source.url == target.url:
        raise UserError(f"--to names the store being read ({source.where}): nothing to push")
    copies = [push_run(source, target, run_id) for run_id in args.runs or source.run_ids()]
    counts = Counter(c["action"] for c in copies)
    if args.json:
        print_json({"to": target.where, "runs": copies, "counts": counts})
        return 0
    for c in copies:
        console.print(f"run {c['run']} -> {c['as']} {c['action']}" +
                      (f" ({c['results']} results)" if c["action"] != "already there" else ""))
    summary = ", ".join(f"{n} {action}" for action, n in counts.items())
    console.print(f"pushed {len(copies)} run(s) to {target.where}" + (f": {summary}" if summary else ""))
    return 0


def push_run(source: Store, target: Store, run_id: int) -> dict:
    run, rows = source.export_run(run_id)
    new_id, action = target.import_run(run, rows)
    return {"run": run_id, "as": new_id, "action": action, "results": len(rows), "status": run["status"]}
