"""The report page: one self-contained HTML file (charts inline as base64 PNG, CSS and a few lines of JS inline,
nothing fetched from the network), readable in any browser and printable.

It reads top to bottom (render): the findings (written from the data, each linking to its section), the roofline of
each device, the warnings counted by kind and folded, then per run each of SECTIONS whose data is present, and last
the environment (what all runs share once, what differs per run). Tables longer than a screenful are folded, and
every table sorts by a click on its header.

    render(report.load(store, [12]))     # -> Report(html, charts, sections)
"""
from __future__ import annotations

import base64
import datetime
from collections import Counter, defaultdict

from .. import peaks
from ..rows import group_name
from ..table import fmt_ms, fp32_ratios, percent_ceiling, percent_peak, rate
from . import charts as ch
from . import convergence
from .common import (Report, RunData, advice_summary, anchor, crossovers, escape, lab_size, label, model_name, number,
                     table)
from .findings import findings
from .notes import environment, warning_kinds


class Page:
    """Collects sections and the charts they embed."""

    def __init__(self):
        self.sections: list[tuple[str, str, str]] = []     # (id, title, body html)
        self.charts: dict[str, bytes] = {}

    def section(self, sid: str, title: str, body: str, css: str = "") -> None:
        if body:
            markup = f'<section id="{sid}" class="{css}"><h2>{escape(title)}</h2>{body}</section>'
            self.sections.append((sid, title, markup))

    def chart(self, name: str, png: bytes | None, caption: str = "") -> str:
        """Register a chart (for --png) and return its <figure> with the image inline."""
        if not png:
            return ""
        name = anchor(name) + ".png"
        self.charts[name] = png
        data = base64.b64encode(png).decode("ascii")
        return (f'<figure><img src="data:image/png;base64,{data}" alt="{escape(caption or name)}">'
                f'<figcaption>{escape(caption)}</figcaption></figure>')


def render(runs: list[RunData]) -> Report:
    page = Page()
    page.section("summary", "Findings", summary_html(runs))
    page.section("roofline", "Roofline", roofline_html(runs, page))
    page.section("warnings", "Warnings", warnings_html(runs), css="warnings")
    for sid, title, builder in SECTIONS:
        page.section(sid, title, "".join(builder(rd, page) for rd in runs))
    page.section("environment", "Environment", environment_html(runs))
    return Report(_document(runs, page), page.charts, [s[0] for s in page.sections])


def _status(row: dict):
    return ("html", f'<span class="st-{escape(row["status"])}">{escape(row["status"])}</span>')


# --- the findings ---------------------------------------------------------------------------------------------
def summary_html(runs: list[RunData]) -> str:
    parts = [f"<h3>{escape(heading)}</h3><ul>" + "".join(f'<li><a href="#{f.anchor}">{escape(f.text)}</a></li>'
                                                     for f in lines) + "</ul>"
             for heading, lines in findings(runs).items()]
    kinds = warning_kinds(runs)
    if kinds:
        counts = ", ".join(f"{len(k.items)} {k.name}" for k in kinds)
        parts.append(f'<p class="caveat">Read with: <a href="#warnings">{escape(counts)}</a>.</p>')
    return "".join(parts)


# --- the roofline ----------------------------------------------------------------------------------------------
ROOFLINE_CAPTION = ("Each point a kernel case: its FLOPs over the bytes it moves against the rate it reached. "
                    "The slope is the bandwidth, the flat lines each precision's compute ceiling (solid: measured by "
                    "`tcperf ceilings`, dashed: the datasheet where none was measured). Points under the slope are "
                    "memory-bound, points on a flat line are at the ceiling; a cross marks a shape that misses the "
                    "Tensor Core alignment rule, the commonest reason tcperf names for falling short.")


def roofline_html(runs: list[RunData], page: Page) -> str:
    """One chart a device, from the kernel cases of all its runs."""
    by_device = defaultdict(list)
    for rd in runs:
        by_device[rd.run["device"]].append(rd)
    parts = []
    for device, group in by_device.items():
        rows = [r for rd in group for r in rd.of_kind("kernel")]
        png = ch.roofline_chart(rows, group[0].ceilings, _sheet(group[0]), f"roofline · {device}")
        if png:
            parts.append(f'<h3 id="{anchor("roofline", device)}">{escape(device)}</h3>'
                         + page.chart(f"roofline-{device}", png, ROOFLINE_CAPTION))
    return "".join(parts)


