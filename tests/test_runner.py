"""The runner against real worker processes: correctness gates timing, and a case that crashes, hangs or runs
out of memory is recorded while the run goes on; a worker holds an object across calls, a spare becomes a worker
for its case at once, and the in-process twin answers the same calls."""
import os
import time

import pytest
import torch

from conftest import side_by_side
from fake_ops import Held, preload
from tcperf.records import Case, Job, Result, TimingConfig
from tcperf.runner import InProcess, Spares, Worker, run_cases, task_key

CPU = torch.device("cpu")
FAST = TimingConfig(warmup_ms=1, rep_ms=5)


def case(op, precision="fp32", n=1000):
    return Case(f"fake_ops:{op}", {"n": n}, precision, suite="test")


def run(*cases, timeout=60.0):
    seen = []
    results = run_cases(list(cases), CPU, Job(FAST, timeout=timeout), on_result=seen.append)
    assert seen == results
    return {r.op.split(":")[-1].lower(): r for r in results}


@pytest.fixture(scope="module")
def apart():
    """GOOD in fp32, bf16 and fp64 through run_cases as it groups by default (a worker a precision), and what
    on_result saw: shared by the three tests below, which only read it (each ran the same workers again: 2-4 s on
    2 cores)."""
    seen = []
    rows = run_cases([case("GOOD", "fp32"), case("GOOD", "bf16"), case("GOOD", "fp64")], CPU, Job(FAST),
                     on_result=seen.append)
    return rows, seen


def test_good_case_is_checked_then_timed(apart):
    rows, seen = apart
    assert seen == rows
    r = next(x for x in rows if x.precision == "fp32")
    assert r.op.split(":")[-1].lower() == "good" and r.status == "ok" and r.error < 1e-12
    assert r.n >= 5 and len(r.samples) == r.n and r.median_ms > 0
    assert r.gbps > 0


@pytest.fixture(scope="module")
def misbehaving():
    """Three groups of cases, each through run_cases from a thread of its own, side by side (one after the other,
    a worker each at least, they took 12 s on 2 cores, the hang's 3 s with the cores idle):
    - "gated": three wrong kernels, one out of memory, then a good one, in one worker (one group: fp32); the good
      case last shows the group went on after every one;
    - "crash": a good case, one that kills its worker, another good one (a fresh worker), and what on_result saw;
    - "hang": a case that hangs past its 3 s timeout, then a good one."""
    def crash():
        seen = []
        rows = run_cases([case("GOOD"), case("CRASH"), case("GOOD", n=2000)], CPU, Job(FAST, timeout=60.0),
                         on_result=seen.append)
        return rows, seen
    return dict(zip(["gated", "crash", "hang"], side_by_side(
        lambda: run(case("WRONG"), case("UNWRITTEN"), case("NAN"), case("OOM"), case("GOOD")), crash,
        lambda: run(case("HANG"), case("GOOD"), timeout=3.0))))


@pytest.mark.parametrize("bug", ["WRONG", "UNWRITTEN", "NAN"])
def test_wrong_kernel_is_caught_and_not_timed(misbehaving, bug):
    gated = misbehaving["gated"]
    bad = gated[bug.lower()]
    assert bad.status == "wrong" and bad.median_ms is None
    assert "tolerance" in bad.message
    assert gated["good"].status == "ok"


def test_crash_is_recorded_and_the_group_goes_on(misbehaving):
    rows, seen = misbehaving["crash"]
    assert seen == rows
    crash = next(x for x in rows if x.op == "fake_ops:CRASH")
    assert crash.status == "error" and "worker died (exit 3)" in crash.message
    assert {x.shape["n"] for x in rows if x.status == "ok"} == {1000, 2000}


def test_hang_past_timeout_is_recorded(misbehaving):
    r = misbehaving["hang"]
    assert r["hang"].status == "timeout" and "3 s" in r["hang"].message
    assert "about to hang" in r["hang"].message          # where it was: the last line tcperf's log gave
    assert r["good"].status == "ok"


def test_out_of_memory_is_recorded(misbehaving):
    gated = misbehaving["gated"]
    assert gated["oom"].status == "oom" and "out of memory" in gated["oom"].message
    assert gated["good"].status == "ok"


def test_unsupported_precision_is_skipped_with_reason():
    r = run(case("GOOD", precision="tf32"))["good"]
    assert r.status == "skipped" and "CUDA GPU" in r.message


