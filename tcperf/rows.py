"""What a stored result row is, as statistics and reports read it: its kind (told by its `op`), the group it is
compared and tabled under, its headline figure, and the statuses that count as a failure. Below both
tcperf.compare and tcperf.report, so the statistics never import a report.

    kind({"op": "lab.vector_add"})            # 'lab'
    headline(row).unit                        # 'TFLOPS' for a gemm row; 'ms' where the op counts no rate
    merge_repeats(store.results(run_id))      # a case timed twice (a CPU `tcperf run`) as one row of both timings
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FAILED = ("wrong", "error", "oom", "timeout")


def kind(row: dict) -> str:
    """'kernel' | 'ceiling' | 'model' | 'lab' | 'advise' | 'totarget'."""
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


# --- a case timed more than once in a run ----------------------------------------------------------------------
def merge_repeats(results: list[dict]) -> list[dict]:
    """One row a kernel case (case_key), in first-appearance order: a case timed more than once in a run becomes one
    row of all its samples, each timing kept in metrics["timings"] (tcperf.compare.claim must hold in each); where a
    repeat failed, the failure is the row. Rows of other kinds stay as they are."""
    groups: dict[str | int, list[dict]] = {}
    for r in results:
        groups.setdefault((kind(r) == "kernel" and r.get("case_key")) or id(r), []).append(r)
    return [group[0] if len(group) == 1 else _merged(group) for group in groups.values()]


def _merged(group: list[dict]) -> dict:
    """Rows of one case -> one: median, IQR and rate of all their samples; a timing of each in metrics.timings."""
    if any(r["status"] != "ok" or not r.get("samples") for r in group):
        return next((r for r in group if r["status"] in FAILED), group[-1])
    first, samples = group[0], [x for r in group for x in r["samples"]]
    median = float(np.median(samples))
    q1, q3 = np.percentile(samples, [25, 75])
    rate = {k: first[k] * first["median_ms"] / median for k in ("tflops", "gbps") if first.get(k)}
    timings = [{"samples": r["samples"], "median_ms": r["median_ms"],
                "quantised_ms": (r.get("metrics") or {}).get("quantised_ms")} for r in group]
    metrics = {k: v for k, v in first["metrics"].items() if k not in ("padded", "quantised_ms")}
    metrics["timings"] = timings
    steps = [t["quantised_ms"] for t in timings if t["quantised_ms"]]
    padded = _padded([(r.get("metrics") or {}).get("padded") for r in group])
    return {**first, **rate, "samples": samples, "median_ms": median, "iqr_ms": float(q3 - q1), "n": len(samples),
            "min_ms": min(samples), "mean_ms": float(np.mean(samples)),
            "warnings": _warnings(group, (q3 - q1) / median, len(group)),
            "metrics": {**metrics, **({"quantised_ms": max(steps)} if steps else {}),
                        **({"padded": padded} if padded else {})}}


def _warnings(group: list[dict], spread: float, n: int) -> list[str]:
    """Each timing's warnings once; their 'unstable' ones (tcperf.worker's) as one, with the pooled spread."""
    said = list(dict.fromkeys(w for r in group for w in r.get("warnings") or []))
    unstable = [w for w in said if w.startswith("unstable:")]
    pooled = [f"unstable: IQR/median = {spread:.0%} over its {n} timings"] if unstable else []
    return pooled + [w for w in said if w not in unstable]


def _padded(timings: list[dict | None]) -> dict | None:
    """The padded shape's gain that each timing agrees on (all faster, or all slower): the one nearest 1; None
    where they disagree (a gain one timing saw and the other did not is no finding)."""
    if not all(timings):
        return None
    sides = {(t["gain"] > 1) for t in timings}
    return min(timings, key=lambda t: abs(np.log(t["gain"]))) if len(sides) == 1 else None
