"""Runs cases on N ranks of one host, or on the ranks an outer torchrun started, with runner.run_cases's signature.

Each case runs on every rank (its task, called as task(case, device, job) in the world the ranks joined); rank 0's
row is the case's result. With `nproc` on one host, the ranks are tcperf workers (tcperf.runner.Worker, one a rank,
one GPU a rank: NCCL on GPUs, gloo on the CPU), their answers and beats read from one queue. A rank that raises or
dies (the case recorded as error or oom, naming it), or no word from any rank for `timeout` seconds (timeout, naming
the ranks behind: those with the fewest beats), kills every rank, and fresh ranks take the remaining cases; ranks
end with the process that started them (tcperf.worker watches its parent): nothing is left running.

Under an outer `torchrun --nnodes ... tcperf ...` (RANK and WORLD_SIZE set) the cases run in this process as one
rank of that world and rank 0 keeps the rows; torchrun stops the others when one fails.

    rows = run_cases(cases, torch.device("cuda"), Job(timeout=120), nproc=2, on_result=store_it)
"""
from __future__ import annotations

import os
import queue
import socket
import time
from datetime import timedelta

import torch

from ..errors import UserError
from ..records import Case, Job, Result, from_wire
from ..runner import Rows, Worker
from ..worker import beat  # noqa: F401  (a rank's tasks say where they are: launch.beat("... check"))

POLL_S = 0.5           # how often the parent looks at its ranks between their messages
STARTUP_S = 300.0      # importing torch and joining the process group, before the first case
MAX_CPU_RANKS = 64


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


# --- the parent -----------------------------------------------------------------------------------------------------
def run_cases(cases: list[Case], device, job: Job = Job(), *, nproc: int, on_result=None) -> list[Result]:
    """Every case on `nproc` ranks; rank 0's rows in order, each handed to `on_result` as it arrives."""
    device, rows = torch.device(device), Rows(on_result)
    if under_torchrun():
        for case in cases:           # a rank that raises ends its process; torchrun stops the others
            r = rank_case(case, device.type, job)
            if rank() == 0:
                rows.add(case.own(r))
        return rows
    pending = list(cases)
    while pending:
        pending = _launch(pending, nproc, device, job, rows.add)
    return rows


def _launch(cases: list[Case], nproc: int, device, job: Job, emit) -> list[Case]:
    """Start `nproc` ranks (workers of one world) and run the cases on them in order; the cases left for fresh ranks
    after a failure (none when every case ran, or when the ranks never started one: then every case fails)."""
    inbox: queue.Queue = queue.Queue()
    port = free_port()
    ranks = [Worker(torch.device("cuda", i) if device.type == "cuda" else device, inbox=inbox,
                    env=_rank_env(i, nproc, port, device.type)) for i in range(nproc)]
    try:
        for i, case in enumerate(cases):
            for worker in ranks:
                worker.send(rank_case, case, device.type, job)
            row, failure = _follow(ranks, inbox, _Progress(nproc, job.timeout, first=i == 0))
            if failure is None:
                emit(case.own(row))
                continue
            if failure.pop("before_start"):
                for c in cases[i:]:
                    emit(c.failed(**failure))
                return []
            emit(case.failed(**failure))
            return cases[i + 1:]
        _leave(ranks, inbox, job.timeout)
        return []
    finally:
        for worker in ranks:
            worker.close()


def _rank_env(index: int, nproc: int, port: int, device_type: str = "cuda") -> dict:
    """torchrun's variables for rank `index`. On a CPU also its share of the cores for PyTorch's threads, as
    torchrun gives each of several ranks OMP_NUM_THREADS=1 unless the user set it: N ranks each running as many
    threads as there are cores, with gloo polling beside them, made a tiny ResNet's DDP step on 2 cores read
    0.9-1.4 s and vary 1.3-3.6x from one step to the next (70 ms on one rank)."""
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(index), "WORLD_SIZE": str(nproc),
           "LOCAL_RANK": str(index), "LOCAL_WORLD_SIZE": str(nproc)}
    if device_type == "cpu":
        env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // nproc))
    return env


def _follow(ranks: list[Worker], inbox: queue.Queue, progress: "_Progress") -> tuple[Result | None, dict | None]:
    """Every rank's answer to the case just sent: (rank 0's row, None), or (None, the failure that ended them: a rank
    that raised or died, named, or no progress from any rank within the limit; every rank is then killed)."""
    answers: dict[int, Result] = {}
    while len(answers) < len(ranks):
        try:
            worker, line = inbox.get(timeout=POLL_S)
        except queue.Empty:
            failure = progress.stuck()
        else:
            failure = _heard(ranks.index(worker), worker.event(line), progress, answers)
        if failure:
            for worker in ranks:
                worker.kill()
            return None, {**failure, "before_start": progress.case < 0 and progress.first}
    return answers[0], None


def _heard(who: int, event: dict, progress: "_Progress", answers: dict) -> dict | None:
    """One rank's event taken in; the failure it means, or None."""
    kind = event["event"]
    if kind == "failed":
        return {"status": event["status"], "message": f"rank {who}: {event['message']}"[:400]}
    if kind in ("start", "beat"):
        progress.heard(who, "case" if kind == "start" else "beat", 0 if kind == "start" else event["label"])
    elif kind == "reply":
        progress.heard(who, "done", None)
        answer = from_wire(event["result"])
        if not answer.op and not answer.ok:        # the rank raised (its peers then fail in a collective)
            return {"status": answer.status, "message": f"rank {who}: {answer.message}"[:400]}
        answers[who] = answer
    else:
        progress.heard(who, kind, None)           # "up": alive
    return None


def _leave(ranks: list[Worker], inbox: queue.Queue, timeout: float) -> None:
    """Every rank leaves the world together (a barrier first: no rank tears gloo or NCCL down while another is in a
    collective)."""
    for worker in ranks:
        worker.send(leave_world)
    left, deadline = 0, time.monotonic() + timeout
    while left < len(ranks) and time.monotonic() < deadline:
        try:
            worker, line = inbox.get(timeout=POLL_S)
        except queue.Empty:
            continue
        left += worker.event(line)["event"] in ("reply", "failed")


class _Progress:
    """What each rank last said about the current case: a hang is `timeout` seconds (STARTUP_S before the first case
    started) without a word from any rank; the ranks with the fewest beats are the ones behind."""

    def __init__(self, nproc: int, timeout: float, first: bool = True):
        self.timeout, self.first = timeout, first
        self.beats = [0] * nproc
        self.where = ["starting"] * nproc
        self.case = -1
        self.last = time.monotonic()

    def heard(self, who: int, kind: str, label) -> None:
        self.last = time.monotonic()
        if kind in ("done", "up"):
            return
        if kind == "case" and label > self.case:
            self.case, self.beats = label, [0] * len(self.beats)
        self.beats[who] += 1
        self.where[who] = label if kind == "beat" else f"case {label} start"

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


# --- on a rank ------------------------------------------------------------------------------------------------------
def rank_case(case: Case, device_type: str, job: Job) -> Result:
    """What each rank's worker runs: the case's task, in the world (joined at the first case)."""
    return case.task(case, join_world(device_type, job.timeout + STARTUP_S), job)


def leave_world() -> None:
    import torch.distributed as dist
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