# --- warnings and the environment ------------------------------------------------------------------------------
def warnings_html(runs: list[RunData]) -> str:
    """One line a kind: its count and what it means for the numbers; the list folded beneath."""
    return "".join(f'<details><summary><b>{escape(k.name)}</b> ({len(k.items)}): {escape(k.meaning)}.</summary><ul>'
                   + "".join(f"<li>{escape(i.text)}</li>" for i in k.items) + "</ul></details>"
                   for k in warning_kinds(runs))


def environment_html(runs: list[RunData]) -> str:
    """What every run shares, once; then a row a run with only the fields that differ."""
    common, differing = environment(runs)
    shared = "".join(f"<dt>{escape(name)}</dt><dd>{escape(value)}</dd>" for name, value in common)
    parts = [f'<dl class="kv">{shared}</dl>' if shared else ""]
    if differing:
        rows = [[number(rd.run["id"], "{}"), *[values[i] for _, values in differing]] for i, rd in enumerate(runs)]
        parts.append(table(["run", *[name for name, _ in differing]], rows))
    return "".join(parts)


# --- kernel suites and ceilings ---------------------------------------------------------------------------------
def _sheet(rd: RunData) -> dict:
    return peaks.datasheet((rd.run.get("env") or {}).get("gpu", {}).get("name"))


def _tc_html(row: dict) -> str:
    m = row.get("metrics") or {}
    parts = []
    if m.get("tensor_cores_used") is not None:
        parts.append('<span class="ok">TC</span>' if m["tensor_cores_used"] else '<span class="bad">no TC</span>')
    if (m.get("verdict") or {}).get("misaligned"):
        parts.append('<span class="bad">misaligned</span>')
    if m.get("padded"):
        parts.append(f"pad: {m['padded']['gain']:.2f}x")
    return " ".join(parts)


def _ratio(found) -> str | tuple:
    """The speed-up over fp32 as a sortable cell, 'n.s.' where it does not survive the spread (table.fp32_ratios)."""
    ratio, why = found or (None, None)
    return "n.s." if why else number(ratio, "{:.2f}", "x")


def kernel_table(rows: list[dict], rd: RunData) -> str:
    sheet, ratios = _sheet(rd), fp32_ratios(rows)
    out = []
    for i, r in enumerate(rows):
        value, unit = rate(r)
        out.append([label(r), r["precision"], _status(r), (fmt_ms(r), r["median_ms"]) if r.get("median_ms") else "",
                    (f"{value:.4g} {unit}", value) if value else "", number(percent_peak(r, sheet), "{:.0f}", "%"),
                    number(percent_ceiling(r, rd.ceilings), "{:.0f}", "%"),
                    _ratio(ratios.get(i)),
                    ("html", _tc_html(r)), r.get("message") or "; ".join(r.get("warnings") or [])])
    return table(["case", "precision", "status", "ms (median ± IQR)", "rate", "% peak", "% ceiling", "vs fp32",
                  "Tensor Cores", "note"], out)


def suites_html(rd: RunData, page: Page) -> str:
    groups = defaultdict(list)
    for r in rd.of_kind("kernel"):
        groups[group_name(r)].append(r)
    parts = []
    for suite, rows in groups.items():
        note = "" if rd.ceilings else " No measured ceilings for this device: run `tcperf ceilings`."
        png = ch.suite_chart(rows, rd.ceilings, _sheet(rd), f"{suite} · {rd.name}")
        caption = f"Best rate per op and precision; black: measured ceiling, dashed: datasheet peak.{note}"
        spread = ch.speedup_chart(rows, f"speed-up over fp32 · {suite} · {rd.name}")
        parts.append(f'<h3 id="{anchor("suite", rd.run["id"], suite)}">{escape(suite)} · {escape(rd.name)}</h3>'
                     + page.chart(f"run{rd.run['id']}-speedup-{suite}", spread, SPEEDUP_CAPTION)
                     + page.chart(f"run{rd.run['id']}-suite-{suite}", png, caption) + kernel_table(rows, rd))
    return "".join(parts)


SPEEDUP_CAPTION = ("Speed-up over fp32 strict of each case that also ran at fp32, per precision: the box holds the "
                   "middle half, the line is the median; dotted: no speed-up.")


