"""The advisor's search over the whole grid: every base recipe that applies (fp32, tf32, amp_fp16, amp_bf16, fp16 and
bf16 weights, channels_last, mixed recipes with fp32 modules, fp8, int8) x {eager, torch.compile, torch.compile +
CUDA graphs}, and for training a CUDA graph of the whole step, then a runoff among the leaders (tcperf.advisor.runoff).

Each recipe is prepared and checked in a worker of its own, up to `jobs` at once (torch.compile is mostly CPU work,
and Inductor's cache is shared between them), while the parent times one prepared recipe at a time on the GPU
(tcperf.advisor.pool). Once a recipe passes its accuracy check, its compiled tiers are queued together, so their
compiles run side by side, most promising first; each is started only when the evidence leaves it a chance:

    any compiled tier    is pruned when X's eager GEMM/conv/attention kernels alone take longer than the best step
    of X                 so far (compile hands those to the same libraries and cannot fuse them away), less the
                         share of GEMM FLOPs in layers whose eager time is no floor (loose_share: Inductor lays
                         convolutions out channels-last itself, and timm's EfficientNet-B0 ran tf32 + compile at
                         6.2 ms on an H200 where tf32's eager conv kernels took 12 ms);
    CUDA graphs of X     when X+compile is measured before they start: pruned when X+compile's kernels alone take
                         longer than the best step so far (graphs remove the launch gaps, not kernel time);
                         likewise the whole-step graph (training).

A margin of PRUNE_MARGIN keeps near misses in. The workers of the leading recipes stay alive, so the runoff times
what was compiled without compiling it again. `budget` (seconds) stops starting recipes that would not finish in
time and says which were not tried.

    search = Search(bench, jobs=4, budget=90, progress=show)
    results = search.run(items, after_eager=more_items)      # [RecipeResult ...]; search.decision: the runoff's
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from .. import env
from .. import recipes as recipemod
from ..records import Result
from . import runoff
from .trials import Bench, Item, RecipeResult
from .pool import Pool, Timeline

GRID_TIMING = {"warmup_ms": 100.0, "rep_ms": 300.0, "flush_l2": False, "back_to_back": True, "min_reps": 5,
               "max_reps": 100_000}
PRUNE_MARGIN = 0.03     # a bound must exceed the best step by this share to prune
LEAD_MARGIN = 0.25      # recipes within this share of the best grid time go to the runoff ...
MAX_LEADERS = 5         # ... at most this many
FIRST_GUESS_S = {"eager": 10.0, "compile": 40.0}   # a recipe's wall time before one of its kind has finished
TIERS = ("eager", "compile", "cuda_graphs", "step_graph")


def tier_of(name: str) -> str:
    r = recipemod.get(name)
    return "step_graph" if r.step_graph else "cuda_graphs" if r.cuda_graphs else "compile" if r.compile else "eager"


def rank(r: RecipeResult) -> tuple:
    """Simplicity, for ties: the tier, then a plain precision before channels_last, fp32 modules, fp8 and int8."""
    rec = recipemod.get(r.runs)
    extras = rec.channels_last + 2 * bool(r.keep_fp32) + 3 * (rec.fp8 or rec.int8)
    return TIERS.index(tier_of(r.runs)), extras


def loose_share(layers: list, precision: str, channels_last: bool) -> float:
    """The share of a forward's GEMM FLOPs in layers whose eager kernel time is no floor for torch.compile at this
    precision: those that miss its alignment (Inductor may pad them), and the convolutions unless the recipe is
    already channels_last (Inductor changes their layout)."""
    total = sum(l.flops * l.count for l in layers) or 1.0
    loose = sum(l.flops * l.count for l in layers
                if precision in l.issues or (l.kind == "conv" and not channels_last))
    return loose / total


def default_jobs(device) -> int:
    """Workers preparing at once on a GPU machine: five for every eight cores, at most 10 (tracing is one core's
    work; Inductor's kernel compiles share the rest). On an H200 with 16 cores, a 134M decoder's grid took 62.8 s
    with 10 jobs and 75.5 s with 8, each from cold caches: the compiles took as long, fewer waited for a worker."""
    cores = env.usable_cores()
    return max(1, min(10, cores * 5 // 8)) if device.type == "cuda" else max(1, min(2, cores))


@dataclass
class Candidate:
    item: Item
    tier: str
    root: str                      # the recipe it builds on (eager, or fp8/int8), for naming the tiers above
    root_label: str                # ... and its row's label (a mixed recipe's)
    bound_ms: float | None = None  # no step of it can be faster than this
    bound_from: str = ""
    grown: bool = False            # a tier put on top of a measured recipe (compile, CUDA graphs, whole-step graph)

    @property
    def label(self) -> str:
        return self.item.label or self.item.recipe


def candidate(item: Item) -> Candidate:
    return Candidate(item, tier_of(item.recipe), item.base or item.recipe, item.label or item.recipe)


class Plan:
    """What to try next: the queue of candidates in order, what is in flight, the evidence that prunes a candidate,
    the budget, and the tiers a passing recipe earns. No workers and no threads: Search runs what it hands out."""

    def __init__(self, mode: str, *, timed: bool, grow: bool, layers: list, jobs: int, budget: float | None,
                 started: float):
        self.mode, self.timed, self.grow, self.layers = mode, timed, grow, layers
        self.jobs, self.budget, self.started = jobs, budget, started
        self.results: list[RecipeResult] = []
        self.queue: list[Candidate] = []
        self.seen: set[str] = set()
        self.running, self.eager_open = 0, 0            # started and not in yet; ... of them eager
        self.walls: dict[str, list] = {"eager": [], "compile": []}
        self.pruned, self.untried = [], []
        self.runoff = True                              # the leaders timed again, interleaved, at the end

    def _add(self, cands: list[Candidate]) -> None:
        for c in cands:
            if c.label not in self.seen:
                self.seen.add(c.label)
                self.queue.append(c)
        self.queue.sort(key=lambda c: (c.tier != "eager", c.bound_ms or 0.0, TIERS.index(c.tier)))

    def _eager_pending(self) -> bool:
        return any(c.tier == "eager" for c in self.queue) or self.eager_open > 0

    def _next(self) -> Candidate | None:
        """The next candidate to start, in the queue's order; but the tiers grown on eager recipes wait until every
        eager recipe is timed, so that the best eager step prunes the hopeless ones before they take a worker (on an
        H200 a 134M decoder's fp32 + compile held a worker 35 s to time 24 ms, where the best eager step took 10)."""
        wait = self._eager_pending()
        for i, c in enumerate(self.queue):
            if not (c.grown and wait):
                return self.queue.pop(i)
        return None

    def _prune_reason(self, cand: Candidate) -> str | None:
        best = self.best()
        if cand.bound_ms is None or best is None or cand.bound_ms <= best.step_ms * (1 + PRUNE_MARGIN):
            return None
        return (f"pruned: {cand.bound_from} take {cand.bound_ms:.3g} ms a step, more than the best step so far "
                f"({best.recipe}, {best.step_ms:.3g} ms): {cand.tier} cannot make it win")

    def _budget_reason(self, cand: Candidate) -> str | None:
        if not self.budget:
            return None
        need = self.guess(cand.tier)
        left = self.budget - (time.perf_counter() - self.started) - self._runoff_guess()
        if need <= left:
            return None
        return f"not tried: --budget {self.budget:g} s (about {need:.0f} s needed, {max(left, 0):.0f} s left)"

    def _above(self, cand: Candidate, r: RecipeResult, metrics: dict) -> list[Candidate]:
        """The tiers that sit on top of a passing recipe, each with the bound the evidence gives it."""
        graphs = ["cuda_graphs"] + (["step_graph"] if self.mode == "train" else [])
        if cand.tier == "eager":
            rec = recipemod.get(cand.item.recipe)
            extras = [] if rec.fp8 or rec.int8 else ["compile", *graphs]
            aligned = 1.0 - loose_share(self.layers, rec.peak_precision, rec.channels_last)
            bound = metrics["matmul_ms"] * aligned if metrics.get("matmul_ms") else None
            src = f"{r.recipe}'s GEMM/conv kernels (eager)" + \
                (f", those compile cannot change ({aligned:.0%} of the GEMM FLOPs)," if aligned < 1 else "")
        elif cand.tier == "compile":
            extras, bound, src = graphs, metrics.get("kernel_ms"), f"{r.recipe}'s kernels"
        else:
            return []
        above = [self._on_top(cand, extra, bound, src) for extra in extras]
        self._tighten(above)
        return above

    def _tighten(self, above: list[Candidate]) -> None:
        """A tier already queued on weaker evidence takes the compiled step's bound, when that is tighter."""
        queued = {c.label: c for c in self.queue}
        for c in above:
            old = queued.get(c.label)
            if old is not None and c.bound_ms is not None and c.bound_ms > (old.bound_ms or 0.0):
                old.bound_ms, old.bound_from = c.bound_ms, c.bound_from

    def _on_top(self, cand: Candidate, extra: str, bound, src: str) -> Candidate:
        name = recipemod.on_top(cand.root, extra)
        keep = cand.item.keep
        item = Item(name, keep, f"{cand.root_label}+{extra}" if keep else None, name if keep else None)
        return Candidate(item, tier_of(name), cand.root, cand.root_label, bound, src, grown=True)

    def best(self) -> RecipeResult | None:
        timed = [r for r in self.results if r.passes and r.step_ms]
        return min(timed, key=lambda r: r.step_ms) if timed else None

    # --- time ------------------------------------------------------------------------------------------------
    def guess(self, tier: str) -> float:
        """A recipe's expected wall time (prepare, check, time): the median of its kind so far."""
        kind = "eager" if tier == "eager" else "compile"
        walls = sorted(self.walls[kind])
        return walls[len(walls) // 2] if walls else FIRST_GUESS_S[kind]

    def _runoff_guess(self) -> float:
        best = self.best() if self.runoff else None
        return 0.0 if best is None else MAX_LEADERS * runoff.ROUNDS * (runoff.window_ms(best.step_ms) / 1e3 + 0.1)

    def eta(self) -> float:
        """Seconds left, roughly: what is queued and running spread over the workers, the tiers an eager recipe
        may still earn, and the runoff."""
        later = sum(len(TIERS) - 2 + (self.mode == "train") for c in self.queue if c.tier == "eager")
        work = sum(self.guess(c.tier) for c in self.queue) + self.running * self.guess("compile") / 2 + \
            later * self.guess("compile") * self.timed
        return work / self.jobs + self._runoff_guess()


class Search(Plan):
    """The plan run: its candidates prepared in the worker pool (tcperf.advisor.pool), timed one at a time with the
    others stopped, the leaders' workers kept alive for the runoff."""

    def __init__(self, bench: Bench, *, jobs: int | None = None, budget: float | None = None, progress=None,
                 log=None, started: float | None = None, grow: bool = True, layers: list | None = None,
                 runoff: bool = True):
        """grow: build the compiled tiers (False: only the recipes given); layers: the shape lint's (tcperf.advisor.
        lint.Layer), for the share of GEMM FLOPs whose eager time bounds nothing (loose_share). runoff=False: no
        runoff, no worker kept for one (with a workload the stream decides: its 4-14 s went to the budget)."""
        started = started or time.perf_counter()
        super().__init__(bench.mode, timed=bench.device.type == "cuda", grow=grow, layers=layers or [],
                         jobs=jobs or default_jobs(bench.device), budget=budget, started=started)
        self.bench, self.runoff = bench, runoff
        self.progress, self.log = progress or (lambda *a: None), log or (lambda text: None)
        self._timeline = Timeline(started)
        self.pool = Pool(bench, self._timeline)
        self.alive: dict[str, tuple] = {}      # leader label -> (session, result)
        self.crowded: list[Item] = []           # ran out of memory beside other workers: tried again alone
        self.decision, self.phases = {}, {}

    @property
    def timeline(self) -> dict[str, dict]:
        """label -> {tier, launched, up, opened, timed}: a copy, taken under the timeline's lock."""
        return self._timeline.snapshot()

    # --- the loop ---------------------------------------------------------------------------------------------
    def run(self, items: list[Item], after_eager=None) -> list[RecipeResult]:
        """Measure items and the tiers they earn; after_eager(results) -> more eager items (the mixed recipes the
        sensitive-layer search finds), called once every eager item is in. Then the runoff."""
        t0 = time.perf_counter()
        self._add([candidate(i) for i in items])
        try:
            self._drain(after_eager)
            self.pool.close_spares()
            self.phases["grid_s"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            self._runoff()
            self.phases["runoff_s"] = time.perf_counter() - t1
        finally:
            for session, _ in self.alive.values():
                session.close()
        self._alone_again()
        return self.results

    def _alone_again(self) -> None:
        """The recipes that ran out of memory while other workers held the GPU's memory, prepared and timed again
        now that none is alive: a recipe is stored as oom only where it runs out of memory alone."""
        for item in self.crowded:
            worker = self.bench.open(item)
            try:
                row = worker.call(self.bench.kind, worker.case, self.bench.device, hold=True,
                                  timeout=self.bench.timeout)
                if row.ok and self.timed:
                    row = worker.call("time", timing=GRID_TIMING, profile=True, timeout=self.bench.timeout)
            finally:
                worker.close()
            r = RecipeResult.from_result(row)
            r.base = r.base or item.base
            if r.status == "oom":
                r.message = f"{r.message} (alone on the GPU too)"
            self._record(r)

    def _drain(self, after_eager) -> None:
        while self.queue or self.running or after_eager:
            if after_eager and not self._eager_pending():
                more, after_eager = after_eager(self.results), None
                self._add([candidate(i) for i in more])
                continue
            self._launch()
            if not self.running:
                continue
            cand, session, row, wall = self.pool.ready.get()   # blocks: each preparing thread answers
            self.running -= 1
            self._done(cand, session, row, wall)
            self.eager_open -= cand.tier == "eager"

    def _launch(self) -> None:
        while self.running < self.jobs:
            cand = self._next()
            if cand is None:
                return
            why = self._prune_reason(cand) or self._budget_reason(cand)
            if why:
                self._record(RecipeResult(cand.label, "skipped", message=why, base=cand.item.base))
                (self.pruned if why.startswith("pruned") else self.untried).append(cand.label)
                continue
            self.running += 1
            self.eager_open += cand.tier == "eager"
            self._timeline.launch(cand.label, cand.tier)
            self.pool.start(cand)

    # --- a recipe prepared -----------------------------------------------------------------------------------
    def _done(self, cand: Candidate, session, row: Result, wall: float) -> None:
        if session is not None and row.ok and self.timed:
            t0 = time.perf_counter()
            with self.pool.quiet():
                row = session.call("time", timing=GRID_TIMING, profile=True, timeout=self.bench.timeout)
            wall += time.perf_counter() - t0
        row = self.pool.unpause(session, row, done=True)     # the timed row carries the first call again
        self._timeline.mark(cand.label, "timed")
        self.walls["eager" if cand.tier == "eager" else "compile"].append(wall)
        r = RecipeResult.from_result(row)
        r.base = r.base or cand.item.base
        if r.status == "oom":
            self.crowded.append(cand.item)          # tried again alone at the end, recorded then
            self._keep(r, session)
            return
        self._record(r)
        if r.passes and self.timed and self.grow:
            self._add(self._above(cand, r, row.metrics))
        self._keep(r, session)

    def _record(self, r: RecipeResult) -> None:
        self.results.append(r)
        self.bench.report(r)
        self.progress(len(self.results), len(self.results) + len(self.queue) + self.running, self.eta(), r.recipe)

    def _keep(self, r: RecipeResult, session) -> None:
        """Keep the worker of a leading recipe alive for the runoff; close the others."""
        if session is None:
            return
        if r.passes and r.step_ms and self.runoff:
            self.alive[r.recipe] = (session, r)
        best = self.best()
        for i, (label, (s, res)) in enumerate(sorted(self.alive.items(), key=lambda kv: kv[1][1].step_ms)):
            if i >= MAX_LEADERS or res.step_ms > best.step_ms * (1 + LEAD_MARGIN):
                s.close()
                del self.alive[label]
        if r.recipe not in self.alive:
            session.close()

    # --- the runoff ------------------------------------------------------------------------------------------
    def _runoff(self) -> None:
        if not self.alive:
            return
        leaders = {label: s for label, (s, _) in self.alive.items()}
        slowest = max(r.step_ms for _, r in self.alive.values())
        self.log(f"runoff: {', '.join(leaders)} ({runoff.ROUNDS} interleaved rounds)")
        times = runoff.run({label: self._timer(s) for label, s in leaders.items()}, runoff.ROUNDS,
                           runoff.window_ms(slowest)) if len(leaders) > 1 else \
            {label: [r.step_ms] for label, (_, r) in self.alive.items()}
        self.decision = runoff.decide(times, {label: rank(r) for label, (_, r) in self.alive.items()})

    def _timer(self, session):
        def window(ms: float) -> float | None:
            mean_ms = session.call("window", ms=ms, timeout=self.bench.timeout)
            return mean_ms if isinstance(mean_ms, float) else None      # else the row of its worker's death
        return window

    def summary(self) -> dict:
        return {"jobs": self.jobs, "budget_s": self.budget, "pruned": self.pruned, "not_tried": self.untried,
                "runoff": self.decision, "timeline": self.timeline, **self.phases}
