"""The advice on a workload (tcperf.workload): after the search has found the fastest accurate precision on the
example input, the ways of meeting varying shapes are measured at that precision on the workload's stream, as people
who serve such models write them (FAMILY):

    eager                   the precision alone
    compile, static         torch.compile(dynamic=False): a compile per new shape (stopped after RECOMPILE_STOP)
    compile, dynamic        torch.compile's automatic dynamic shapes (its default)
    compile, marked         the varying dimensions marked dynamic before the first call
    CUDA graphs, dynamic    torch.compile(mode="reduce-overhead"), as a plain snippet writes it
    CUDA graphs, marked     the same, symbolic from the start (one compile; a graph captured a shape)
    CUDA graphs, padded to multiples of 64 or 128, compiled static: one compile and one capture a bucket

Each runs in a fresh worker with empty Inductor and Triton caches (tcperf.engine.StreamSession), so its first pass
costs what it costs on a new machine. All are prepared at once, then their first passes run side by side (their
compiles are CPU work; the GPU they share runs their steps); each recipe is timed as soon as its own pass ends, and
a recipe still warming up is stopped once its warm-up so far plus the job at its speed of light costs more than the
best job timed (Race; STREAM_CAP_S stops any first pass). Then the stopped workers are gone and the survivors are
timed alone, the others idle, in ROUNDS interleaved rounds of one pass each, and the job's pick is profiled. On a
CPU nothing is timed: the eager and padded recipes run for their accuracy (padding a model whose outputs change at
the real positions is rejected there too).

    found = run(bench, pick, steps=10_000, log=print)    # [RecipeResult] with .stream: first pass, steady, one-time
"""
from __future__ import annotations

import math
import os
import queue
import threading
import time

from .. import recipes, workload
from . import job
from ..engine import StreamSession, recipe_case
from ..records import Result
from .trials import Bench, Item, RecipeResult
from .pool import Pool, Timeline

STREAM_CAP_S = 90.0
STOP_EVERY_S = 0.5        # how often the first passes still warming up are weighed against the best job so far
BOUND_PASSES = 3          # a recipe's timing beside the others' compiles (its median: slowed, so above its job)
ROUNDS = 4                # interleaved rounds of the final timing, a pass of each survivor a round (7 on BERT's
                          # stream took ~17 s of the stage's 83; killed workers are reaped before them now)
STEADY_GUESS_S = 3.0      # a recipe's steady passes and profile, for the time left
FAMILY = (("", "static"), ("compile", "static"), ("compile", "dynamic"), ("compile", "marked"),
          ("cuda_graphs", "dynamic"), ("cuda_graphs", "marked"), ("cuda_graphs", "pad64"), ("cuda_graphs", "pad128"))
CPU_FAMILY = (("", "static"), ("", "pad64"), ("", "pad128"))
LADDER_COMPILED = {"compile": "amp_bf16", "cuda_graphs": "amp_bf16", "fused": "amp_bf16", "step_graph": "amp_bf16"}


def root_of(name: str) -> str:
    """The recipe without its compile or CUDA graphs: 'bf16+cuda_graphs' -> 'bf16', 'cuda_graphs' -> 'amp_bf16';
    fp8 and int8 (compiled by definition) stay themselves."""
    name = name.split("@")[0]
    for extra in recipes.EXTRAS:
        name = name.removesuffix(f"+{extra}")
    return LADDER_COMPILED.get(name, name)


def family(root: str, device_type: str) -> list[str]:
    """The recipes FAMILY (CPU_FAMILY off a GPU) makes of `root`, each once."""
    rec = recipes.get(root)
    names = []
    for extra, shapes in (FAMILY if device_type == "cuda" else CPU_FAMILY):
        base = root if not extra or (extra == "compile" and rec.compile) else recipes.on_top(root, extra)
        if shapes in ("dynamic", "marked") and not recipes.get(base).compile:
            continue
        name = base if shapes == "static" else f"{base}@{shapes}"
        if name not in names:
            names.append(name)
    return names


