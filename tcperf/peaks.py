"""Datasheet peaks per GPU and precision (data/peaks.csv), and the ceilings this GPU really reaches
(measured by `tcperf ceilings`, read back from the store). Never a constant in code.

    datasheet("NVIDIA H200")            # {'fp16': 989.0, ..., 'bandwidth_gbs': 4800.0, 'gpu': 'H200'}
    measured(args.db, device)           # {'bf16': 744.0, 'bandwidth': 4210.0}: what `tcperf ceilings` stored
    measure_now(device, "bf16")         # the same from one GEMM and one copy timed now, where nothing is stored
"""
from __future__ import annotations

import csv
import re
from functools import lru_cache
from importlib import resources

import torch

PRECISION_COLUMNS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")
QUICK_GEMM = 8192         # measure_now's GEMM: 8192^3, where every precision's Tensor Core kernels reach their best
QUICK_COPY = 2**28        # measure_now's copy: fp32 elements, 1 GiB, far beyond L2


@lru_cache(maxsize=1)
def table() -> list[dict]:
    with resources.files("tcperf").joinpath("data/peaks.csv").open() as f:
        return list(csv.DictReader(f))


def datasheet(gpu_name: str | None) -> dict:
    """The first row whose `match` pattern is found in the device name (rows are ordered specific first);
    {} for an unknown GPU or the CPU. TFLOPS (TOPS for int8), dense; bandwidth in GB/s."""
    if not gpu_name:
        return {}
    for row in table():
        if re.search(row["match"], gpu_name):
            peaks = {k: float(row[k]) for k in (*PRECISION_COLUMNS, "bandwidth_gbs") if row[k]}
            return {**peaks, "gpu": row["gpu"], "source": row["note"]}
    return {}


def measured(db, device: torch.device) -> dict:
    """This GPU's ceilings as `tcperf ceilings` measured and stored them (Store.ceilings: {precision: TFLOPS,
    "bandwidth": GB/s}); {} off CUDA or where it never ran. `db` is --db (None: the default store)."""
    if device.type != "cuda":
        return {}
    from .store import Store      # here, not above: every worker imports peaks (engine.py) and needs no database
    return Store.open(db).ceilings(torch.cuda.get_device_name(device))


def percent_of(value: float | None, peak: float | None) -> float | None:
    return 100.0 * value / peak if value and peak else None


def measure_now(device: torch.device, precision: str | None = None) -> dict:
    """This GPU's copy bandwidth, and the Tensor Core ceiling at `precision` if given, timed now (a few hundred ms,
    each case checked first): {precision: TFLOPS, "bandwidth": GB/s, "from": ...}, a value None where its case
    failed. For the advisor's speed of light and generate's byte limit where `tcperf ceilings` has not run."""
    from .ops.case import measure_case     # here: the ops import peaks' neighbours, not the other way round
    from .records import Case, Job
    copy = measure_case(Case("copy", {"n": QUICK_COPY}, "fp32", suite="quick"), device, Job())
    out = {"bandwidth": copy.gbps if copy.ok else None,
           "from": "measured now (one copy" + (", one GEMM)" if precision else ")")}
    if precision:
        shape = {"m": QUICK_GEMM, "n": QUICK_GEMM, "k": QUICK_GEMM, "a_t": "N",
                 "b_t": "T" if precision == "int8" else "N"}
        gemm = measure_case(Case("gemm", shape, precision, suite="quick"), device, Job())
        out[precision] = gemm.tflops if gemm.ok else None
    return out
