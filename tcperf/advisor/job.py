"""The job, weighed: a recipe costs its one-time work (compiles, recompiles, CUDA graph captures) plus N steps at its
steady step time, and the advice picks the cheapest job of N steps that passes the accuracy check.

    one-time   on a workload: the stream's first two passes less two steady ones (tcperf.stream, measured from
               cold caches); on one input: the first call less one step (torch.compile's compile, with the caches
               the search shares between its workers, so a lower bound of a cold compile)
    step       on a workload: the steady passes' median over the stream's steps; on one input: the step time
    job(N)     one-time + N x step; N None: a job long enough that one-time costs vanish, so the fastest step wins

Never picked on a varying workload: a recipe that compiled again at each new shape (tcperf.stream stops it and says
so) or that did not finish warming up.

A tie is said, not hidden: each recipe's job is an interval (the quartiles of its timed passes or windows), and
among the recipes whose interval reaches the cheapest one's, the one with the least one-time cost is advised (a
host-bound eager step spreads widely: BERT-base's passes ran 5.9-7.4 ms a batch on an H100, and the compiled
recipes' jobs at 10,000 steps fell inside that spread).

    summary(results, steps=10_000)   # {"steps", "pick", "rows": [...], "break_even": {...}, "short": {...}}
    break_even(a, b)                 # steps after which a's faster step has paid for its larger one-time cost
"""
from __future__ import annotations

import math
import statistics

from .trials import RecipeResult


def one_time_s(r: RecipeResult) -> float:
    if r.stream and r.stream.get("one_time_s") is not None:
        return float(r.stream["one_time_s"])
    if r.first_call_s is None or not r.step_ms:
        return 0.0
    return max(0.0, r.first_call_s - r.step_ms / 1e3)


def job_s(r: RecipeResult, steps: int | None) -> float:
    """Seconds the job takes with this recipe; None steps: the steady step alone (in seconds), for ordering."""
    if steps is None:
        return r.step_ms / 1e3
    return one_time_s(r) + steps * r.step_ms / 1e3


def eligible(results: list[RecipeResult]) -> list[RecipeResult]:
    return [r for r in results if r.passes and r.step_ms]


def interval(r: RecipeResult, steps: int | None) -> tuple[float, float]:
    """The job's seconds at the first and third quartile of the timed samples (passes or windows; with fewer than
    three, their least and largest): the spread a single outlying pass does not widen."""
    samples = sorted(x for x in (r.timing or {}).get("samples") or [] if x) or [r.step_ms]
    low, high = (samples[0], samples[-1]) if len(samples) < 3 else \
        (lambda q: (q[0], q[2]))(statistics.quantiles(samples, n=4))
    n = 1 if steps is None else steps
    base = 0.0 if steps is None else one_time_s(r)
    return base + n * low / 1e3, base + n * high / 1e3


def tied(results: list[RecipeResult], steps: int | None) -> list[RecipeResult]:
    """The cheapest job, and every recipe whose interval reaches into its interval."""
    found = eligible(results)
    if not found:
        return []
    best = min(found, key=lambda r: job_s(r, steps))
    top = interval(best, steps)[1]
    return [r for r in found if r is best or interval(r, steps)[0] <= top]


def pick(results: list[RecipeResult], steps: int | None) -> RecipeResult | None:
    """The cheapest job among the recipes that pass and were timed; among those tied with it, the least one-time
    cost (then the cheaper job)."""
    ties = tied(results, steps)
    return min(ties, key=lambda r: (one_time_s(r), job_s(r, steps))) if ties else None


def break_even(a: RecipeResult, b: RecipeResult) -> float | None:
    """Steps after which `a` (the faster step, the larger one-time cost) costs less than `b`; 0 when `a` is ahead
    from the first step, None when it never gets ahead."""
    gain_ms = b.step_ms - a.step_ms
    extra_s = one_time_s(a) - one_time_s(b)
    if extra_s <= 0:
        return 0.0 if gain_ms >= 0 else None
    return extra_s / (gain_ms / 1e3) if gain_ms > 0 else None


