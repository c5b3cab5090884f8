"""Reports from the store: the HTML page, its charts and findings, and the names `tcperf compare` and the export
formats share.

A stored result row is one of five kinds, told apart by its `op` (docs/design.md, tcperf.rows):
kernel (gemm, conv, ...), `ceiling`, `model` (the ladder), `lab.<kernel>` and `advise.<what>`. This package
module stays light: no submodule imports it back.

    tcperf report 12 13 --out report.html --png charts/     # the command (tcperf/commands/report.py)
    build(Store.open(), [12, 13]).html                      # the same from Python
"""
from __future__ import annotations

from .common import Report, RunData, load

__all__ = ["Report", "RunData", "build", "load"]


def build(store, run_ids: list[int] | None = None) -> Report:
    """The report for these runs, built only from the store (nothing here touches a GPU)."""
    from .html import render      # here: the page needs matplotlib, which the names in common.py do not
    return render(load(store, run_ids))
