"""A prepared step timed on a workload's stream (tcperf.workload): the first pass, which pays every compile,
recompile and CUDA graph capture, apart from the steady state once all of it is warm.

The first pass is wall time (a host clock, the GPU synchronised at its end): compiles are host work. Compiles and
CUDA graph recordings are counted, and the seconds they took summed, from Dynamo's own callbacks
(torch._dynamo.callback_handler: a start and an end around each compile and each recording). It stops early, and
says why, when
    - a compiled recipe compiled again at each of the first RECOMPILE_STOP new shapes: it recompiles per shape (a
      compile for every shape it meets, up to Dynamo's recompile limit); such a recipe is never advised;
    - the job's own arithmetic says it cannot win (Limit), or the advice's --budget has run out. Nothing else
      stops a warm-up: no cap in seconds.
A second pass follows, on the wall clock too: CUDA graph trees (mode="reduce-overhead") run a shape's first call
as a warm-up and record its graph at the second, so their one-time cost ends only there; the one-time cost is
both passes less two steady ones. The steady state: `passes` more passes over the whole stream, each between two
CUDA events (perf_counter on a CPU); its median over the stream's steps is the recipe's step time on this workload.

    first = first_pass(step.call, stream, device, limit=Limit(steps=10_000, sol_ms=2.0, best_s=90.0))  # FirstPass
    steady = steady_passes(step.call, stream, device, passes=3)           # {"pass_ms": [...], "median_ms", ...}
"""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

import torch

from . import accuracy
from .workload import CHECK_STEPS, shape_key

RECOMPILE_STOP = 3        # automatic dynamic compiles again at the first new shape (symbolic), and may once more
                          # where a guard on the symbolic size's range fails (an H100: Inductor's pad_mm guarded
                          # 2 <= L <= 7 on a tiny encoder, compiled again at L = 28, then no more): three in a row
                          # tell a recompile per shape from it
PASSES = 5             # a host-bound eager step's passes spread widely (BERT-base on an H100: 5.9-7.4 ms a batch)


class Compiles:
    """Inside: Dynamo's compiles (frames compiled, LAZY_BACKWARD included) and Inductor's CUDA graph recordings,
    with the seconds they took; `graphs`: Dynamo's unique_graphs counter over the same span. Where Dynamo was never
    imported (an eager recipe: torch.compile imports it) nothing can compile, and nothing is watched: importing it
    cost an eager recipe's first pass 3-5 s of wall on an H200's host (its pass 1.5-2.4 s)."""

    def __init__(self):
        self.compiles = self.captures = 0
        self.compile_s = self.capture_s = 0.0
        self._t0 = self._handler = None
        self._graphs0 = 0

    def __enter__(self):
        if "torch._dynamo" not in sys.modules:
            return self
        from torch._dynamo.utils import counters
        self._graphs0 = counters["stats"]["unique_graphs"]
        self._handler = getattr(torch._dynamo, "callback_handler", None)
        if self._handler is not None:
            self._handler.register_start_callback(self._start)
            self._handler.register_end_callback(self._end)
        return self

    def __exit__(self, *exc):
        if self._handler is not None:
            self._handler.remove_start_callback(self._start)
            self._handler.remove_end_callback(self._end)

    @property
    def graphs(self) -> int:
        if "torch._dynamo" not in sys.modules:
            return 0
        from torch._dynamo.utils import counters
        return counters["stats"]["unique_graphs"] - self._graphs0

    def _recording(self, args) -> bool:
        return getattr(args.callback_trigger, "name", "") == "CUDAGRAPH_RECORDING"

    def _start(self, args) -> None:
        self._t0 = time.perf_counter()
        if self._recording(args):
            self.captures += 1
        else:
            self.compiles += 1

    def _end(self, args) -> None:
        if self._t0 is None:
            return
        seconds, self._t0 = time.perf_counter() - self._t0, None
        if self._recording(args):
            self.capture_s += seconds
        else:
            self.compile_s += seconds


@dataclass(frozen=True)
class Limit:
    """When a warm-up stops. After `elapsed` seconds and `done` steps of the stream, a job of `steps` steps costs at
    least elapsed + (steps - done) x sol_ms (the step's speed of light): once that passes `best_s`, the cheapest job
    measured so far, it cannot win. budget_s: the seconds the advice's --budget leaves it. steps None (a long job)
    or no job measured yet: only the budget stops it."""
    steps: int | None = None
    sol_ms: float = 0.0
    best_s: float = math.inf
    budget_s: float | None = None

    def reason(self, elapsed: float, done: int) -> str:
        if self.budget_s is not None and elapsed > self.budget_s:
            return f"the --budget ran out after {elapsed:.0f} s of its warm-up ({done} steps)"
        if self.steps is None or math.isinf(self.best_s):
            return ""
        least = elapsed + max(0, self.steps - done) * self.sol_ms / 1e3
        if least <= self.best_s:
            return ""
        return (f"cannot win: after {elapsed:.0f} s of warm-up ({done} steps) its job of {self.steps:,} steps costs at "
                f"least {least:.0f} s even at the speed of light ({self.sol_ms:.3g} ms a step); the cheapest job "
                f"measured takes {self.best_s:.0f} s")


