"""The report's charts: one function a chart, each taking stored result rows and returning PNG bytes (or None when the
rows hold nothing to draw). matplotlib's object API on the Agg canvas: no pyplot, no global state, no display needed.

    png = suite_chart(rows, ceilings={"bf16": 744.0}, sheet=peaks.datasheet("NVIDIA H200"), title="quick")
"""
from __future__ import annotations

import io
import math
import statistics
from collections import defaultdict

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..precision import KERNEL_PRECISIONS
from ..table import speedups
from .common import crossovers, lab_size

DPI = 110
CEILING_STYLE = {"colors": "black", "linewidths": 2.5}
PEAK_STYLE = {"colors": "0.45", "linewidths": 1.2, "linestyles": "dashed"}


def figure(width: float, height: float, panels: int = 1, ratios=None):
    """A figure and its `panels` axes side by side, drawn without pyplot (no global state, no window)."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, list(fig.subplots(1, panels, squeeze=False, width_ratios=ratios)[0])


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _ok(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["status"] == "ok"]


def _precision_order(precisions) -> list[str]:
    known = [p for p in KERNEL_PRECISIONS if p in precisions]
    return known + sorted(set(precisions) - set(known))


# --- per suite: TFLOPS against the measured ceiling ------------------------------------------------------------
def suite_chart(rows: list[dict], ceilings: dict, sheet: dict, title: str) -> bytes | None:
    """Best rate of each op per precision (bars) against the measured ceiling (solid) and the datasheet peak
    (dashed); a second panel in GB/s for ops that only move memory (copy)."""
    compute = [r for r in _ok(rows) if r.get("tflops")]
    memory = [r for r in _ok(rows) if not r.get("tflops") and r.get("gbps")]
    panels = []
    if compute:
        panels.append((compute, "tflops", "TFLOPS (TOPS for int8)", ceilings.get, sheet.get))
    if memory:
        panels.append((memory, "gbps", "GB/s", lambda p: ceilings.get("bandwidth"),
                       lambda p: sheet.get("bandwidth_gbs")))
    if not panels:
        return None
    counts = [len({r["precision"] for r in p[0]}) for p in panels]
    fig, axes = figure(3 + 1.3 * sum(counts), 4.2, len(panels), ratios=counts)
    for ax, (data, key, unit, ceiling, peak) in zip(axes, panels):
        _grouped_bars(ax, data, key, ceiling, peak)
        ax.set_ylabel(unit)
    fig.suptitle(title)
    return png(fig)


def _grouped_bars(ax, rows: list[dict], key: str, ceiling, peak) -> None:
    precs = _precision_order({r["precision"] for r in rows})
    ops = sorted({r["op"] for r in rows})
    best = defaultdict(float)
    for r in rows:
        best[r["op"], r["precision"]] = max(best[r["op"], r["precision"]], r[key])
    width = 0.8 / len(ops)
    for j, op in enumerate(ops):
        xs = [i + (j - (len(ops) - 1) / 2) * width for i, p in enumerate(precs) if (op, p) in best]
        values = [best[op, p] for p in precs if (op, p) in best]
        bars = ax.bar(xs, values, width, label=op)
        ax.bar_label(bars, [short(v) for v in values], fontsize=7)
    _marks(ax, precs, ceiling, "measured ceiling", CEILING_STYLE)
    _marks(ax, precs, peak, "datasheet peak", PEAK_STYLE)
    ax.set_xticks(range(len(precs)), precs)
    ax.legend(fontsize=8)


def short(value: float) -> str:
    """747 -> '747', 4193.2 -> '4193', 0.1316 -> '0.132'."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _marks(ax, precs: list[str], value_of, name: str, style: dict) -> None:
    """A horizontal tick over each precision's group of bars, at that precision's ceiling or peak."""
    labelled = False
    for i, p in enumerate(precs):
        if value_of(p):
            ax.hlines(value_of(p), i - 0.45, i + 0.45, label=None if labelled else name, **style)
            labelled = True


