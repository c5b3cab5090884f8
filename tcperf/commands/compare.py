"""`tcperf compare RUN_A RUN_B [--fail-if-slower 5%]`: run B against run A, case by case.

Prints each paired case's ratio (> 1x: B is faster) with a Mann-Whitney U test on the raw samples, the geometric
mean per suite, the cases only one run has and the cases that broke. With --fail-if-slower it is a regression
gate: exit 1 when a case is significantly slower in B by more than the threshold, or passed in A and fails or is
wrong in B; 0 otherwise; 2 on bad input. See tcperf/compare.py for the test.

    tcperf compare 12 15 --fail-if-slower 5%
    tcperf compare 40 15 --baseline-db postgresql+psycopg://ci@db.lab/tcperf   # run 40 from the team's store
    NVIDIA H200 vs NVIDIA H100 80GB HBM3: 1.04x on quick (gemm 1.02x, copy 1.38x)
"""
from __future__ import annotations

from rich.table import Table

from .. import compare as cmp
from ..errors import UserError
from ..report.common import label
from ..rows import headline as figure_of
from ..store import Store
from ..table import fmt_ms
from .common import add_db, add_json, console, print_json


def add_parser(sub) -> None:
    p = sub.add_parser("compare")
    p.add_argument("run_a", type=int, metavar="RUN_A", help="the baseline run id")
    p.add_argument("run_b", type=int, metavar="RUN_B", help="the run to judge against it")
    p.add_argument("--fail-if-slower", default=None, metavar="PCT",
                   help="exit 1 when a case is significantly slower than this in RUN_B, e.g. 5%%")
    add_db(p)
    p.add_argument("--baseline-db", default=None, metavar="PATH_OR_URL",
                   help="read RUN_A from this store (e.g. a team's PostgreSQL) and RUN_B from --db")
    add_json(p)


def main(args) -> int:
    threshold = _threshold(args.fail_if_slower)
    store = Store.open(args.db)
    baseline = Store.open(args.baseline_db) if args.baseline_db else store
    run_a, run_b = baseline.run(args.run_a), store.run(args.run_b)
    result = cmp.compare(baseline.results(run_a["id"]), store.results(run_b["id"]))
    failing = result.regressions(threshold) if threshold is not None else []
    broken = result.broken if threshold is not None else []
    if args.json:
        print_json(as_json(run_a, run_b, result, threshold, failing))
    else:
        print_comparison(run_a, run_b, result, threshold, failing)
    return 1 if failing or broken else 0


