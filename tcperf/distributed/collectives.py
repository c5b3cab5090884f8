"""The five collectives `tcperf comm` measures through torch.distributed (NCCL on GPUs, gloo on the CPU), with
nccl-tests' size and bandwidth conventions (nccl-tests/doc/PERFORMANCE.md):

    size S    all_reduce, broadcast: the buffer; all_gather: the gathered output; reduce_scatter, all_to_all: the
              input of one rank (so S / n bytes leave or arrive per peer)
    algbw     S / t
    busbw     algbw x 2(n-1)/n (all_reduce), x (n-1)/n (all_gather, reduce_scatter, all_to_all), x 1 (broadcast):
              the figure to hold against the link's speed, the same for every collective and rank count

A case runs on every rank. Inputs are random integers 1..4 times (rank + 1), so every sum is exact in fp32 and
bf16 (up to 10 ranks); outputs are poisoned with NaN, the collective runs once and every rank compares its output
with the value the others' inputs imply; only when the worst rank matches is it timed. Timing is nccl-tests':
a warm-up, then many calls back to back between two CUDA events and nothing else, the elapsed time over the calls
(tcperf.timing.time_loop), the same number of calls on every rank (agreed from a probe after the same warm-up), the
slowest rank's time taken (all_reduce MAX) after each loop. That loop is repeated REPEATS times; the median is
reported with its IQR.

On 2 x H200 (NVLink NV18, torch 2.11), a plain all_reduce loop gives fp32 bus bandwidth 39 GB/s at 1 MiB, 223 at
16 MiB, 300 at 256 MiB and 328 at 1 GiB (issue 14); tcperf must land within 3% (benchmarks/comm_gpu.py).

    rows = launch.run_cases(cases(["all_reduce"], ["fp32"], sizes(1024, 2**30), 2), device, Job(), nproc=2)
"""
from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass
from importlib import resources
from typing import Callable

import torch
import torch.distributed as dist

from ..errors import UserError, choices
from ..records import Case, Job, Result
from . import launch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
TOLERANCE = {"fp32": 1e-6, "bf16": 1e-2, "fp16": 1e-3}   # relative to the largest expected value; sums are exact
MIN_REPS, MAX_REPS = 5, 2000      # calls in one timed loop
PROBE_REPS = 3
WARMUP = 5                        # calls before each timed loop
REPEATS = 5                       # timed loops: the median of their means is reported, with its spread
SEED = 1234
HOST_BOUND = 0.9     # a loop whose calls took the host at least this share of their time a call waited on the host


@dataclass(frozen=True)
class Prepared:
    run: Callable[[], object]      # one call of the collective
    out: torch.Tensor              # what the call writes (poisoned before the check)
    expected: torch.Tensor         # what it must hold after one call


@dataclass(frozen=True)
class Collective:
    name: str
    prepare: Callable[[torch.Tensor, int, int], Prepared]   # (base of S bytes, n ranks, this rank)
    bus_factor: Callable[[int], float]                      # busbw / algbw for n ranks
    chunked: bool = True                                    # S is split in n equal parts

    def bandwidth(self, size_bytes: float, seconds: float, n: int) -> tuple[float, float]:
        """(algbw, busbw) in GB/s (1e9 bytes a second)."""
        alg = size_bytes / seconds / 1e9
        return alg, alg * self.bus_factor(n)


def _weights(base: torch.Tensor, n: int) -> torch.Tensor:
    """1, ..., 1, 2, ..., 2, ..., n: chunk j of a rank-stacked buffer came from rank j (times j + 1)."""
    c = base.numel() // n
    return torch.arange(1, n + 1, device=base.device, dtype=base.dtype).repeat_interleave(c)


def _poisoned(like: torch.Tensor, numel: int | None = None) -> torch.Tensor:
    return torch.full((like.numel() if numel is None else numel,), float("nan"), dtype=like.dtype, device=like.device)