def ceilings_html(rd: RunData, page: Page) -> str:
    rows = rd.of_kind("ceiling")
    if not rows:
        return ""
    png = ch.suite_chart(rows, {}, _sheet(rd), f"measured ceilings · {rd.name}")
    return (f'<h3 id="{anchor("ceilings", rd.run["id"])}">{escape(rd.name)}</h3>'
            + page.chart(f"run{rd.run['id']}-ceilings", png, "Measured ceilings; dashed: datasheet peak.")
            + kernel_table(rows, rd))


def alignment_html(rd: RunData, page: Page) -> str:
    rows = rd.of_kind("kernel")
    png = ch.alignment_chart(rows, f"alignment · {rd.name}")
    if not png:
        return ""
    padded = [r for r in rows if (r.get("metrics") or {}).get("padded") and r["status"] == "ok"]
    out = [[label(r), r["precision"], ", ".join(r["metrics"].get("verdict", {}).get("misaligned") or []),
            (fmt_ms(r), r["median_ms"]), number(r["metrics"]["padded"]["median_ms"]),
            number(r["metrics"]["padded"]["gain"], "{:.2f}", "x"), r["metrics"].get("verdict", {}).get("fix") or ""]
           for r in padded]
    caption = "Red crosses: shapes that miss the 16-byte alignment rule. Right: the same work padded to aligned."
    return (f'<h3 id="{anchor("alignment", rd.run["id"])}">{escape(rd.name)}</h3>'
            + page.chart(f"run{rd.run['id']}-alignment", png, caption)
            + (table(["case", "precision", "misaligned", "ms as is", "ms padded", "gain", "fix"], out) if out else ""))


# --- the model ladder -------------------------------------------------------------------------------------------
def ladder_batch(rows: list[dict]):
    """The batch the ladder chart shows: the one most recipes ran at (the largest such)."""
    counts = Counter(r["shape"].get("batch") for r in rows)
    return max(counts, key=lambda b: (counts[b], b if isinstance(b, (int, float)) else -1))


def models_html(rd: RunData, page: Page) -> str:
    groups = defaultdict(list)
    for r in rd.of_kind("model"):
        groups[r["shape"].get("model", "?"), r["shape"].get("mode", "")].append(r)
    parts = []
    for (model, mode), rows in groups.items():
        batch = ladder_batch(rows)
        name = f"{model} {mode} · {rd.name}"
        ladder = ch.ladder_chart([r for r in rows if r["shape"].get("batch") == batch], f"{name} · batch {batch}")
        sweep = ch.batch_chart(rows, name) if len({r["shape"].get("batch") for r in rows}) > 1 else None
        slug = f"run{rd.run['id']}-{model}-{mode}"
        parts.append(f'<h3 id="{anchor("model", rd.run["id"], model, mode)}">{escape(name)}</h3>'
                     + page.chart(slug + "-ladder", ladder, "Throughput per rung; labels: speedup over fp32.")
                     + page.chart(slug + "-batch", sweep, "Throughput against batch size per recipe.")
                     + model_table(ch.rung_order(rows)))
    return "".join(parts)


def model_table(rows: list[dict]) -> str:
    out = []
    for r in rows:
        m = r.get("metrics") or {}
        out.append([r["precision"], number(r["shape"].get("batch"), "{}"), _status(r),
                    number(m.get("throughput"), "{:,.0f}", f" {m.get('unit', '')}"),
                    number(m.get("speedup_fp32"), "{:.2f}", "x"),
                    number(m.get("speedup_prev"), "{:.2f}", "x"), number(m.get("mfu"), "{:.1%}"),
                    number(m.get("peak_mem_gib"), "{:.1f}"), number(m.get("compile_s"), "{:.0f}", " s"),
                    _accuracy_text(m.get("accuracy")), r.get("message") or "; ".join(r.get("warnings") or [])])
    return table(["recipe", "batch", "status", "throughput", "vs fp32", "vs previous rung", "MFU", "peak GiB",
                  "compile", "accuracy", "note"], out)


def _accuracy_text(acc) -> str:
    if not isinstance(acc, dict):
        return ""
    return ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in acc.items() if v is not None)


