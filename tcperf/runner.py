"""Worker processes, the parent's side, and the cases run through them.

A Worker is one `python -m tcperf.worker` process (tcperf.worker): its calls are sent in order and answered in
order, each under a timeout; a hang or a death comes back as a Result with status timeout / error / oom (named by
the signal, with the worker's last line), and every later call answers the same at once. InProcess answers the
same calls in this process. Every feature measures through these two: a run of cases (run_cases), a recipe kept
alive for the advisor (`hold=True`, then its methods), a spare (Spares), a rank of many (tcperf.distributed.launch).
The parent never spins: it blocks on a queue fed by a reader thread, with the call's timeout.

    results = run_cases(cases, torch.device("cuda"), Job(profile=True), on_result=store_it)

    worker = Worker(device, own_group=True)
    row = worker.call(engine.RecipeSession, case, device, hold=True, timeout=600)   # prepared and checked
    row = worker.call("window", timeout=60, ms=300)                                  # one of its methods
    worker.close()
"""
from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time

import torch

from .records import Case, Job, Result, TimingConfig, from_wire, name_of, to_wire
from .worker import LOG_MARK, guarded, serve

__all__ = ["Worker", "InProcess", "Spares", "Rows", "run_cases", "run_case", "preload", "Job", "TimingConfig"]

STARTUP_TIMEOUT = 300.0   # importing torch and creating a CUDA context, before the first call


# --- what a worker runs -----------------------------------------------------------------------------------------
def run_case(case: Case, device, job: Job) -> Result:
    """A case measured by its task (a kernel case: tcperf.ops.case.measure_case); an exception is the case's row,
    with status error (oom for out of memory), here as in a worker."""
    from .ops.case import measure_case
    result = guarded(lambda: (case.task or measure_case)(case, device, job))
    return case.own(result) if result.op or result.ok else case.failed(result.status, result.message)


def preload(cases: list[Case]) -> None:
    """Each case's preload (its model into host memory), while another worker measures: what fails here fails again
    in the case itself, where it is recorded."""
    for case in cases:
        if case.preload is not None:
            try:
                case.preload(case)
            except Exception:        # noqa: BLE001 - reported by the case
                pass


# --- a run of cases -------------------------------------------------------------------------------------------------
class Rows(list):
    """A run's rows in the order they came, each completed (complete(row, the rows before)) and handed to
    on_result the moment it is added, so that the caller can store it at once."""

    def __init__(self, on_result=None, complete=None):
        super().__init__()
        self.on_result, self.complete = on_result, complete

    def add(self, row: Result) -> None:
        if self.complete:
            self.complete(row, list(self))
        self.append(row)
        if self.on_result:
            self.on_result(row)


def group_key(case: Case) -> tuple:
    """Cases that may share a worker: the same precision (its flags are process-global) and the same task."""
    return case.task, case.precision


def task_key(case: Case):
    """Cases that may share a worker whatever their precision: the same task. For kernel cases (`tcperf run`)
    precision.apply sets and restores every global flag a kernel reads, and nothing compiles; one worker then pays
    the CUDA start-up once instead of once a precision (an H100, 2026-11-25: with a worker a precision, tf32, bf16
    and int8 took 7.7-8.3 s against 0.8-2.8 s for the others, the next worker still starting)."""
    return case.task


def run_cases(cases: list[Case], device, job: Job = Job(), *, on_result=None, group_by=group_key) -> list[Result]:
    """Measure every case; returns the results in the order they finished, each handed to `on_result` as it
    arrives. A crash, an out-of-memory or a hang is recorded for its case and the rest of the group goes to a fresh
    worker. group_by: which cases share a worker (group_key: a worker a precision; task_key: one worker a task). A
    case with a `known` row (a skip its caller decided) is reported first, as it is, and starts no worker. While one
    group measures, the next group's worker is already starting and preloading."""
    device, rows = torch.device(device), Rows(on_result)
    for case in cases:
        if case.known is not None:
            rows.add(case.own(case.known.replace(metrics=dict(case.known.metrics))))
    groups: dict = {}
    for case in cases:                       # first-appearance order of groups, suite order inside each
        if case.known is None:
            groups.setdefault(group_by(case), []).append(case)
    ordered = list(groups.values())
    ahead = _start(ordered[0], device, job) if ordered else None
    try:
        for i, group in enumerate(ordered):
            first, ahead = ahead, (_start(ordered[i + 1], device, job) if i + 1 < len(ordered) else None)
            for r in _run_group(group, device, job, first):
                rows.add(r)
    finally:
        if ahead is not None:
            ahead.close()
    return rows


