"""`tcperf report [RUN ...] [--out FILE.html] [--png DIR]`: one self-contained HTML page (charts inline, no
network needed to view it, printable) for the named runs, the latest by default. Built only from the store: it
never touches the GPU, so it runs anywhere the results file is. Without --out the page goes into the results store's
folder as report-RUNS.html, and the command says where.

    tcperf report 3 4 7 --out docs/results/report.html --png docs/results/charts
"""
from __future__ import annotations

from pathlib import Path

from .. import report
from ..store import Store
from .common import add_db, beside_store, console, write_file


def add_parser(sub) -> None:
    p = sub.add_parser("report")
    p.add_argument("runs", nargs="*", type=int, metavar="RUN", help="run ids (see `tcperf runs`)")
    p.add_argument("--out", default=None,
                   help="HTML file to write (default: report-RUNS.html in the results store's folder)")
    p.add_argument("--png", default=None, metavar="DIR", help="also write each chart as a PNG into DIR")
    add_db(p)


def main(args) -> int:
    store = Store.open(args.db)
    built = report.build(store, args.runs or None)
    ids = "-".join(str(i) for i in args.runs) if args.runs else "latest"
    out = Path(args.out) if args.out else beside_store(store, f"report-{ids}.html")
    write_file(out, built.html)
    console.print(f"wrote {out} ({len(built.sections)} sections: {', '.join(built.sections)}; "
                  f"{len(built.charts)} charts)")
    if args.png:
        folder = Path(args.png)
        for name, png in built.charts.items():
            write_file(folder / name, png)
        console.print(f"wrote {len(built.charts)} PNG(s) to {folder}/")
    return 0