class StreamBench:
    """What tcperf.advisor.pool.Pool needs of a bench, for stream sessions: each recipe's worker holds an
    engine.StreamSession, in a fresh worker whose Inductor and Triton caches start empty (not in this process: its
    caches are the process's), its first pass limited to `cap_s`."""
    kind = StreamSession

    def __init__(self, bench: Bench, keep: tuple):
        self.bench, self.keep = bench, keep      # keep: modules the pick keeps in fp32 (a mixed recipe)
        self.timeout, self.spares, self.cap_s = bench.timeout, None, STREAM_CAP_S
        self.device = bench.device

    def case(self, name: str):
        b = self.bench
        label = f"{name}+fp32[{len(self.keep)} modules]" if self.keep else None
        cold = os.path.join(b.folder, "cold-" + "".join(c if c.isalnum() else "_" for c in name))
        args = b.args(Item(name, tuple(self.keep), base=name if self.keep else None), cold=cold if b.source else None,
                      cap_s=self.cap_s)
        return recipe_case(args, op="advise.stream", shape={"model": b.name, "mode": b.mode}, label=label,
                           suite="advise")

    def open(self, item):
        return self.bench.worker_for(self.case(item.recipe))     # a spare left by the search where one is up


class _Item:
    """A recipe as the pool hands it around (its .item is what bench.open receives)."""

    def __init__(self, recipe: str):
        self.recipe, self.label, self.tier = recipe, recipe, "stream"
        self.item = self


def run(bench: Bench, pick: RecipeResult, steps: int | None, log=None, progress=None,
        sol_ms: float | None = None, phases: dict | None = None) -> list[RecipeResult]:
    """The pick's precision's FAMILY on the stream: RecipeResults whose .stream holds the first pass and the steady
    state (its one-time cost in one_time_s). sol_ms: the least a step can take (its speed of light), which stops a
    warm-up whose job of `steps` could not win even there. phases: where the stage's seconds went, added to it
    (workload_open_s, workload_race_s, workload_rounds_s, workload_profile_s)."""
    log = log or (lambda text: None)
    clock = _Clock(phases if phases is not None else {})
    timed = bench.device.type == "cuda"
    names = family(root_of(pick.runs), bench.device.type)
    sb = StreamBench(bench, tuple(pick.keep_fp32))
    pool = Pool(sb, Timeline(time.perf_counter()))
    log(f"the workload: {', '.join(names)} on the stream")
    tell = _teller(progress, len(names), sb)
    opened = clock.lap("workload_open_s", _open_all(pool, names))
    race = Race(steps if timed else None, sol_ms, tell, log)
    rows = race.run(opened, bench.timeout, side_by_side=bench.source is not None)
    for name in race.why:            # stopped: their workers gone (a dying CUDA context slows the GPU and host)
        opened[name][0].close()
    clock.lap("workload_race_s")
    if timed:
        rows.update(_rounds({n: opened[n][0] for n, row in rows.items() if row.ok},
                            bench.timeout, log))
    clock.lap("workload_rounds_s")
    measured = [(RecipeResult.from_result(rows[name]), opened[name][0]) for name in names]
    return clock.lap("workload_profile_s", _profiled(measured, steps, bench.timeout if timed else None, log,
                                                     bench.spares))


class _Clock:
    """Seconds since the last lap, into phases[name]."""

    def __init__(self, phases: dict):
        self.phases, self.t0 = phases, time.perf_counter()

    def lap(self, name: str, value=None):
        now = time.perf_counter()
        self.phases[name] = now - self.t0
        self.t0 = now
        return value


def _rounds(sessions: dict, timeout: float, log=None, rounds: int = ROUNDS) -> dict[str, dict]:
    """The survivors timed in interleaved rounds, one pass each a round, the others idle: whatever disturbs the
    machine for a while disturbs every recipe alike. {name: its row, every round's pass in its samples}; each
    recipe's passes logged (ms a step), so a host-bound recipe's spread can be read beside the others'."""
    rows = {}
    for i in range(rounds):
        for name, session in sessions.items():
            rows[name] = session.call("time", passes=1, fresh=i == 0, timeout=timeout)
    for name, row in rows.items():
        if log and row.samples:
            log(f"{name}: {len(row.samples)} rounds, ms a step: {' '.join(f'{t:.3g}' for t in row.samples)}")
    return rows


