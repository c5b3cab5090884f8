"""Time to target over N seeded runs, as the anchors report it: DAWNBench takes the first evaluation at the target;
airbench reports the mean and spread over many runs and checks that the mean reaches the target. Per recipe (summarize):
the median time to target and its spread over the runs that reached it, the share that reached it, and where the time
went (split). Whether two recipes can be told apart is tcperf.compare's Mann-Whitney test on their times (it needs
compare.MIN_SAMPLES runs a side).

    rows = [store rows of one recipe's runs]
    s = summarize(rows, clock.get("dawnbench"), usd_per_hour=2.5)     # {"median_s": 61.2, "reached": 1.0, ...}
"""
from __future__ import annotations

import numpy as np

from .. import compare
from ..records import Case, Result
from . import reached
from .clock import CLOCKS, Clock

def first_reach(trace: list[dict], target: float, higher: bool) -> dict | None:
    """The first trace point (evaluation) at the target, DAWNBench's rule; None when none is."""
    return next((p for p in trace if reached(p["metric"], target, higher)), None)


def time_to_target(metrics: dict, target: float, higher: bool, clock: Clock) -> float | None:
    """Seconds on `clock` to the first evaluation at `target` (any target: the trace holds every evaluation)."""
    point = first_reach(metrics.get("trace") or [], target, higher)
    return None if point is None else clock.elapsed(point, metrics.get("prep_s", 0.0))


def run_row(case: Case, task, out: dict, prep_s: float) -> Result:
    """A seeded run's store row: median_ms is its time to target on the run's clock (none when not reached)."""
    trace = out.get("trace") or []
    metrics = {k: out.get(k) for k in ("trace", "steps", "warmup_steps", "warmup_s", "init_s", "notes")}
    metrics.update(prep_s=prep_s, metric=task.metric, higher_is_better=task.higher_is_better, unit=task.unit,
                   final_metric=trace[-1]["metric"] if trace else None, clock=case.args.clock,
                   info={k: v for k, v in task.info.items() if k != "files"})
    metrics.update(_speed(trace, out, task))
    point = first_reach(trace, case.args.target, task.higher_is_better)
    if point:
        metrics.update(steps_to_target=point["step"], epochs_to_target=point["epoch"],
                       time_to_target={c.name: c.elapsed(point, prep_s) for c in CLOCKS.values()})
    seconds = (metrics.get("time_to_target") or {}).get(case.args.clock)
    return Result(case.op, case.shape, case.precision, out["status"], suite=case.suite,
                  message=out.get("message", ""), metrics=metrics,
                  median_ms=seconds * 1e3 if seconds is not None else None,
                  samples=[seconds * 1e3] if seconds is not None else [], n=1 if seconds is not None else 0)


def _speed(trace: list[dict], out: dict, task) -> dict:
    """Throughput of the steady steps, and compile time: the warm-up less what its steps take when steady."""
    if not trace or not trace[-1]["train_s"]:
        return {}
    steady = trace[-1]["step"] - out["warmup_steps"]
    step_s = trace[-1]["train_s"] / steady
    return {"throughput": task.items_per_step / step_s, "step_ms": step_s * 1e3,
            "compile_s": max(0.0, out["warmup_s"] - out["warmup_steps"] * step_s)}


SPLIT = ("prep_s", "warmup_s", "compile_s", "train_s", "eval_s")


def split(metrics: dict, point: dict) -> dict:
    """Where a run's time up to a trace point went: data preparation, the warm-up steps (compilation within them),
    the steady training steps and the evaluations; each clock counts some of these (clock.py)."""
    return {"prep_s": metrics.get("prep_s") or 0.0, "warmup_s": point["warmup_s"],
            "compile_s": metrics.get("compile_s"), "train_s": point["train_s"], "eval_s": point["eval_s"]}


