"""`tcperf export RUN --format json|csv`: a run's results for other tools (stdout, or --out FILE)."""
from __future__ import annotations

import csv
import io
import json
import sys

from ..errors import UserError
from ..store import RESULT_COLUMNS, Store
from .common import add_db

FORMATS = {}


def exporter(name):
    def register(fn):
        FORMATS[name] = fn
        return fn
    return register


@exporter("json")
def to_json(run: dict, results: list[dict]) -> str:
    return json.dumps({"run": run, "results": results}, indent=2, default=str)


@exporter("csv")
def to_csv(run: dict, results: list[dict]) -> str:
    """One flat row a result: the columns, with JSON fields kept as JSON text (samples left out)."""
    buf = io.StringIO()
    cols = ["run_id", "device", *[c for c in RESULT_COLUMNS if c != "samples"]]
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    for r in results:
        row = {**r, "run_id": run["id"], "device": run["device"]}
        for k in ("shape", "metrics", "warnings"):
            row[k] = json.dumps(row[k], default=str)
        w.writerow(row)
    return buf.getvalue()


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="write a run's results as JSON or CSV")
    p.add_argument("run", type=int, help="run id (see `tcperf runs`)")
    p.add_argument("--format", default="json", help="json | csv (and any format registered in export.FORMATS)")
    p.add_argument("--out", default=None, help="file to write (default: stdout)")
    add_db(p)
    p.set_defaults(func=main)


def main(args) -> int:
    if args.format not in FORMATS:
        raise UserError(f"unknown format {args.format!r}; choose from: {', '.join(FORMATS)}")
    store = Store.open(args.db)
    run = store.run(args.run)
    text = FORMATS[args.format](run, store.results(run["id"]))
    if args.out:
        with open(args.out, "w", newline="") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0
