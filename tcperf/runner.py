"""Runs cases in worker processes, one per precision group, and survives what a case can do to its worker.

A crash, a CUDA error that kills the process, an out-of-memory or a hang past `timeout` seconds is recorded for
the case it happened in (`error` / `oom` / `timeout`); a fresh worker takes the rest of the group. Each result
reaches `on_result` the moment it arrives, so the caller can store it at once. The parent never spins: it
blocks on a queue fed by a reader thread, with the case's timeout.

    results = run_cases(cases, torch.device("cuda"), on_result=lambda r: store.add_result(run_id, r))
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass

import torch

from .worker import LOG_MARK

STARTUP_TIMEOUT = 300.0   # importing torch and creating a CUDA context, before the first case


@dataclass
class TimingConfig:
    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    flush_l2: bool = True
    graph: bool = False


def group_key(case: dict) -> str:
    """Cases that may share a worker: the same precision (its flags are process-global) and the same task."""
    return f"{case.get('task', '')}|{case['precision']}"


def task_key(case: dict) -> str:
    """Cases that may share a worker whatever their precision: the same task. For kernel cases (`tcperf run`)
    precision.apply sets and restores every global flag a kernel reads (TF32 for matmul and cuDNN, cuDNN autotune),
    cuDNN's autotune cache keys hold the TF32 flag, and nothing compiles; one worker then pays the CUDA start-up
    (context, cuBLAS, cuDNN, the profiler) once instead of once a precision. With a worker a precision, a `tcperf
    run` on an H100 spent 7.7-8.3 s on tf32, bf16 and int8 against 0.8-2.8 s on the others with as many cases: the
    next worker was still starting while the previous precision measured (2026-11-25, 39 s inside, 46 s wall)."""
    return case.get("task", "")


def run_cases(cases: list[dict], device: torch.device, *, timeout: float = 120.0,
              timing: TimingConfig | None = None, profile: bool = False, pad: bool = False,
              on_result=None, extra: dict | None = None, group_by=group_key) -> list[dict]:
    """Measure every case; returns the results in the order they finished. group_by: which cases share a worker
    (group_key: a worker a precision; task_key: one worker a task). A case with a `known` row (a skip its caller
    decided without a worker) is reported first, as it is, and starts no worker.

    While one group measures, the next group's worker is already importing torch (it starts measuring only
    when told to), so a suite of many precisions does not pay the start-up once per group."""
    job = {"device": str(device), "timing": asdict(timing or TimingConfig()), "profile": profile, "pad": pad,
           "sys_path": [p for p in sys.path if p], **(extra or {})}
    results = []
    for case in cases:                       # rows known without a worker (a skip decided in the parent): no
        if case.get("known") is not None:    # process is started for them
            results.append(_with_identity(dict(case["known"]), case))
            if on_result:
                on_result(results[-1])
    groups: dict[str, list[dict]] = {}
    for case in cases:                       # first-appearance order of groups, suite order inside each
        if case.get("known") is None:
            groups.setdefault(group_by(case), []).append(case)
    queue_ = list(groups.values())
    ahead = _Worker({**job, "cases": queue_[0]}) if queue_ else None
    try:
        for i, group in enumerate(queue_):
            first, ahead = ahead, (_Worker({**job, "cases": queue_[i + 1]}) if i + 1 < len(queue_) else None)
            for r in _run_group(group, job, timeout, first):
                results.append(r)
                if on_result:
                    on_result(r)
    finally:
        if ahead is not None:
            ahead.close()
    return results


def _run_group(cases: list[dict], job: dict, timeout: float, worker: "_Worker"):
    pending = cases
    while pending:
        worker = worker or _Worker({**job, "cases": pending})
        finished, failure = 0, None
        try:
            worker.go()
            for event in worker.events(timeout):
                if event["event"] == "result":
                    finished = event["i"] + 1
                    yield _with_identity(event["result"], pending[event["i"]])
                elif event["event"] == "failed":
                    failure = event
        finally:
            worker.close()
            worker = None
        if failure is None:
            return
        if failure.get("i") is None:
            if finished == 0:                 # died before its first case: nothing will work in this group
                for case in pending:
                    yield _failed(case, failure["status"], failure["message"])
                return
            pending = pending[finished:]      # died between cases: a fresh worker takes the rest
            continue
        yield _failed(pending[failure["i"]], failure["status"], failure["message"])
        pending = pending[failure["i"] + 1:]


def _with_identity(result: dict, case: dict) -> dict:
    """The stored row always says which case it was, whatever the task returned."""
    for key in ("op", "suite", "shape", "precision"):
        if result.get(key) in (None, "") and case.get(key) is not None:
            result[key] = case[key]
    return result


def _failed(case: dict, status: str, message: str) -> dict:
    return {"op": case["op"], "suite": case.get("suite", ""), "shape": case.get("shape", {}),
            "precision": case["precision"], "status": status, "message": message,
            "metrics": {"tags": case.get("tags", {})}}


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


class _Worker:
    """One `python -m tcperf.worker` process, its protocol lines on a queue, its stderr in a temporary file."""

    def __init__(self, job: dict, env: dict | None = None):
        self.stderr = tempfile.TemporaryFile(mode="w+")
        # a session's worker leads a process group of its own, with Inductor's compile workers: pause() stops them
        # all, close() ends them all
        self.group = bool(job.get("session"))
        self.proc = subprocess.Popen([sys.executable, "-m", "tcperf.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                                     env={**_worker_env(), **(env or {})}, start_new_session=self.group)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._send(json.dumps(job) + "\n")   # it imports torch, then waits for go()

    def _send(self, text: str, close: bool = False) -> None:
        try:
            self.proc.stdin.write(text)
            self.proc.stdin.flush()
            if close:
                self.proc.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass   # it already died; events() reports that with its stderr

    def go(self) -> None:
        """Start measuring (the previous group's worker has finished, so the GPU is ours)."""
        self._send("go\n", close=True)

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)   # end of file: the worker exited

    def events(self, timeout: float):
        """Yield protocol events; a hang or death ends with one {"event": "failed", "i": case or None} event."""
        current = None
        while True:
            event = self.next_event(STARTUP_TIMEOUT if current is None else timeout, current)
            if event["event"] == "failed":
                yield event
                return
            if event["event"] == "start":
                current = event["i"]
            elif event["event"] == "result":
                current = None
                yield event
            elif event["event"] == "done":
                return

    def next_event(self, limit: float, current=None) -> dict:
        """The next protocol event, or {"event": "failed", ...} when none comes within `limit` seconds (the
        worker is killed) or the worker died."""
        try:
            line = self.lines.get(timeout=limit)
        except queue.Empty:
            self.proc.kill()
            return {"event": "failed", "i": current, "status": "timeout",
                    "message": f"no answer within {limit:.0f} s: worker killed{self.last_logged()}"}
        if line is None:
            return self._death(current)
        return json.loads(line)

    def _death(self, current):
        rc = self.proc.wait()
        tail = self.stderr_tail()
        status = "oom" if "out of memory" in tail.lower() else "error"
        last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
        return {"event": "failed", "i": current, "status": status, "exit": rc,
                "message": f"worker died ({exit_text(rc)}): {last}"[:400]}

    def last_logged(self) -> str:
        """'; last logged: ...', the last line of tcperf's progress log (worker.LOG_MARK) in the worker's stderr:
        where a killed worker was (a batch probe, fp32's reference, ...); '' when it logged nothing."""
        lines = [x for x in self.stderr_tail().splitlines() if x.startswith(LOG_MARK)]
        return f"; last logged: {lines[-1][len(LOG_MARK):].strip()[:240]}" if lines else ""

    def stderr_tail(self, chars: int = 4000) -> str:
        self.stderr.seek(0, os.SEEK_END)
        size = self.stderr.tell()
        self.stderr.seek(max(0, size - chars))
        return self.stderr.read()

    def signal(self, sig) -> None:
        """Send `sig` to the worker (and to its process group, when it leads one)."""
        try:
            if self.group:
                os.killpg(self.proc.pid, sig)
            elif self.proc.poll() is None:
                self.proc.send_signal(sig)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self):
        self._send("", close=True)
        if self.group:
            self.signal(signal.SIGKILL)      # its compile workers too
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.stderr.close()