def _open_all(pool: Pool, names: list[str]) -> dict[str, tuple]:
    """Every recipe prepared at once, each in its worker: {name: (session, its row)}."""
    for name in names:
        pool.timeline.launch(name, "stream")
        pool.start(_Item(name))
    opened = {}
    for _ in names:
        item, session, row, _ = pool.ready.get()
        opened[item.recipe] = (session, row)
    return opened


class Race:
    """The first passes side by side (their compiles are CPU work; the GPU they share runs their steps), each recipe
    timed as soon as its own ends, beside the others still compiling: a slowed timing, so its job (the median of
    BOUND_PASSES passes) lies above the job it will time alone (BERT's stream on an H100: the best job read 89 s so,
    69 s alone). Every STOP_EVERY_S, a recipe still warming up is stopped (its worker killed) once its warm-up so
    far plus the job's steps at the speed of light costs more than the best such job: it cannot win. Without a job
    length (a long job, or nothing timed) only the cap in the worker stops a first pass."""

    def __init__(self, steps: int | None, sol_ms: float | None, tell, log):
        self.steps, self.sol_ms, self.tell, self.log = steps, sol_ms or 0.0, tell, log
        self.best, self.best_name = math.inf, ""
        self.started: dict[str, float] = {}     # recipes still warming up: when their first pass began
        self.warm: set[str] = set()               # first pass over (a thread adds it): its job is known soon
        self.why: dict[str, str] = {}
        self.done: queue.Queue = queue.Queue()

    def run(self, opened: dict[str, tuple], timeout: float, side_by_side: bool = True) -> dict[str, dict]:
        """{name: its row after the first pass (and the bound's timing)}."""
        rows = {}
        for name, (session, row) in opened.items():
            if session is None or not row.ok:
                rows[name] = row
                self.tell(name)
            elif side_by_side:
                self.started[name] = time.perf_counter()
                threading.Thread(target=self._first, args=(name, session, timeout), daemon=True,
                                 name=f"tcperf-stream-{name}").start()
            else:                    # one process (a model no worker can receive): one after another, none stopped
                self._first(name, session, timeout)
        while len(rows) < len(opened):
            try:
                name, row = self.done.get(timeout=STOP_EVERY_S)
            except queue.Empty:
                pass
            else:
                rows[name] = self._answer(name, row)
            self._stop_losers(opened, rows)
        return rows

    def _first(self, name: str, session, timeout: float) -> None:
        row = session.call("first", timeout=timeout)
        self.warm.add(name)
        if row.ok and self.steps is not None:
            row = session.call("time", passes=BOUND_PASSES, timeout=timeout)
        self.done.put((name, row))

    def _answer(self, name: str, row: Result) -> Result:
        self.started.pop(name, None)
        self.tell(name)
        if name in self.why:       # killed: its worker's death is the stop
            return row.replace(status="skipped", message=f"warm-up stopped: {self.why[name]}")
        r = RecipeResult.from_result(row)
        if self.steps is not None and r.passes and r.step_ms:
            bound = job.job_s(r, self.steps)
            self.log(f"{name}: warm after {job.one_time_s(r):.1f} s one-time, {r.step_ms:.3g} ms a step beside the "
                     f"others' compiles")
            if bound < self.best:
                self.best, self.best_name = bound, name
        return row

    def _stop_losers(self, opened: dict, rows: dict) -> None:
        if self.steps is None or self.best == math.inf:
            return
        now = time.perf_counter()
        for name, t0 in list(self.started.items()):
            if name in rows or name in self.why or name in self.warm:
                continue
            least = (now - t0) + self.job_floor_s()
            if least > self.best:
                self.why[name] = (f"after {now - t0:.0f} s of warm-up its job of {self.steps:,} steps would take at "
                                  f"least {least:.0f} s even at the speed of light; {self.best_name}'s takes "
                                  f"{self.best:.0f} s (timed beside the others' compiles)")
                self.log(f"{name}: {self.why[name]}")
                opened[name][0].kill()

    def job_floor_s(self) -> float:
        """The job's steps beyond the two warm-up passes over the stream, at the speed of light."""
        return max(0, self.steps - 2 * workload.STREAM_STEPS) * self.sol_ms / 1e3