# --- the advisor ------------------------------------------------------------------------------------------------
def advisor_html(rd: RunData, page: Page) -> str:
    """The recipes the advisor timed (a table), then each verdict: its one-line answer, the details, the code."""
    rows = rd.of_kind("advise")
    recipes = [r for r in rows if not (r.get("metrics") or {}).get("verdict")]
    parts = [f'<h3 id="{anchor("advisor", rd.run["id"])}">{escape(rd.name)}</h3>'] if rows else []
    if recipes:
        parts.append(advice_table(recipes))
    for r in rows:
        verdict = (r.get("metrics") or {}).get("verdict")
        if verdict:
            parts.append(verdict_html(r, verdict, anchor("advisor", rd.run["id"], model_name(r))))
    return "".join(parts)


def advice_table(rows: list[dict]) -> str:
    out = [[label(r), r["precision"], _status(r),
            (f"{r['mean_ms']:.4g} ({fmt_ms(r)})", r["mean_ms"]) if r.get("mean_ms") else "",
            number((r.get("metrics") or {}).get("speedup_fp32"), "{:.2f}", "x"), number(r.get("error"), "{:.2g}"),
            number((r.get("metrics") or {}).get("tc_share"), "{:.0%}"),
            number((r.get("metrics") or {}).get("gpu_busy"), "{:.0%}"), r.get("message") or ""] for r in rows]
    return table(["model", "recipe", "status", "ms a step: mean (median ± IQR)", "vs fp32", "error", "TC share",
                  "GPU busy", "note"], out)


def verdict_html(row: dict, verdict, place: str) -> str:
    m = row.get("metrics") or {}
    answer = advice_summary(row)
    details = {k: v for k, v in verdict.items() if k != "snippets"} if isinstance(verdict, dict) else verdict
    snippets = m.get("snippets") or (verdict.get("snippets") if isinstance(verdict, dict) else None)
    parts = [f'<p class="answer">{escape(answer)}</p>' if answer else "", "<h4>verdict</h4>", value_html(details)]
    for key, value in (("shape lint", m.get("lint")), ("code to paste", snippets),
                       ("precision-sensitive modules", m.get("sensitive"))):
        if value not in (None, "", [], {}):
            parts.append(f"<h4>{escape(key)}</h4>{value_html(value)}")
    return f'<div class="verdict" id="{place}"><h3>{escape(label(row))}</h3>{"".join(parts)}</div>'


def value_html(value) -> str:
    """Any JSON value, readably: a dict as a two-column list, a list of records as a table, code as <pre>."""
    if isinstance(value, dict):
        items = "".join(f"<dt>{escape(k)}</dt><dd>{value_html(v)}</dd>" for k, v in value.items()
                        if v not in (None, "", [], {}))
        return f'<dl class="kv">{items}</dl>'
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        keys = list(dict.fromkeys(k for v in value for k in v))
        return table(keys, [[("html", value_html(v.get(k))) for k in keys] for v in value], cls="records")
    if isinstance(value, list):
        return "<ul>" + "".join(f"<li>{value_html(v)}</li>" for v in value) + "</ul>"
    if isinstance(value, str) and "\n" in value:
        return f"<pre>{escape(value)}</pre>"
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else escape(value)


# --- the lab ----------------------------------------------------------------------------------------------------
def lab_html(rd: RunData, page: Page) -> str:
    groups = defaultdict(list)
    for r in rd.of_kind("lab"):
        groups[r["op"]].append(r)
    parts = []
    for op, rows in groups.items():
        rows = sorted(rows, key=lambda r: lab_size(r["shape"]) or 0)
        marks = ", ".join(f"{k}: {v:,.0f}" for k, v in crossovers(rows).items()) or "none in the sizes measured"
        png = ch.lab_chart(rows, f"{op} · {rd.name}")
        out = [[number(lab_size(r["shape"]), "{:,}"), r["precision"], _status(r),
                *[number(ch.lab_value(r, key)) for key, _ in ch.LAB_SERIES]] for r in rows]
        parts.append(f"<h3>{escape(op)} · {escape(rd.name)}</h3>"
                     + page.chart(f"run{rd.run['id']}-{op}", png, f"Time against size; crossover: {marks}.")
                     + table(["size", "precision", "status", *[name + " (ms)" for _, name in ch.LAB_SERIES]], out))
    return "".join(parts)


SECTIONS = (("models", "Model ladder", models_html), ("alignment", "Alignment", alignment_html),
            ("advisor", "Advisor", advisor_html), ("suites", "Kernel suites", suites_html),
            ("ceilings", "Measured ceilings", ceilings_html), ("lab", "Lab: CPU against GPU", lab_html),
            ("totarget", "Time to accuracy", convergence.section))