def _start(cases: list[Case], device, job: Job) -> "Worker":
    worker = Worker(device, profiler=job.profile)
    worker.send(preload, cases, quiet=True)
    return worker


def _run_group(cases: list[Case], device, job: Job, worker: "Worker"):
    pending = list(cases)
    while pending:
        worker = worker or _start(pending, device, job)
        try:
            for r in _on(worker, pending, device, job):
                yield r
        finally:
            worker.close()
            worker = None


def _on(worker: "Worker", pending: list[Case], device, job: Job):
    """The pending cases on one worker, each removed from `pending` as its row is yielded, until the worker ends. A
    worker that ended before its first case started fails them all: nothing would work in this group."""
    first = True
    while pending:
        worker.case = pending[0]
        r = worker.call(run_case, pending[0], device, job, timeout=job.timeout)
        if worker.ended is not None and not worker.calls_started:
            for case in pending:
                yield case.failed(r.status, r.message, exit=r.metrics.get("exit"))
            pending.clear()
            return
        if first and worker.started:
            r.metrics["worker_start_s"] = worker.started     # where a run's time goes: stored with its first row
        first = False
        yield r
        pending.pop(0)
        if worker.ended is not None:
            return


# --- a worker process ---------------------------------------------------------------------------------------------
def exit_text(rc: int) -> str:
    """'exit 3', or 'killed by SIGSEGV' for a negative return code."""
    if rc is not None and rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit {rc}"


