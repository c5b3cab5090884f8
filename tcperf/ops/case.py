"""One operation at one shape and precision, measured: correctness first, then timing, then (optionally) the kernels
that ran and the padded shape's time. The task of every kernel case (`tcperf run`, `bench`, `ceilings`), run in a
worker (tcperf.runner):

    result = measure_case(Case("gemm", {"m": 4096, "n": 4096, "k": 4096, "a_t": "N", "b_t": "N"}, "bf16"),
                          torch.device("cuda"), Job(profile=True, pad=True))
"""
from __future__ import annotations

import contextlib
import dataclasses
import time

import torch

from .. import env, precision
from ..records import Case, Job, Result
from . import get
from .base import check


def measure_case(case: Case, device: torch.device, job: Job) -> Result:
    """Checked against float64 before it is timed; a wrong result is not timed."""
    op, prec, shape = get(case.op), precision.get(case.precision), case.shape
    sm_count = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else None
    result = Result(op.name, shape, prec.name, suite=case.suite, flops=op.flops(shape), bytes=op.bytes(shape, prec),
                    tolerance=prec.tolerance, metrics={"label": op.label(shape), "tags": case.tags,
                                                       "verdict": op.verdict(shape, prec, sm_count)})
    why = precision.unsupported_reason(prec, device) or op.unsupported(shape, prec, device)
    if why:
        return result.replace(status="skipped", message=why)
    with precision.apply(prec, device.type, benchmark_cudnn=True):     # a kernel suite: cuDNN's best algorithm
        with _phase(result, "prepare"):
            prep = op.prepare(shape, prec, device, seed=case.seed)
        with _phase(result, "check"):
            err = check(prep)          # sync point: the error is read back
        result.error = err
        result.metrics.update(prep.info)
        if not err <= prec.tolerance:     # written this way round so that NaN fails too
            return result.replace(status="wrong", message=f"relative error {err:.3g} > tolerance "
                                                          f"{prec.tolerance:.0e}: not timed")
        with _phase(result, "time"):
            m = _timed(prep.run, device, job, result)
        _fill(result, m)
        if device.type == "cuda":
            throttled = env.throttle_reasons(device.index or 0)
            if throttled:
                result.warnings.append(f"clocks throttled: {', '.join(throttled)}")
            if job.profile:
                with _phase(result, "kernels"):
                    _add_kernels(result, prep.run, device)
        del prep
    if job.pad:
        with _phase(result, "pad"):
            _add_padded(result, op, shape, prec, device, job)
    return result


@contextlib.contextmanager
def _phase(result: Result, name: str):
    """Add the seconds the block takes to result.metrics["phases_s"][name]: where a case's time goes (each phase of a
    GPU case ends in a sync, so these are the GPU's seconds too)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        phases = result.metrics.setdefault("phases_s", {})
        phases[name] = phases.get(name, 0.0) + time.perf_counter() - t0


def _timed(fn, device, job: Job, result: Result):
    """time_fn, or (job.until_stable: the ceilings) the best of repeats until it stops improving, the repeats
    recorded in the result's metrics."""
    from ..timing import time_fn, time_until_stable
    timing = dataclasses.asdict(job.timing)
    if not job.until_stable:
        return time_fn(fn, device, **timing)
    m, medians = time_until_stable(fn, device, **job.until_stable, **timing)
    result.metrics.update(repeats=len(medians), repeat_medians_ms=medians)
    return m


def _fill(result: Result, m) -> None:
    """The timing's figures, its rates and its own warnings: a spread above the threshold, a host timer that counted
    scheduler slices."""
    summary = m.summary()
    result.status, result.samples = "ok", m.samples_ms
    result.median_ms, result.iqr_ms, result.min_ms = summary["median_ms"], summary["iqr_ms"], summary["min_ms"]
    result.mean_ms, result.n = summary["mean_ms"], summary["n"]
    seconds = m.median_ms * 1e-3
    result.tflops = result.flops / seconds / 1e12 if result.flops else None
    result.gbps = result.bytes / seconds / 1e9 if result.bytes else None
    if m.unstable:
        result.warnings.append(f"unstable: IQR/median = {m.spread:.0%}")
    if m.quantised_ms:
        result.metrics["quantised_ms"] = m.quantised_ms
        result.warnings.append(f"quantised: the samples sit on {m.quantised_ms:g} ms steps (a shared CPU's "
                               f"scheduler slices were timed, not the work): no ratio is claimed from it")


def _add_kernels(result: Result, fn, device) -> None:
    from ..profiler import profile
    found = profile(fn, device)
    result.metrics["kernels"] = [k["name"] for k in found["top"]]
    share = found["tc_share"]
    result.metrics["tc_share"] = share            # of GPU time: an NCHW fp16 conv spends ~58% transposing
    result.metrics["tensor_cores_used"] = bool(share)


def _add_padded(result: Result, op, shape: dict, prec, device, job: Job) -> None:
    """Time the aligned shape beside a misaligned one: the fix, measured."""
    padded = op.padded(shape, prec)
    if padded is None or result.status != "ok":
        return
    sub = measure_case(Case(op.name, padded, prec.name), device, dataclasses.replace(job, pad=False, profile=False))
    if sub.status == "ok":
        result.metrics["padded"] = {"shape": padded, "median_ms": sub.median_ms,
                                    "gain": result.median_ms / sub.median_ms}
