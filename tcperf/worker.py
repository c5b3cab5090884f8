"""The child process: one group of cases in (a JSON job on stdin), one JSON line per event out.

    {"event": "start", "i": 3}          before case 3, so the parent knows which case a crash or hang belongs to
    {"event": "result", "i": 3, "result": {...}}
    {"event": "done"}

The parent (tcperf.runner) starts one worker per precision group, because precision flags, cuDNN autotune
and compile caches are process-global. Stray prints go to stderr: stdout carries only the protocol.

A case is measured by its `task` (a name in tcperf.tasks.TASKS; default "kernel": `measure_case` below), called
as task(case, device, job) -> result dict; the model ladder, the advisor and the lab plug in here.

A session (job["session"]: the advisor's search) keeps one object alive across commands instead: the worker says
{"event": "up"} once torch is imported, then answers each command line on stdin,
    {"call": "open"}                      -> the object `case["task"](case, device, job)` is made (a recipe prepared)
    {"call": "time", "args": {...}}       -> its method time(**args), and so on
with {"event": "start"} then {"event": "reply", "result": {...}}; a command that raises is a reply with status
error / oom, and the object stays for the next. End of stdin ends the worker. A spare (job["spare"]) is a session
started before its case is known: it imports torch and readies the GPU, loads a model when sent {"preload": case},
and becomes the session of the case it is sent as {"case": case}.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import traceback

from . import tasks

LOG_MARK = "tcperf log:"      # this worker's lines of tcperf's progress log in its stderr begin so (_log_progress)


def measure_case(case: dict, device, job: dict) -> dict:
    """Correctness first, then timing, then (optionally) the kernels that ran and the padded shape's time."""
    import torch

    from . import env, ops, precision
    from .ops.base import check

    op, prec, shape = ops.get(case["op"]), precision.get(case["precision"]), case["shape"]
    sm_count = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else None
    result = {"op": op.name, "suite": case.get("suite", ""), "shape": shape, "precision": prec.name,
              "flops": op.flops(shape), "bytes": op.bytes(shape, prec), "tolerance": prec.tolerance,
              "metrics": {"label": op.label(shape), "tags": case.get("tags", {}),
                          "verdict": op.verdict(shape, prec, sm_count)}, "warnings": []}
    why = precision.unsupported_reason(prec, device) or op.unsupported(shape, prec, device)
    if why:
        return {**result, "status": "skipped", "message": why}
    with precision.apply(prec, device.type):
        with _phase(result, "prepare"):
            prep = op.prepare(shape, prec, device, seed=case.get("seed", 0))
        with _phase(result, "check"):
            err = check(prep)          # sync point: the error is read back
        result["error"] = err
        result["metrics"].update(prep.info)
        if not err <= prec.tolerance:     # written this way round so that NaN fails too
            return {**result, "status": "wrong",
                    "message": f"relative error {err:.3g} > tolerance {prec.tolerance:.0e}: not timed"}
        with _phase(result, "time"):
            m = _timed(prep.run, device, job, result)
        result.update(status="ok", samples=m.samples_ms, **m.summary())
        _rates(result, m.median_ms)
        _warn(result, m)
        if device.type == "cuda":
            throttled = env.throttle_reasons(device.index or 0)
            if throttled:
                result["warnings"].append(f"clocks throttled: {', '.join(throttled)}")
            if job.get("profile"):
                with _phase(result, "kernels"):
                    _add_kernels(result, prep.run, device)
        del prep
    if job.get("pad"):
        with _phase(result, "pad"):
            _add_padded(result, op, shape, prec, device, job)
    return result


@contextlib.contextmanager
def _phase(result: dict, name: str):
    """Add the seconds the block takes to result["metrics"]["phases_s"][name]: where a case's time goes (each
    phase of a GPU case ends in a sync, so these are the GPU's seconds too)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        phases = result["metrics"].setdefault("phases_s", {})
        phases[name] = phases.get(name, 0.0) + time.perf_counter() - t0


def _warn(result: dict, m) -> None:
    """The timing's own warnings: a spread above the threshold, a host timer that counted scheduler slices."""
    if m.unstable:
        result["warnings"].append(f"unstable: IQR/median = {m.spread:.0%}")
    if m.quantised_ms:
        result["metrics"]["quantised_ms"] = m.quantised_ms
        result["warnings"].append(f"quantised: the samples sit on {m.quantised_ms:g} ms steps (a shared CPU's "
                                  f"scheduler slices were timed, not the work): no ratio is claimed from it")


