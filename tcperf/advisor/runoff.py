"""The runoff: the leading recipes of the search re-timed interleaved, A B C, B C A, C A B, ..., in short windows of
back-to-back steps, each in the worker that compiled it (nothing is compiled again), with nothing else on the GPU.

Near its power cap an H200 runs in spells: the same recipe took 3.51 ms a step in one run and 4.80 ms in the next, so
one window per recipe cannot rank recipes 5% apart. Windows of one round lie seconds apart, so a spell slows every
recipe of the round alike; the runoff ranks on the ratio of each recipe to the fastest *within each round*, and

    advantage of A over B = median over the rounds of (B's time / A's time) - 1
    its spread            = the interquartile range of those ratios (how much the rounds disagree)

A recipe beats another when its advantage exceeds max(TIE, spread), or when it was faster in every round (at least
MIN_ROUNDS) and the other's mean ratio, its stalls included, is more than TIE behind; recipes within that are a
tie, and a tie goes to the simpler recipe (eager before torch.compile before CUDA graphs; plain precision before
mixed, fp8, int8). The second way is for a recipe that stalls: ConvNeXt-T's fp16 + compile ran 1.0% behind bf16 +
CUDA graphs in four rounds of six and 9-22% behind in two (an H100, 2026-11-27); the spread made a tie of it, and
the tie went to the simpler, stalling recipe, which a plain loop then ran 8.6% slower.

    verdict = decide({"bf16+cuda_graphs": [2.52, 2.55, ...], "fp16+cuda_graphs": [2.60, ...]}, rank)
    verdict["pick"], verdict["margin"], verdict["spread"]       # 'bf16+cuda_graphs', 0.031, 0.008
"""
from __future__ import annotations

import statistics

from ..timing import _quantile

ROUNDS = 6
TIE = 0.015             # advantages below 1.5% are never called, whatever the spread
MIN_ROUNDS = 4          # faster in every one of at least 4 rounds: 1 chance in 16 of it happening by luck
MIN_WINDOW_MS = 200.0
MAX_WINDOW_MS = 1000.0
STEPS_A_WINDOW = 10


def window_ms(step_ms: float) -> float:
    """Long enough for STEPS_A_WINDOW steps of the slowest leader, within [MIN_WINDOW_MS, MAX_WINDOW_MS]."""
    return min(MAX_WINDOW_MS, max(MIN_WINDOW_MS, STEPS_A_WINDOW * step_ms))


def orders(names: list[str], rounds: int) -> list[list[str]]:
    """Each round's order: the list rotated by one each round, so no recipe always runs first or last."""
    return [names[r % len(names):] + names[:r % len(names)] for r in range(rounds)]


def run(timers: dict, rounds: int = ROUNDS, window: float = MIN_WINDOW_MS) -> dict[str, list[float]]:
    """timers: name -> fn(ms) -> the mean step time of one window (None when the recipe failed: it leaves the
    runoff). Returns name -> its time in each round."""
    times: dict[str, list[float]] = {name: [] for name in timers}
    for order in orders(list(timers), rounds):
        for name in order:
            if name in times:
                ms = timers[name](window)
                if ms is None:
                    del times[name]
                else:
                    times[name].append(ms)
    return times


def advantage(faster: list[float], slower: list[float]) -> tuple[float, float]:
    """(median over the rounds of slower / faster - 1, the ratios' interquartile range)."""
    ratios = [s / f for f, s in zip(faster, slower)]
    return statistics.median(ratios) - 1, _quantile(ratios, 0.75) - _quantile(ratios, 0.25)


def significant(adv: float, spread: float) -> bool:
    return adv > max(TIE, spread)


def beats(faster: list[float], slower: list[float]) -> bool:
    """True when `faster` is significantly faster than `slower`, by either rule of the module's docstring."""
    if significant(*advantage(faster, slower)):
        return True
    ratios = [s / f for f, s in zip(faster, slower)]
    return len(ratios) >= MIN_ROUNDS and min(ratios) > 1 and statistics.fmean(ratios) - 1 > TIE


def decide(times: dict[str, list[float]], rank: dict[str, tuple]) -> dict:
    """The pick among the recipes timed in every round: the simplest (lowest `rank`) of those the fastest does not
    beat significantly. The result says the pick, its median time, its margin over the runner-up with the spread,
    which recipes it tied with, and each recipe's median and advantage."""
    names = [n for n in times if times[n]]
    if not names:
        return {}
    rounds = min(len(times[n]) for n in names)
    t = {n: times[n][:rounds] for n in names}
    fastest = min(names, key=lambda n: statistics.median(t[n]))
    tied = [n for n in names if not beats(t[fastest], t[n])]
    pick = min(tied, key=lambda n: (rank.get(n, (99,)), statistics.median(t[n])))
    others = {n: advantage(t[pick], t[n]) for n in names if n != pick}
    runner = min(others, key=lambda n: others[n][0]) if others else None
    return {"pick": pick, "median_ms": statistics.median(t[pick]), "rounds": rounds, "fastest": fastest,
            "tied": [n for n in tied if n != pick], "runner_up": runner,
            "margin": others[runner][0] if runner else None, "spread": others[runner][1] if runner else None,
            "recipes": {n: {"median_ms": statistics.median(t[n]), "times_ms": t[n],
                            "behind_pick": others[n][0] if n in others else 0.0,
                            "spread": others[n][1] if n in others else 0.0} for n in names}}


def sentence(v: dict) -> str:
    """'bf16+cuda_graphs: 2.52 ms, 3.1% +- 0.8% ahead of fp16+cuda_graphs (6 interleaved rounds)'."""
    if not v:
        return ""
    head = f"{v['pick']}: {v['median_ms']:.3g} ms"
    if v.get("runner_up") is None:
        return f"{head} (the only recipe in the runoff)"
    margin = (f"{v['margin']:.1%} +- {v['spread']:.1%} ahead of {v['runner_up']}" if v["margin"] >= 0 else
              f"{-v['margin']:.1%} +- {v['spread']:.1%} behind {v['runner_up']}, within the noise")
    tie = (f"; tied with {', '.join(v['tied'])} (within the noise or {TIE:.1%}), the simpler recipe is chosen"
           if v.get("tied") else "")
    return f"{head}, {margin} ({v['rounds']} interleaved rounds){tie}"