# --- the roofline -----------------------------------------------------------------------------------------------
def roofline_chart(rows: list[dict], ceilings: dict, sheet: dict, title: str) -> bytes | None:
    """Achieved TFLOPS against arithmetic intensity (the FLOPs and bytes moved each case stored), log-log, one colour
    a precision, a cross where the shape misses the Tensor Core alignment rule. The roofs: the bandwidth slope
    and each precision's compute ceiling, measured (solid) or, where none was measured, the datasheet's (dashed)."""
    points = [r for r in _ok(rows) if r.get("tflops") and r.get("flops") and r.get("bytes")]
    if not points:
        return None
    fig, (ax,) = figure(10, 5.8)
    values = [intensity(r) for r in points]
    span = min(values) / 2, max(values) * 2
    bandwidth = _measured_or_sheet(ceilings, sheet, None)
    for colour, precision in zip(COLOURS, _precision_order({r["precision"] for r in points})):
        roof = _measured_or_sheet(ceilings, sheet, precision)
        name = f"{precision} (roof {short(roof[0])})" if roof[0] else precision
        _roofline_points(ax, [r for r in points if r["precision"] == precision], colour, name)
        _roof(ax, span, roof, bandwidth[0], colour)
    _bandwidth_label(ax, span, bandwidth)
    ax.scatter([], [], marker="x", color="0.3", label="misses alignment")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel("achieved TFLOPS (TOPS for int8)")
    ax.legend(fontsize=8, loc="lower right", ncols=2)
    ax.set_title(title)
    return png(fig)


COLOURS = ("tab:brown", "tab:gray", "tab:orange", "tab:blue", "tab:green", "tab:purple", "tab:red", "tab:olive",
           "tab:cyan", "tab:pink")


def intensity(row: dict) -> float:
    return row["flops"] / row["bytes"]


def misses_alignment(row: dict) -> bool:
    return ((row.get("metrics") or {}).get("verdict") or {}).get("aligned") is False


def _measured_or_sheet(ceilings: dict, sheet: dict, precision: str | None) -> tuple[float | None, bool]:
    """(roof, measured?) for a precision's compute roof (TFLOPS), or for the bandwidth (GB/s) when None."""
    measured = ceilings.get(precision or "bandwidth")
    return (measured, True) if measured else (sheet.get(precision or "bandwidth_gbs"), False)


def _roofline_points(ax, rows: list[dict], colour: str, precision: str) -> None:
    for crossed in (False, True):
        group = [(intensity(r), r["tflops"]) for r in rows if misses_alignment(r) == crossed]
        if group:
            ax.scatter(*zip(*group), s=30 if crossed else 14, marker="x" if crossed else "o", color=colour,
                       alpha=0.9 if crossed else 0.55, linewidths=1.5 if crossed else 0,
                       label=None if crossed else precision)


def _roof(ax, span: tuple[float, float], compute: tuple, gbs: float | None, colour: str) -> None:
    """min(compute roof, bandwidth x intensity) across the plotted span."""
    roof, measured = compute
    if not roof:
        return
    lo, hi = span
    knee = roof * 1e3 / gbs if gbs else lo          # GB/s x FLOP/B = GFLOP/s; 1e3 GFLOP/s = 1 TFLOPS
    xs = [x for x in (lo, knee, hi) if lo <= x <= hi]
    ys = [min(roof, gbs * x / 1e3) if gbs else roof for x in xs]
    ax.plot(xs, ys, color=colour, linewidth=1.6, linestyle="solid" if measured else "dashed")


def _bandwidth_label(ax, span: tuple[float, float], bandwidth: tuple) -> None:
    gbs, measured = bandwidth
    if gbs:
        x = span[0] * 1.5
        ax.annotate(f"{'measured' if measured else 'datasheet'} {gbs:.0f} GB/s", (x, gbs * x / 1e3), xytext=(0, 8),
                    textcoords="offset points", fontsize=8, rotation=28)