def _profiled(measured: list[tuple], steps: int | None, timeout: float | None, log=None,
              spares=None) -> list[RecipeResult]:
    """The job's pick profiled (where its step goes, for the speed of light), the host-bound recipes timed again
    alone (_alone) and, if one of them is the pick then, it profiled; every worker closed at the end. Nothing is
    profiled without a timeout (nothing was timed: a CPU)."""
    results = [r for r, _ in measured]
    try:
        if timeout:
            first = job.pick(results, steps)
            done = set()
            if first is not None and not host_bound(first.runs):   # its worker closes in _alone
                done.add(_profile(measured, results, first.recipe, timeout))
            done |= _alone(measured, results, timeout, log or (lambda text: None), spares)
            pick = job.pick(results, steps)
            if pick is not None and pick.recipe not in done:
                _profile(measured, results, pick.recipe, timeout)
    finally:
        for _, session in measured:
            if session is not None:
                session.close()
    return results


def _profile(measured: list[tuple], results: list[RecipeResult], name: str, timeout: float) -> str:
    """The recipe `name` profiled in its worker, its result replaced (in place); its name."""
    for i, (r, session) in enumerate(measured):
        if r.recipe == name and session is not None:
            results[i] = RecipeResult.from_result(session.call("profile", timeout=timeout))
    return name


def host_bound(name: str) -> bool:
    """A recipe without torch.compile or CUDA graphs: its step is the host launching kernels one by one."""
    return not recipes.get(name.split("@")[0]).compile


def _alone(measured: list[tuple], results: list[RecipeResult], timeout: float, log, spares=None) -> set[str]:
    """The host-bound recipes (eager) timed again, ROUNDS passes, once every other worker and idle spare is closed,
    as a user runs them: their step is the CPU's speed. A hand loop of BERT's eager stream beside seven idle
    processes holding CUDA contexts read 6.20 ms a batch, alone 5.59 and 5.77 (an H100, 2026-11-26; one process
    each). The graphed recipes do not move with the host. (The larger gap, 7.0-8.9 ms in the advice against 5.3-5.8
    by hand, was CUPTI left attached by the workers' profiler: tcperf.profiler.detach_after_profiling.) The names
    of the recipes whose workers it closed."""
    if spares is not None:
        spares.close()
    closed = set()
    for r, session in measured:
        if session is not None and not host_bound(r.runs):
            session.close()
            closed.add(r.recipe)
    for i, (r, session) in enumerate(measured):
        if session is not None and host_bound(r.runs) and r.passes and r.step_ms:
            results[i] = RecipeResult.from_result(session.call("time", passes=ROUNDS, fresh=True, timeout=timeout))
            log(f"{r.recipe}: alone, {ROUNDS} passes, ms a step: "
                f"{' '.join(f'{t:.3g}' for t in (results[i].timing or {}).get('samples') or [])}")
    return closed


def _teller(progress, total: int, sb: StreamBench):
    """progress(done, total, seconds left, recipe) as each first pass comes in: the first passes still out take
    at most the cap, then each steady timing a few seconds."""
    started, done = time.perf_counter(), [0]

    def tell(name: str) -> None:
        done[0] += 1
        if progress:
            left = max(0.0, sb.cap_s - (time.perf_counter() - started)) + STEADY_GUESS_S * (total - done[0])
            progress(done[0], total, left, name)
    return tell
