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
costs what it costs on a new machine: the eager recipe first, then the others side by side (their compiles are CPU
work; the GPU they share runs their first passes only), each first pass stopped once it has taken longer than the
whole job could take with the eager recipe (or STREAM_CAP_S; for a long job, with no --steps, all start at once
under that cap); then, once every first pass is in, each one's steady passes timed alone, the others idle. On a CPU nothing is timed: the eager and padded recipes run for their accuracy
(padding a model whose outputs change at the real positions is rejected there too).

    found = run(bench, pick, steps=10_000, log=print)    # [RecipeResult] with .stream: first pass, steady, one-time
"""
from __future__ import annotations

import os
import time

from .. import recipes
from . import job
from ..engine import recipe_case
from .measure import Bench, RecipeResult
from .pool import Pool, Timeline

STREAM_CAP_S = 90.0
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
    """What tcperf.advisor.pool.Pool needs of a bench, for stream sessions: each recipe in a fresh worker whose
    Inductor and Triton caches start empty, its first pass limited to `cap_s`."""

    def __init__(self, bench: Bench, keep: tuple):
        self.bench, self.keep = bench, keep      # keep: modules the pick keeps in fp32 (a mixed recipe)
        self.timeout, self.spares, self.cap_s = bench.timeout, None, STREAM_CAP_S

    def case(self, name: str) -> dict:
        b = self.bench
        label = f"{name}+fp32[{len(self.keep)} modules]" if self.keep else None
        case = recipe_case(b.source, name, b.mode, op="advise.stream", shape={"model": b.name, "mode": b.mode},
                           reference=b.reference_file, label=label, suite="advise", steps=b.steps,
                           tolerance=b.tolerance, keep=list(self.keep), base=name if self.keep else None)
        cold = os.path.join(b.folder, "cold-" + "".join(c if c.isalnum() else "_" for c in name))
        return {**case, "task": "stream_session", "cold": cold, "cap_s": self.cap_s}

    def open(self, item):
        if self.bench.source is None:      # in this process: its caches are the process's, not made cold
            from .measure import _LocalSession
            case = {k: v for k, v in self.case(item.recipe).items() if k != "cold"}
            return _LocalSession({**case, "spec": self.bench.spec}, self.bench.device)
        from ..runner import Session
        return Session(self.case(item.recipe), self.bench.device, env=self.bench.env)


class _Item:
    """A recipe as the pool hands it around (its .item is what bench.open receives)."""

    def __init__(self, recipe: str):
        self.recipe, self.label, self.tier = recipe, recipe, "stream"
        self.item = self


def run(bench: Bench, pick: RecipeResult, steps: int | None, log=None, progress=None) -> list[RecipeResult]:
    """The pick's precision's FAMILY on the stream: RecipeResults whose .stream holds the first pass and the steady
    state (its one-time cost in one_time_s)."""
    log = log or (lambda text: None)
    timed = bench.device.type == "cuda"
    root, keep = root_of(pick.runs), tuple(pick.keep_fp32)
    names = family(root, bench.device.type)
    sb = StreamBench(bench, keep)
    pool = Pool(sb, Timeline(time.perf_counter()))
    log(f"the workload: {', '.join(names)} on the stream")
    tell = _teller(progress, len(names), sb)
    if steps is None or not timed:          # the cap is STREAM_CAP_S whatever eager does: all at once
        return _profiled(_measure(pool, names, timed, tell), steps, sb.timeout if timed else None)
    first = _measure(pool, names[:1], timed, tell)
    if first[0][0].passes and first[0][0].step_ms:
        sb.cap_s = cap_for(steps, first[0][0])
    return _profiled(first + _measure(pool, names[1:], timed, tell), steps, sb.timeout)


def _profiled(measured: list[tuple], steps: int | None, timeout: float | None) -> list[RecipeResult]:
    """The job's pick profiled (where its step goes, for the speed of light), then every worker closed; no
    profile without a timeout (nothing was timed: a CPU)."""
    results = [r for r, _ in measured]
    pick = job.pick(results, steps) if timeout else None
    try:
        for i, (r, session) in enumerate(measured):
            if r is pick and session is not None:
                results[i] = RecipeResult.from_row(session.call("profile", timeout))
    finally:
        for _, session in measured:
            if session is not None:
                session.close()
    return results



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


def cap_for(steps: int | None, eager: RecipeResult) -> float:
    """A first pass still warming up when it has taken longer than the whole job with the eager recipe (its own
    steps included) cannot win: stop it there, or at STREAM_CAP_S."""
    if steps is None:
        return STREAM_CAP_S
    length = (eager.stream or {}).get("length") or 1
    return min(STREAM_CAP_S, (steps + length) * eager.step_ms / 1e3 + 1.0)


def _measure(pool: Pool, names: list[str], timed: bool, tell) -> list[tuple]:
    """Open every recipe at once (their first passes), then time each alone: [(RecipeResult, its session)], the
    sessions still open."""
    for name in names:
        pool.timeline.launch(name, "stream")
        pool.start(_Item(name))
    opened = []
    for _ in names:
        opened.append(pool.ready.get())
        tell(opened[-1][0].recipe)
    out = []
    for item, session, row, _ in sorted(opened, key=lambda o: names.index(o[0].recipe)):
        if session is not None and row.get("status") == "ok" and timed:
            row = session.call("time", pool.bench.timeout)
        out.append((RecipeResult.from_row(row), session))
    return out