# --- speed-up over fp32 across a suite ------------------------------------------------------------------------------
def speedup_chart(rows: list[dict], title: str) -> bytes | None:
    """Per precision, the distribution of speed-up over fp32 strict for the suite's cases that ran at both (a box
    of the quartiles over the points, log scale), its median and count written above."""
    ok = _ok(rows)
    by_precision = defaultdict(list)
    for i, value in speedups(ok).items():
        if ok[i]["precision"] != "fp32":
            by_precision[ok[i]["precision"]].append(value)
    if not by_precision:
        return None
    precs = _precision_order(by_precision)
    fig, (ax,) = figure(2.8 + 1.2 * len(precs), 4.2)
    for x, p in enumerate(precs, 1):
        values = sorted(by_precision[p])
        jitter = [x + 0.25 * ((i * 0.618) % 1 - 0.5) for i in range(len(values))]   # spread, not random
        ax.scatter(jitter, values, s=8, alpha=0.5, color="tab:blue")
        ax.annotate(f"median {statistics.median(values):.2f}x\nn={len(values)}", (x, max(values)), xytext=(0, 5),
                    textcoords="offset points", ha="center", fontsize=7)
    ax.boxplot([by_precision[p] for p in precs], tick_labels=precs, showfliers=False, widths=0.5)
    ax.axhline(1.0, color="0.4", linestyle=":", linewidth=1)
    ax.set_yscale("log")
    ax.set_ylabel("speed-up over fp32 (same case)")
    ax.margins(y=0.15)
    ax.set_title(title)
    return png(fig)


# --- the alignment cliff -------------------------------------------------------------------------------------------
def alignment_chart(rows: list[dict], title: str) -> bytes | None:
    """Left: rate over shapes ordered by size, misaligned shapes marked (the cliff). Right: each misaligned
    case as measured against the same work padded to an aligned shape, with the gain."""
    lines = cliff_lines(rows)
    padded = [r for r in _ok(rows) if (r.get("metrics") or {}).get("padded") and r.get("tflops")]
    panels = [p for p in (("cliff", lines), ("padded", padded)) if p[1]]
    if not panels:
        return None
    fig, axes = figure(12 if len(panels) == 2 else 7, 4.5, len(panels))
    for ax, (which, data) in zip(axes, panels):
        (_cliff if which == "cliff" else _padding)(ax, data)
    fig.suptitle(title)
    return png(fig)


def cliff_lines(rows: list[dict]) -> dict[tuple, list[dict]]:
    """(op, precision) -> its rows ordered by FLOPs, for groups of 2+ shapes with at least one misaligned."""
    groups = defaultdict(list)
    for r in _ok(rows):
        if r.get("tflops") and "aligned" in ((r.get("metrics") or {}).get("verdict") or {}):
            groups[r["op"], r["precision"]].append(r)
    return {k: sorted(v, key=lambda r: r.get("flops") or 0) for k, v in groups.items()
            if len(v) > 1 and any(not _aligned(r) for r in v)}


def _aligned(row: dict) -> bool:
    return bool(row["metrics"]["verdict"]["aligned"])


def _case(row: dict) -> str:
    return (row.get("metrics") or {}).get("label") or row["op"]


def _cliff(ax, lines: dict) -> None:
    names = []
    for group in lines.values():
        names += [n for n in (_case(r) for r in group) if n not in names]
    where = {n: i for i, n in enumerate(names)}
    bad_labelled = False
    for (op, prec), group in lines.items():
        xs = [where[_case(r)] for r in group]
        ax.plot(xs, [r["tflops"] for r in group], marker="o", label=f"{op} {prec}")
        bad = [(x, r["tflops"]) for x, r in zip(xs, group) if not _aligned(r)]
        ax.scatter(*zip(*bad), marker="x", s=90, color="red", zorder=3,
                   label=None if bad_labelled else "misaligned (not 16-byte multiples)")
        bad_labelled = True
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("TFLOPS")
    ax.set_ylim(bottom=0)
    ax.set_title("rate by shape", fontsize=10)
    ax.legend(fontsize=8)


def _padding(ax, rows: list[dict]) -> None:
    names = [f"{_case(r)} {r['precision']}" for r in rows]
    as_is = [r["tflops"] for r in rows]
    # The padded call does the original problem's useful work in the padded time.
    padded = [r["flops"] / (r["metrics"]["padded"]["median_ms"] * 1e-3) / 1e12 for r in rows]
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], as_is, 0.4, label="as is (misaligned)", color="tab:red")
    bars = ax.bar([x + 0.2 for x in xs], padded, 0.4, label="padded to aligned", color="tab:green")
    ax.bar_label(bars, [f"{r['metrics']['padded']['gain']:.2f}x" for r in rows], fontsize=8)
    ax.set_xticks(list(xs), names, rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.75, max(len(rows), 3) - 0.25)      # a lone case keeps a readable bar width
    ax.set_ylabel("useful TFLOPS (unpadded FLOPs / time)")
    ax.set_title("padding gain", fontsize=10)
    ax.legend(fontsize=8)


