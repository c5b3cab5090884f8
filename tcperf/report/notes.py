"""What the report says about the measurements rather than with them: warnings grouped by kind, each kind counted
and told what it means for the numbers, and the environment split into what all runs share and what differs.

    kinds = warning_kinds(runs)      # [WarningKind('throttled', items=[...], meaning='NVML reported ...'), ...]
    common, differing = environment(runs)
"""
from __future__ import annotations

import datetime
import re
from collections import Counter, defaultdict
from dataclasses import dataclass

from ..rows import FAILED, kind
from .common import RunData, label

ORDER = ("runs", "wrong results", "failed cases", "throttled", "unstable", "accuracy", "other warnings")
MEANING = {
    "runs": "a run did not finish or warned as a whole: its results may be incomplete or disturbed",
    "wrong results": "a kernel missed its float64 reference, so it was not timed: no figure for these cases",
    "failed cases": "the case raised an error, ran out of memory or timed out: no figure for these cases",
    "accuracy": "a model run produced non-finite values or its loss scaler skipped steps",
    "other warnings": "warnings of no known kind; read them below",
}


@dataclass(frozen=True)
class Item:
    run_id: int
    row: dict | None      # None for a run-level warning
    text: str


@dataclass(frozen=True)
class WarningKind:
    name: str
    items: list[Item]
    meaning: str


def warning_kinds(runs: list[RunData]) -> list[WarningKind]:
    """The kinds of warning present, in ORDER, each with its items and what it means for the numbers."""
    found = collect(runs)
    return [WarningKind(name, found[name], meaning(name, found[name], runs)) for name in ORDER if found.get(name)]


def collect(runs: list[RunData]) -> dict[str, list[Item]]:
    """Kind -> items: failed runs, wrong results, failed cases, throttled and unstable measurements, accuracy."""
    out = defaultdict(list)
    for rd in runs:
        run_id = rd.run["id"]
        if rd.run["status"] != "done":
            out["runs"].append(Item(run_id, None, f"run {run_id} is {rd.run['status']}"))
        out["runs"] += [Item(run_id, None, f"run {run_id}: {w}") for w in rd.run.get("warnings") or []]
        for r in rd.results:
            where = f"run {run_id} · {label(r)} · {r['precision']}"
            if _failure(r):
                out[_failure(r)].append(Item(run_id, r, f"{where}: {r['status']}: {r.get('message') or ''}".strip(": ")))
            for w in r.get("warnings") or []:
                out[_warning_kind(w)].append(Item(run_id, r, f"{where}: {w}"))
            out["accuracy"] += [Item(run_id, r, f"{where}: {a}") for a in _accuracy_problems(r)]
    return out


def _failure(row: dict) -> str | None:
    """'wrong results' | 'failed cases' | None. A recipe the advisor rejected is its finding (shown in the
    advisor's section), not a failure of the measurement."""
    if kind(row) == "advise" or row["status"] not in FAILED:
        return None
    return "wrong results" if row["status"] == "wrong" else "failed cases"


def _warning_kind(text: str) -> str:
    low = text.lower()
    return "unstable" if "unstable" in low else "throttled" if "throttl" in low else "other warnings"


def _accuracy_problems(row: dict) -> list[str]:
    acc = (row.get("metrics") or {}).get("accuracy")
    if not isinstance(acc, dict):
        return []
    found = []
    if acc.get("nonfinite"):
        found.append(f"non-finite values ({acc['nonfinite']})")
    if acc.get("skipped_steps") and row.get("status") == "wrong":    # otherwise GradScaler's calibration
        found.append(f"{acc['skipped_steps']} optimizer step(s) skipped by the loss scaler")
    return found


# --- what a kind means -----------------------------------------------------------------------------------------
def meaning(name: str, items: list[Item], runs: list[RunData]) -> str:
    if name == "throttled":
        return throttle_meaning(items, runs)
    if name == "unstable":
        return unstable_meaning(items)
    return MEANING[name]


