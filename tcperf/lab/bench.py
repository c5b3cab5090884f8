"""The lab's measurements: each kernel at each size against NumPy on the CPU and torch/cuBLAS on the GPU, with
the cost of moving the data counted, and the size from which the GPU wins.

One case is one kernel at one size and precision. `measure_case` is the tcperf worker task that measures it
(docs/design.md, "a case and a result"), in this order:

1. inputs made on the host (seeded per case, random, non-zero), as a program would have them;
2. the kernel's output checked against its NumPy version in float64 on the same operands (`wrong`, not timed, if not);
3. NumPy on the CPU (all cores: BLAS is multi-threaded, NumPy's elementwise operations use one core);
4. the kernel alone on the GPU (`tcperf.timing.time_fn`: CUDA events, L2 flushed, median and IQR);
5. the torch equivalent on the GPU (cuBLAS for the matmuls);
6. end to end: the copies in, the kernel, the copy out, from pageable and from pinned host memory (a host clock
   around the whole round trip, which ends in a synchronize).

The stored row: `median_ms` and its spread are the kernel's, `tflops` / `gbps` its rate; `metrics` holds
numpy_ms, torch_ms, e2e_pageable_ms, e2e_pinned_ms, the ceiling the rate is held against and its percentage.
`crossovers()` adds one summary row per kernel and precision with `metrics.crossover`.

Without a GPU the kernels run in the Triton interpreter (TRITON_INTERPRET=1) on CPU tensors at small sizes: that
checks them; the interpreter's time is stored but is not a speed, and there is no crossover.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import zlib
from dataclasses import dataclass

import numpy as np
import torch

from .. import lab, precision
from ..errors import UserError
from ..ops.base import rel_error
from ..records import Case, Job, Result
from ..timing import Measurement, time_fn

# The default sweeps (issue: vectors 1e3..1e8, matrices 128..8192), and the interpreter's small ones.
VECTOR_SIZES = (10**3, 10**4, 10**5, 10**6, 10**7, 10**8)
MATRIX_SIZES = (128, 256, 512, 1024, 2048, 4096, 8192)
QUICK_MAX = {"vector": 10**7, "matrix": 4096}
INTERPRETED_SIZES = {"vector": (1_000, 10_000, 100_000), "matrix": (16, 32, 64)}
INTERPRETED_MAX = {"matmul_naive": 16}     # ~4 ms a program in the interpreter: n=64 would take a minute a call

# NumPy computes fp16/bf16 cases in float32 (it has no bfloat16 and no BLAS for float16) and int8 ones in float64
# (integer matmul has no BLAS; float64 is exact for these products).
NUMPY_DTYPES = {"fp16": np.float32, "bf16": np.float32, "int8": np.float64}


# --- what to measure --------------------------------------------------------------------------------------------
def parse_kernels(text: str | None) -> list[str]:
    if not text:
        return lab.names()
    names = [t.strip() for t in text.split(",") if t.strip()]
    for name in names:
        lab.get(name)                      # UserError naming the kernels
    return names


def parse_sizes(text: str | None) -> list[int] | None:
    """'1e3,1e6' or '1024, 4096' -> [1000, 1000000]; None for the default sweep."""
    if not text:
        return None
    sizes = []
    for token in (t.strip() for t in text.split(",")):
        try:
            value = float(token)
        except ValueError:
            value = float("nan")
        if not (1 <= value <= 2**40 and value == int(value)):      # NaN and inf fail here too
            raise UserError(f"bad size {token!r} in --sizes: give positive whole numbers, e.g. 1e3,1e6 or 1024,4096")
        sizes.append(int(value))
    return sizes


def default_sizes(name: str, interpreted: bool, quick: bool = False) -> list[int]:
    entry = lab.get(name)
    if interpreted:
        cap = INTERPRETED_MAX.get(name)
        return [n for n in INTERPRETED_SIZES[entry.kind] if cap is None or n <= cap] or [cap]
    sizes = VECTOR_SIZES if entry.kind == "vector" else MATRIX_SIZES
    cap = min(entry.max_default or sizes[-1], QUICK_MAX[entry.kind] if quick else sizes[-1])
    return [n for n in sizes if n <= cap]


@dataclass(frozen=True)
class LabArgs:
    """What every lab case of a run shares: the ceilings its rates are held against ({"measured": ...,
    "datasheet": ...}) and the file NumPy's times are kept in across cases and workers."""
    ceilings: dict
    numpy_cache: str | None = None