# --- the model ladder -------------------------------------------------------------------------------------------
def rung_order(rows: list[dict]) -> list[dict]:
    """Rows in ladder order: by `rung` where numeric, else as stored."""
    def key(item):
        i, r = item
        rung = (r.get("metrics") or {}).get("rung")
        return (rung if isinstance(rung, (int, float)) else math.inf, i)
    return [r for _, r in sorted(enumerate(rows), key=key)]


def ladder_chart(rows: list[dict], title: str) -> bytes | None:
    """Throughput per recipe, in rung order, each bar labelled with its speedup over fp32; a rung that failed
    shows its status instead of a bar."""
    rows = rung_order(rows)
    if not rows:
        return None
    fig, (ax,) = figure(2.5 + 1.1 * len(rows), 4.5)
    values = [(r.get("metrics") or {}).get("throughput") or 0.0 if r["status"] == "ok" else 0.0 for r in rows]
    bars = ax.bar(range(len(rows)), values, color="tab:blue")
    ax.bar_label(bars, [_ladder_label(r) for r in rows], fontsize=8)
    ax.set_xticks(range(len(rows)), [r["precision"] for r in rows], rotation=25, ha="right", fontsize=8)
    units = {(r.get("metrics") or {}).get("unit") for r in rows} - {None}
    ax.set_ylabel(", ".join(sorted(units)) or "throughput")
    ax.margins(y=0.12)
    ax.set_title(title)
    return png(fig)


def _ladder_label(row: dict) -> str:
    if row["status"] != "ok":
        return row["status"].upper()
    speedup = (row.get("metrics") or {}).get("speedup_fp32")
    return f"{speedup:.2f}x" if speedup else ""


def batch_chart(rows: list[dict], title: str) -> bytes | None:
    """Throughput against batch size, one line per recipe (ok rows only)."""
    lines = defaultdict(list)
    for r in _ok(rows):
        if (r.get("metrics") or {}).get("throughput") is not None:
            lines[r["precision"]].append((r["shape"]["batch"], r["metrics"]["throughput"]))
    if not lines:
        return None
    fig, (ax,) = figure(7, 4.5)
    for recipe, points in lines.items():
        ax.plot(*zip(*sorted(points)), marker="o", label=recipe)
    batches = sorted({b for points in lines.values() for b, _ in points})
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.set_xlabel("batch size")
    units = {(r.get("metrics") or {}).get("unit") for r in rows} - {None}
    ax.set_ylabel(", ".join(sorted(units)) or "throughput")
    ax.legend(fontsize=8)
    ax.set_title(title)
    return png(fig)


# --- the lab: CPU against GPU -------------------------------------------------------------------------------------
LAB_SERIES = (("numpy_ms", "CPU (numpy)"), ("median_ms", "GPU kernel"), ("torch_ms", "torch (GPU)"),
              ("e2e_pageable_ms", "GPU incl. copies, pageable"), ("e2e_pinned_ms", "GPU incl. copies, pinned"))


def lab_chart(rows: list[dict], title: str) -> bytes | None:
    """Time against problem size on log-log axes, CPU and GPU series, the crossover marked."""
    rows = sorted([r for r in rows if lab_size(r["shape"]) is not None], key=lambda r: lab_size(r["shape"]))
    if not rows:
        return None
    fig, (ax,) = figure(7.5, 4.5)
    for key, name in LAB_SERIES:
        points = [(lab_size(r["shape"]), lab_value(r, key)) for r in rows]
        points = [p for p in points if p[1]]
        if points:
            ax.plot(*zip(*points), marker="o", label=name)
    for i, (what, size) in enumerate(crossovers(rows).items()):
        ax.axvline(size, color="black", linestyle=":", linewidth=1.5)
        ax.annotate(f"{what}: {size:,.0f}", (size, 0.95 - 0.08 * i), xycoords=("data", "axes fraction"),
                    xytext=(4, 0), textcoords="offset points", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("problem size")
    ax.set_ylabel("ms (median)")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title)
    return png(fig)


def lab_value(row: dict, key: str):
    value = row.get(key) if key == "median_ms" else (row.get("metrics") or {}).get(key)
    return value if isinstance(value, (int, float)) and value > 0 else None

