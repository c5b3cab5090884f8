"""The search's worker pool and its timeline (tcperf.advisor.search decides what runs; this runs it).

Each recipe is prepared in a worker of its own (bench.open: a tcperf.runner.Worker holding bench.kind of the
recipe's case), from a thread of its own so that several prepare at once; every thread answers through `ready`,
whatever happened. While the parent times and profiles a recipe, the workers still preparing and the idle spares are
stopped (SIGSTOP, then SIGCONT), since their checks, cuDNN's autotuning and Inductor's benchmarks share the GPU, and
their compiles and imports the CPU a host-bound step needs (on an H200, EfficientNet's fp32 + compile timed at 54 ms
beside them and 11 ms alone).

A recipe's first call (prepare, compile, check: engine.prepare_checked) that a pause fell into reads the paused
seconds back out (unpaused): on an H200 the grid's first calls read 9.7 s for eager recipes whose first pass over a
whole stream takes 0.1-2 s in a plain loop, the length of another recipe's timing (2026-11-28, GRU and conv_seq).

    pool.start(candidate)                           # prepares in a thread
    cand, worker, row, wall = pool.ready.get()      # blocks until one is prepared
    with pool.quiet():
        worker.call("time", timeout=600)            # nothing else runs meanwhile
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time

from ..records import Result

DRAIN_S = 0.05          # after stopping the workers, for the kernels they queued to finish


class Timeline:
    """When each recipe reached each stage, in seconds after the search began: launched, up (its worker), opened
    (prepared, checked), timed (or done, where nothing was timed). The preparing threads write it too: every write
    and read takes the lock."""

    def __init__(self, started: float):
        self.started, self.lock, self.events = started, threading.Lock(), {}

    def launch(self, label: str, tier: str) -> None:
        with self.lock:
            self.events[label] = {"tier": tier, "launched": self.now()}

    def mark(self, label: str, stage: str, at: float | None = None) -> None:
        """`stage` reached now, or at the perf_counter time `at`."""
        with self.lock:
            self.events[label][stage] = self.now() if at is None else round(at - self.started, 2)

    def snapshot(self) -> dict[str, dict]:
        with self.lock:
            return {label: dict(stages) for label, stages in self.events.items()}

    def now(self) -> float:
        return round(time.perf_counter() - self.started, 2)


class Pool:
    """Workers preparing recipes, each from a thread; `lock` guards which are preparing (`opening`), which were
    stopped for a timing (`stopped`) and whether one is under way (`hushed`: a worker that starts now waits)."""

    def __init__(self, bench, timeline: Timeline):
        self.bench, self.timeline = bench, timeline
        self.ready: queue.Queue = queue.Queue()
        self.spares = getattr(bench, "spares", None)   # tcperf.runner.Spares: stopped too while the parent times
        self.lock = threading.Lock()
        self.opening: set = set()
        self.stopped: set = set()
        self.hushed = False
        self.paused: dict = {}          # session -> [[perf_counter stopped, resumed or None], ...]

    def start(self, cand) -> None:
        threading.Thread(target=self._open, args=(cand,), daemon=True,
                         name=f"tcperf-{cand.tier}-{cand.label}").start()

    def _open(self, cand) -> None:
        t0 = time.perf_counter()
        session = row = None
        try:
            session = self.bench.open(cand.item)
            with self.lock:
                self.opening.add(session)
                if self.hushed:
                    self._pause(session)
                    self.stopped.add(session)
            row = session.call(self.bench.kind, session.case, self.bench.device, hold=True,
                               timeout=self.bench.timeout)
            row = self.unpause(session, row)
        except Exception as e:       # noqa: BLE001 - the parent must always get an answer
            row = Result("advise.recipe", {}, cand.label, "error", message=f"{type(e).__name__}: {e}"[:300])
        finally:
            with self.lock:
                self.opening.discard(session)
        up = getattr(session, "up_at", None)
        if up is not None:
            self.timeline.mark(cand.label, "up", at=up)
        self.timeline.mark(cand.label, "opened")
        self.ready.put((cand, session, row, time.perf_counter() - t0))

    @contextlib.contextmanager
    def quiet(self):
        """Inside: every worker still preparing, and the spares, are stopped: the GPU runs only what is timed."""
        self._stop_others()
        try:
            yield
        finally:
            self._resume_others()

    def _stop_others(self) -> None:
        with self.lock:
            self.hushed, self.stopped = True, set(self.opening)
            for s in self.stopped:
                self._pause(s)
            drain = bool(self.stopped)
        if self.spares is not None:
            self.spares.pause()
        if drain:
            time.sleep(DRAIN_S)

    def _resume_others(self) -> None:
        if self.spares is not None:
            self.spares.resume()
        with self.lock:
            for s in self.stopped:
                s.resume()
                self.paused[s][-1][1] = time.perf_counter()
            self.hushed, self.stopped = False, set()

    def unpause(self, session, row: Result, done: bool = False) -> Result:
        """`row` (the session's first call, or a later row carrying it) without the seconds the session was stopped
        in its first call; done: the session's last row, its pauses forgotten."""
        with self.lock:
            pauses = self.paused.pop(session, []) if done else list(self.paused.get(session, []))
        return unpaused(row, pauses)

    def _pause(self, session) -> None:
        """Stop `session`, noting when (under the lock)."""
        session.pause()
        self.paused.setdefault(session, []).append([time.perf_counter(), None])

    def close_spares(self) -> None:
        """No recipe will start now: spares starting up would share the CPU with the runoff's host-bound steps."""
        if self.spares is not None:
            self.spares.close()


def unpaused(row: Result, pauses: list) -> Result:
    """The row with the seconds its worker was stopped during its first call (and its first call at a new shape)
    taken out of first_call_s (new_shape_s): the windows the worker noted on the shared monotonic clock; a pause
    not yet ended counts to the window's end."""
    for seconds, window_key, paused in (("first_call_s", "first_call_window", "first_call_paused_s"),
                                        ("new_shape_s", "new_shape_window", "new_shape_paused_s")):
        window = (row.metrics or {}).pop(window_key, None)
        if not window or not pauses or row.metrics.get(seconds) is None:
            continue
        start, end = window
        stopped = sum(max(0.0, min(end, b if b is not None else end) - max(start, a)) for a, b in pauses)
        if stopped > 0:
            row.metrics[seconds] = max(0.0, row.metrics[seconds] - stopped)
            row.metrics[paused] = stopped
    return row
