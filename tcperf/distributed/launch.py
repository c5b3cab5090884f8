"""Runs cases on N ranks of one host, or on the ranks an outer torchrun started, with runner.run_cases's signature.

Each case runs on every rank (its `task`, 'module:function', called as task(case, device, job) as in tcperf.worker);
rank 0's row is the case's result. With `nproc` on one host, tcperf starts the ranks itself through
torch.multiprocessing (spawn; NCCL on GPUs, one GPU a rank; gloo on the CPU) and follows them from this process:

- a rank that raises or dies: its case is recorded (error, or oom) with the rank and its last line, the other ranks
  are stopped (torch.multiprocessing's ProcessContext.join), and fresh ranks take the remaining cases;
- a rank that makes no progress for `timeout` seconds: the case is recorded as timeout, naming the ranks that were
  behind (ranks beat at each stage of a case, so the ones that waited in a collective are told from the one that
  hung), and every rank is killed;
- ranks die with this process (PR_SET_PDEATHSIG on Linux): nothing is left running.

Under an outer `torchrun --nnodes ... tcperf ...` (RANK and WORLD_SIZE set) the cases run in this process as one
rank of that world and rank 0 keeps the rows; torchrun stops the others when one fails.

    rows = run_cases(cases, torch.device("cuda"), nproc=2, timeout=120, on_result=store_it)
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import socket
import time
from dataclasses import asdict
from datetime import timedelta

import torch

from .. import tasks
from ..errors import UserError
from ..runner import TimingConfig, _failed, _with_identity

POLL_S = 0.5           # how often the parent looks at its ranks between their messages
STARTUP_S = 300.0      # importing torch and joining the process group, before the first case
GRACE_S = 2.0          # a failed rank's peers get this long to exit before they are killed
MAX_CPU_RANKS = 64

_EVENTS = None         # in a rank started here: the queue its beats and results go to
_RANK = 0


# --- the world ------------------------------------------------------------------------------------------------------
def under_torchrun() -> bool:
    """True when an outer launcher (torchrun) made this process one rank of a world."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def rank() -> int:
    return int(os.environ.get("RANK", 0)) if under_torchrun() else 0


def check_nproc(nproc: int | None, device: torch.device) -> int:
    """The number of ranks to start: --nproc, or every GPU visible (2 on a CPU); UserError when it cannot run."""
    if under_torchrun():
        return int(os.environ["WORLD_SIZE"])
    gpus = torch.cuda.device_count() if device.type == "cuda" else None
    if nproc is None:
        return gpus or 2
    if nproc < 1:
        raise UserError(f"bad --nproc {nproc}; give 1 to {gpus or MAX_CPU_RANKS}")
    if gpus is not None and nproc > gpus:
        raise UserError(f"--nproc {nproc}: only {gpus} CUDA GPU(s) visible (one rank a GPU)")
    if nproc > MAX_CPU_RANKS:
        raise UserError(f"--nproc {nproc}: at most {MAX_CPU_RANKS} ranks on a CPU")
    return nproc


def backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def join_world(device_type: str, timeout_s: float) -> torch.device:
    """This process's device, in the process group (made here from the environment unless it exists)."""
    import torch.distributed as dist
    local = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local) if device_type == "cuda" else torch.device("cpu")
    if not dist.is_initialized():
        kw = {"device_id": device} if device.type == "cuda" else {}
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend(device), timeout=timedelta(seconds=timeout_s), **kw)
    return device


def slowest(values: list[float], device) -> list[float]:
    """Element by element, the largest of every rank's values (all_reduce MAX)."""
    import torch.distributed as dist
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def beat(label: str) -> None:
    """Tell the parent this rank reached `label` (a stage of the current case); nothing outside a launched rank."""
    if _EVENTS is not None:
        _EVENTS.put(("beat", _RANK, None, label))


# --- the parent -----------------------------------------------------------------------------------------------------
def run_cases(cases: list[dict], device, *, nproc: int, timeout: float = 120.0, timing: TimingConfig | None = None,
              profile: bool = False, pad: bool = False, on_result=None, extra: dict | None = None) -> list[dict]:
    """Every case on `nproc` ranks; rank 0's rows in order, each handed to `on_result` as it arrives."""
    device = torch.device(device)
    job = {"device": device.type, "timing": asdict(timing or TimingConfig()), "profile": profile, "timeout": timeout,
           **(extra or {})}
    results: list[dict] = []

    def emit(r: dict) -> None:
        results.append(r)
        if on_result:
            on_result(r)

    if under_torchrun():
        _in_process(cases, job, emit)
        return results
    pending = list(cases)
    while pending:
        finished, failure = _launch(pending, nproc, job, emit)
        pending = _after(pending, finished, failure, emit)
    return results


def _after(pending: list[dict], finished: int, failure: dict | None, emit) -> list[dict]:
    """The cases fresh ranks take after a launch ended: the failed case recorded and skipped; every case failed
    when the ranks never started one (nothing would work)."""
    if failure is None:
        return []
    i = failure.pop("i")
    if i < 0:
        for case in pending:
            emit(_failed(case, **failure))
        return []
    if i < finished:               # a rank died after rank 0 reported its last case
        return pending[finished:]
    emit(_failed(pending[i], **failure))
    return pending[i + 1:]


def _in_process(cases: list[dict], job: dict, emit) -> None:
    device = join_world(job["device"], job["timeout"] + STARTUP_S)
    for case in cases:
        result = task_of(case)(case, device, job)
        if rank() == 0:
            emit(_with_identity(result, case))