def _all_reduce(base, n, r) -> Prepared:
    x = base * (r + 1)                                           # in place: out is x
    return Prepared(lambda: dist.all_reduce(x), x, base * (n * (n + 1) // 2))


def _all_gather(base, n, r) -> Prepared:
    c = base.numel() // n
    mine, out = base[r * c:(r + 1) * c] * (r + 1), _poisoned(base)  # (c,) in, (n c,) out
    return Prepared(lambda: dist.all_gather_into_tensor(out, mine), out, base * _weights(base, n))


def _reduce_scatter(base, n, r) -> Prepared:
    c = base.numel() // n
    x, out = base * (r + 1), _poisoned(base, c)                  # (n c,) in, (c,) out
    return Prepared(lambda: dist.reduce_scatter_tensor(out, x), out, base[r * c:(r + 1) * c] * (n * (n + 1) // 2))


def _broadcast(base, n, r) -> Prepared:
    x = base.clone() if r == 0 else _poisoned(base)             # rank 0 is the root
    return Prepared(lambda: dist.broadcast(x, src=0), x, base)


def _all_to_all(base, n, r) -> Prepared:
    c = base.numel() // n
    x, out = base * (r + 1), _poisoned(base)                     # chunk j of out is chunk r of rank j's x
    mine = base[r * c:(r + 1) * c].repeat(n)
    return Prepared(lambda: dist.all_to_all_single(out, x), out, mine * _weights(base, n))


COLLECTIVES: dict[str, Collective] = {c.name: c for c in (
    Collective("all_reduce", _all_reduce, lambda n: 2 * (n - 1) / n, chunked=False),
    Collective("all_gather", _all_gather, lambda n: (n - 1) / n),
    Collective("reduce_scatter", _reduce_scatter, lambda n: (n - 1) / n),
    Collective("broadcast", _broadcast, lambda n: 1.0, chunked=False),
    Collective("all_to_all", _all_to_all, lambda n: (n - 1) / n),
)}


def get(name: str) -> Collective:
    if name not in COLLECTIVES:
        raise choices("collective", name, COLLECTIVES)
    return COLLECTIVES[name]


# --- cases ------------------------------------------------------------------------------------------------------------
def parse_size(text: str) -> int:
    """'1K' | '16M' | '1G' | '4096' -> bytes (powers of 1024); UserError otherwise."""
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1:] if t[-1:] in ("K", "M", "G") else ""
    try:
        value = float(t[:-1] if unit else t) * units[unit]
    except ValueError:
        raise UserError(f"bad size {text!r}; give bytes such as 1024, 1K, 16M, 1G") from None
    if value < 1:
        raise UserError(f"bad size {text!r}; give at least 1 byte")
    return int(value)


def sizes(begin: int, end: int, factor: float = 2.0) -> list[int]:
    """nccl-tests' -b/-e/-f: begin, begin x factor, ... up to end (end included when the steps land on it)."""
    if factor <= 1 or begin > end:
        raise UserError(f"bad sizes: begin {begin} <= end {end} and factor {factor} > 1 are needed")
    out, s = [], float(begin)
    while s <= end * (1 + 1e-9):
        out.append(int(s))
        s *= factor
    return out


def label(size: int) -> str:
    """1024 -> '1 KiB'; 67108868 -> '64.0 MiB'."""
    size = int(size)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size // scale} {unit}" if size % scale == 0 else f"{size / scale:.1f} {unit}"
    return f"{size} B"


LATENCY_BOUND = 2.0     # sizes whose time is within this factor of the smallest size's: the latency floor holds


def regimes(points: list[tuple[int, float, float]]) -> dict | None:
    """From one collective's (bytes, µs a call, busbw GB/s), smallest first: the latency floor (the smallest size's
    time), the largest size still within LATENCY_BOUND of it (doubling the bytes barely moves the time: latency-
    bound), and the smallest size reaching half the peak bus bandwidth measured (Hockney's n½); None without 2
    sizes."""
    points = sorted(p for p in points if p[1] and p[2] is not None)
    if len(points) < 2:
        return None
    floor = points[0][1]
    bound = [size for size, us, _ in points if us <= LATENCY_BOUND * floor]
    peak_size, _, peak = max(points, key=lambda p: p[2])
    half = next(size for size, _, bus in points if bus >= peak / 2)
    return {"floor_us": floor, "latency_bound_to": max(bound), "half_peak_from": half, "peak_busbw_gbps": peak,
            "peak_at": peak_size}


def regimes_sentence(found: dict, host_us: float | None = None) -> str:
    """One line for regimes(); host_us: the host's time to issue a call where every size of the floor waited on
    it (the floor is then the host's cost a call, not the link's latency)."""
    host = (f", set by the host: issuing a call takes it {host_us:,.1f} µs (Python, PyTorch, NCCL's enqueue)"
            if host_us is not None else "")
    return (f"latency floor {found['floor_us']:,.1f} µs (to {label(found['latency_bound_to'])}, the time within "
            f"{LATENCY_BOUND:g}x of it{host}); half the peak bus bandwidth ({found['peak_busbw_gbps']:,.1f} GB/s "
            f"at {label(found['peak_at'])}) from {label(found['half_peak_from'])}")


@dataclass(frozen=True)
class CommArgs:
    """What the rows of a run of collectives share: the link between the ranks (tcperf.distributed.link)."""
    link: dict | None = None


def case(name: str, dtype: str, size: int, nproc: int, suite: str = "sweep", tags: dict | None = None,
         link: dict | None = None) -> Case:
    return Case(f"comm.{name}", {"bytes": size, "nproc": nproc}, dtype, task, suite=suite, tags=tags or {},
                args=CommArgs(link))


def cases(names, dtypes, size_list, nproc: int, link: dict | None = None) -> list[Case]:
    """Collective by collective, dtype by dtype, small to large (the order nccl-tests prints)."""
    return [case(n, d, s, nproc, link=link) for n in names for d in dtypes for s in size_list]


def deepbench(names, dtypes, nproc: int, link: dict | None = None) -> list[Case]:
    """DeepBench's all-reduce table (tcperf/suites/deepbench/allreduce.csv): its float counts, in each dtype."""
    text = resources.files("tcperf.suites").joinpath("deepbench/allreduce.csv").read_text()
    rows = list(csv.DictReader(text.splitlines()))
    return [case(n, d, int(row["floats"]) * DTYPES[d].itemsize, nproc, "deepbench",
                 {"application": row["application"] or "unnamed", "floats": int(row["floats"])}, link)
            for n in names for d in dtypes for row in rows]


def parse_names(text: str, table: dict, kind: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return list(table)
    for n in names or [""]:
        if n not in table:
            raise choices(kind, n, [*table, "all"])
    return names


# --- on every rank ----------------------------------------------------------------------------------------------------
def task(case: Case, device, job: Job) -> Result:
    """One collective, one dtype, one size on this rank: check, then time; the row rank 0 keeps."""
    coll, dtype = get(case.op.split(".", 1)[1]), case.precision
    n, r = dist.get_world_size(), dist.get_rank()
    prep, size = _prepare(coll, dtype, case.shape["bytes"], n, r, device)
    row = _row(case, coll, size, n)
    launch.beat(f"{row.metrics['label']}: check")
    [err] = launch.slowest([_error(prep, dtype)], device)        # the worst rank's
    row.error = err
    if not err <= TOLERANCE[dtype]:          # this way round, NaN fails too
        return row.replace(status="wrong", message=f"relative error {err:.3g} > {TOLERANCE[dtype]:g}: not timed")
    launch.beat(f"{row.metrics['label']}: time")
    _time_into(row, prep.run, coll, size, n, device, job)
    return row


def _prepare(coll: Collective, dtype: str, size: int, n: int, r: int, device) -> tuple[Prepared, int]:
    """The case's buffers on this rank and the size really moved (a chunked size rounded down to n chunks)."""
    count = max(1, size // DTYPES[dtype].itemsize)
    if coll.chunked:
        count = max(n, count // n * n)
    gen = torch.Generator(device=device).manual_seed(SEED)         # the same base on every rank
    base = torch.randint(1, 5, (count,), generator=gen, device=device).to(DTYPES[dtype])
    return coll.prepare(base, n, r), count * DTYPES[dtype].itemsize


def _row(case: Case, coll: Collective, size: int, n: int) -> Result:
    link = case.args.link if case.args else None
    return Result(case.op, case.shape, case.precision, suite=case.suite, tolerance=TOLERANCE[case.precision],
                  bytes=size, metrics={"label": f"{coll.name} {label(size)}", "tags": case.tags, "world": n,
                                       "backend": dist.get_backend(), "link": link, "size_bytes": size})


def _error(prep: Prepared, dtype: str) -> float:
    """Run once and compare: the largest difference over the largest expected value (NaN when poison is left)."""
    prep.run()
    got, want = prep.out.float(), prep.expected.float()
    err = ((got - want).abs().max() / want.abs().max()).item()   # sync point: the check's answer on the host
    return err if err == err else math.inf


def _time_into(row: Result, run, coll: Collective, size: int, n: int, device, job: Job) -> None:
    """Time `run` as nccl-tests does (the module's doc says how) into the row: times, bandwidths, spread, and the
    host's time to issue a call (host_bound where it is what the loop measured)."""
    from ..timing import Measurement, loop_times
    iters = _iters(run, device, job.timing.rep_ms)
    # the slowest rank's time taken after each loop, as the plain loop does: that exchange also lines the ranks' hosts
    # up before the next loop, so no rank's timed calls wait for another still finishing the last
    mine, slowest, host = [], [], []
    for _ in range(REPEATS):
        ms, host_ms = loop_times(run, device, iters=iters, warmup=WARMUP)
        mine.append(ms)
        worst, worst_host = launch.slowest([ms, host_ms], device)
        slowest.append(worst)
        host.append(worst_host)
    m = Measurement(slowest, warmup=WARMUP, flush_l2=False, back_to_back=True)
    alg, bus = coll.bandwidth(size, m.median_ms * 1e-3, n)
    host_us = statistics.median(host) * 1e3
    row.samples, row.median_ms, row.iqr_ms, row.min_ms, row.mean_ms, row.n, row.gbps = \
        m.samples_ms, m.median_ms, m.iqr_ms, m.min_ms, m.mean_ms, m.n, bus
    row.metrics.update(algbw_gbps=alg, busbw_gbps=bus, time_us=m.median_ms * 1e3, iters=iters, warmup=WARMUP,
                       repeats=REPEATS, rank0_ms=mine, spread=m.spread, unstable=m.unstable, host_us=host_us,
                       host_bound=host_us >= HOST_BOUND * m.median_ms * 1e3,
                       timing="nccl-tests: mean of a loop between two events, slowest rank, median of repeats")
    if m.unstable:
        row.warnings.append(f"unstable: IQR/median = {m.spread:.0%}")


def _iters(run, device, rep_ms: float) -> int:
    """Calls a repeat's loop makes, the same on every rank: its share of `rep_ms` over the slowest rank's probe."""
    from ..timing import time_loop
    [probe] = launch.slowest([time_loop(run, device, iters=PROBE_REPS, warmup=WARMUP)], device)
    return int(min(MAX_REPS, max(MIN_REPS, rep_ms / REPEATS / max(probe, 1e-4))))