# --- the page ---------------------------------------------------------------------------------------------------
CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:#222;
     max-width:1240px;margin:1.5em auto;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em} h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
h3{margin:1.2em 0 .4em} nav a{margin-right:1em}
table{border-collapse:collapse;margin:.4em 0 1.2em;font-size:12px}
th,td{border:1px solid #ccc;padding:3px 7px;vertical-align:top;text-align:left}
th{background:#f2f2f2} table.sortable th{cursor:pointer} table.sortable th:after{content:" \\2195";color:#aaa}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
figure{margin:.6em 0} img{max-width:100%;height:auto} figcaption{font-size:12px;color:#555}
#summary ul{margin:.2em 0 .6em;padding-left:1.2em} #summary li{margin:.15em 0} #summary a{color:#1a4d8f}
#summary h3{margin:.8em 0 .2em;font-size:1.05em} .caveat{color:#8a5a00}
.warnings{border-left:4px solid #d89000;background:#fffaf0;padding:.1em 1em .5em}
.warnings h2{border:none} .warnings details{margin:.3em 0} .warnings summary{cursor:pointer}
details.fold>summary{cursor:pointer;color:#1a4d8f;margin:.3em 0} input.filter{margin:.3em 0;width:22em}
.st-ok,.ok{color:#2e7d32} .st-skipped{color:#777} .bad{color:#b26a00}
.st-wrong,.st-error,.st-oom,.st-timeout{color:#c62828;font-weight:bold}
pre{background:#f6f6f6;padding:.5em;overflow-x:auto;margin:.2em 0}
dl.kv{display:grid;grid-template-columns:max-content auto;gap:2px 14px;margin:.3em 0} dl.kv dt{font-weight:bold}
dl.kv dd{margin:0}
.answer{font-size:1.1em;font-weight:bold;border-left:4px solid #2e7d32;padding-left:.6em}
@media print{body{max-width:none;margin:0;font-size:11px} nav,input.filter{display:none}
  table.sortable th:after{content:""} figure,tr{break-inside:avoid} h2,h3{break-after:avoid}}
"""

# Click a column header to sort by it (numbers by their value, before text; text alphabetically); click again to
# reverse. A numeric cell carries its value in data-v.
JS = """
document.querySelectorAll("table.sortable th").forEach(function (th) {
  th.addEventListener("click", function () {
    var col = th.cellIndex, body = th.closest("table").tBodies[0], up = th.dataset.dir !== "asc";
    th.dataset.dir = up ? "asc" : "desc";
    var key = function (row) {
      var c = row.cells[col];
      return c.dataset.v !== undefined ? [0, parseFloat(c.dataset.v)] : [1, c.textContent];
    };
    var rows = Array.prototype.slice.call(body.rows).sort(function (a, b) {
      var x = key(a), y = key(b);
      var c = (x[0] - y[0]) || (x[0] === 0 ? x[1] - y[1] : x[1].localeCompare(y[1]));
      return up ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
// Type in a folded table's filter box to show only the rows that contain the text.
document.querySelectorAll("input.filter").forEach(function (box) {
  box.addEventListener("input", function () {
    var text = box.value.toLowerCase();
    Array.prototype.forEach.call(box.nextElementSibling.tBodies[0].rows, function (r) {
      r.hidden = r.textContent.toLowerCase().indexOf(text) < 0;
    });
  });
});
"""


def page_title(runs: list[RunData]) -> str:
    """'tcperf report: NVIDIA H200, 30 runs, 2026-11-22' (one run: 'run 12')."""
    devices = ", ".join(dict.fromkeys(rd.run["device"] for rd in runs))
    days = sorted({datetime.date.fromtimestamp(rd.run["started"]).isoformat() for rd in runs})
    count = f"run {runs[0].run['id']}" if len(runs) == 1 else f"{len(runs)} runs"
    return f"tcperf report: {devices}, {count}, {days[0]}" + (f" to {days[-1]}" if len(days) > 1 else "")


def _document(runs: list[RunData], page: Page) -> str:
    title = page_title(runs)
    nav = " ".join(f'<a href="#{sid}">{escape(t)}</a>' for sid, t, _ in page.sections)
    made = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    body = "".join(s[2] for s in page.sections)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{escape(title)}</h1><p>Built by tcperf from the results store on {made}; every figure is a median "
            f"with its spread (IQR).</p><nav>{nav}</nav>{body}<script>{JS}</script></body></html>\n")