def test_precisions_run_in_separate_workers_without_leaking(apart):
    """Each precision group gets a fresh process: tf32 flags set by one cannot reach the next."""
    results, _ = apart
    assert sorted(r.precision for r in results) == ["bf16", "fp32", "fp64"]
    assert all(r.status == "ok" for r in results)


def test_task_key_runs_every_precision_in_one_worker_and_each_case_says_where_its_time_went(apart):
    """`tcperf run`'s grouping: one worker start-up (the first result carries it), whatever the precision; each
    case stores the seconds of its phases, and they fit inside its wall time. The default grouping (`apart`): a
    start-up a precision."""
    cases = [case("GOOD", "fp32"), case("GOOD", "bf16"), case("GOOD", "fp64")]
    shared = run_cases(cases, CPU, Job(FAST), group_by=task_key)
    apart, _ = apart
    assert [r.precision for r in shared] == ["fp32", "bf16", "fp64"] and all(r.status == "ok" for r in shared)
    assert sum("worker_start_s" in r.metrics for r in shared) == 1
    assert sum("worker_start_s" in r.metrics for r in apart) == 3
    started = shared[0].metrics["worker_start_s"]
    assert set(started) == {"imports", "device"} and started["imports"] > 0
    for r in shared:
        phases = r.metrics["phases_s"]
        assert set(phases) == {"prepare", "check", "time"} and all(s >= 0 for s in phases.values())
        assert sum(phases.values()) <= r.metrics["wall_s"]


def test_worker_that_cannot_start_fails_every_case_clearly():
    r = run_cases([Case("no_such_module:X", {"n": 1}, "fp32")], CPU, Job(FAST))
    assert r[0].status == "error" and "No module named" in r[0].message


def test_a_worker_that_dies_before_its_first_case_fails_every_case_of_its_group(monkeypatch):
    """Nothing would work in that group: each case says why, none waits for a worker of its own."""
    import tcperf.runner as runner
    broken = {**runner._worker_env(), "TCPERF_PARENT": "not a pid"}     # the worker dies as it starts
    monkeypatch.setattr(runner, "_worker_env", lambda: broken)
    rows = run_cases([case("GOOD"), case("GOOD", n=2000)], CPU, Job(FAST, timeout=60))
    assert [r.status for r in rows] == ["error", "error"]
    assert all("worker died (exit 1)" in r.message and "invalid literal" in r.message for r in rows)
    assert [r.shape["n"] for r in rows] == [1000, 2000]


# --- a worker that holds an object; spares; the in-process twin --------------------------------------------------
def held_case(name="m"):
    return Case("held", {}, "fp32", args=name, preload=preload)


def process_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_a_spare_loads_the_model_it_is_told_and_becomes_a_worker_for_its_case_at_once():
    spares = Spares(CPU, 1)
    try:
        spares.preload(held_case())
        worker = spares.take(held_case())
        assert len(spares.idle) == 1                       # the one taken is replaced
        row = worker.call(Held, worker.case, CPU, hold=True, timeout=60)
        assert row.status == "ok" and row.metrics["preloaded"]
        assert worker.call("count", timeout=60).metrics["calls"] == 1
        worker.close()
    finally:
        spares.close()
    assert spares.idle == []


def test_the_in_process_twin_answers_the_same_calls():
    here = InProcess(CPU, case=held_case())
    assert here.call(Held, here.case, CPU, hold=True, timeout=60).status == "ok"
    assert here.call("count", timeout=60).metrics["calls"] == 1
    failed = here.call("no_such_method", timeout=60)
    assert failed.status == "error" and "no_such_method" in failed.message and failed.op == "held"


@pytest.fixture(scope="module")
def held_worker():
    """One worker holding an object, taken through what three tests below ask of it, in turn (a worker each took
    2-3 s on 2 cores): {step: what it answered}. Started in its own process group (as the advisor starts them) and
    without TEARDOWN_CUPTI in the parent's environment; paused, then resumed; then killed from another thread while a
    call of 30 s is under way, and asked once more."""
    import threading
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("TEARDOWN_CUPTI", raising=False)
        worker = Worker(CPU, own_group=True, case=held_case())
    seen = {}
    try:
        seen["held"] = worker.call(Held, worker.case, CPU, hold=True, timeout=60)
        seen["cupti"] = worker.call("env", variable="TEARDOWN_CUPTI", timeout=60)
        if os.path.exists("/proc/self/stat"):
            worker.pause()
            time.sleep(0.2)
            seen["paused_state"] = process_state(worker.proc.pid)
            worker.resume()
        seen["count"] = worker.call("count", timeout=60)
        threading.Timer(0.5, worker.kill).start()
        t0 = time.perf_counter()
        seen["killed"] = worker.call("nap", seconds=30, timeout=60)
        seen["killed_s"] = time.perf_counter() - t0
        seen["after"] = worker.call("count", timeout=60)
    finally:
        worker.close()
    return seen