def _timed(fn, device, job: dict, result: dict):
    """time_fn, or (job["until_stable"]: the ceilings) the best of repeats until it stops improving, the repeats
    recorded in the result's metrics."""
    from .timing import time_fn, time_until_stable
    if not job.get("until_stable"):
        return time_fn(fn, device, **job.get("timing", {}))
    m, medians = time_until_stable(fn, device, **job["until_stable"], **job.get("timing", {}))
    result["metrics"].update(repeats=len(medians), repeat_medians_ms=medians)
    return m


def _rates(result: dict, median_ms: float) -> None:
    seconds = median_ms * 1e-3
    result["tflops"] = result["flops"] / seconds / 1e12 if result["flops"] else None
    result["gbps"] = result["bytes"] / seconds / 1e9 if result["bytes"] else None


def _add_kernels(result: dict, fn, device) -> None:
    from .profiler import profile
    found = profile(fn, device)
    result["metrics"]["kernels"] = [k["name"] for k in found["top"]]
    share = found["tc_share"]
    result["metrics"]["tc_share"] = share            # of GPU time: an NCHW fp16 conv spends ~58% transposing
    result["metrics"]["tensor_cores_used"] = bool(share)


def _add_padded(result: dict, op, shape: dict, prec, device, job: dict) -> None:
    """Time the aligned shape beside a misaligned one: the fix, measured."""
    padded = op.padded(shape, prec)
    if padded is None or result.get("status") != "ok":
        return
    sub = measure_case({"op": op.name, "shape": padded, "precision": prec.name}, device, {**job, "pad": False,
                                                                                        "profile": False})
    if sub.get("status") == "ok":
        result["metrics"]["padded"] = {"shape": padded, "median_ms": sub["median_ms"],
                                       "gain": result["median_ms"] / sub["median_ms"]}


def run_case(case: dict, device, job: dict) -> dict:
    """Call the case's task, turning an exception into a recorded status."""
    return _guarded(case, device, lambda: tasks.resolve(case.get("task"))(case, device, job))


def _guarded(case: dict, device, call) -> dict:
    """call() -> its result dict; an exception becomes a row with status oom or error (where it was raised)."""
    import torch
    base = {k: case.get(k) for k in ("op", "suite", "shape", "precision")}
    try:
        return call()
    except torch.OutOfMemoryError as e:
        return {**base, "status": "oom", "message": str(e).splitlines()[0][:300]}
    except Exception as e:   # a failing case is recorded and the group goes on
        last = traceback.extract_tb(e.__traceback__)[-1]
        where = f" ({os.path.basename(last.filename)}:{last.lineno})"
        return {**base, "status": "error", "message": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300] + where}
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()


PARENT_POLL_S = 1.0


def _end_with_parent() -> None:
    """A thread that ends this worker (and so its compile workers) once the process that started it has gone: a
    parent killed by a time limit leaves no orphan compiling or holding the GPU for the next command. Polled, not
    PR_SET_PDEATHSIG, which fires when the parent's *thread* that started us ends (the advisor opens workers from
    short-lived threads). The runner names its pid in TCPERF_PARENT: a parent gone before this line ran is
    noticed too."""
    parent = int(os.environ.get("TCPERF_PARENT") or os.getppid())

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)
    threading.Thread(target=watch, daemon=True, name="tcperf-parent-watch").start()


def main() -> None:
    _end_with_parent()
    channel = os.fdopen(os.dup(1), "w", buffering=1)   # the protocol keeps the real stdout ...
    os.dup2(2, 1)                                       # ... and anything else printed goes to stderr
    _log_progress()
    job = json.loads(sys.stdin.readline())
    for path in reversed(job.get("sys_path", [])):
        if path not in sys.path:
            sys.path.insert(0, path)
    t0 = time.perf_counter()
    import torch

    from . import ops, precision, timing  # noqa: F401  (imported now, while the previous group measures)
    t1 = time.perf_counter()
    if not job.get("no_preload"):
        _preload(job["cases"])
    device = _ready_device(torch.device(job["device"]), job.get("profile", False))
    started = {"imports": t1 - t0, "device": time.perf_counter() - t1}   # stored with the worker's first result
    if job.get("spare"):
        case = _await_case()
        return _session(channel, case, device, job) if case is not None else None
    if job.get("session"):
        return _session(channel, job["cases"][0], device, job)
    if sys.stdin.readline().strip() != "go":
        return                                # the parent went away or closed us before our turn
    for i, case in enumerate(job["cases"]):
        _emit(channel, {"event": "start", "i": i})
        t0 = time.perf_counter()
        result = run_case(case, device, job)
        result.setdefault("metrics", {})["wall_s"] = time.perf_counter() - t0   # where a run's time goes
        if i == 0:
            result["metrics"]["worker_start_s"] = started
        _emit(channel, {"event": "result", "i": i, "result": result})
    _emit(channel, {"event": "done"})


def _log_progress() -> None:
    """tcperf's progress log (logging.getLogger("tcperf...").info: a batch probe, fp32's reference) to stderr,
    each line marked, so that the parent can say where a worker it killed was (runner._Worker.last_logged)."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{LOG_MARK} %(asctime)s %(message)s", "%H:%M:%S"))
    log = logging.getLogger("tcperf")
    log.addHandler(handler)
    log.setLevel(logging.INFO)


def _await_case() -> dict | None:
    """A spare (tcperf.runner.Spares) waits for its case: {"preload": case} loads that case's model into host memory
    meanwhile; {"case": case} makes it a session of that case. None when the parent closes it first."""
    for line in sys.stdin:
        message = json.loads(line)
        if "preload" in message:
            _preload([message["preload"]])
        elif "case" in message:
            return message["case"]
    return None


def _session(channel, case: dict, device, job: dict) -> None:
    """Serve one long-lived object (see the module's doc) until stdin closes. A session is timed again after it
    was profiled (the advisor's runoff and rounds), so CUPTI is let go after each profile here."""
    from .profiler import detach_after_profiling
    detach_after_profiling()
    _emit(channel, {"event": "up"})
    held = {}
    for line in sys.stdin:
        command = json.loads(line)
        _emit(channel, {"event": "start", "i": 0})
        t0 = time.perf_counter()
        result = _guarded(case, device, lambda: _command(held, case, device, job, command))
        result.setdefault("metrics", {})["wall_s"] = time.perf_counter() - t0
        _emit(channel, {"event": "reply", "result": result})


def _command(held: dict, case: dict, device, job: dict, command: dict) -> dict:
    if command["call"] == "open":
        held["object"] = tasks.resolve(case["task"])(case, device, job)
        return held["object"].row()
    return getattr(held["object"], command["call"])(**command.get("args", {}))


def _ready_device(device, profile: bool):
    """Before our turn, while the previous group measures: create the CUDA context and the cuBLAS handle, and start
    the profiler once, so that the first case does not pay for them (on an H200 the first case of each `tcperf run`
    group took 4-5 s, the others under a second). None of these launches a kernel, so the group measuring now is
    not disturbed."""
    import torch
    if device.type != "cuda":
        return device
    device = torch.device("cuda", device.index or 0)   # set_device needs an index
    torch.cuda.set_device(device)
    torch.cuda.init()
    torch.cuda.current_blas_handle()
    if profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
            pass
    return device


def _preload(cases: list[dict]) -> None:
    """Let each case's task module get ready while the previous group measures (tcperf.engine loads the model
    into host memory): a task module may define preload(case). What fails here fails again in the case itself,
    where it is recorded."""
    for case in cases:
        try:
            getattr(tasks.module_of(case.get("task")), "preload", lambda case: None)(case)
        except Exception:        # noqa: BLE001 - reported by the case
            pass


def _emit(channel, event: dict) -> None:
    channel.write(json.dumps(event, default=_jsonable) + "\n")
    channel.flush()


def _jsonable(x):
    if hasattr(x, "item"):
        return x.item()
    return str(x)


if __name__ == "__main__":
    main()
