"""What a stored result row is, as statistics and reports read it: its kind (told by its `op`), the group it is
compared and tabled under, its headline figure, and the statuses that count as a failure. Below both
tcperf.compare and tcperf.report, so the statistics never import a report.

    kind({"op": "lab.vector_add"})            # 'lab'
    headline(row).unit                        # 'TFLOPS' for a gemm row; 'ms' where the op counts no rate
"""
from __future__ import annotations

from dataclasses import dataclass

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