def _worker_env() -> dict:
    """The parent's environment, with this tcperf importable even when it runs from a source tree."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "TCPERF_PARENT": str(os.getpid())}


class Worker:
    """One `python -m tcperf.worker` process: its protocol lines on a queue (`inbox`, shared by many workers where
    given: lines arrive as (worker, line)), its stderr in a temporary file. `case`: the case its answers belong to
    (a failure is recorded as that case's row). own_group: the worker leads a process group of its own, with
    Inductor's compile workers, so that pause() stops them all and close() ends them all."""

    def __init__(self, device, *, env: dict | None = None, own_group: bool = False, profiler: bool = False,
                 case: Case | None = None, inbox: queue.Queue | None = None):
        self.device, self.case, self.own_group = torch.device(device), case, own_group
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "tcperf.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                                     env={**_worker_env(), **(env or {})}, start_new_session=own_group)
        self.lines: queue.Queue = inbox if inbox is not None else queue.Queue()
        self.shared = inbox is not None
        self.started: dict | None = None      # seconds the worker took to import torch and ready the device
        self.up_at: float | None = None       # perf_counter when it said so
        self.ended: Result | None = None      # the failure that ended it
        self.calls_started = 0                # calls whose answer was wanted that it began
        self.where = ""                       # the last beat it sent
        self.waiting: collections.deque = collections.deque()      # for each call sent: is its answer wanted?
        threading.Thread(target=self._read, daemon=True).start()
        self._write({"device": str(self.device), "sys_path": [p for p in sys.path if p], "profiler": profiler})

    # sending and answering
    def send(self, target, *args, hold: bool = False, quiet: bool = False, **kwargs) -> None:
        """Call `target` (a module-level function or class; a method name: the held object's method) with these
        arguments (records, plain data). hold: keep the object made. quiet: its answer is read and dropped."""
        request = {"method": target} if isinstance(target, str) else {"call": name_of(target), "hold": hold}
        request.update(args=to_wire(list(args)), kwargs=to_wire(kwargs))
        self.waiting.append(not quiet)
        self._write(request)

    def reply(self, timeout: float):
        """The answer to the oldest call whose answer is wanted (the quiet ones before it are read and dropped), or
        the failure that ended the worker: no answer within `timeout` (it is killed), or its death."""
        while self.waiting:
            wanted = self.waiting.popleft()
            answer = self._answer(timeout if wanted else max(timeout, STARTUP_TIMEOUT), wanted)
            if wanted or self.ended is not None:
                return self._owned(answer)
        raise RuntimeError("worker protocol: no call is waiting for its answer")

    def call(self, target, *args, timeout: float, hold: bool = False, **kwargs):
        self.send(target, *args, hold=hold, **kwargs)
        return self.reply(timeout)

    def _answer(self, timeout: float, wanted: bool):
        if self.ended is None and self.started is None:
            up = self._expect("up", STARTUP_TIMEOUT)
            if up is not None:
                self.started, self.up_at = up["started"], time.perf_counter()
        if self.ended is None and self._expect("start", timeout) is not None:
            self.calls_started += wanted
            reply = self._expect("reply", timeout)
            if reply is not None:
                return from_wire(reply["result"])
        return self.ended.replace(metrics=dict(self.ended.metrics))

    def _owned(self, answer):
        if self.case is not None and isinstance(answer, Result):
            if not answer.op and answer.status != "ok":
                return self.case.failed(answer.status, answer.message, **answer.metrics)
            return self.case.own(answer)
        return answer

    def _expect(self, kind: str, limit: float) -> dict | None:
        """The next event of this kind (beats between restart the limit: the worker is making progress), or None
        when the worker ended (self.ended says how)."""
        while True:
            event = self.next_event(limit)
            if event["event"] == "failed":
                self.ended = Result("", {}, "", event["status"], message=event["message"],
                                    metrics={"exit": event.get("exit")})
                self.close()
                return None
            if event["event"] == "beat":
                self.where = event["label"]
                continue
            if event["event"] != kind:
                raise RuntimeError(f"worker protocol: expected {kind!r}, got {event}")
            return event

    def next_event(self, limit: float) -> dict:
        """The next protocol event, or {"event": "failed", ...} when none comes within `limit` seconds (the worker
        is killed) or the worker died."""
        try:
            line = self.lines.get(timeout=limit)
        except queue.Empty:
            self.kill()
            return {"event": "failed", "status": "timeout",
                    "message": f"no answer within {limit:.0f} s: worker killed{self.last_logged()}"}
        return self.event(line[1] if self.shared else line)

    def event(self, line: str | None) -> dict:
        """A protocol line as its event; None (the end of its output) as its death."""
        if line is None:
            return self._death()
        return json.loads(line)

    def _death(self) -> dict:
        rc = self.proc.wait()
        tail = self.stderr_tail()
        status = "oom" if "out of memory" in tail.lower() else "error"
        last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
        return {"event": "failed", "status": status, "exit": rc,
                "message": f"worker died ({exit_text(rc)}): {last}"[:400]}

    # the process
    def _write(self, message: dict, close: bool = False) -> None:
        try:
            self.proc.stdin.write(json.dumps(message, default=str) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass   # it already died; its answer says so, with its stderr

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put((self, line) if self.shared else line)
        self.lines.put((self, None) if self.shared else None)   # end of file: the worker exited

    def last_logged(self) -> str:
        """'; last logged: ...', the last line of tcperf's progress log (worker.LOG_MARK) in the worker's stderr:
        where a killed worker was (a batch probe, fp32's reference, ...); '' when it logged nothing."""
        lines = [x for x in self.stderr_tail().splitlines() if x.startswith(LOG_MARK)]
        return f"; last logged: {lines[-1][len(LOG_MARK):].strip()[:240]}" if lines else ""

    def stderr_tail(self, chars: int = 4000) -> str:
        if self.stderr.closed:
            return ""
        self.stderr.seek(0, os.SEEK_END)
        self.stderr.seek(max(0, self.stderr.tell() - chars))
        return self.stderr.read()

    def signal(self, sig) -> None:
        """Send `sig` to the worker (and to its process group, when it leads one)."""
        try:
            if self.own_group:
                os.killpg(self.proc.pid, sig)
            elif self.proc.poll() is None:
                self.proc.send_signal(sig)
        except (ProcessLookupError, PermissionError):
            pass

    def pause(self) -> None:
        """Stop the worker and its compile workers (SIGSTOP) so that they use neither the GPU nor the CPU while
        another recipe is timed (a step whose host work sets its pace slows down beside busy cores)."""
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def kill(self) -> None:
        """End the worker now, from any thread: a call under way in another thread answers with its death."""
        self.signal(signal.SIGKILL)

    def close(self) -> None:
        if self.proc.returncode is None:
            self.resume()                   # a stopped process would not read the end of its input
            try:
                self.proc.stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass
            if self.own_group:
                self.signal(signal.SIGKILL)      # its compile workers too
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
        if not self.stderr.closed:
            self.stderr.close()
        if self.ended is None:
            self.ended = Result("", {}, "", "error", message="the worker was closed")


class InProcess:
    """A worker's calls answered in this process, for what no worker can receive (a model pickle cannot carry) and
    for a rank an outer torchrun started: the same calls and answers, without a pipe, a timeout or a death of its
    own. Nothing runs here between calls, so pause and resume have nothing to stop."""

    def __init__(self, device, *, case: Case | None = None):
        self.device, self.case = torch.device(device), case
        self.held: dict = {}
        self.answers: collections.deque = collections.deque()
        self.started, self.ended, self.calls_started, self.where = None, None, 0, ""

    def send(self, target, *args, hold: bool = False, quiet: bool = False, **kwargs) -> None:
        request = {"method": target} if isinstance(target, str) else {"call": target, "hold": hold}
        answer = guarded(lambda: serve(self.held, request, args, kwargs))
        self.calls_started += not quiet
        if not quiet:
            self.answers.append(answer)

    def reply(self, timeout: float):
        answer = self.answers.popleft()
        if self.case is not None and isinstance(answer, Result):
            return self.case.own(answer) if answer.op or answer.ok else \
                self.case.failed(answer.status, answer.message)
        return answer

    def call(self, target, *args, timeout: float, hold: bool = False, **kwargs):
        self.send(target, *args, hold=hold, **kwargs)
        return self.reply(timeout)

    def pause(self) -> None:
        pass

    resume = kill = pause

    def close(self) -> None:
        self.held.clear()
        self.ended = self.ended or Result("", {}, "", "error", message="the worker was closed")


class Spares:
    """Workers started ahead of need: each imports torch and makes its CUDA context at once, loads the model into host
    memory when told its case (preload), and is handed out the moment a case needs a worker; every one taken is
    replaced (an H200, 2026-11-24: a worker took 16-19 s to its first command while eight others compiled). They do
    not start the profiler ahead: eager steps ran 10-20% slower after one (tcperf.profiler.detach_after_profiling).

        spares = Spares(device, 8, env)
        spares.preload(case)                 # the model's source: the spares load it now
        worker = spares.take(case)           # a Worker, as Worker(device, env=env, own_group=True) but already up
        spares.close()
    """

    def __init__(self, device, count: int, env: dict | None = None):
        self.device, self.count, self.env = device, count, env
        self.template: Case | None = None
        self.lock = threading.Lock()
        self.idle = [self._start() for _ in range(count)]

    def _start(self) -> Worker:
        worker = Worker(self.device, env=self.env, own_group=True)
        if self.template is not None:
            worker.send(preload, [self.template], quiet=True)
        return worker

    def preload(self, case: Case) -> None:
        """Tell every spare, now and later, the case whose model to load into host memory."""
        with self.lock:
            self.template = case
            for worker in self.idle:
                worker.send(preload, [case], quiet=True)

    def resize(self, count: int) -> None:
        """Keep at most `count` spares (a large model: each holds a copy in host memory)."""
        with self.lock:
            self.count = count
            while len(self.idle) > count:
                self.idle.pop().close()

    def take(self, case: Case) -> Worker:
        """A worker for `case`: an idle spare (a new worker when none is left)."""
        with self.lock:
            spare = None
            while self.idle and spare is None:
                spare = self.idle.pop(0)
                if spare.proc.poll() is not None:        # died while waiting: not worth a recipe
                    spare.close()
                    spare = None
            if self.count:
                self.idle.append(self._start())
        if spare is None:
            return Worker(self.device, env=self.env, own_group=True, case=case)
        spare.resume()                          # taken while the spares were stopped: the search decides
        spare.case = case
        return spare

    def pause(self) -> None:
        """Stop the idle spares (they may be importing or loading, on the CPU a timed step needs)."""
        with self.lock:
            for worker in self.idle:
                worker.pause()

    def resume(self) -> None:
        with self.lock:
            for worker in self.idle:
                worker.resume()

    def close(self) -> None:
        with self.lock:
            self.count = 0
            for worker in self.idle:
                worker.close()
            self.idle = []
