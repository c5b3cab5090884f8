"""`tcperf suites [--json]`: every suite tcperf ships, with its row count, its source and what it holds.

    tcperf suites
    tcperf bench --suite deepbench-gemm-train        # then measure one
"""
from __future__ import annotations

from rich.table import Table

from .. import suites
from .common import add_json, console, print_json


def add_parser(sub) -> None:
    p = sub.add_parser("suites")
    add_json(p)


def listing() -> list[dict]:
    """One dict a suite: name, rows (as in its file), cases (what `bench` runs per precision), source, about."""
    out = []
    for name in suites.names():
        s = suites.get(name)
        out.append({"name": name, "rows": suites.count(name), "cases": len(suites.load(name, "cuda")),
                    "ops": sorted({row.op for row in suites.load(name, "cuda")}), "source": s.source,
                    "file": s.file, "about": s.about})
    return out


def main(args) -> int:
    items = listing()
    if args.json:
        print_json(items)
        return 0
    t = Table(title="tcperf suites (run one with `tcperf bench --suite NAME`)")
    t.add_column("suite", no_wrap=True)
    for col, justify in (("rows", "right"), ("GPU cases", "right"), ("ops", "left"), ("source", "left"),
                         ("about", "left")):
        t.add_column(col, justify=justify, overflow="fold")
    for s in items:
        t.add_row(s["name"], str(s["rows"]), str(s["cases"]), ", ".join(s["ops"]), s["source"], s["about"])
    console.print(t)
    return 0
