"""Result rows as a rich table: time with its spread, rate against the datasheet peak and the measured ceiling,
speedup over fp32 for the same case, the Tensor Core verdict, and what went wrong where something did."""
from __future__ import annotations

from rich.table import Table

from . import peaks
from .compare import claim
from .tensorcore import padding_cell

STATUS_STYLE = {"ok": "green", "wrong": "bold red", "skipped": "dim", "error": "red", "oom": "red", "timeout": "red"}


def status_cell(status: str) -> str:
    """A result's status in its colour (red for every failure)."""
    return f"[{STATUS_STYLE.get(status, 'red')}]{status}[/]"


def fmt_ms(r: dict) -> str:
    if r.get("median_ms") is None:
        return ""
    return f"{r['median_ms']:.4g} ± {r.get('iqr_ms') or 0:.2g}"


def rate(r: dict) -> tuple[float | None, str]:
    """(value, unit): TFLOPS for compute (TOPS for int8, whose operations are not floating point), GB/s for pure
    data movement."""
    if r.get("tflops"):
        return r["tflops"], "TOPS" if r.get("precision") == "int8" else "TFLOPS"
    if r.get("gbps"):
        return r["gbps"], "GB/s"
    return None, ""


def rate_cell(r: dict) -> str:
    value, unit = rate(r)
    return f"{value:.4g} {unit}" if value else ""


def percent_peak(r: dict, sheet: dict) -> float | None:
    value, unit = rate(r)
    key = "bandwidth_gbs" if unit == "GB/s" else r["precision"]
    return peaks.percent_of(value, sheet.get(key))


def percent_ceiling(r: dict, ceilings: dict) -> float | None:
    value, unit = rate(r)
    key = "bandwidth" if unit == "GB/s" else r["precision"]
    return peaks.percent_of(value, ceilings.get(key))


def fp32_pairs(results: list[dict]) -> dict[int, tuple[float, dict]]:
    """index -> (fp32 time / this time, the fp32 row), for results whose case also ran at fp32."""
    fp32 = {(r["op"], str(sorted(r["shape"].items()))): r for r in results
            if r["precision"] == "fp32" and r.get("median_ms")}
    out = {}
    for i, r in enumerate(results):
        base = fp32.get((r["op"], str(sorted(r["shape"].items()))))
        if base and r.get("median_ms"):
            out[i] = (base["median_ms"] / r["median_ms"], base)
    return out


def fp32_ratios(results: list[dict]) -> dict[int, tuple[float, str | None]]:
    """index -> (fp32 time / this time, None where that ratio survives the spread, else why not:
    tcperf.compare.claim); fp32's own row is 1, stated."""
    out = {}
    for i, (ratio, base) in fp32_pairs(results).items():
        ok, why = (True, "") if base is results[i] else \
            claim(*sorted((results[i], base), key=lambda r: r["median_ms"]))
        out[i] = (ratio, None if ok else why)
    return out


def speedups(results: list[dict]) -> dict[int, float]:
    """index -> fp32 time / this time, where that ratio survives the spread."""
    return {i: ratio for i, (ratio, why) in fp32_ratios(results).items() if why is None}


def unclaimed(results: list[dict]) -> dict[int, str]:
    """index -> why its ratio to fp32 is not stated (no significant difference, or a quantised timer)."""
    return {i: why for i, (_, why) in fp32_ratios(results).items() if why is not None}


def _ratio_cell(found) -> str:
    """'3.52x', 'n.s.' where the ratio does not survive the spread, or '' where the case has no fp32 row."""
    if found is None:
        return ""
    ratio, why = found
    return f"{ratio:.2f}x" if why is None else "n.s."


def tc_cell(r: dict) -> str:
    m = r.get("metrics") or {}
    verdict = m.get("verdict") or {}
    used = m.get("tensor_cores_used")
    parts = []
    share = m.get("tc_share")
    if used is not None:
        parts.append("[yellow]no TC[/]" if not used else "[green]TC[/]" if not share or share >= 0.9
                     else f"[yellow]TC {share:.0%} of time[/]")
    if verdict.get("misaligned"):
        parts.append("[yellow]misaligned[/]")
    padded = m.get("padded")
    if padded:
        parts.append(f"pad: {padding_cell(padded['gain'])}")
    return " ".join(parts)


def results_table(results: list[dict], gpu_name: str | None = None, ceilings: dict | None = None,
                  title: str = "") -> Table:
    sheet = peaks.datasheet(gpu_name)
    ceilings = ceilings or {}
    t = Table(title=title, show_lines=False)
    for col, justify in (("case", "left"), ("prec", "left"), ("status", "left"), ("ms (median ± IQR)", "right"),
                         ("rate", "right"), ("% peak", "right"), ("% ceiling", "right"), ("vs fp32", "right"),
                         ("Tensor Cores", "left"), ("note", "left")):
        t.add_column(col, justify=justify, overflow="fold")
    ratios = fp32_ratios(results)
    for i, r in enumerate(results):
        pp, pc = percent_peak(r, sheet), percent_ceiling(r, ceilings)
        note = r.get("message") or "; ".join(r.get("warnings") or [])
        t.add_row(f"{r['op']} {(r.get('metrics') or {}).get('label', '')}", r["precision"],
                  status_cell(r["status"]), fmt_ms(r), rate_cell(r), f"{pp:.0f}%" if pp else "",
                  f"{pc:.0f}%" if pc else "", _ratio_cell(ratios.get(i)),
                  tc_cell(r), note)
    return t