def cases(kernels: list[str], sizes: list[int] | None, interpreted: bool, quick: bool = False,
          args: LabArgs = LabArgs({})) -> list[Case]:
    """One case per kernel, precision and size, in the tutorial's order."""
    return [Case(f"lab.{name}", {"n": n}, prec, measure_case, suite="lab", args=args) for name in kernels
            for prec in lab.get(name).precisions for n in sizes or default_sizes(name, interpreted, quick)]


@contextlib.contextmanager
def interpreter(on: bool):
    """TRITON_INTERPRET=1 (or unset) for the worker processes started inside; the caller's value back after."""
    saved = os.environ.pop("TRITON_INTERPRET", None)
    if on:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        os.environ.pop("TRITON_INTERPRET", None)
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved


# --- one case (runs in a tcperf worker) -------------------------------------------------------------------------
def label(name: str, n: int) -> str:
    if lab.get(name).kind == "vector":
        exp = len(str(n)) - 1
        return f"{n:,} ({'1e' + str(exp) if n == 10**exp else f'{n:.1e}'})"
    return f"{n}x{n}"


def measure_case(case: Case, device: torch.device, job: Job) -> Result:
    """One kernel at one size and precision, in a worker."""
    name, prec, n = case.op.split(".", 1)[1], precision.get(case.precision), case.shape["n"]
    entry, mod = lab.get(name), lab.load(name)
    interpreted = lab.interpreting()
    itemsize = torch.empty((), dtype=prec.dtype).element_size()
    result = Result(case.op, {"n": n}, prec.name, suite="lab", flops=mod.flops(n), bytes=mod.bytes_moved(n, itemsize),
                    tolerance=prec.tolerance,
                    metrics={"label": label(name, n), "kind": entry.kind, "bound": entry.bound,
                             "interpreted": interpreted, "cpu_cores": os.cpu_count(),
                             "torch_threads": torch.get_num_threads()})
    why = None if interpreted else precision.unsupported_reason(prec, device)
    if why:
        return result.replace(status="skipped", message=why)
    with precision.apply(prec, device.type):    # strict fp32 (TF32 off) for the fp32 kernels and their baselines
        return _measure(name, prec, n, device, job, case.args, result, interpreted)


@dataclass
class Checked:
    """One kernel run on its inputs and held against NumPy in float64: what the timing goes on with."""
    mod: object
    host: list[torch.Tensor]        # inputs as made, on the host
    arrays: list[np.ndarray]        # the same for NumPy (in NUMPY_DTYPES)
    xs: list[torch.Tensor]          # the same where the kernel runs
    out: torch.Tensor               # the kernel's output
    reference: np.ndarray           # numpy_fn in float64 on the same operands
    error: float                    # ||out - reference|| / ||reference||


def check(name: str, prec_name: str, n: int, run_on: torch.device | str) -> Checked:
    """Make the case's inputs, run the kernel once on `run_on` and compare it with the float64 reference."""
    mod, prec = lab.load(name), precision.get(prec_name)
    seed = zlib.crc32(f"{name}|{n}|{prec.name}".encode())   # per case: a stale output of another case never matches
    host = list(mod.make_inputs(n, prec.dtype, torch.Generator().manual_seed(seed)))
    arrays = [x.float().numpy().astype(NUMPY_DTYPES.get(prec.name, np.float32), copy=False) for x in host]
    reference = mod.numpy_fn(*[a.astype(np.float64) for a in arrays])
    xs = [x.to(run_on) for x in host]
    out = mod.triton_fn(*xs)
    return Checked(mod, host, arrays, xs, out, reference, rel_error(out.cpu(), torch.from_numpy(reference)))


