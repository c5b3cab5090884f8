"""Two runs, case by case: each case's speed ratio with a significance test on the raw samples, the geometric
mean per suite, the cases only one run has, and the cases that broke. `tcperf compare A B` prints it; with
`--fail-if-slower 5%` it is a regression gate (exit 1), for CI after a driver, PyTorch or code change.

Cases are paired by `case_key` (op|shape|precision), so runs on different GPUs compare too:
"H200 vs H100: 1.04x on quick (gemm 1.02x, copy 1.38x)". A ratio > 1 means run B is faster.

The test: a two-sided Mann-Whitney U test on the two runs' timed samples (normal approximation with tie and
continuity corrections; rank-based, so no normal distribution is assumed), at ALPHA. A difference is never called
significant when the interquartile ranges of the two sample sets overlap, however small p is, nor with fewer
than MIN_SAMPLES samples a side. Caveat: timed samples are not fully independent (clocks and caches drift
together), so p is optimistic; the IQR rule is the guard against that.

    result = compare(store.results(3), store.results(4))
    result.regressions(0.05)          # pairs significantly more than 5% slower in run B
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from .rows import FAILED, group_name, headline, merge_repeats

ALPHA = 0.05
MIN_SAMPLES = 5


# --- the statistics ---------------------------------------------------------------------------------------------
def mann_whitney_p(a, b) -> float:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation, tie and continuity corrected)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n1, n2 = len(a), len(b)
    both = np.concatenate([a, b])
    _, inverse, counts = np.unique(both, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2)[inverse]          # average rank of each value (1-based)
    u = ranks[:n1].sum() - n1 * (n1 + 1) / 2
    n = n1 + n2
    ties = (counts ** 3 - counts).sum() / (n * (n - 1))
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - ties))
    if sigma == 0:                       # every sample equal: no evidence of a difference
        return 1.0
    z = max(abs(u - n1 * n2 / 2) - 0.5, 0.0) / sigma
    return math.erfc(z / math.sqrt(2))


def quartiles(samples) -> tuple[float, float]:
    q1, q3 = np.percentile(np.asarray(samples, dtype=float), [25, 75])
    return float(q1), float(q3)


def spreads_overlap(a, b) -> bool:
    (a1, a3), (b1, b3) = quartiles(a), quartiles(b)
    return a1 <= b3 and b1 <= a3


def significance(a, b) -> tuple[bool, float | None, str]:
    """(significant, p, why) for two sets of timed samples."""
    if min(len(a), len(b)) < MIN_SAMPLES:
        return False, None, f"too few samples ({len(a)} and {len(b)}; need {MIN_SAMPLES})"
    p = mann_whitney_p(a, b)
    if spreads_overlap(a, b):
        return False, p, "not significant: the IQRs overlap"
    if p >= ALPHA:
        return False, p, f"not significant: p={p:.2g}"
    return True, p, f"significant: p={p:.2g}"


def claim(fast: dict, slow: dict) -> tuple[bool, str]:
    """Whether stored row `fast` is faster than row `slow` beyond the spread, and why (not): a row timed on a
    shared CPU's scheduler steps (metrics.quantised_ms, tcperf.timing.quantum) carries no claim; else their samples
    must differ significantly, in every timing of a row timed more than once (metrics.timings: on a shared CPU one
    timing said bf16 attention 1.29x fp32 and the next 0.90x, both significant alone; issue 58). Every "x faster"
    a report or table states goes through here."""
    for r in (fast, slow):
        step = (r.get("metrics") or {}).get("quantised_ms")
        if step:
            return False, f"no significant difference claimed: timed on {step:g} ms scheduler steps"
    pairs = list(zip(_timings(fast), _timings(slow)))
    for i, (a, b) in enumerate(pairs, 1):
        ok, _, why = significance(a.get("samples") or [], b.get("samples") or [])
        if ok and _median(a) >= _median(b):
            ok, why = False, "not significant: it ran the other way"
        if not ok:
            where = f" in timing {i} of {len(pairs)}" if len(pairs) > 1 else ""
            return False, f"no significant difference ({why.removeprefix('not significant: ')}{where})"
    return True, why if len(pairs) == 1 else f"significant in each of {len(pairs)} timings"


def _median(timing: dict) -> float:
    return timing.get("median_ms") or float(np.median(timing["samples"]))


def _timings(row: dict) -> list[dict]:
    """The row's timings: each of its timings (metrics.timings), else the row itself. (metrics.repeats is another
    thing: how many times a ceiling was measured until stable.)"""
    return (row.get("metrics") or {}).get("timings") or [row]


# --- pairing ----------------------------------------------------------------------------------------------------
@dataclass
class Pair:
    key: str
    a: dict
    b: dict
    speedup: float | None = None     # > 1: run B is faster (time A / time B, or figure B / figure A)
    significant: bool = False
    p: float | None = None
    why: str = ""

    @property
    def group(self) -> str:
        return group_name(self.b)

    @property
    def tensor_cores_lost(self) -> bool:
        """Run A's case used Tensor Cores and run B's did not (both profiled)."""
        used = [(r.get("metrics") or {}).get("tensor_cores_used") for r in (self.a, self.b)]
        return used == [True, False]

    @property
    def slower_by(self) -> float | None:
        """How much longer B takes than A (0.05: 5% slower); None without a ratio."""
        return 1 / self.speedup - 1 if self.speedup else None


def measure_pair(key: str, a: dict, b: dict) -> Pair:
    """The speed ratio and its significance: from the raw samples where both have them, else from the
    rows' headline figures (throughput, TFLOPS, median), which cannot be tested."""
    pair = Pair(key, a, b)
    sa, sb = a.get("samples") or [], b.get("samples") or []
    if sa and sb:
        pair.speedup = _ratio(a.get("median_ms") or float(np.median(sa)), b.get("median_ms") or float(np.median(sb)))
        pair.significant, pair.p, pair.why = significance(sa, sb)
        return pair
    fa, fb = headline(a), headline(b)
    if fa.name == fb.name and fa.value and fb.value:
        pair.speedup = fb.value / fa.value if fa.higher_is_better else fa.value / fb.value
    pair.why = "no raw samples: not tested"
    return pair


