"""`tcperf ceilings`: what this GPU really reaches, per precision (the best of a few large aligned GEMMs) and
for memory (a device-to-device copy), stored so that every later table shows % of the measured ceiling beside %
of the datasheet peak.

    tcperf ceilings                         # 4096^3 and 8192^3 GEMMs at every precision, and a 1 GiB copy
    tcperf ceilings --precision bf16,fp16 --size 16384

A ceiling is the best the device sustains, so one measurement is not enough: clocks settle over seconds under
power and thermal limits (on an H200 one measurement of bf16 4096^3 read 738 TFLOPS where do_bench read 781 in the
same call). Each size and precision is measured again (a median over 300 ms of calls each time) until stable
(UNTIL_STABLE; the repeats are stored in the row's metrics), and the ceiling is the best over the sizes;
benchmarks/fidelity.py holds it against triton.testing.do_bench. int8 runs with B column-major, cuBLASLt's fast
layout (row-major B takes an sm80 kernel at a seventh of the speed).

Rows have op "ceiling" and precision = the GEMM's precision, or "bandwidth" for the copy; Store.ceilings reads back
the best row per precision of the latest run that measured it.
On an H200 (anchors.md): bf16 744 TFLOPS, fp16 716-747, tf32 390, fp32 50, fp64 62, copy 4.25 TB/s.
"""
from __future__ import annotations

import dataclasses

from rich.table import Table

from .. import env as envmod
from .. import peaks
from ..errors import UserError
from ..ops.case import measure_case
from ..records import Case, Job, Result
from ..precision import KERNEL_PRECISIONS, PRECISIONS, parse_list, unsupported_reason
from ..table import fmt_ms
from .common import add_measuring, console, job_from, measure_into_store, print_json

SIZES = {"cuda": (4096, 8192), "cpu": (512,)}  # GEMM m = n = k: aligned for every precision, many waves
COPY_ELEMENTS = {"cuda": 2**28, "cpu": 2**24}  # fp32 elements: 1 GiB on a GPU (far beyond L2), 64 MiB on the CPU
CPU_PRECISIONS = ("fp32", "bf16", "fp64")
UNTIL_STABLE = {"max_repeats": 10, "patience": 2, "min_gain": 0.005}   # tcperf.timing.time_until_stable


def add_parser(sub) -> None:
    p = sub.add_parser("ceilings")
    p.add_argument("--precision", default=None,
                   help="comma-separated (default: every kernel precision this device runs)")
    p.add_argument("--size", type=int, default=None,
                   help="GEMM m = n = k, one size (default 4096 and 8192 on a GPU, 512 on the CPU)")
    p.add_argument("--copy-elements", type=int, default=None, help="fp32 elements copied (default 2^28 on a GPU)")
    add_measuring(p)
    p.set_defaults(rep_ms=300.0)


def main(args) -> int:
    device = envmod.parse_device(args.device)
    precisions = _precisions(args.precision, device)
    sizes = SIZES[device.type] if args.size is None else (args.size,)
    copy_n = COPY_ELEMENTS[device.type] if args.copy_elements is None else args.copy_elements
    if min(sizes) < 1 or copy_n < 1:
        raise UserError(f"--size and --copy-elements must be >= 1 (got {args.size}, {copy_n})")
    job = job_from(args, profile=device.type == "cuda", until_stable=UNTIL_STABLE)
    run_id, _, store = measure_into_store("ceilings", cases(precisions, sizes, copy_n), args, job, label="ceilings")
    run, results = store.run(run_id), store.results(run_id)
    if args.json:
        print_json({"run": run, "results": results, "ceilings": store.ceilings(run["device"])})
    else:
        console.print(ceilings_table(run, results))
    return 0


def _precisions(text: str | None, device) -> list[str]:
    if text:
        return [p.name for p in parse_list(text)]
    if device.type == "cpu":
        return list(CPU_PRECISIONS)
    return [p for p in KERNEL_PRECISIONS if unsupported_reason(PRECISIONS[p], device) is None]


