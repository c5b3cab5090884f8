"""Result rows as a rich table: time with its spread, rate against the datasheet peak and the measured ceiling,
speedup over fp32 for the same case, the Tensor Core verdict, and what went wrong where something did."""
from __future__ import annotations

from dataclasses import dataclass

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
    """The row's rate as a share of its precision's ceiling; None where it would read above 100%: a case that
    outruns its ceiling shows that figure is none (on a CPU a bf16 GEMM ran at 0.01x fp32 and bf16 attention read
    2,842% of it)."""
    share = ceiling_share(r, ceilings)
    return share if share is not None and round(share) <= 100 else None


def ceiling_share(r: dict, ceilings: dict) -> float | None:
    value, unit = rate(r)
    return peaks.percent_of(value, ceilings.get("bandwidth" if unit == "GB/s" else r["precision"]))


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


def tc_cell(r: dict, sep: str = " ") -> str:
    """'TC', 'no TC', 'TC 43% of time', then 'misaligned' and the padded shape's gain, joined by `sep`."""
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
    return sep.join(parts)


def _pct(value: float | None) -> str:
    return f"{value:.0f}%" if value else ""


@dataclass
class Row:
    """What a table's cells read of one result: the row, its ratio to fp32 and its notes' numbers."""
    r: dict
    sheet: dict
    ceilings: dict
    ratio: tuple | None
    footnote: str = ""


def note(r: dict) -> str:
    """Why a row failed or was skipped, else its warnings."""
    return r.get("message") or "; ".join(r.get("warnings") or [])


# name -> (header, justify, cell): every column a results table may show
COLUMNS = {
    "case": ("case", "left", lambda x: f"{x.r['op']} {(x.r.get('metrics') or {}).get('label', '')}"),
    "prec": ("prec", "left", lambda x: x.r["precision"]),
    "status": ("status", "left", lambda x: status_cell(x.r["status"])),
    "ms": ("ms (median ± IQR)", "right", lambda x: fmt_ms(x.r)),
    "ms_or_status": ("ms (median ± IQR)", "right", lambda x: fmt_ms(x.r) or status_cell(x.r["status"])),
    "rate": ("rate", "right", lambda x: rate_cell(x.r)),
    "peak": ("% peak", "right", lambda x: _pct(percent_peak(x.r, x.sheet))),
    "ceiling": ("% ceiling", "right", lambda x: _pct(percent_ceiling(x.r, x.ceilings))),
    "fp32": ("vs fp32", "right", lambda x: _ratio_cell(x.ratio)),
    "tc": ("Tensor Cores", "left", lambda x: tc_cell(x.r)),
    "tc_lines": ("Tensor Cores", "left", lambda x: tc_cell(x.r, "\n")),     # a line a fact: a narrow column
    "note": ("note", "left", lambda x: note(x.r)),
    "notes": ("note", "left", lambda x: x.footnote),
}
ALL = ("case", "prec", "status", "ms", "rate", "peak", "ceiling", "fp32", "tc", "note")
# `tcperf run`: fits a 120-column terminal; a failure's status stands where its time would, and the notes are
# numbered below the table (`tcperf show` has every column)
COMPACT = ("case", "prec", "ms_or_status", "rate", "ceiling", "fp32", "tc_lines", "notes")


def footnotes(results: list[dict], parts=lambda r: [r.get("message") or "", *(r.get("warnings") or [])]
              ) -> tuple[list[str], list[str]]:
    """(each row's footnote numbers, '1,3', and the notes in order, each once); parts(row): a row's notes."""
    texts: dict[str, int] = {}
    numbers = []
    for r in results:
        numbers.append(",".join(str(texts.setdefault(p, len(texts) + 1)) for p in parts(r) if p))
    return numbers, list(texts)


def results_table(results: list[dict], gpu_name: str | None = None, ceilings: dict | None = None,
                  title: str = "", columns=ALL, caption: str = "") -> Table:
    """One row a result; `columns` names which of COLUMNS to show, less those empty in every row. With "notes",
    the notes are numbered in the caption below, each once. Numbers never wrap (the case and the notes do)."""
    numbers, notes = footnotes(results)
    ratios, sheet, ceilings = fp32_ratios(results), peaks.datasheet(gpu_name), ceilings or {}
    rows = [Row(r, sheet, ceilings, ratios.get(i), numbers[i]) for i, r in enumerate(results)]
    cells = [[COLUMNS[col][2](row) for col in columns] for row in rows]
    shown = [j for j, _ in enumerate(columns) if not cells or any(c[j] for c in cells)]
    lines = [caption] if caption else []
    if "ceiling" in columns and any(round(ceiling_share(r, ceilings) or 0) > 100 for r in results):
        lines.append("% ceiling left out where a case ran faster than its precision's ceiling: that one is none")
    if "notes" in columns:
        lines += [f"{i}. {text}" for i, text in enumerate(notes, 1)]
    t = Table(title=title, caption="\n".join(lines) or None, caption_justify="left", show_lines=False)
    for j in shown:
        header, justify, _ = COLUMNS[columns[j]]
        t.add_column(header, justify=justify, overflow="fold", no_wrap=justify == "right")
    for c in cells:
        t.add_row(*(c[j] for j in shown))
    return t
