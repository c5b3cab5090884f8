"""Reports from the store: what the HTML report, `tcperf compare` and the export formats share.

A stored result row is one of five kinds, told apart by its `op` (docs/design.md):
kernel (gemm, conv, ...), `ceiling`, `model` (the ladder), `lab.<kernel>` and `advise.<what>`.
This module sorts rows into those kinds, names each row's headline figure and finds the ceilings measured
for a device. It imports no plotting library: charts live in report/charts.py, the opening findings in
report/findings.py, warnings and the environment in report/notes.py, the page in report/html.py.

    tcperf report 12 13 --out report.html --png charts/     # the command (tcperf/commands/report.py)
    build(Store.open(), [12, 13]).html                      # the same from Python
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

FAILED = ("wrong", "error", "oom", "timeout")


def kind(row: dict) -> str:
    """'kernel' | 'ceiling' | 'model' | 'lab' | 'advise'."""
    op = row["op"]
    if op in ("ceiling", "model"):
        return op
    for prefix in ("lab", "advise", "totarget"):
        if op.startswith(prefix + "."):
            return prefix
    return "kernel"


def group_name(row: dict) -> str:
    """The group a row's comparisons and tables go under: its suite, else its kind."""
    return row.get("suite") or {"kernel": "(no suite)", "ceiling": "ceilings"}.get(kind(row), kind(row))


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


@dataclass(frozen=True)
class Figure:
    """A row's headline figure: `value` in `unit`, and whether more is better."""
    name: str
    value: float | None
    unit: str
    higher_is_better: bool


def headline(row: dict) -> Figure:
    """Throughput for models, TFLOPS or GB/s where the op counts them, else the median time."""
    m = row.get("metrics") or {}
    if kind(row) == "model" and m.get("throughput") is not None:
        return Figure("throughput", m["throughput"], m.get("unit", "items/s"), True)
    if row.get("tflops"):
        return Figure("tflops", row["tflops"], "TOPS" if row["precision"] == "int8" else "TFLOPS", True)
    if row.get("gbps"):
        return Figure("gbps", row["gbps"], "GB/s", True)
    return Figure("median_ms", row.get("median_ms"), "ms", False)


def advice_summary(row: dict) -> str:
    """The advisor's one-sentence answer for an `advise.verdict` row ('' when its verdict is not in that format)."""
    verdict = (row.get("metrics") or {}).get("verdict")
    if not isinstance(verdict, dict):
        return str(verdict or "")
    from ..advisor.verdict import headline
    try:
        return headline(verdict, row.get("tolerance") or 0.0)
    except (KeyError, TypeError, ValueError):
        return ""


def relative_spread(row: dict) -> float | None:
    """IQR / median of the timed samples (tcperf.timing flags it above 10%)."""
    if row.get("median_ms") and row.get("iqr_ms") is not None:
        return row["iqr_ms"] / row["median_ms"]
    return None


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
    """The runs to report on (the latest when none is named), each with its device's ceilings."""
    runs = [store.run(i) for i in run_ids] if run_ids else [store.run(None)]
    return [RunData(run, store.results(run["id"]), store.ceilings(run["device"])) for run in runs]


@dataclass
class Report:
    html: str
    charts: dict[str, bytes]      # file name -> PNG bytes
    sections: list[str]


def build(store, run_ids: list[int] | None = None) -> Report:
    """The report for these runs, built only from the store (nothing here touches a GPU)."""
    from .html import render
    return render(load(store, run_ids))
