"""`tcperf report [RUN ...] [--out report.html] [--png DIR]`: one self-contained HTML page (charts inline, no
network needed to view it, printable) for the named runs, the latest by default. Built only from the store: it
never touches the GPU, so it runs anywhere the results file is.

    tcperf report 3 4 7 --out docs/results/report.html --png docs/results/charts
"""
from __future__ import annotations

from pathlib import Path

from .. import report
from ..store import Store
from .common import add_db, console, write_file


def add_parser(sub) -> None:
    p = sub.add_parser("report")
    p.add_argument("runs", nargs="*", type=int, metavar="RUN", help="run ids (see `tcperf runs`)")
    p.add_argument("--out", default="report.html", help="HTML file to write (default: report.html)")
    p.add_argument("--png", default=None, metavar="DIR", help="also write each chart as a PNG into DIR")
    add_db(p)
    p.set_defaults(func=main)


def main(args) -> int:
    built = report.build(Store.open(args.db), args.runs or None)
    out = Path(args.out)
    write_file(out, built.html)
    console.print(f"wrote {out} ({len(built.sections)} sections: {', '.join(built.sections)}; "
                  f"{len(built.charts)} charts)")
    if args.png:
        folder = Path(args.png)
        for name, png in built.charts.items():
            write_file(folder / name, png)
        console.print(f"wrote {len(built.charts)} PNG(s) to {folder}/")
    return 0