def _threshold(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return cmp.parse_threshold(text)
    except ValueError:
        raise UserError(f"--fail-if-slower {text!r}: give a percentage such as 5% (or 5)") from None


def title_line(run_a: dict, run_b: dict, result: cmp.Comparison) -> str:
    """'H200 vs H100: 1.04x on quick (gemm 1.02x, copy 1.38x)'; runs on one device are named by id."""
    names = [r["device"].replace("NVIDIA ", "") for r in (run_a, run_b)]
    who = (f"{names[1]} (run {run_b['id']}) vs {names[0]} (run {run_a['id']})" if names[0] != names[1]
           else f"run {run_b['id']} vs run {run_a['id']} ({names[0]})")
    by_op = {}
    for p in result.pairs:
        by_op.setdefault(p.group, set()).add(p.b["op"])
    ops = result.geomeans(by=lambda p: (p.group, p.b["op"]))
    parts = []
    for group, (mean, n) in result.geomeans().items():
        inner = ", ".join(f"{op} {ops[group, op][0]:.2f}x" for op in sorted(by_op[group]) if (group, op) in ops)
        parts.append(f"{mean:.2f}x on {group}" + (f" ({inner})" if len(by_op[group]) > 1 else ""))
    return f"{who}: " + ("; ".join(parts) if parts else "no case ran in both")


def print_comparison(run_a, run_b, result: cmp.Comparison, threshold, failing) -> None:
    console.print(f"[bold]{title_line(run_a, run_b, result)}[/]")
    console.print("ratio > 1x: run B is faster. Geometric means over the cases of each suite.")
    console.print(pairs_table(result, failing))
    console.print(geomean_table(result))
    for title, rows in ((f"only in run {run_a['id']}", result.only_a), (f"only in run {run_b['id']}", result.only_b)):
        if rows:
            console.print(f"{title} ({len(rows)}): " + "; ".join(f"{label(r)} {r['precision']}" for r in rows))
    for title, pairs, style in (("broken in run B (ok in A)", result.broken, "bold red"),
                                ("fixed in run B", result.fixed, "green")):
        for ra, rb in pairs:
            console.print(f"[{style}]{title}:[/] {label(rb)} {rb['precision']}: {ra['status']} -> {rb['status']} "
                          f"{rb.get('message') or ''}")
    for p in result.pairs:
        if p.tensor_cores_lost:
            console.print(f"[yellow]Tensor Cores no longer used in run B:[/] {label(p.b)} {p.b['precision']}")
    console.print(verdict_line(result, threshold, failing))


def verdict_line(result: cmp.Comparison, threshold, failing) -> str:
    if threshold is None:
        return "no gate (--fail-if-slower not given): exit 0"
    if failing or result.broken:
        return (f"[bold red]FAIL[/]: {len(failing)} case(s) significantly slower than {threshold:.0%}, "
                f"{len(result.broken)} broken")
    return f"[green]PASS[/]: no case significantly slower than {threshold:.0%}, none broken"


def pairs_table(result: cmp.Comparison, failing) -> Table:
    t = Table(show_lines=False)
    for col, justify in (("suite", "left"), ("case", "left"), ("prec", "left"), ("A", "right"), ("B", "right"),
                         ("ratio", "right"), ("change", "left"), ("significance", "left"), ("", "left")):
        t.add_column(col, justify=justify, overflow="fold")
    bad = {id(p) for p in failing}
    for p in sorted(result.pairs, key=lambda p: (p.group, p.speedup or 0)):
        style = "green" if p.significant and (p.speedup or 1) > 1 else "red" if p.significant else ""
        change = f"[{style}]{cmp.describe(p)}[/]" if style else cmp.describe(p)
        t.add_row(p.group, label(p.b), p.b["precision"], _figure(p.a), _figure(p.b),
                  f"{p.speedup:.3f}x" if p.speedup else "", change,
                  p.why, "[bold red]SLOWER[/]" if id(p) in bad else "")
    return t


def _figure(row: dict) -> str:
    """The case's time (median ± IQR, ms) or, without one, its headline figure."""
    if row.get("median_ms") is not None:
        return fmt_ms(row) + " ms"
    f = figure_of(row)
    return f"{f.value:.4g} {f.unit}" if f.value is not None else ""


def geomean_table(result: cmp.Comparison) -> Table:
    t = Table(title="geometric mean per suite")
    for col in ("suite", "cases", "B vs A"):
        t.add_column(col)
    for group, (mean, n) in result.geomeans().items():
        t.add_row(group, str(n), f"{mean:.3f}x")
    return t


def as_json(run_a, run_b, result: cmp.Comparison, threshold, failing) -> dict:
    bad = {id(p) for p in failing}
    return {
        "run_a": run_a["id"], "run_b": run_b["id"], "device_a": run_a["device"], "device_b": run_b["device"],
        "headline": title_line(run_a, run_b, result), "threshold": threshold,
        "geomean": {g: {"speedup": m, "cases": n} for g, (m, n) in result.geomeans().items()},
        "pairs": [{"case_key": p.key, "suite": p.group, "label": label(p.b), "precision": p.b["precision"],
                   "median_ms_a": p.a.get("median_ms"), "median_ms_b": p.b.get("median_ms"), "speedup": p.speedup,
                   "change": cmp.describe(p), "significant": p.significant, "p": p.p, "why": p.why,
                   "tensor_cores_lost": p.tensor_cores_lost, "fails_gate": id(p) in bad} for p in result.pairs],
        "only_a": [r["case_key"] for r in result.only_a], "only_b": [r["case_key"] for r in result.only_b],
        "broken": [rb["case_key"] for _, rb in result.broken], "fixed": [rb["case_key"] for _, rb in result.fixed],
    }