def _measure(name, prec, n, device, job: Job, args: LabArgs, result: Result, interpreted: bool) -> Result:
    run_on = torch.device("cpu") if interpreted else device
    c = check(name, prec.name, n, run_on)
    result.error = c.error
    if not c.error <= prec.tolerance:           # written this way round so that NaN fails too
        return result.replace(status="wrong", message=f"relative error {c.error:.3g} > {prec.tolerance:.0e}: not timed")
    m = result.metrics
    m["numpy_ms"], m["numpy_dtype"] = _numpy_ms(c.mod, c.arrays, c.reference.shape, args), str(c.arrays[0].dtype)
    kernel = _time(lambda: c.mod.triton_fn(*c.xs), run_on, job, interpreted)
    result.samples, result.median_ms, result.iqr_ms = kernel.samples_ms, kernel.median_ms, kernel.iqr_ms
    result.min_ms, result.mean_ms, result.n = kernel.min_ms, kernel.mean_ms, kernel.n
    _time_torch(c.mod, c.xs, run_on, job, result, compare=not interpreted)
    config = getattr(c.mod, "tuned_config", None)
    if config and config():
        m["config"] = config()
    if interpreted:
        result.message = "Triton interpreter on the CPU: checked, but its time is not a GPU's speed"
        return result
    for kind, pinned in (("pageable", False), ("pinned", True)):
        e2e = _end_to_end(c.mod, c.host, c.out, device, pinned)
        m[f"e2e_{kind}_ms"], m[f"e2e_{kind}_iqr_ms"] = e2e.median_ms, e2e.iqr_ms
    _rate(result, args.ceilings)
    if kernel.unstable:
        result.warnings.append(f"unstable: IQR/median = {kernel.spread:.0%}")
    return result


def _time(fn, device: torch.device, job: Job, interpreted: bool) -> Measurement:
    if interpreted:                              # a few calls: the interpreter takes up to seconds per call
        return time_fn(fn, "cpu", warmup_ms=0, rep_ms=0, min_reps=3)
    return time_fn(fn, device, **dataclasses.asdict(job.timing))


def _time_torch(mod, xs, device, job: Job, result: Result, compare: bool) -> None:
    """The library's time for the same operation; a baseline that cannot run this shape is a note, not a failure."""
    try:
        m = _time(lambda: mod.torch_fn(*xs), device, job, False)
    except RuntimeError as e:                    # e.g. torch._int_mm wants M > 16 and K, N multiples of 8
        result.warnings.append(f"torch baseline failed: {str(e).splitlines()[0][:200]}")
        return
    result.metrics["torch_ms"] = m.median_ms
    if compare:
        result.metrics["vs_torch"] = m.median_ms / result.median_ms    # > 1: the Triton kernel is faster


def _numpy_ms(mod, arrays: list[np.ndarray], shape, args: LabArgs) -> float:
    """NumPy's median time, cached across cases and workers: the matmul modules share one NumPy function."""
    key = f"{mod.numpy_fn.__module__}.{mod.numpy_fn.__name__}|{arrays[0].dtype}|{shape}"
    path = args.numpy_cache
    cache = json.load(open(path)) if path and os.path.exists(path) else {}
    if key not in cache:
        out = np.empty(shape, dtype=arrays[0].dtype)
        cache[key] = time_fn(lambda: mod.numpy_fn(*arrays, out=out), "cpu", warmup_ms=0, rep_ms=200,
                             min_reps=3).median_ms
        if path:
            with open(path, "w") as f:
                json.dump(cache, f)
    return cache[key]