def _ratio(time_a: float, time_b: float) -> float | None:
    return time_a / time_b if time_a and time_b else None


@dataclass
class Comparison:
    pairs: list[Pair] = field(default_factory=list)
    only_a: list[dict] = field(default_factory=list)
    only_b: list[dict] = field(default_factory=list)
    broken: list[tuple[dict, dict]] = field(default_factory=list)   # ok in A, failed or wrong in B
    fixed: list[tuple[dict, dict]] = field(default_factory=list)    # failed or wrong in A, ok in B
    not_compared: list[tuple[dict, dict]] = field(default_factory=list)   # skipped or failed in both

    def regressions(self, threshold: float) -> list[Pair]:
        """Pairs significantly slower in B by more than `threshold` (0.05 = 5%)."""
        return [p for p in self.pairs if p.significant and p.slower_by is not None and p.slower_by > threshold]

    def geomeans(self, by=lambda p: p.group) -> dict[str, tuple[float, int]]:
        """{group: (geometric mean of the speedups, number of cases)}."""
        logs = defaultdict(list)
        for p in self.pairs:
            if p.speedup:
                logs[by(p)].append(math.log(p.speedup))
        return {g: (math.exp(sum(v) / len(v)), len(v)) for g, v in logs.items()}


def compare(results_a: list[dict], results_b: list[dict]) -> Comparison:
    """Pair two runs' results by case_key, a case timed twice in a run (a CPU `tcperf run`) as one row of both
    timings (rows.merge_repeats)."""
    a = {r["case_key"]: r for r in merge_repeats(results_a)}
    b = {r["case_key"]: r for r in merge_repeats(results_b)}
    out = Comparison(only_a=[a[k] for k in a if k not in b], only_b=[b[k] for k in b if k not in a])
    for key in (k for k in b if k in a):
        ra, rb = a[key], b[key]
        if ra["status"] == "ok" and rb["status"] == "ok":
            out.pairs.append(measure_pair(key, ra, rb))
        elif ra["status"] == "ok" and rb["status"] in FAILED:
            out.broken.append((ra, rb))
        elif ra["status"] in FAILED and rb["status"] == "ok":
            out.fixed.append((ra, rb))
        else:
            out.not_compared.append((ra, rb))
    return out


def describe(pair: Pair) -> str:
    """'1.23x faster' | '1.10x slower' | 'same speed' | 'n/a' (pyperf's wording)."""
    if not pair.speedup:
        return "n/a"
    if abs(pair.speedup - 1) < 0.005:
        return "same speed"
    return f"{pair.speedup:.2f}x faster" if pair.speedup > 1 else f"{1 / pair.speedup:.2f}x slower"


def parse_threshold(text: str) -> float:
    """'5%' or '5' -> 0.05; ValueError for anything else or a negative number."""
    value = float(text.strip().rstrip("%"))
    if not math.isfinite(value) or value < 0:
        raise ValueError(text)
    return value / 100