def _launch(cases: list[dict], nproc: int, job: dict, emit) -> tuple[int, dict | None]:
    """Start `nproc` ranks on `cases` and follow them: (cases finished, the failure that ended them or None)."""
    events = multiprocessing.get_context("spawn").Queue()
    job = {**job, "cases": cases, "nproc": nproc, "port": free_port()}
    ranks = torch.multiprocessing.start_processes(_rank_main, args=(job, events), nprocs=nproc, join=False,
                                                  start_method="spawn")
    try:
        return _follow(ranks, events, _Progress(nproc, job["timeout"]), cases, emit)
    finally:
        _stop(ranks)
        events.close()


def _follow(ranks, events, progress: "_Progress", cases: list[dict], emit) -> tuple[int, dict | None]:
    finished = 0
    raised: list[int] = []          # ranks in the order they said they raised

    def take(event) -> None:
        nonlocal finished
        kind, who, i, payload = event
        if kind == "result":
            emit(_with_identity(payload, cases[i]))
            finished = i + 1
        elif kind == "raised":
            raised.append(who)
        else:
            progress.heard(who, kind, payload)

    def raised_in_order() -> list[int]:
        _drain(events, take)
        return raised

    while True:
        try:
            take(events.get(timeout=POLL_S))
        except queue.Empty:
            pass
        if progress.all_done():
            return finished, None
        failure = _exited(ranks, raised_in_order) or progress.stuck()
        if failure:
            return finished, {"i": progress.case, **failure}


def _drain(events, take) -> None:
    """Every event the ranks sent before they stopped (all ranks are joined when this is called)."""
    while True:
        try:
            take(events.get_nowait())
        except queue.Empty:
            return


def _exited(ranks, raised) -> dict | None:
    """The failure of a rank that raised or died (the others are stopped by join), else None. When several ranks
    raised, the first to say so is named: torch names the lowest, often a peer that lost it in a collective (gloo:
    'Connection closed by peer'). `raised()` gives the ranks in the order they said they raised."""
    from torch.multiprocessing import ProcessExitedException, ProcessRaisedException
    try:
        ranks.join(timeout=0, grace_period=GRACE_S)
    except ProcessRaisedException as e:
        index, text = e.error_index, str(e)
        first = next((r for r in raised() if os.access(ranks.error_files[r], os.R_OK)), index)
        if first != index:
            with open(ranks.error_files[first], "rb") as fh:
                index, text = first, str(pickle.load(fh))
        lines = [line for line in text.strip().splitlines() if line.strip()]
        status = "oom" if "out of memory" in text.lower() else "error"
        return {"status": status, "message": f"rank {index}: {lines[-1].strip() if lines else 'raised'}"[:400]}
    except ProcessExitedException as e:
        return {"status": "error", "message": f"rank {e.error_index}: died ({e})"[:400]}
    return None


def _stop(ranks) -> None:
    """Kill every rank still alive and reap them all."""
    for p in ranks.processes:
        if p.is_alive():
            p.kill()
    for p in ranks.processes:
        p.join()


class _Progress:
    """What each rank last said: a hang is `timeout` seconds (STARTUP_S before the first case) without a word
    from any rank; the ranks with the fewest beats are the ones behind."""

    def __init__(self, nproc: int, timeout: float):
        self.timeout = timeout
        self.beats = [0] * nproc
        self.where = ["starting"] * nproc
        self.done = [False] * nproc
        self.case = -1
        self.last = time.monotonic()

    def heard(self, who: int, kind: str, label) -> None:
        self.last = time.monotonic()
        if kind == "done":
            self.done[who] = True
            return
        if kind == "case" and label > self.case:
            self.case, self.beats = label, [0] * len(self.beats)
        self.beats[who] += 1
        self.where[who] = label if kind == "beat" else f"case {label} start"

    def all_done(self) -> bool:
        return all(self.done)

    def stuck(self) -> dict | None:
        limit = STARTUP_S if self.case < 0 else self.timeout
        silent = time.monotonic() - self.last
        if silent < limit:
            return None
        least = min(self.beats)
        behind = [r for r, b in enumerate(self.beats) if b == least]
        waited = [r for r in range(len(self.beats)) if r not in behind]
        said = "; ".join(f"rank {r} at {self.where[r]!r}" for r in behind)
        rest = f"; rank(s) {', '.join(map(str, waited))} waited for it" if waited else ""
        return {"status": "timeout",
                "message": f"no progress for {silent:.0f} s: {said}{rest}; every rank stopped"[:400]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- a rank ---------------------------------------------------------------------------------------------------------
def task_of(case: dict):
    return tasks.resolve(case["task"])


def _rank_main(index: int, job: dict, events) -> None:
    """One rank started by _launch: join the world, run every case, send rank 0's rows to the parent."""
    global _EVENTS, _RANK
    _die_with_parent()
    _EVENTS, _RANK = events, index
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(job["port"]), RANK=str(index),
                      WORLD_SIZE=str(job["nproc"]), LOCAL_RANK=str(index), LOCAL_WORLD_SIZE=str(job["nproc"]))
    import torch.distributed as dist
    device = join_world(job["device"], job["timeout"] + STARTUP_S)
    for i, case in enumerate(job["cases"]):
        events.put(("case", index, None, i))
        try:
            result = task_of(case)(case, device, job)
        except Exception:
            events.put(("raised", index, i, None))    # before this rank exits and its peers fail in turn
            raise
        if index == 0:
            events.put(("result", index, i, result))
    events.put(("done", index, None, None))
    dist.barrier()                  # no rank tears down gloo/NCCL while another is mid-collective
    dist.destroy_process_group()


def _die_with_parent() -> None:
    """Linux: this rank gets SIGKILL when the process that started it dies, however it dies."""
    try:
        import ctypes
        import signal
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)   # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:          # the parent died before prctl took effect
        os._exit(1)
