"""Honest timing: raw samples from CUDA events (GPU) or perf_counter (CPU), with warm-up and repeat counts set by
time budgets, and the statistics every tcperf number is printed with (median, IQR, min, count).

Modelled on triton.testing.do_bench, which times the same way (events per call, L2 flushed before each call), but
keeps every raw sample, lets the L2 flush be switched off, replays a CUDA graph on request and gives the CPU the
same statistics. benchmarks/fidelity.py holds this against do_bench on a GPU.

Two ways to time a call:
- per call (the default, do_bench's way: for kernels): an event pair around each call, with the L2 flushed in
  between if asked; the gaps between calls are not counted.
- back to back (`back_to_back=True`: for whole-model steps): one event between consecutive calls and nothing
  else in the loop, so the samples add up to the loop's time on the GPU and their mean is the time a step that a
  loop of them sustains (tcperf.advisor ranks recipes by it).

    m = time_fn(lambda: a @ b, "cuda")                       # Measurement(median_ms=..., iqr_ms=..., n=...)
    m = time_fn(step, "cuda", flush_l2=False, back_to_back=True)
    ms = time_loop(lambda: dist.all_reduce(x), "cuda", iters=200)   # nccl-tests' way: one event pair, mean
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

UNSTABLE_SPREAD = 0.10   # IQR / median above this is flagged, as torch.utils.benchmark and pyperf do
SCHEDULER_STEPS_MS = (10.0, 4.0)   # the slices a busy CPU's scheduler hands out (Linux at HZ 100 and 250)
QUANTISED_SHARE = 0.75   # this share of the samples on whole multiples of one step: the timer counts slices


def quantum(samples: list[float]) -> float | None:
    """The scheduler step (ms) that most samples sit on, within 1% of a whole multiple (at least 2) of it; else
    None. A process that gets a shared CPU in slices times the slices, not its work: with a second process busy on
    a 2-core machine, tcperf's CPU medians sat on 8, 16, 32 and 64 ms with tight spreads, and bf16 convolution read
    85.9x fp32 in one run and 0.02x in the next."""
    for step in SCHEDULER_STEPS_MS:
        on = [x for x in samples if x >= 1.98 * step and abs(x - round(x / step) * step) <= 0.01 * step]
        if samples and len(on) >= QUANTISED_SHARE * len(samples):
            return step
    return None


def _quantile(xs: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default), without numpy."""
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _of_samples(statistic) -> property:
    """A read-only statistic of Measurement.samples_ms, computed when read."""
    return property(lambda self: statistic(self.samples_ms))


@dataclass
class Measurement:
    samples_ms: list[float]
    warmup: int = 0
    flush_l2: bool = True
    graph: bool = False
    back_to_back: bool = False
    notes: list[str] = field(default_factory=list)
    host_clock: bool = False          # perf_counter samples (a CPU): the scheduler can quantise them

    # the statistics every tcperf number is printed with (milliseconds, but n)
    n = _of_samples(len)
    median_ms = _of_samples(statistics.median)
    iqr_ms = _of_samples(lambda s: _quantile(s, 0.75) - _quantile(s, 0.25))
    min_ms = _of_samples(min)
    mean_ms = _of_samples(statistics.fmean)

    @property
    def spread(self) -> float:
        """IQR over median: the relative spread tcperf warns about above UNSTABLE_SPREAD."""
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else 0.0

    @property
    def unstable(self) -> bool:
        return self.spread > UNSTABLE_SPREAD

    @property
    def quantised_ms(self) -> float | None:
        """The scheduler step a host clock's samples sit on (quantum), else None."""
        return quantum(self.samples_ms) if self.host_clock else None

    def summary(self) -> dict:
        return {"median_ms": self.median_ms, "iqr_ms": self.iqr_ms, "min_ms": self.min_ms,
                "mean_ms": self.mean_ms, "n": self.n, "warmup": self.warmup,
                "flush_l2": self.flush_l2, "graph": self.graph, "back_to_back": self.back_to_back}


def _counts(estimate_ms: float, warmup_ms: float, rep_ms: float, min_reps: int, max_reps: int) -> tuple[int, int]:
    est = max(estimate_ms, 1e-4)
    warmup = max(1, int(warmup_ms / est))
    reps = min(max_reps, max(min_reps, int(rep_ms / est)))
    return warmup, reps


def time_fn(fn, device: torch.device | str, *, warmup_ms: float = 25, rep_ms: float = 100,
            flush_l2: bool = True, graph: bool = False, min_reps: int = 5, max_reps: int = 1000,
            back_to_back: bool = False) -> Measurement:
    """Time `fn()` on `device`; every sample is one call (per call, or back to back: see the module's doc).
    On the CPU both ways are the same: perf_counter around each call counts the host's work."""
    if back_to_back and flush_l2:
        raise ValueError("back_to_back samples run the calls without a gap, so the L2 cannot be flushed between "
                         "them: pass flush_l2=False")
    device = torch.device(device)
    if device.type == "cuda":
        return _time_cuda(fn, device, warmup_ms, rep_ms, flush_l2, graph, min_reps, max_reps, back_to_back)
    return _time_cpu(fn, warmup_ms, rep_ms, min_reps, max_reps)


def repeat_until_stable(measure, *, max_repeats: int = 10, patience: int = 2, min_gain: float = 0.005) -> list[float]:
    """Call `measure()` (-> ms, lower is better) until its best has not improved by more than `min_gain` for
    `patience` calls in a row, at most `max_repeats` times; every value, in order. A GPU's clocks settle over
    seconds (power and thermal limits), so one measurement can read several percent below what it sustains."""
    values, stale = [], 0
    while len(values) < max_repeats and stale < patience:
        value = measure()
        stale = 0 if not values or value < min(values) * (1 - min_gain) else stale + 1
        values.append(value)
    return values


