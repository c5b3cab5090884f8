"""The child process: it answers its parent's calls one at a time, one JSON line each way (tcperf.runner.Worker is
the parent's side; arguments and answers cross as tcperf.records.to_wire data).

    parent  {"device": "cuda:0", "sys_path": [...], "profiler": false}          once: the set-up
    worker  {"event": "up", "started": {"imports": 2.1, "device": 0.4}}        torch imported, the device ready
    parent  {"call": "tcperf.runner:run_case", "args": [...]}                 a function called with its arguments
    parent  {"call": "tcperf.engine:RecipeSession", "args": [...], "hold": true}   an object made and kept ...
    parent  {"method": "time", "kwargs": {"passes": 3}}                       ... and a method of it called
    worker  {"event": "start"}, then {"event": "reply", "result": ...}        for each call, in order
    worker  {"event": "beat", "label": "..."}                                 progress said between (beat())

A call that raises is answered with a Result of status error (oom for out of memory), naming where it was raised;
the worker goes on to the next call. End of stdin ends the worker; so does its parent's death. Stray prints go to
stderr: stdout carries only the protocol. A held object may be timed again after it was profiled (the advisor), so
a worker that holds one lets CUPTI go after each profile (tcperf.profiler.detach_after_profiling).
"""
from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
import traceback

from .records import Result, from_wire, resolve, to_wire

LOG_MARK = "tcperf log:"      # this worker's lines of tcperf's progress log in its stderr begin so (_log_progress)
PARENT_POLL_S = 1.0
_CHANNEL = None               # the protocol's stream, in a worker process; beat() writes to it


def main() -> None:
    global _CHANNEL
    _end_with_parent()
    _CHANNEL = os.fdopen(os.dup(1), "w", buffering=1)   # the protocol keeps the real stdout ...
    os.dup2(2, 1)                                        # ... and anything else printed goes to stderr
    _log_progress()
    setup = json.loads(sys.stdin.readline())
    for path in reversed(setup.get("sys_path", [])):
        if path not in sys.path:
            sys.path.insert(0, path)
    t0 = time.perf_counter()
    import torch

    from . import ops, precision, timing  # noqa: F401  (imported now, while the previous group measures)
    t1 = time.perf_counter()
    ready_device(torch.device(setup["device"]), setup.get("profiler", False))
    gc.freeze()     # the imports' objects (torch's: 400k) live as long as we do: no full collection walks them again
    _emit({"event": "up", "started": {"imports": t1 - t0, "device": time.perf_counter() - t1}})
    held: dict = {}
    for line in sys.stdin:
        _emit({"event": "start"})
        t0 = time.perf_counter()
        request = json.loads(line)
        if request.get("hold"):
            from .profiler import detach_after_profiling
            detach_after_profiling()
        answer = guarded(lambda: serve(held, request, from_wire(request["args"]), from_wire(request["kwargs"])))
        if isinstance(answer, Result):
            answer.metrics["wall_s"] = time.perf_counter() - t0
        _emit({"event": "reply", "result": to_wire(answer)})


def serve(held: dict, request: dict, args=(), kwargs=None):
    """One call: request["call"] (a function or class, or its name_of) with these arguments, or request["method"] of
    the held object. An object made with "hold" is kept, and answers with its row()."""
    kwargs = kwargs or {}
    if "method" in request:
        return getattr(held["object"], request["method"])(*args, **kwargs)
    target = resolve(request["call"]) if isinstance(request["call"], str) else request["call"]
    if not request.get("hold"):
        return target(*args, **kwargs)
    held["object"] = made = target(*args, **kwargs)
    return made.row() if hasattr(made, "row") else None


def guarded(call):
    """call()'s answer; an exception becomes a Result with status oom or error, and where it was raised."""
    import torch
    try:
        return call()
    except torch.OutOfMemoryError as e:
        return Result("", {}, "", "oom", message=str(e).splitlines()[0][:300])
    except Exception as e:   # a failing case is recorded and the worker goes on
        last = traceback.extract_tb(e.__traceback__)[-1]
        where = f" ({os.path.basename(last.filename)}:{last.lineno})"
        text = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return Result("", {}, "", "error", message=text[:300] + where)
    finally:
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def beat(label: str) -> None:
    """Tell the parent this worker reached `label` (a rank between the stages of a case): progress it can name
    when it stops a hung call. Nothing outside a worker."""
    if _CHANNEL is not None:
        _emit({"event": "beat", "label": label})


def ready_device(device, profiler: bool = False):
    """Before the first call, while another worker measures (none of this launches a kernel): the CUDA context, the
    cuBLAS handle and (profiler) the profiler started once, so that the first case does not pay for them (an H200:
    a `tcperf run` group's first case took 4-5 s, the others under a second). The device, with its index."""
    import torch
    if device.type != "cuda":
        return device
    device = torch.device("cuda", device.index or 0)   # set_device needs an index
    torch.cuda.set_device(device)
    torch.cuda.init()
    torch.cuda.current_blas_handle()
    if profiler:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
            pass
    return device


def _end_with_parent() -> None:
    """A thread that ends this worker (and so its compile workers) once the process that started it has gone: a
    parent killed by a time limit leaves no orphan holding the GPU. Polled, not PR_SET_PDEATHSIG, which fires when
    the parent's *thread* that started us ends (the advisor opens workers from short-lived threads); TCPERF_PARENT
    names the parent, so one gone before this line ran is noticed too."""
    parent = int(os.environ.get("TCPERF_PARENT") or os.getppid())

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)
    threading.Thread(target=watch, daemon=True, name="tcperf-parent-watch").start()


def _log_progress() -> None:
    """tcperf's progress log (logging.getLogger("tcperf...").info: a batch probe, fp32's reference) to stderr,
    each line marked, so that the parent can say where a worker it killed was (runner.Worker.last_logged)."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{LOG_MARK} %(asctime)s %(message)s", "%H:%M:%S"))
    log = logging.getLogger("tcperf")
    log.addHandler(handler)
    log.setLevel(logging.INFO)


def _emit(event: dict) -> None:
    _CHANNEL.write(json.dumps(event, default=str) + "\n")
    _CHANNEL.flush()


if __name__ == "__main__":
    sys.modules.setdefault("tcperf.worker", sys.modules[__name__])   # one module: what a task imports as tcperf.worker
    main()                                                          # is this one (beat() writes to its channel)