def summary(results: list[RecipeResult], steps: int | None, eager: str | None = None) -> dict:
    """The job as data: each recipe's one-time cost, step and job time; the pick; its break-even against the
    runner-up and against the eager recipe; and the pick for a short job where that differs."""
    found = eligible(results)
    chosen = pick(found, steps)
    rows = [{"recipe": r.recipe, "one_time_s": one_time_s(r), "step_ms": r.step_ms,
             "job_s": job_s(r, steps) if steps is not None else None,
             "compiles": (r.stream or {}).get("compiles"), "captures": (r.stream or {}).get("captures")}
            for r in found]
    out = {"steps": steps, "pick": chosen.recipe if chosen else None, "rows": rows,
           "tied": [r.recipe for r in tied(found, steps)]}
    if chosen is None:
        return out
    others = sorted((r for r in found if r is not chosen), key=lambda r: job_s(r, steps))
    base = next((r for r in found if r.recipe == eager), None)
    out["break_even"] = {r.recipe: break_even(chosen, r) for r in [*others[:1], *([base] if base else [])]
                         if r is not chosen}
    out["runner_up"] = others[0].recipe if others else None
    out["short"] = short_pick(found, chosen)
    fastest = min(found, key=lambda r: r.step_ms)
    if fastest is not chosen and steps is not None:
        out["long"] = {"recipe": fastest.recipe, "from_steps": break_even(fastest, chosen)}
    return out


def short_pick(found: list[RecipeResult], chosen: RecipeResult) -> dict | None:
    """For a job shorter than the pick's break-even against a recipe of smaller one-time cost: that recipe (the
    cheapest such job just below the break-even), with the step count from which the pick is the better one."""
    cheaper = [r for r in found if one_time_s(r) < one_time_s(chosen)]
    evens = [(break_even(chosen, r), r) for r in cheaper]
    evens = [(n, r) for n, r in evens if n is not None and n > 0]
    if not evens:
        return None
    n, _ = max(evens, key=lambda e: e[0])
    below = max(1, math.floor(n) - 1)
    r = min(cheaper, key=lambda c: job_s(c, below))
    return {"recipe": r.recipe, "below_steps": n}


def _warm_up(row: dict) -> str:
    """' (2 compiles, 59 CUDA graph captures)' on a workload's stream, else ''."""
    if row.get("compiles") is None:
        return ""
    captures = f", {row['captures']} CUDA graph captures" if row.get("captures") else ""
    return f" ({row['compiles']} compile{'s' if row['compiles'] != 1 else ''}{captures})"


def sentence(job: dict) -> str | None:
    """One line on the job: the break-even of the pick's one-time cost and the short job's pick."""
    if not job.get("pick"):
        return None
    pick_row = {row["recipe"]: row for row in job["rows"]}[job["pick"]]
    parts = []
    others = [t for t in job.get("tied", []) if t != job["pick"]]
    if others:
        parts.append(f"a tie within the spread of the timed passes with {', '.join(others)}: the least warm-up "
                     f"is advised")
    evens = {k: v for k, v in (job.get("break_even") or {}).items() if v}
    if pick_row["one_time_s"] >= 0.5 and evens:
        against = ", ".join(f"{n:,.0f} steps against {name}" for name, n in evens.items())
        parts.append(f"its {pick_row['one_time_s']:.0f} s of warm-up{_warm_up(pick_row)} pay back after {against}")
    short, long = job.get("short"), job.get("long")
    if short:
        parts.append(f"for a job under {short['below_steps']:,.0f} steps, {short['recipe']} costs less")
    if long and long.get("from_steps"):
        parts.append(f"from {long['from_steps']:,.0f} steps on, {long['recipe']} (the fastest step) costs less")
    if job["steps"] is not None:
        parts.insert(0, f"a job of {job['steps']:,} steps takes {pick_row['job_s']:.3g} s")
    return "; ".join(parts) or None