def throttle_meaning(items: list[Item], runs: list[RunData]) -> str:
    """The reasons NVML gave, the clock the GPU could reach, and which figures ran under it."""
    reasons = sorted({r.strip() for i in items for r in i.text.rsplit("throttled:", 1)[-1].split(",")})
    clocks = sorted({(rd.run.get("env") or {}).get("gpu", {}).get("sm_clock_max_mhz") for rd in runs} - {None})
    top = f" (max SM clock {'/'.join(f'{c:g}' for c in clocks)} MHz)" if clocks else ""
    return (f"NVML reported the clocks held below their maximum{top} by {', '.join(reasons)} while these cases ran; "
            f"the clock each case saw is not stored. Touched: {touched(items)}. These figures, and any ceiling "
            f"measured under the same cap, may be below what the GPU reaches at full clock")


def unstable_meaning(items: list[Item]) -> str:
    spreads = [int(p) for i in items for p in re.findall(r"(\d+)%", i.text)]
    span = f" (here {min(spreads)}% to {max(spreads)}%)" if spreads else ""
    return (f"the IQR of the timed samples is above 10% of the median{span}: those medians are less certain; "
            f"compare them with care. Touched: {touched(items)}")


def touched(items: list[Item]) -> str:
    """'gemm 480, conv 12 cases in runs 1, 4' for the rows behind these items."""
    ops = Counter(i.row["op"] for i in items if i.row)
    runs = sorted({i.run_id for i in items})
    return (", ".join(f"{op} {n}" for op, n in ops.most_common()) + " cases in "
            + ("run " if len(runs) == 1 else "runs ") + ", ".join(map(str, runs)))


# --- the environment -------------------------------------------------------------------------------------------
FIELDS = (
    ("kind", lambda r, e: r["kind"]), ("status", lambda r, e: r["status"]),
    ("started", lambda r, e: _when(r["started"])), ("command", lambda r, e: r["command"]),
    ("device", lambda r, e: r["device"]), ("SMs", lambda r, e: e.get("gpu", {}).get("sm_count")),
    ("compute capability", lambda r, e: e.get("gpu", {}).get("compute_capability")),
    ("GPU memory (GiB)", lambda r, e: e.get("gpu", {}).get("memory_gib")),
    ("driver", lambda r, e: e.get("gpu", {}).get("driver")),
    ("max SM / memory clock (MHz)", lambda r, e: _pair(e.get("gpu", {}), "sm_clock_max_mhz", "mem_clock_max_mhz")),
    ("power limit (W)", lambda r, e: e.get("gpu", {}).get("power_limit_w")),
    ("CPU", lambda r, e: f"{e.get('cpu', {}).get('model', '')} ({e.get('cpu', {}).get('cores', '?')} cores)"),
    ("platform", lambda r, e: e.get("platform")),
    ("tcperf", lambda r, e: r.get("tcperf_version")),
    *[(lib, (lambda name: lambda r, e: e.get("libraries", {}).get(name))(lib))
      for lib in ("python", "torch", "cuda", "cudnn", "cublas", "triton", "torchvision", "torchao")],
)


def _when(ts) -> str:
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else ""


def _pair(d: dict, a: str, b: str):
    return f"{d[a]:g} / {d[b]:g}" if d.get(a) and d.get(b) else None


def environment(runs: list[RunData]) -> tuple[list[tuple[str, str]], list[tuple[str, list[str]]]]:
    """(the fields every run shares: (name, value)), (the fields that differ: (name, a value per run))."""
    fields = [(name, ["" if v is None else str(v) for v in (get(rd.run, rd.run.get("env") or {}) for rd in runs)])
              for name, get in FIELDS]
    fields = [(name, values) for name, values in fields if any(values)]
    fields.append(("results", [result_counts(rd.results) for rd in runs]))
    common = [(name, values[0]) for name, values in fields if len(set(values)) == 1]
    return common, [(name, values) for name, values in fields if len(set(values)) > 1]


def result_counts(results: list[dict]) -> str:
    return ", ".join(f"{n} {s}" for s, n in Counter(r["status"] for r in results).most_common())