HOST_CALLS = 32     # loop_times: calls whose issuing is timed on the host, fewer than a launch queue holds


def time_loop(fn, device: torch.device | str, *, iters: int, warmup: int = 5) -> float:
    """Milliseconds a call of `fn` takes in a loop, as nccl-tests times a collective (loop_times)."""
    return loop_times(fn, device, iters=iters, warmup=warmup)[0]


def loop_times(fn, device: torch.device | str, *, iters: int, warmup: int = 5) -> tuple[float, float]:
    """(ms a call, ms of host time a call) for `warmup` calls, then `iters` calls back to back between two CUDA
    events (perf_counter on a CPU), as nccl-tests times a collective. Nothing runs between the calls, so per-call
    costs a loop does not pay (an event, a sample) are not counted. The host time is what issuing the first
    HOST_CALLS calls took, a call: where it reaches the first figure the device waited on the host, and the loop
    measured the host's cost a call (Python, PyTorch and the library enqueueing), not the device's. (Later calls
    can block on a full launch queue, which a device-bound loop fills: they would read the device's pace.)"""
    device = torch.device(device)
    if device.type != "cuda":
        for _ in range(warmup):
            fn()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        ms = (time.perf_counter() - t0) * 1e3 / iters
        return ms, ms
    with torch.cuda.device(device):
        start, end = _events(2)    # made (and synced) before the warm-up, so the GPU is busy when the loop starts
        for _ in range(warmup):
            fn()
        first = min(iters, HOST_CALLS)
        start.record()
        t0 = time.perf_counter()
        for _ in range(first):
            fn()
        host_ms = (time.perf_counter() - t0) * 1e3 / first
        for _ in range(iters - first):
            fn()
        end.record()
        torch.cuda.synchronize()   # sync point: read the events once the loop has completed
    return start.elapsed_time(end) / iters, host_ms


def time_until_stable(fn, device, *, max_repeats: int = 10, patience: int = 2, min_gain: float = 0.005,
                      **timing) -> tuple[Measurement, list[float]]:
    """`time_fn` repeated by `repeat_until_stable`: the measurement with the best median, and every median."""
    runs = []

    def measure() -> float:
        runs.append(time_fn(fn, device, **timing))
        return runs[-1].median_ms

    medians = repeat_until_stable(measure, max_repeats=max_repeats, patience=patience, min_gain=min_gain)
    return min(runs, key=lambda m: m.median_ms), medians


def _time_cpu(fn, warmup_ms, rep_ms, min_reps, max_reps) -> Measurement:
    t0 = time.perf_counter()
    fn()
    estimate_ms = (time.perf_counter() - t0) * 1e3
    warmup, reps = _counts(estimate_ms, warmup_ms, rep_ms, min_reps, max_reps)
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return Measurement(samples, warmup=warmup, flush_l2=False, host_clock=True)


_L2_BUFFERS: dict[torch.device, torch.Tensor] = {}


def _l2_buffer(device: torch.device) -> torch.Tensor:
    """256 MB to overwrite before each call: larger than any current L2 (H200: 60 MB), as do_bench does."""
    if device not in _L2_BUFFERS:
        _L2_BUFFERS[device] = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device=device)
    return _L2_BUFFERS[device]


def _as_graph(fn, device):
    """Capture fn in a CUDA graph and return its replay; fn must already have run once (warm)."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        fn()   # warm-up on a side stream, as torch.cuda.graphs recommends before capture
    torch.cuda.current_stream(device).wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def _time_cuda(fn, device, warmup_ms, rep_ms, flush_l2, graph, min_reps, max_reps, back_to_back) -> Measurement:
    with torch.cuda.device(device):
        call = _as_graph(fn, device) if graph else fn
        cache = _l2_buffer(device) if flush_l2 else None
        call()
        torch.cuda.synchronize()   # sync point: the first call may include lazy init
        estimate_ms = _estimate_cuda(call, cache)
        warmup, reps = _counts(estimate_ms, warmup_ms, rep_ms, min_reps, max_reps)
        # the events before the warm-up: their sync must not leave the GPU idle right before the timed calls
        marks = _events(reps + 1 if back_to_back else 2 * reps)
        for _ in range(warmup):
            call()
        if back_to_back:
            samples = _back_to_back(call, marks)
            return Measurement(samples, warmup=warmup, flush_l2=False, graph=graph, back_to_back=True)
        starts, ends = marks[:reps], marks[reps:]
        for start, end in zip(starts, ends):
            if cache is not None:
                cache.zero_()      # evict the inputs from L2 so every call reads them from memory
            start.record()
            call()
            end.record()
        torch.cuda.synchronize()   # sync point: read the events only once all have completed
        samples = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return Measurement(samples, warmup=warmup, flush_l2=flush_l2, graph=graph)


def _back_to_back(call, marks: list) -> list[float]:
    """One event between consecutive calls: sample i is the interval from call i's start to call i+1's."""
    marks[0].record()
    for mark in marks[1:]:
        call()
        mark.record()
    torch.cuda.synchronize()   # sync point: read the events only once all have completed
    return [a.elapsed_time(b) for a, b in zip(marks, marks[1:])]


def _events(n: int) -> list:
    """n timing events, created before the timed loop: torch creates the CUDA event at its first record(), and
    that driver call must not land between two timed calls."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for e in events:
        e.record()
    torch.cuda.synchronize()   # sync point: before the timed calls, not among them
    return events


def _estimate_cuda(call, cache, calls: int = 5) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        if cache is not None:
            cache.zero_()
        call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls
