"""The report's opening summary, written from the stored rows: the device's measured ceilings against its datasheet,
per model the best recipe, the biggest padding and layout gains, the recipes that failed their accuracy check and
the advisor's verdicts. Each finding is a line of text and the anchor of the section that shows it.

    findings(report.load(store, [1, 11]))   # {'Device': [Finding('NVIDIA H200 (132 SMs): bf16 735 of 989 ...',
                                            #              'roofline-NVIDIA-H200')], 'Models': [...], ...}
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from .. import peaks
from ..compare import claim
from ..rows import kind
from .common import RunData, advice_summary, anchor, label, model_name

TOP = 3                                  # padding and layout gains listed
LAYOUT_KEYS = ("layout", "a_t", "b_t")   # shape keys that change the memory layout, not the work


@dataclass(frozen=True)
class Finding:
    text: str
    anchor: str


def findings(runs: list[RunData]) -> dict[str, list[Finding]]:
    """Heading -> findings, for the headings with something to say."""
    found = {"Device": device_lines(runs), "Models: best recipe over fp32 strict": model_lines(runs),
             "Padding and layout": padding_lines(runs) + layout_lines(runs),
             "Failed their accuracy check": accuracy_lines(runs), "Advisor": verdict_lines(runs)}
    return {heading: lines for heading, lines in found.items() if lines}


def _runs(ids) -> str:
    ids = sorted(set(ids))
    return f"run {ids[0]}" if len(ids) == 1 else "runs " + ", ".join(map(str, ids))


# --- the device ---------------------------------------------------------------------------------------------------
def device_lines(runs: list[RunData]) -> list[Finding]:
    """One line a device: each measured ceiling as a share of its datasheet peak."""
    by_device = {rd.run["device"]: rd for rd in runs}
    return [Finding(f"{device}{_gpu_facts(rd)}: {_ceiling_text(rd)}", anchor("roofline", device))
            for device, rd in by_device.items()]


def _gpu_facts(rd: RunData) -> str:
    gpu = (rd.run.get("env") or {}).get("gpu", {})
    facts = [f"{gpu['sm_count']} SMs" if gpu.get("sm_count") else "",
             f"{gpu['power_limit_w']:g} W" if gpu.get("power_limit_w") else ""]
    return f" ({', '.join(f for f in facts if f)})" if any(facts) else ""


def _ceiling_text(rd: RunData) -> str:
    if not rd.ceilings:
        return "no measured ceilings (run `tcperf ceilings`)"
    sheet = peaks.datasheet((rd.run.get("env") or {}).get("gpu", {}).get("name"))
    keys = [k for k in (*peaks.PRECISION_COLUMNS, "bandwidth") if rd.ceilings.get(k)]
    return "measured ceilings: " + ", ".join(_ceiling_part(k, rd.ceilings[k], sheet) for k in keys)


def _ceiling_part(key: str, value: float, sheet: dict) -> str:
    """'bf16 735.1 of 989 TFLOPS (74%)', 'copy 4216 of 4800 GB/s (88%)'."""
    peak = sheet.get("bandwidth_gbs" if key == "bandwidth" else key)
    unit = "GB/s" if key == "bandwidth" else "TOPS" if key == "int8" else "TFLOPS"
    share = f" of {peak:g} {unit} ({peaks.percent_of(value, peak):.0f}%)" if peak else f" {unit}"
    return f"{'copy' if key == 'bandwidth' else key} {value:.4g}{share}"


# --- models -------------------------------------------------------------------------------------------------------
def model_lines(runs: list[RunData]) -> list[Finding]:
    """Per model and mode, the ladder rung with the largest speed-up over fp32 strict that survives the spread
    (tcperf.compare.claim against the fp32 row of the same run)."""
    best = {}
    for rd in runs:
        rows = rd.of_kind("model")
        for r in rows:
            speedup = (r.get("metrics") or {}).get("speedup_fp32")
            if r["status"] == "ok" and speedup and speedup > best.get(model_name(r), (0,))[0] and \
                    _beats_fp32(r, rows):
                best[model_name(r)] = (speedup, r, rd.run["id"])
    return [Finding(f"{name}: {r['precision']}, {speedup:.2f}x ({_throughput(r)}, batch {r['shape'].get('batch')}, "
                    f"run {run_id})", anchor("model", run_id, name))
            for name, (speedup, r, run_id) in best.items()]


def _beats_fp32(r: dict, rows: list[dict]) -> bool:
    """r is fp32 itself, or faster than the fp32 row of its model, mode and batch beyond the spread."""
    if r["precision"] == "fp32":
        return True
    fp32 = next((x for x in rows if x["precision"] == "fp32" and x["shape"] == r["shape"] and x.get("median_ms")), None)
    return fp32 is None or claim(r, fp32)[0]


def _throughput(row: dict) -> str:
    m = row["metrics"]
    return f"{m['throughput']:,.0f} {m.get('unit', '')}".strip() if m.get("throughput") else ""


# --- padding and layout -------------------------------------------------------------------------------------------
def padding_lines(runs: list[RunData]) -> list[Finding]:
    """The largest measured gains from padding a misaligned shape, one line a case (its best run)."""
    best = {}
    for rd in runs:
        for r in rd.of_kind("kernel"):
            padded = (r.get("metrics") or {}).get("padded")
            if r["status"] == "ok" and padded and not r["metrics"].get("quantised_ms") and \
                    padded["gain"] > best.get(r["case_key"], (0,))[0]:
                best[r["case_key"]] = (padded["gain"], r, rd.run["id"])
    return [Finding(f"{r['precision']} {label(r)}: {r['metrics']['verdict'].get('fix') or 'padded'} "
                    f"is {gain:.2f}x faster (run {run_id})", anchor("alignment", run_id))
            for gain, r, run_id in sorted(best.values(), key=lambda b: -b[0])[:TOP] if gain > 1]


def layout_lines(runs: list[RunData]) -> list[Finding]:
    """The largest measured gains from a different layout of the same work (NCHW against NHWC, B transposed)."""
    best = {}
    for rd in runs:
        for key, (gain, fast, slow) in layout_pairs(rd.of_kind("kernel")).items():
            if gain > best.get(key, (0,))[0]:
                best[key] = (gain, fast, slow, rd.run["id"])
    return [Finding(f"{fast['precision']} {label(fast)}: {_layout(fast)} is {gain:.2f}x faster than {_layout(slow)} "
                    f"(run {run_id})", anchor("suite", run_id, fast.get("suite") or "(no suite)"))
            for gain, fast, slow, run_id in sorted(best.values(), key=lambda b: -b[0])[:TOP] if gain > 1]


def layout_pairs(rows: list[dict]) -> dict[tuple, tuple[float, dict, dict]]:
    """Same op, precision and work in different layouts -> (slowest time / fastest time, fastest, slowest), where
    the fastest is faster beyond the spread (tcperf.compare.claim)."""
    groups = defaultdict(list)
    for r in rows:
        if r["status"] == "ok" and r.get("median_ms") and any(k in r["shape"] for k in LAYOUT_KEYS):
            work = tuple(sorted((k, str(v)) for k, v in r["shape"].items() if k not in LAYOUT_KEYS))
            groups[r["op"], r["precision"], work].append(r)
    out = {}
    for key, group in groups.items():
        fast, slow = min(group, key=lambda r: r["median_ms"]), max(group, key=lambda r: r["median_ms"])
        if fast is not slow and claim(fast, slow)[0]:      # a gain inside the spread is no finding
            out[key] = (slow["median_ms"] / fast["median_ms"], fast, slow)
    return out


def _layout(row: dict) -> str:
    return " ".join(f"{k}={row['shape'][k]}" for k in LAYOUT_KEYS if k in row["shape"])


# --- accuracy and the advisor -------------------------------------------------------------------------------------
def accuracy_lines(runs: list[RunData]) -> list[Finding]:
    """Model and advisor recipes whose result missed the fp32 reference, with the reason; repeats folded."""
    seen = defaultdict(list)
    for rd in runs:
        for r in rd.results:
            if r["status"] == "wrong" and kind(r) in ("model", "advise"):
                seen[model_name(r), r["precision"], r.get("message") or "", kind(r)].append(rd.run["id"])
    return [Finding(f"{model}, {recipe}: {why or 'wrong'} ({_runs(ids)})",
                    anchor("model" if which == "model" else "advisor", ids[0], model))
            for (model, recipe, why, which), ids in seen.items()]


def verdict_lines(runs: list[RunData]) -> list[Finding]:
    """The advisor's answer per model and mode, from the latest run that gave one."""
    latest = {}
    for rd in runs:
        for r in rd.of_kind("advise"):
            if (r.get("metrics") or {}).get("verdict"):
                earlier = latest.get(model_name(r), (None, None, []))[2]
                latest[model_name(r)] = (r, rd.run["id"], [*earlier, rd.run["id"]])
    return [Finding(f"{name}: {advice_summary(r) or 'no verdict'} ({_runs(ids)}{', the latest shown' if ids[1:] else ''})",
                    anchor("advisor", run_id, name))
            for name, (r, run_id, ids) in latest.items()]