def _end_to_end(mod, host: list[torch.Tensor], out: torch.Tensor, device: torch.device, pinned: bool) -> Measurement:
    """Host arrays in, host array out: the copies, the kernel, and the wait for the result."""
    if pinned:
        host = [x.pin_memory() for x in host]
    out_host = torch.empty(out.shape, dtype=out.dtype, pin_memory=pinned)

    def round_trip():
        xs = [x.to(device, non_blocking=pinned) for x in host]    # host -> device (pageable: staged by the driver)
        y = mod.triton_fn(*xs)
        out_host.copy_(y, non_blocking=pinned)                     # device -> host
        torch.cuda.synchronize(device)          # sync point: only now is the result on the host
    # A host clock is the right one here: the host waits for the whole round trip, copies included.
    return time_fn(round_trip, "cpu", warmup_ms=25, rep_ms=200, min_reps=5)


def _rate(result: Result, ceilings: dict) -> None:
    """TFLOPS or GB/s (by what bounds the kernel), against the measured ceiling, else the datasheet's."""
    seconds = result.median_ms * 1e-3
    result.tflops = result.flops / seconds / 1e12
    result.gbps = result.bytes / seconds / 1e9
    memory = result.metrics["bound"] == "memory"
    value, unit = (result.gbps, "GB/s") if memory else (result.tflops, "TFLOPS")
    measured = (ceilings.get("measured") or {}).get("bandwidth" if memory else result.precision)
    sheet = (ceilings.get("datasheet") or {}).get("bandwidth_gbs" if memory else result.precision)
    ceiling, source = (measured, "measured") if measured else (sheet, "datasheet")
    if memory:
        result.tflops = None                     # an add's "TFLOPS" mean nothing: rated by bandwidth only
    if ceiling:
        result.metrics["ceiling"] = {"value": ceiling, "unit": unit, "source": source}
        result.metrics["pct_ceiling"] = 100.0 * value / ceiling


# --- after the sweep ----------------------------------------------------------------------------------------------
CROSSOVER_SERIES = (("median_ms", "kernel only"), ("e2e_pageable_ms", "incl. copies, pageable"),
                    ("e2e_pinned_ms", "incl. copies, pinned"))


def gpu_time(row: Result, key: str) -> float | None:
    return row.median_ms if key == "median_ms" else row.metrics.get(key)


def crossover(rows: list[Result], key: str) -> int | None:
    """The smallest size from which the GPU time `key` beats NumPy at this and every larger size measured."""
    wins = [(r.shape["n"], gpu_time(r, key) < r.metrics["numpy_ms"]) for r in
            sorted(rows, key=lambda r: r.shape["n"]) if gpu_time(r, key) and r.metrics.get("numpy_ms")]
    first = next((i for i in range(len(wins)) if all(w for _, w in wins[i:])), None)
    return wins[first][0] if first is not None else None


def crossovers(results: list[Result]) -> list[Result]:
    """One summary row per kernel and precision: metrics.crossover = {series: size or None}."""
    series: dict[tuple, list] = {}
    for r in results:
        if r.ok and r.op.startswith("lab.") and "numpy_ms" in r.metrics:
            series.setdefault((r.op, r.precision), []).append(r)
    out = []
    for (op, prec), rows in series.items():
        found = {what: crossover(rows, key) for key, what in CROSSOVER_SERIES}
        sizes = sorted(r.shape["n"] for r in rows)
        out.append(Result(op, {"summary": "crossover"}, prec, suite="lab",
                          metrics={"label": "crossover", "sizes": sizes,     # keys name the precision: reports
                                   "crossover": {f"{prec} {what}": n for what, n in found.items()}},   # mix them
                          message="; ".join(f"{what}: {_from(n, sizes)}" for what, n in found.items())))
    return out


def _from(n: int | None, sizes: list[int]) -> str:
    if n is None:
        return f"never within {sizes[0]:,}..{sizes[-1]:,}"
    return f"GPU wins from {n:,}" if n > sizes[0] else f"GPU wins at every size ({sizes[0]:,}..{sizes[-1]:,})"
