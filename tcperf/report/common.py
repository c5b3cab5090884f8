"""What the report's modules share: names and figures of a stored row, the runs as the report reads them from the
store, and the HTML cells and tables every section is made of. Below html.py, charts.py, findings.py, notes.py and
convergence.py, so none of them imports another's privates or the package back.

    table(["case", "ms"], [["gemm 4096", number(1.42)]])      # a sortable table; the number cell sorts by 1.42
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from ..rows import kind, merge_repeats

FOLD_ROWS = 20    # a table longer than this is folded behind a <details>, with a filter box


# --- a row's names and figures ------------------------------------------------------------------------------------
def anchor(*parts) -> str:
    """The id of a place in the page: anchor("model", 11, "resnet50 train") -> 'model-11-resnet50-train'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", "-".join(map(str, parts))).strip("-")


def label(row: dict) -> str:
    """A human name for the case: the op's label, or the shape written out."""
    m = row.get("metrics") or {}
    shape = row.get("shape") or {}
    if kind(row) == "model":
        return f"{shape.get('model', '?')} {shape.get('mode', '')} batch {shape.get('batch', '?')}".strip()
    text = m.get("label") or " ".join(f"{k}={v}" for k, v in shape.items())
    return f"{row['op']} {text}".strip()


def model_name(row: dict) -> str:
    """'resnet50 train': the model and mode of a model or advisor row."""
    return f"{row['shape'].get('model', '?')} {row['shape'].get('mode', '')}".strip()


def application(row: dict) -> str:
    tags = (row.get("metrics") or {}).get("tags") or {}
    return tags.get("application", "") if isinstance(tags, dict) else ""


def advice_summary(row: dict) -> str:
    """The advisor's one-sentence answer for an `advise.verdict` row ('' when its verdict is not in that format)."""
    verdict = (row.get("metrics") or {}).get("verdict")
    if not isinstance(verdict, dict):
        return str(verdict or "")
    from ..advisor.verdict import headline     # here: the advisor (and torch) load only for a verdict to word
    try:
        return headline(verdict, row.get("tolerance") or 0.0)
    except (KeyError, TypeError, ValueError):
        return ""


def relative_spread(row: dict) -> float | None:
    """IQR / median of the timed samples (tcperf.timing flags it above 10%)."""
    return row["iqr_ms"] / row["median_ms"] if row.get("median_ms") and row.get("iqr_ms") is not None else None


def lab_size(shape: dict):
    """The problem size a lab row was measured at: `size`, else `n`, else its first number."""
    for key in ("size", "n", "elements", "bytes"):
        if isinstance(shape.get(key), (int, float)):
            return shape[key]
    return next((v for v in shape.values() if isinstance(v, (int, float)) and not isinstance(v, bool)), None)


def crossovers(rows: list[dict]) -> dict[str, float]:
    """Where the GPU starts to beat the CPU in a lab sweep: {what: size}.

    The lab's own `crossover` metric wins: a size (number), a flag per row (the smallest flagged size), or a dict
    of sizes by name. Without it, the smallest size from which the GPU, copies included, beats numpy at every
    larger size."""
    marks = [(lab_size(r["shape"]), (r.get("metrics") or {}).get("crossover")) for r in rows]
    found = {}
    for size, mark in marks:
        if isinstance(mark, dict):
            found.update({k: v for k, v in mark.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
        elif isinstance(mark, bool):
            if mark and size is not None:
                found["GPU wins"] = min(size, found.get("GPU wins", size))
        elif isinstance(mark, (int, float)):
            found["crossover"] = mark
    return found or _measured_crossover(rows)


def _measured_crossover(rows: list[dict]) -> dict[str, float]:
    wins = []
    for r in sorted(rows, key=lambda r: lab_size(r["shape"]) or 0):
        m = r.get("metrics") or {}
        gpu = [m[k] for k in ("e2e_pinned_ms", "e2e_pageable_ms") if m.get(k)]
        if m.get("numpy_ms") and gpu:
            wins.append((lab_size(r["shape"]), min(gpu) < m["numpy_ms"]))
    first = next((i for i in range(len(wins)) if all(w for _, w in wins[i:])), None)
    return {"GPU incl. copies beats numpy": wins[first][0]} if first is not None and first > 0 else {}


@dataclass
class RunData:
    """One run as the report reads it: the run row, its results and the ceilings of its device."""
    run: dict
    results: list[dict]
    ceilings: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"run {self.run['id']} · {self.run['device']}"

    def of_kind(self, which: str) -> list[dict]:
        return [r for r in self.results if kind(r) == which]


def load(store, run_ids: list[int] | None) -> list[RunData]:
    """The runs to report on (the latest when none is named), each with its device's ceilings; a case timed twice (a
    CPU `tcperf run`) is one row (rows.merge_repeats)."""
    runs = [store.run(i) for i in run_ids] if run_ids else [store.run(None)]
    return [RunData(run, merge_repeats(store.results(run["id"])), store.ceilings(run["device"])) for run in runs]


@dataclass
class Report:
    html: str
    charts: dict[str, bytes]      # file name -> PNG bytes
    sections: list[str]


# --- HTML cells and tables ----------------------------------------------------------------------------------------
def escape(text) -> str:
    return html.escape(str(text), quote=True)


def number(value, fmt: str = "{:.4g}", suffix: str = "") -> tuple[str, float] | str:
    """A numeric cell: (shown text, sort value), or '' when there is no value."""
    if value is None or isinstance(value, bool):
        return ""
    if not isinstance(value, (int, float)):
        return str(value)
    return (fmt.format(value) + suffix, value)


def table(headers: list[str], rows: list[list], cls: str = "sortable") -> str:
    """A table; a cell is text, or (text, number) for a right-aligned cell that sorts by the number, or
    ('html', markup) for trusted markup."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    markup = f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    if len(rows) <= FOLD_ROWS:
        return markup
    return (f'<details class="fold"><summary>{len(rows)} rows: show the table</summary>'
            f'<input class="filter" type="search" placeholder="filter rows (any text)">{markup}</details>')


def _cell(c) -> str:
    if isinstance(c, tuple) and c[0] == "html":
        return f"<td>{c[1]}</td>"
    if isinstance(c, tuple):
        return f'<td class="num" data-v="{c[1]}">{escape(c[0])}</td>'
    return f"<td>{escape(c)}</td>"