class Session:
    """One worker that holds one object across commands (tcperf.worker's session mode): the advisor's search keeps a
    prepared recipe alive, to time it again beside others later. Each command has its own timeout; a hang kills the
    worker and a death is read from its stderr, and either comes back as a row with status timeout / error / oom,
    as run_cases records them. Every later command then answers the same row at once.

        s = Session(case, device)
        row = s.call("open", timeout=600)          # the object made: case["task"](case, device, job)
        row = s.call("window", 30, ms=300)         # one of its methods
        s.close()
    """

    def __init__(self, case: dict, device, *, env: dict | None = None, extra: dict | None = None,
                 preload: bool = True, spare: "_Worker | None" = None):
        """spare: a worker from Spares, already up, that becomes this session."""
        self.case, self.ended, self.up = case, None, False
        self.up_at: float | None = None        # perf_counter when the worker had imported torch
        if spare is not None:
            spare._send(json.dumps({"case": case}) + "\n")
            self.worker = spare
            return
        job = {"device": str(device), "sys_path": [p for p in sys.path if p], "session": True,
               "no_preload": not preload, "cases": [case], **(extra or {})}
        self.worker = _Worker(job, env)

    def call(self, name: str, timeout: float, **args) -> dict:
        """Run method `name` in the worker; its row, or the row of the failure that ended the worker."""
        if self.ended is None and not self.up:
            self._expect("up", STARTUP_TIMEOUT)
            self.up = self.ended is None
            self.up_at = time.perf_counter()
        if self.ended is not None:
            return dict(self.ended)
        self.worker._send(json.dumps({"call": name, "args": args}) + "\n")
        self._expect("start", timeout)
        reply = self._expect("reply", timeout) if self.ended is None else None
        return _with_identity(reply["result"], self.case) if reply else dict(self.ended)

    def _expect(self, kind: str, limit: float) -> dict | None:
        event = self.worker.next_event(limit, 0)
        if event["event"] == "failed":
            self.ended = _failed(self.case, event["status"], event["message"])
            self.ended["metrics"]["exit"] = event.get("exit")
            self.close()
            return None
        if event["event"] != kind:
            raise RuntimeError(f"worker protocol: expected {kind!r}, got {event}")
        return event

    def pause(self) -> None:
        """Stop the worker and its compile workers (SIGSTOP) so that they use neither the GPU nor the CPU while
        another recipe is timed (a step whose host work sets its pace slows down beside busy cores)."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, sig) -> None:
        if self.worker is not None:
            self.worker.signal(sig)

    def kill(self) -> None:
        """End the worker now, from any thread: a call under way in another thread answers with its death (the
        advisor stops a recipe that can no longer win); close() still follows."""
        self._signal(signal.SIGKILL)

    def close(self) -> None:
        if self.worker is not None:
            self.resume()                   # a stopped process would not read the end of its input
            self.worker.close()
            self.worker = None
            self.ended = self.ended or _failed(self.case, "error", "the worker was closed")


class Spares:
    """Session workers started ahead of need: each imports torch and makes its CUDA context at once, loads the model
    into host memory when told its source (preload), and becomes a Session the moment a case needs one; every spare
    taken is replaced. They do not start the profiler ahead (tcperf.worker._ready_device's warm-up): a profile
    leaves CUPTI attached where torch does not tear it down, and the eager steps these workers time ran 10-20%
    slower after one (tcperf.profiler.detach_after_profiling); a recipe's own profile comes after its timing. On an
    H200 a worker took 16-19 s from its start to its first command while eight others compiled (the advisor,
    2026-11-24): this takes that off the path of every recipe.

        spares = Spares(device, 8, env)
        spares.preload(case)                 # the model's source: the spares load it now
        session = spares.session(case)       # a Session, as Session(case, device, env=env) but already up
        spares.close()
    """

    def __init__(self, device, count: int, env: dict | None = None):
        self.device, self.count, self.env = device, count, env
        self.job = {"device": str(device), "sys_path": [p for p in sys.path if p], "session": True, "spare": True,
                    "cases": []}
        self.template: dict | None = None
        self.lock = threading.Lock()
        self.idle = [self._start() for _ in range(count)]

    def _start(self) -> "_Worker":
        worker = _Worker(self.job, self.env)
        if self.template is not None:
            worker._send(json.dumps({"preload": self.template}) + "\n")
        return worker

    def preload(self, case: dict) -> None:
        """Tell every spare, now and later, the case whose model to load into host memory."""
        with self.lock:
            self.template = case
            for worker in self.idle:
                worker._send(json.dumps({"preload": case}) + "\n")

    def resize(self, count: int) -> None:
        """Keep at most `count` spares (a large model: each holds a copy in host memory)."""
        with self.lock:
            self.count = count
            while len(self.idle) > count:
                self.idle.pop().close()

    def keep(self, count: int) -> None:
        """Start no more spares; keep at most `count` of those idle (a later stage takes them), close the rest."""
        with self.lock:
            self.count = 0
            while len(self.idle) > count:
                self.idle.pop().close()

    def session(self, case: dict) -> Session:
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
            return Session(case, self.device, env=self.env)
        spare.signal(signal.SIGCONT)            # taken while the spares were stopped: the search decides
        return Session(case, self.device, spare=spare)

    def pause(self) -> None:
        """Stop the idle spares (they may be importing or loading, on the CPU a timed step needs)."""
        with self.lock:
            for worker in self.idle:
                worker.signal(signal.SIGSTOP)

    def resume(self) -> None:
        with self.lock:
            for worker in self.idle:
                worker.signal(signal.SIGCONT)

    def close(self) -> None:
        with self.lock:
            self.count = 0
            for worker in self.idle:
                worker.close()
            self.idle = []