def cases(precisions: list[str], sizes, copy_n: int) -> list[Case]:
    """Aligned square GEMMs per precision (int8 with B column-major) and one copy, each for measure_ceiling."""
    gemm = lambda size, p: {"m": size, "n": size, "k": size, "a_t": "N", "b_t": "T" if p == "int8" else "N"}
    out = [Case("gemm", gemm(size, p), p, measure_ceiling, suite="ceilings") for p in precisions for size in sizes]
    out.append(Case("copy", {"n": copy_n}, "bandwidth", measure_ceiling, suite="ceilings"))
    return out


def measure_ceiling(case: Case, device, job: Job) -> Result:
    """Worker task: measure the GEMM (or the fp32 copy) as any case, store it as op 'ceiling'."""
    inner = case.replace(task=None, precision="fp32" if case.precision == "bandwidth" else case.precision)
    result = measure_case(inner, device, dataclasses.replace(job, pad=False))
    result.metrics["measured"] = f"{case.op} {inner.precision}"
    return result.replace(op="ceiling", precision=case.precision)


def of_run(results: list[dict], device_type: str) -> dict:
    """A quick ceiling from a run's own rows, for where `tcperf ceilings` has not run: per precision the best aligned
    square GEMM at this command's sizes or larger (_ceiling_gemm), and the best copy as "bandwidth", each timed
    once rather than until stable; {precision: TFLOPS, "bandwidth": GB/s} as Store.ceilings gives them."""
    smallest = min(SIZES["cuda" if device_type.startswith("cuda") else "cpu"])
    out: dict[str, float] = {}
    for r in (r for r in results if r["status"] == "ok"):
        if r["op"] == "copy" and r.get("gbps"):
            out["bandwidth"] = max(out.get("bandwidth", 0.0), r["gbps"])
        elif _ceiling_gemm(r, smallest):
            out[r["precision"]] = max(out.get(r["precision"], 0.0), r["tflops"])
    return out


def _ceiling_gemm(r: dict, smallest: int) -> bool:
    """A square GEMM of `smallest`^3 or more, aligned for its precision: the kind `tcperf ceilings` measures."""
    from ..tensorcore import misaligned
    s = r["shape"]
    return (r["op"] == "gemm" and bool(r.get("tflops")) and s["m"] == s["n"] == s["k"] >= smallest
            and not misaligned({"k": s["k"]}, r["precision"]))


def _value(r: dict) -> float | None:
    return r.get("gbps") if r["precision"] == "bandwidth" else r.get("tflops")


def ceilings_table(run: dict, results: list[dict]) -> Table:
    """One row per measurement; the best of each precision (the ceiling kept) in bold."""
    sheet = peaks.datasheet(run["env"].get("gpu", {}).get("name"))
    best: dict[str, dict] = {}
    for r in (r for r in results if r["status"] == "ok" and _value(r)):
        if r["precision"] not in best or _value(r) > _value(best[r["precision"]]):
            best[r["precision"]] = r
    t = Table(title=f"ceilings · run {run['id']} · {run['device']} (bold: the ceiling kept, best per precision)")
    for col, justify in (("precision", "left"), ("measured", "left"), ("status", "left"),
                         ("ms (median ± IQR)", "right"), ("repeats", "right"), ("TFLOPS · TOPS · GB/s", "right"),
                         ("datasheet", "right"), ("% of datasheet", "right"), ("note", "left")):
        t.add_column(col, justify=justify)
    for r in results:
        bandwidth = r["precision"] == "bandwidth"
        value = _value(r)
        unit = "GB/s" if bandwidth else ("TOPS" if r["precision"] == "int8" else "TFLOPS")
        peak = sheet.get("bandwidth_gbs" if bandwidth else r["precision"])
        share = peaks.percent_of(value, peak)
        metrics = r.get("metrics") or {}
        t.add_row(r["precision"], metrics.get("label", ""), r["status"], fmt_ms(r), str(metrics.get("repeats", "")),
                  f"{value:.4g} {unit}" if value else "", f"{peak:.4g}" if peak else "",
                  f"{share:.0f}%" if share else "", r.get("message") or "; ".join(r.get("warnings") or []),
                  style="bold" if best.get(r["precision"]) is r else None)
    return t