def split_of(ran: list[dict], target: float, higher: bool) -> dict:
    """The median split at the target over the runs that reached it; over the runs' ends when none did."""
    points = [(r["metrics"], first_reach(r["metrics"]["trace"], target, higher)) for r in ran
              if (r.get("metrics") or {}).get("trace")]
    at = "target" if any(p for _, p in points) else "end"
    points = [(m, p) for m, p in points if p] if at == "target" else [(m, m["trace"][-1]) for m, _ in points]
    if not points:
        return {}
    parts = [split(m, p) for m, p in points]
    return {"split": {k: _median(part[k] for part in parts) for k in SPLIT}, "split_at": at}


def with_split(summary: list[dict], rows: list[dict], target) -> list[dict]:
    """Summary rows stored before the split was kept get it from their seeded runs' rows (op totarget.run); such a
    row comes back a copy, so the rows passed in stay as they were read."""
    out = []
    for r in summary:
        m = r.get("metrics") or {}
        runs = [x for x in rows if x["op"] == "totarget.run" and x["precision"] == r["precision"]]
        if "split" not in m and runs and target is not None:
            higher = bool((runs[0].get("metrics") or {}).get("higher_is_better"))
            r = {**r, "metrics": {**m, **split_of(runs, target, higher)}}
        out.append(r)
    return out


def _median(values):
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else None


def summarize(rows: list[dict], clock: Clock, target: float, higher: bool, usd_per_hour: float | None) -> dict:
    """One recipe's runs -> the figures the table, the store's summary row and the report show."""
    ran = [r for r in rows if r["status"] != "skipped"]
    times = [t for t in (time_to_target(r["metrics"] or {}, target, higher, clock) for r in ran) if t is not None]
    got = [r["metrics"] for r in ran if time_to_target(r["metrics"] or {}, target, higher, clock) is not None]
    out = {"runs": len(ran), "reached": len(times), "share": len(times) / len(ran) if ran else 0.0,
           "times_s": times, "statuses": {s: sum(r["status"] == s for r in ran) for s in {r["status"] for r in ran}},
           **{k: _median((r.get("metrics") or {}).get(k) for r in ran)
              for k in ("final_metric", "throughput", "compile_s", "warmup_s")},
           **split_of(ran, target, higher)}
    if times:
        q1, q3 = np.percentile(times, [25, 75])
        out.update(median_s=float(np.median(times)), iqr_s=float(q3 - q1), min_s=min(times), max_s=max(times),
                   steps=_median(first_reach(m["trace"], target, higher)["step"] for m in got),
                   epochs=_median(first_reach(m["trace"], target, higher)["epoch"] for m in got))
        if usd_per_hour:
            out["usd"] = out["median_s"] / 3600 * usd_per_hour
    return out


def summary_status(s: dict, rows: list[dict]) -> str:
    """ok when any run reached the target; else not_reached, or the failure every run shared."""
    if s["reached"]:
        return "ok"
    if not s["runs"]:
        return "skipped"
    return max(s["statuses"], key=lambda k: (k == "not_reached", s["statuses"][k]))


def summary_row(recipe: str, rows: list[dict], shape: dict, clock: Clock, target: float, higher: bool,
                usd_per_hour: float | None) -> Result:
    """The recipe's row in the store: samples are the reached runs' times (ms), so `tcperf compare` tests them.
    rows: its seeded runs as stored."""
    s = summarize(rows, clock, target, higher, usd_per_hour)
    message = "" if s["reached"] == s["runs"] else \
        f"{s['reached']} of {s['runs']} runs reached the target; " + \
        "; ".join(sorted({r["message"] for r in rows if r.get("message")}))[:300]
    ms = {k: s[f"{k}_s"] * 1e3 if s.get(f"{k}_s") is not None else None for k in ("median", "iqr", "min")}
    return Result("totarget.recipe", shape, recipe, summary_status(s, rows), suite=shape["workload"],
                  message=message.strip("; "), median_ms=ms["median"], iqr_ms=ms["iqr"], min_ms=ms["min"],
                  samples=[t * 1e3 for t in s["times_s"]], n=s["reached"], metrics={**s, "clock": clock.name})


def tell_apart(a: list[float], b: list[float]) -> str:
    """Can two recipes' times to target be told apart? tcperf.compare's test, in words."""
    significant, p, why = compare.significance(a, b)
    return f"N too small to tell apart: {why}" if p is None else why
