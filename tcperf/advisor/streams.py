"""The advice on a workload (tcperf.workload): the recipes that led on the example input, measured on the workload's
stream as the user's own loop would run them: one at a time, each in a fresh worker with empty Inductor and Triton
caches and nothing else of tcperf's running (tcperf.engine.StreamSession). Its first two passes are the one-time
cost a user pays on a new machine, its steady passes the step time.

The candidates, in the order they are measured (run):
  0. where the example input's step is host-bound and what CUDA graphs would save over it at the job's steps is more
     than the whole budget left (Plan.graphs_first), CUDA graphs at the precision whose kernels were the shortest
     (never where torch.compile runs some of the model's layers eagerly, probe.untraced: graphs cannot capture them);
  1. each leading precision's eager recipe: the precisions whose job on the example input's figures (first call, what
     a call at the stream's second shape took beyond a step paid again at each distinct shape, + N x step:
     estimated_s) is within LEAD_MARGIN of the best, and, where the best recipe's step is host-bound (GPU busy under
     verdict.HOST_BOUND: a compiled way then removes the launch gaps, and what is left is the GEMM, convolution and
     attention kernels), the precision whose such kernels are the shortest; on 2-D convolutions, each reduced
     precision with channels_last too, before it. Only those the example input ranks with the first within the
     noise (close) are measured here; the others wait until after step 2.
     Where the first of them is host-bound on the stream, CUDA graphs at the precision whose kernels (all of them: a
     graph keeps every kernel) were the shortest come straight after it: the launch gaps, not the precision, set a
     host-bound step, and the eager recipes measured before it had used the whole --budget on T5 (4 x H200,
     cf96fd1; with graphs next, at 1cc56e6, amp_fp16's graphs at 2.27 ms, chosen by GEMM time alone where bf16's
     kernels were 8% shorter);
  2. the ways of meeting varying shapes (FAMILY; CUDA graphs first where the eager step is host-bound, last but padded
     where the GPU never waits) at the precision whose eager job is the cheapest (host-bound: whose GEMM/conv/attention
     kernels are the shortest on the stream);
  3. the leading precisions' eager recipes left from step 1, then the cheapest of step 2's ways at each other leading
     precision, cheapest eager job first;
  4. the recipes compiled by definition (fp8, int8: `later`), with the varying dimensions marked.
Padded recipes are refused before any warm-up where the outputs' varying dimensions do not follow the inputs'
(tcperf.workload.unpaddable, found by the probe). A warm-up stops only where the job's own arithmetic says it cannot
win (tcperf.stream.Limit: its warm-up so far plus the job's remaining steps at the speed of light cost more than the
cheapest job measured) or where the --budget has run out, once one recipe has passed over the stream (the advice rests
on a recipe measured there); what the budget left untried is said. The worker stops itself between steps; the parent
ends it when one step (a compile) outlasts that limit, and a recipe that cannot win even without a warm-up is not
started. On a CPU nothing is timed: the advice's candidate
runs eager and padded, for their accuracy.

    stage = run(bench, grid, facts.workload, steps=10_000, sol_of=lambda name: 1.2, deadline=t0 + 150, log=print)
    stage.results, stage.untried
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

from .. import recipes, stream
from ..engine import StreamSession, recipe_case
from ..runner import InProcess, Worker
from . import job, verdict
from .runoff import TIE
from .search import LEAD_MARGIN
from .trials import Bench, Item, RecipeResult

# Marked before automatic dynamic: marking the varying dimensions skips the static compile automatic dynamic makes
# first, for the same kernels after (one-time 43 against 57 s on T5, 60 against 71 s on the detector, 9.0 against
# 11.5 s on the GRU, their plain loops on an H100, 2026-11-28: docs/results/2026-11-28-h100-x4-b.md; steps within
# 0.5% on conv_seq and the detector on an H200), so automatic dynamic is measured only where marking did not pass
FAMILY = (("compile", "marked"), ("cuda_graphs", "marked"), ("compile", "dynamic"), ("cuda_graphs", "dynamic"),
          ("cuda_graphs", "pad128"), ("cuda_graphs", "pad64"), ("compile", "static"))
CPU_FAMILY = (("", "pad64"), ("", "pad128"))
LADDER_COMPILED = {"compile": "amp_bf16", "cuda_graphs": "amp_bf16", "fused": "amp_bf16", "step_graph": "amp_bf16"}
REDUCED = ("tf32", "amp_fp16", "amp_bf16", "fp16", "bf16")    # channels_last is tried with these on convolutions
KILL_GRACE_S = 1.0     # past a warm-up's limit, before its worker is ended mid-step


def root_of(name: str) -> str:
    """The recipe without its compile or CUDA graphs: 'bf16+cuda_graphs' -> 'bf16', the ladder's 'cuda_graphs' ->
    'amp_bf16' (its channels_last changes nothing without convolutions; with them, `on` puts the ladder's compiled
    rungs back on top), fp8 and int8 (compiled by definition) stay themselves."""
    name = name.split("@")[0]
    for extra in ("compile", "cuda_graphs", "step_graph", "autotune"):
        name = name.removesuffix(f"+{extra}")
    return LADDER_COMPILED.get(name, name)


def way_of(name: str) -> tuple[str, str]:
    """How a recipe meets varying shapes: (its compile or CUDA graphs, or "", its SHAPES): 'bf16+cuda_graphs@pad64'
    -> ('cuda_graphs', 'pad64')."""
    rec = recipes.get(name)
    extra = "cuda_graphs" if rec.cuda_graphs else "compile" if rec.compile and not recipes.get(root_of(name)).compile \
        else ""
    return extra, rec.shapes


def on(root: str, way: tuple[str, str]) -> str:
    """The recipe that meets varying shapes `way` at precision `root`."""
    extra, shapes = way
    base = recipes.on_top(root, extra) if extra and not (extra == "compile" and recipes.get(root).compile) else root
    return f"{base}@{shapes}" if shapes != "static" else base


def family(root: str, device_type: str, pad_refused: str | None = None, graphs_first: bool = False,
           busy: bool = False) -> list[str]:
    """The ways FAMILY (CPU_FAMILY off a GPU) makes of `root`, each once; none padded where padding is refused.
    graphs_first: CUDA graphs before compile alone (a host-bound step: graphs remove the launches compile leaves).
    busy: the GPU never waits for the host on the eager step, so CUDA graphs at unpadded shapes (which remove launch
    gaps, nothing else) come last; padding, which changes the kernels' shapes, before them (conv_seq on an H200:
    eager 18.0 ms at 100% busy, graphs @marked 17.0, @pad64 14.8)."""
    ways = FAMILY if device_type == "cuda" else CPU_FAMILY
    if graphs_first:
        ways = sorted(ways, key=lambda way: (way[1].startswith("pad") or way[1] == "static", way[0] != "cuda_graphs"))
    elif busy:
        ways = sorted(ways, key=lambda way: way[0] == "cuda_graphs" and not way[1].startswith("pad"))
    names = []
    for way in ways:
        if (pad_refused and way[1].startswith("pad")) or (way[1] in ("dynamic", "marked") and not way[0] and
                                                          not recipes.get(root).compile):
            continue
        name = on(root, way)
        if name not in names and name != root:
            names.append(name)
    return names


def host_bound(r: RecipeResult | None) -> bool:
    return r is not None and r.gpu_busy is not None and r.gpu_busy < verdict.HOST_BOUND


def lasting_ms(r: RecipeResult) -> float:
    """The kernels a compiled way cannot remove: GEMM, convolution and attention (all kernels where not split)."""
    return r.matmul_ms if r.matmul_ms is not None else r.kernel_ms if r.kernel_ms is not None else math.inf


def estimated_s(r: RecipeResult, steps: int | None, shapes: int = 1) -> float:
    """A recipe's job at `steps` as the example input foretells it: its first call + steps x its step; without a job
    length, its step. Over a stream of `shapes` distinct shapes it pays again, at each new one, what its first call at
    the stream's second shape took beyond a step (new_shape_s: cuDNN's kernels for a new convolution shape; on an
    H200 amp_fp16's first call on conv_seq took 2.7 s, and its plain loop's warm-up over 63 lengths 96 s)."""
    step = r.step_ms if r.step_ms else math.inf
    if steps is None:
        return step
    again = max(0.0, r.new_shape_s - step / 1e3) if r.new_shape_s is not None and step < math.inf else 0.0
    return (r.first_call_s or 0.0) + max(0, shapes - 1) * again + steps * step / 1e3


def leading(grid: list[RecipeResult], convs: bool, steps: int | None = None,
            shapes: int = 1) -> list[tuple[str, tuple]]:
    """(precision, modules kept in fp32) of the leading recipes on the example input, best first (see the module's
    doc), ranked by the job at `steps` over `shapes` distinct shapes the example input foretells (estimated_s); on
    convolutions each reduced precision with channels_last too. Recipes compiled by definition are not here (`later`
    in run)."""
    eager = [r for r in grid if r.passes and not recipes.get(root_of(r.runs)).compile]
    estimate = lambda r: estimated_s(r, steps, shapes)
    best: dict[tuple, RecipeResult] = {}
    for r in eager:
        key = (root_of(r.runs), tuple(r.keep_fp32))
        if key not in best or estimate(r) < estimate(best[key]):
            best[key] = r
    if not best:
        return []
    ranked = sorted(best, key=lambda k: estimate(best[k]))
    top, least = best[ranked[0]], estimate(best[ranked[0]])
    keys = [k for k in ranked if math.isinf(least) or estimate(best[k]) <= least * (1 + LEAD_MARGIN)]
    if host_bound(top):
        keys.append(min(ranked, key=lambda k: lasting_ms(best[k])))
    if convs:       # NHWC, the Tensor Cores' own layout for 2-D convolutions, first (cuDNN transposes NCHW)
        keys = [k for p, keep in keys for k in ([(recipes.on_top(p, "channels_last"), keep)] if p in REDUCED
                                                else []) + [(p, keep)]]
    return list(dict.fromkeys(keys))


def close(grid: list[RecipeResult], key: tuple[str, tuple], first: tuple[str, tuple], steps: int | None,
          shapes: int = 1) -> bool:
    """Whether the example input ranks `key` with `first` (leading's first) within the noise: their estimated jobs
    apart by no more than their steps' spread (runoff.TIE at least). A precision ranked behind by more is measured on
    the stream after the first one's ways: on conv_seq three such eager recipes (18.0 ms a step each, on an H200)
    used the budget the padded ways (14.8 ms) needed."""
    mine, lead = row_of(grid, key), row_of(grid, first)
    if mine is None or lead is None or not mine.step_ms or not lead.step_ms:
        return True
    spread = max(TIE, *((r.timing or {}).get("iqr_ms", 0.0) / r.step_ms for r in (mine, lead)))
    return estimated_s(mine, steps, shapes) <= estimated_s(lead, steps, shapes) * (1 + spread)


def row_of(grid: list[RecipeResult], key: tuple[str, tuple]) -> RecipeResult | None:
    """The grid's eager row of a (precision, modules kept in fp32) root; for channels_last on a precision, which the
    grid does not time, that precision's row."""
    def row(k):
        return next((r for r in grid if r.passes and (root_of(r.runs), tuple(r.keep_fp32)) == k), None)
    return row(key) or (row((key[0].replace("+channels_last", ""), key[1])) if "+channels_last" in key[0] else None)


def graphed_ms(r: RecipeResult) -> float:
    """The kernels a CUDA graph keeps: every one of them (it removes the launch gaps between them, nothing else)."""
    return r.kernel_ms if r.kernel_ms is not None else math.inf


def least(grid: list[RecipeResult], roots: list[tuple[str, tuple]], kernels=lasting_ms) -> tuple[str, tuple]:
    """Of `roots`, the one whose `kernels` (lasting_ms, graphed_ms) were the shortest on the example input."""
    def shortest(key):
        mine = [r for r in grid if r.passes and (root_of(r.runs), tuple(r.keep_fp32)) == key]
        return min((kernels(r) for r in mine), default=math.inf)
    return min(roots, key=shortest)


@dataclass
class Stage:
    """What the stage measured, and what the budget left untried."""
    results: list[RecipeResult] = field(default_factory=list)
    untried: list[str] = field(default_factory=list)


def run(bench: Bench, grid: list[RecipeResult], workload: dict, steps: int | None, *, convs: bool = False,
        sol_of=None, deadline: float | None = None, later: tuple = (), log=None, progress=None) -> Stage:
    """The candidates on the stream, one at a time (see the module's doc). sol_of(recipe) -> the least ms a step of
    it can take on the stream (its speed of light) or None; deadline: the perf_counter time the --budget ends;
    later: the recipes compiled by definition (fp8, int8) the grid left to the stream."""
    plan = Plan(bench, workload or {}, steps, sol_of or (lambda name: None), deadline, log, progress)
    if bench.device.type != "cuda":          # accuracy only: the advice's candidate, eager and padded
        pick = verdict.candidate(grid)
        root = root_of(pick.runs)
        return plan.measure([root, *family(root, "cpu", plan.refused)], tuple(pick.keep_fp32))
    roots = leading(grid, convs, steps, workload.get("distinct") or 1)
    if not roots:
        return plan.stage
    graphs = least(grid, roots, graphed_ms)
    if plan.graphs_first(row_of(grid, roots[0]), row_of(grid, graphs)):
        plan.measure(family(graphs[0], "cuda", plan.refused, graphs_first=True)[:1], graphs[1])
    plan.measure([roots[0][0]], roots[0][1])
    if host_bound(plan.found(roots[0][0])) and not plan.untraced:   # the launch gaps set the step: graphs next
        plan.measure(family(graphs[0], "cuda", plan.refused, graphs_first=True)[:1], graphs[1])
    shapes = workload.get("distinct") or 1
    lasting = least(grid, roots)
    near = [k for k in roots if k == lasting and host_bound(row_of(grid, roots[0])) or
            close(grid, k, roots[0], steps, shapes)]
    for root, keep in near:
        plan.measure([root], keep)
    first, keep = plan.family_root(near)
    found = plan.found(first)
    plan.measure(family(first, "cuda", plan.refused, graphs_first=host_bound(found) and not plan.untraced,
                        busy=found is not None and not host_bound(found)), keep)
    for root, keep in roots:
        plan.measure([root], keep)
    way = way_of(plan.cheapest(first))
    for root, keep in sorted((k for k in roots if k[0] != first), key=lambda k: plan.job(k[0])):
        if (way[0] or way[1] != "static") and (way[0] or recipes.get(root).compile or way[1].startswith("pad")):
            plan.measure([on(root, way)], keep)
    plan.measure([on(name, ("", "marked")) for name in later], ())
    return plan.stage


class Plan:
    """The candidates measured in turn, each alone and cold, stopped by its job's arithmetic or the budget."""

    def __init__(self, bench: Bench, workload: dict, steps, sol_of, deadline, log, progress):
        self.bench, self.steps, self.sol_of, self.deadline = bench, steps, sol_of, deadline
        self.refused = workload.get("pad_refused")
        self.untraced = workload.get("untraced") or []    # modules torch.compile runs eagerly (probe.untraced)
        self.length = workload.get("length") or 0
        self.log, self.progress = log or (lambda text: None), progress
        self.stage, self.walls = Stage(), []

    def family_root(self, roots: list[tuple[str, tuple]]) -> tuple[str, tuple]:
        """The precision whose ways of meeting varying shapes are tried: the cheapest eager job on the stream; where
        that step is host-bound, the one whose GEMM/conv/attention kernels were the shortest there."""
        cheapest = min(roots, key=lambda k: self.job(k[0]))
        if not host_bound(self.found(cheapest[0])):
            return cheapest
        measured = [k for k in roots if self.found(k[0]) is not None]
        return min(measured, key=lambda k: lasting_ms(self.found(k[0])), default=cheapest)

    def graphs_first(self, eager: RecipeResult | None, graphed: RecipeResult | None) -> bool:
        """CUDA graphs before any eager recipe: the example input's step is host-bound and, at the job's steps, what
        graphs would save over it (the eager step against the kernels a graph keeps) is more than the whole budget
        left, so no warm-up the budget allows could lose to eager. T5 on an H200 (2026-11-28): eager bf16 measured
        first left 17 s of the budget to its graphs, whose warm-up takes 36 s and whose job is 3.8x shorter."""
        if not (host_bound(eager) and graphed is not None and self.steps and self.deadline is not None) or \
                self.untraced:      # graphs cannot capture what torch.compile runs eagerly: the saving is not there
            return False
        saved_s = self.steps * (eager.step_ms - graphed_ms(graphed)) / 1e3
        return saved_s > self.deadline - time.perf_counter()

    def found(self, name: str) -> RecipeResult | None:
        return next((r for r in job.eligible(self.stage.results) if r.runs == name), None)

    def measure(self, names: list[str], keep: tuple) -> Stage:
        for name in names:
            label = f"{name}+fp32[{len(keep)} modules]" if keep else name
            if any(r.recipe == label for r in self.stage.results) or label in self.stage.untried:
                continue
            twin = name.replace("@dynamic", "@marked")
            if twin != name and self.found(twin) is not None:
                self.stage.results.append(RecipeResult(label, "skipped", message=f"not run: {twin} passed, the same "
                                                       "kernels after a shorter warm-up"))
                continue
            if self.over_budget():
                self.stage.untried.append(label)
                continue
            why = self._limit(name).reason(0.0, 0)
            if why:          # even with no warm-up at all, its steps at their speed of light cost too much
                self.stage.results.append(RecipeResult(label, "skipped", message=f"not started: {why}"))
                continue
            t0 = time.perf_counter()
            r = RecipeResult.from_result(self._alone(name, keep, label))
            self.walls.append(time.perf_counter() - t0)
            self.stage.results.append(r)
            self._tell(r)
        return self.stage

    def _alone(self, name: str, keep: tuple, label: str):
        """The recipe in a fresh worker of its own (its caches empty), nothing else running: prepared, its first
        pass under the job's Limit, its steady passes timed, one pass profiled."""
        b = self.bench
        cold = os.path.join(b.folder, "cold-" + "".join(c if c.isalnum() else "_" for c in label))
        args = b.args(Item(name, keep, base=name if keep else None), cold=cold if b.source else None)
        case = recipe_case(args, op="advise.stream", shape={"model": b.name, "mode": b.mode},
                           label=label if keep else None, suite="advise")
        t0 = time.perf_counter()
        worker = Worker(b.device, own_group=True, case=case) if b.source else InProcess(b.device, case=case)
        timed, walls = b.device.type == "cuda", {}

        def call(what, *args, **kwargs):        # each call's wall, the parent's view (where a recipe's seconds go)
            t = time.perf_counter()
            try:
                return worker.call(what, *args, **kwargs)
            finally:
                walls[what if isinstance(what, str) else "setup"] = time.perf_counter() - t
        try:
            row = call(StreamSession, case, b.device, hold=True, timeout=b.timeout)
            setup_s = time.perf_counter() - t0      # the worker's start, the model loaded, its fp32 reference
            if row.ok:
                limit = self._limit(name)
                wait = self._first_timeout(limit)
                row = call("first", limit=limit, timeout=wait)
                if row.status == "timeout" and wait < b.timeout:     # one step (a compile) outlasted the limit
                    row = row.replace(status="skipped", message=f"warm-up stopped: {limit.reason(wait, 0)} "
                                      "(its worker was ended within its first steps)")
            if row.ok and timed:
                call("time", passes=stream.PASSES, timeout=b.timeout)
                row = call("profile", timeout=b.timeout)
        finally:
            t = time.perf_counter()
            worker.close()
            walls["close"] = time.perf_counter() - t
        if isinstance(row.metrics.get("stream"), dict):
            row.metrics["stream"]["setup_s"] = setup_s
            row.metrics["stream"]["calls_s"] = walls
            started = getattr(worker, "started", None) or {}     # the worker's imports and device, where it ran one
            row.metrics["stream"].setdefault("setup", {}).update({f"worker_{k}_s": v for k, v in started.items()})
        return row

    def over_budget(self) -> bool:
        """Past the --budget, once a recipe has passed over the stream: the advice always rests on one measured
        there, never on the example input's figures alone. Past it too where what is left is shorter than the
        least set-up and timing any measurement here has taken (fixed_s): a recipe started then would end after it."""
        if self.deadline is None or not any(r.passes for r in self.stage.results):
            return False
        return time.perf_counter() + sum(self.fixed_s()) >= self.deadline

    def fixed_s(self) -> tuple[float, float]:
        """(before, after): the least seconds a measurement that passed here took before its first pass (its worker,
        model and reference) and after it (the timed passes, the profile, the worker's end), from calls_s; (0, 0)
        before any. A warm-up's share of the --budget leaves room for the after (the advice had overrun its 150 s by
        up to 18 s, timing the recipe whose warm-up the budget had ended)."""
        calls = [r.stream["calls_s"] for r in self.stage.results if r.passes and (r.stream or {}).get("calls_s")]
        if not calls:
            return 0.0, 0.0
        return (min(c.get("setup", 0.0) for c in calls),
                min(c.get("time", 0.0) + c.get("profile", 0.0) + c.get("close", 0.0) for c in calls))

    def _limit(self, name: str) -> stream.Limit:
        best = min((job.job_s(r, self.steps) for r in job.eligible(self.stage.results)), default=math.inf)
        budget = None if self.deadline is None or not any(r.passes for r in self.stage.results) else \
            max(0.0, self.deadline - time.perf_counter() - self.fixed_s()[1])
        return stream.Limit(self.steps, self.floor_ms(name), best if self.steps is not None else math.inf, budget)

    def _first_timeout(self, limit: stream.Limit) -> float:
        """Seconds the first pass may run before the parent ends it: past them the warm-up cannot win whatever
        steps it has done (the Limit at the stream's last step) or the budget is spent. The worker's own Limit stops
        it between steps; this stops a single step (a compile) that outlasts both."""
        bound = limit.budget_s if limit.budget_s is not None else math.inf
        if limit.steps is not None and not math.isinf(limit.best_s):
            bound = min(bound, limit.best_s - max(0, limit.steps - self.length) * limit.sol_ms / 1e3)
        return min(self.bench.timeout, max(0.0, bound) + KILL_GRACE_S)

    def floor_ms(self, name: str) -> float:
        """The least a step of `name` can take: its speed of light, and for CUDA graphs the kernel time of the same
        precision's compiled recipes measured so far at the same shapes (graphs remove launch gaps, not kernels;
        padding changes the kernels: on conv_seq, an H200, tf32 + compile @marked's 16.1 ms of kernels had stopped
        graphs @pad128, whose plain loop's job is 4% shorter, as unable to win)."""
        rec = recipes.get(name)
        floor = self.sol_of(name) or 0.0
        if rec.cuda_graphs:
            same = [r.kernel_ms for r in self.stage.results if r.kernel_ms and root_of(r.runs) == root_of(name)
                    and recipes.get(r.runs).compile and recipes.get(r.runs).pad_to == rec.pad_to]
            floor = max([floor, *same]) if same else floor
        return floor

    def job(self, root: str) -> float:
        found = self.found(root)
        return job.job_s(found, self.steps) if found else math.inf

    def cheapest(self, root: str) -> str:
        """The recipe of `root`'s precision with the cheapest job measured (the root itself where none ran)."""
        mine = [r for r in job.eligible(self.stage.results) if root_of(r.runs) == root_of(root)]
        return min(mine, key=lambda r: job.job_s(r, self.steps)).runs if mine else root

    def _tell(self, r: RecipeResult) -> None:
        first = (r.stream or {}).get("seconds")
        self.log(f"{r.recipe}: {r.status}" + (f", warm-up {first:.1f} s" if first is not None else "") +
                 (f", {r.step_ms:.3g} ms a step" if r.step_ms else "") + (f" ({r.message})" if r.message else ""))
        if self.progress:
            left = None if self.deadline is None else max(0.0, self.deadline - time.perf_counter())
            self.progress(len(self.stage.results), len(self.stage.results) + 1, left, r.recipe)
