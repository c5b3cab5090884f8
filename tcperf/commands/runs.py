"""`tcperf runs`: the stored runs, newest first."""
from __future__ import annotations

import datetime

from rich.table import Table

from ..store import Store
from .common import add_db, add_json, console, print_json


def add_parser(sub) -> None:
    p = sub.add_parser("runs")
    p.add_argument("--limit", type=int, default=30)
    add_db(p)
    add_json(p)


def main(args) -> int:
    runs = Store.open(args.db).runs(args.limit)
    if args.json:
        print_json([{k: v for k, v in r.items() if k != "env"} for r in runs])
        return 0
    t = Table(title=f"{len(runs)} run(s)")
    for col in ("id", "when", "kind", "device", "results", "status", "command"):
        t.add_column(col)
    for r in runs:
        when = datetime.datetime.fromtimestamp(r["started"]).strftime("%Y-%m-%d %H:%M")
        t.add_row(str(r["id"]), when, r["kind"], r["device"], str(r["n_results"]), r["status"], r["command"])
    console.print(t)
    return 0