def test_a_worker_killed_from_another_thread_answers_its_call_with_its_death(held_worker):
    assert held_worker["held"].status == "ok"
    row = held_worker["killed"]
    assert row.status == "error" and "SIGKILL" in row.message and held_worker["killed_s"] < 10
    assert row.op == "held"                                  # the failure is its case's row
    assert held_worker["after"].status == "error"            # every later call: the same, at once


def test_a_worker_that_holds_an_object_has_cupti_let_go_after_each_profile(held_worker):
    """A held recipe is timed again after it is profiled (the advisor): TEARDOWN_CUPTI=1 there, as
    tcperf.profiler.detach_after_profiling sets it, else CUPTI stays attached and slows every launch."""
    assert held_worker["held"].status == "ok"
    assert held_worker["cupti"].metrics["value"] == "1"


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")
def test_a_paused_worker_is_stopped_until_resumed(held_worker):
    assert held_worker["held"].status == "ok"
    assert held_worker["paused_state"] == "T"
    assert held_worker["count"].metrics["calls"] == 1           # resumed: it answers


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")
def test_idle_spares_stop_and_go_on_and_one_taken_while_stopped_runs():
    spares = Spares(CPU, 1)
    try:
        spares.pause()
        time.sleep(0.2)
        assert process_state(spares.idle[0].proc.pid) == "T"
        worker = spares.take(held_case())          # taken while stopped: it runs
        assert worker.call(Held, worker.case, CPU, hold=True, timeout=60).status == "ok"
        spares.resume()
        worker.close()
    finally:
        spares.close()


def test_records_cross_the_pipe_as_themselves():
    """A case's records, functions and devices go to a worker and back unchanged (tcperf.records.to_wire)."""
    from tcperf.records import Source, from_wire, to_wire
    import json
    c = Case("gemm", {"m": 1}, "bf16", task=run_cases, args=Source(target="a.py:f", files=("x.py",)),
             known=Result("gemm", {}, "bf16", error=float("inf")))
    assert from_wire(json.loads(json.dumps(to_wire(c)))) == c
    assert from_wire(json.loads(json.dumps(to_wire(torch.device("cuda", 1))))) == torch.device("cuda", 1)
    with pytest.raises(TypeError, match="cannot be sent to a worker"):
        to_wire(lambda: None)


PARENT = """
import os, subprocess, sys, time
w = subprocess.Popen([sys.executable, "-m", "tcperf.worker"], stdin=int(sys.argv[1]), stdout=subprocess.DEVNULL,
                     env={**os.environ, "TCPERF_PARENT": str(os.getpid())})
print(w.pid, flush=True)
time.sleep(60)
"""


def test_a_worker_ends_when_the_process_that_started_it_is_killed():
    """A command killed by a time limit leaves no worker behind (its stdin held open elsewhere, as a busy worker
    would not read it): the worker notices its parent is gone and ends."""
    import signal
    import subprocess
    import sys
    import time

    from tcperf.runner import _worker_env
    read, write = os.pipe()
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(read)], pass_fds=(read,), stdout=subprocess.PIPE,
                              text=True, env=_worker_env())
    os.close(read)
    child = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 15
    while time.time() < deadline and _alive(child):
        time.sleep(0.2)
    os.close(write)
    assert not _alive(child), "the worker outlived the process that started it"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_known_row_is_reported_without_starting_a_worker(monkeypatch):
    """A skip the caller decided (tcperf generate's, the ladder's) is its row, reported first; only the other cases
    start a worker."""
    import tcperf.runner as runner
    started = []
    real = runner._start
    monkeypatch.setattr(runner, "_start", lambda cases, device, job: started.append([c.op for c in cases])
                        or real(cases, device, job))
    skipped = case("GOOD", precision="bf16").replace(known=Result("", {}, "", "skipped", message="not on this device"))
    results = run_cases([skipped, case("GOOD")], CPU, Job(FAST, timeout=60))
    assert [(r.precision, r.status) for r in results] == [("bf16", "skipped"), ("fp32", "ok")]
    assert results[0].op == "fake_ops:GOOD" and results[0].message == "not on this device"
    assert started == [["fake_ops:GOOD"]]                  # one worker, for the fp32 case alone
    assert run_cases([skipped], CPU, Job(FAST, timeout=60))[0].status == "skipped" and len(started) == 1