@dataclass
class FirstPass:
    seconds: float                 # wall time of the steps it ran
    steps: int                     # steps it ran (all of the stream unless stopped)
    compiles: int                  # Dynamo compiles (callbacks), graphs: Dynamo's unique_graphs
    graphs: int
    captures: int                  # CUDA graph recordings
    compile_s: float
    capture_s: float
    keys: int                      # distinct shapes (or buckets) the compiled code met
    stopped: str = ""              # why it stopped early, or ""
    outputs: list = field(default_factory=list)   # the first CHECK_STEPS steps' outputs (accuracy.check_outputs)

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "outputs"}


def first_pass(call, stream: list[tuple], device, *, limit: Limit = Limit(), key=shape_key,
               per_shape: int = RECOMPILE_STOP, clock=time.perf_counter) -> FirstPass:
    """Every step of the stream once, from cold. key(tensors): what makes a new shape for the compiled code (a
    padded recipe's bucket); per_shape: stop a recipe once it has compiled again at this many new shapes in a
    row; 1 for a recipe compiled static (dynamic=False cannot make a symbolic graph: its first recompile proves a
    compile a shape), 0 never (an eager recipe). limit: when the job's arithmetic or the budget stops it."""
    device = torch.device(device)
    outputs, seen, in_a_row, stopped = [], set(), 0, ""
    with Compiles() as watch:
        t0 = clock()
        for i, x in enumerate(stream):
            before, new = watch.graphs, key(x) not in seen
            out = call(x)
            if i < CHECK_STEPS:
                outputs.append(accuracy.check_outputs(out))     # sync point: copied to the host
            del out
            if new and seen:       # a new shape that compiled nothing proves it is not once a shape: never stop
                in_a_row = in_a_row + 1 if watch.graphs > before else -len(stream)
            seen.add(key(x))
            stopped = _stop_reason(per_shape, in_a_row, limit, clock() - t0, i + 1, len(stream))
            if stopped:
                break
        _sync(device)
        seconds = clock() - t0
    return FirstPass(seconds, i + 1, watch.compiles, watch.graphs, watch.captures, watch.compile_s, watch.capture_s,
                     len(seen), stopped, outputs)


def _stop_reason(per_shape: int, in_a_row: int, limit: Limit, elapsed: float, done: int, total: int) -> str:
    if done == total:
        return ""
    if per_shape and in_a_row >= per_shape:
        return ("compiled again at the first new shape, static (dynamic=False): it recompiles per shape"
                if in_a_row == 1 else f"compiled again at each of the first {in_a_row} new shapes: it recompiles "
                "per shape")
    return limit.reason(elapsed, done)


def wall_pass(call, stream: list[tuple], device) -> float:
    """Seconds one pass takes on the wall clock, the GPU synchronised at its end (the second warm-up pass)."""
    device = torch.device(device)
    t0 = time.perf_counter()
    for x in stream:
        call(x)
    _sync(device)
    return time.perf_counter() - t0


def steady_passes(call, stream: list[tuple], device, passes: int = PASSES) -> dict:
    """`passes` passes over the warm stream, each timed whole: {"pass_ms": [...], "median_ms", "step_ms" (median
    pass over the stream's steps), "spread" (max - min over the median)}."""
    device = torch.device(device)
    return summary([_one_pass(call, stream, device) for _ in range(passes)], len(stream))


def summary(times: list[float], length: int) -> dict:
    """Passes' ms over a stream of `length` steps, summarised as steady_passes returns them."""
    median = sorted(times)[len(times) // 2]
    return {"pass_ms": times, "median_ms": median, "step_ms": median / length,
            "spread": (max(times) - min(times)) / median if median > 0 else 0.0}


def _one_pass(call, stream: list[tuple], device: torch.device) -> float:
    if device.type != "cuda":
        return wall_pass(call, stream, device) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for x in stream:
        call(x)
    end.record()
    end.synchronize()      # sync point: the pass's time is read once it has run
    return start.elapsed_time(end)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)      # sync point: the wall clock ends with the GPU's work
