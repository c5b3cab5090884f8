"""`tcperf export RUN --format json|csv|mlperf|flat-csv`: a run's results for other tools (stdout, or --out FILE).

json: the run and its rows as stored. csv: the store's columns, JSON fields kept as JSON text.
mlperf: DAWNBench/MLPerf-like JSON: the system description (MLPerf system_desc field names) and, per result, the
benchmark, scenario, precision or recipe, the headline metric with its value and the spread of the timing.
flat-csv: for spreadsheets: one row a result, every field a plain column (no JSON text): label, application,
throughput, TFLOPS, Tensor Cores used, padding gain, shape_* columns, ...
"""
from __future__ import annotations

import csv
import io
import json
import sys

from ..errors import choices
from ..report.common import advice_summary, application, label, relative_spread
from ..rows import group_name, headline, kind
from ..store import RESULT_COLUMNS, Store
from .common import add_db, write_file

def to_json(run: dict, results: list[dict]) -> str:
    return json.dumps({"run": run, "results": results}, indent=2, default=str)


def to_csv(run: dict, results: list[dict]) -> str:
    """One flat row a result: the columns, with JSON fields kept as JSON text (samples left out)."""
    buf = io.StringIO()
    cols = ["run_id", "device", *[c for c in RESULT_COLUMNS if c != "samples"]]
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    for r in results:
        row = {**r, "run_id": run["id"], "device": run["device"]}
        for k in ("shape", "metrics", "warnings"):
            row[k] = json.dumps(row[k], default=str)
        w.writerow(row)
    return buf.getvalue()


# --- DAWNBench/MLPerf-like JSON ---------------------------------------------------------------------------------
def system_description(run: dict) -> dict:
    """The run's machine in MLPerf's system_desc terms (one node, at most one accelerator per tcperf run)."""
    env = run.get("env") or {}
    gpu, cpu, lib = env.get("gpu") or {}, env.get("cpu") or {}, env.get("libraries") or {}
    return {
        "system_name": run["device"], "number_of_nodes": 1,
        "accelerator_model_name": gpu.get("name"), "accelerators_per_node": 1 if gpu else 0,
        "accelerator_memory_capacity": f"{gpu['memory_gib']} GiB" if gpu.get("memory_gib") else None,
        "accelerator_sm_count": gpu.get("sm_count"), "accelerator_compute_capability": gpu.get("compute_capability"),
        "accelerator_driver": gpu.get("driver"), "accelerator_power_limit_w": gpu.get("power_limit_w"),
        "accelerator_max_clocks_mhz": {"sm": gpu.get("sm_clock_max_mhz"), "memory": gpu.get("mem_clock_max_mhz")},
        "host_processor_model_name": cpu.get("model"), "host_processor_core_count": cpu.get("cores"),
        "operating_system": env.get("platform"), "framework": f"PyTorch {lib.get('torch')}",
        "other_software_stack": {k: v for k, v in lib.items() if k != "torch" and v is not None},
    }


def mlperf_entry(r: dict) -> dict:
    f, m, shape = headline(r), r.get("metrics") or {}, r.get("shape") or {}
    is_model = kind(r) == "model"
    return {
        "benchmark": shape.get("model") if is_model else r["op"], "case": label(r), "suite": group_name(r),
        "application": application(r), "scenario": (shape.get("mode") if is_model else kind(r)),
        "batch_size": shape.get("batch"), "precision": r["precision"],
        "metric": f.name, "unit": f.unit, "value": f.value, "higher_is_better": f.higher_is_better,
        "spread": {"median_ms": r.get("median_ms"), "iqr_ms": r.get("iqr_ms"), "min_ms": r.get("min_ms"),
                   "samples": r.get("n"), "relative_iqr": relative_spread(r)},
        "accuracy": m.get("accuracy"), "speedup_fp32": m.get("speedup_fp32"),
        "tensor_cores_used": m.get("tensor_cores_used"), "status": r["status"], "valid": r["status"] == "ok",
        "warnings": r.get("warnings") or [], "message": r.get("message") or "", "case_key": r["case_key"],
        "shape": shape,
    }


def to_mlperf(run: dict, results: list[dict]) -> str:
    from .. import __version__
    doc = {"format": "tcperf-mlperf-like", "format_version": 1, "benchmark_suite": f"tcperf {__version__}",
           "run": {k: run.get(k) for k in ("id", "kind", "command", "tcperf_version", "status", "started",
                                            "finished", "warnings")},
           "system": system_description(run), "results": [mlperf_entry(r) for r in results]}
    return json.dumps(doc, indent=2, default=str)


# --- flat CSV for spreadsheets -------------------------------------------------------------------------------------
FLAT_COLUMNS = (
    "run_id", "device", "torch", "cuda", "driver", "suite", "op", "label", "application", "precision", "status",
    "metric", "value", "unit", "median_ms", "iqr_ms", "min_ms", "n", "relative_iqr", "tflops", "gbps",
    "throughput", "throughput_unit", "speedup_fp32", "speedup_prev", "mfu", "peak_mem_gib", "tc", "tc_share",
    "aligned", "misaligned", "padded_ms", "padded_gain", "fix", "backend", "numpy_ms", "torch_ms",
    "e2e_pageable_ms", "e2e_pinned_ms", "crossover", "verdict", "error", "tolerance", "warnings", "message",
    "case_key",
)


def flat_row(run: dict, r: dict) -> dict:
    env, m = run.get("env") or {}, r.get("metrics") or {}
    f, verdict, padded = headline(r), m.get("verdict"), m.get("padded") or {}
    kernel_verdict = verdict if isinstance(verdict, dict) and kind(r) != "advise" else {}
    row = {**{k: r.get(k) for k in ("suite", "op", "precision", "status", "median_ms", "iqr_ms", "min_ms", "n",
                                      "tflops", "gbps", "error", "tolerance", "message", "case_key")},
           "run_id": run["id"], "device": run["device"], "torch": env.get("libraries", {}).get("torch"),
           "cuda": env.get("libraries", {}).get("cuda"), "driver": env.get("gpu", {}).get("driver"),
           "suite": group_name(r), "label": label(r), "application": application(r),
           "metric": f.name, "value": f.value, "unit": f.unit, "relative_iqr": relative_spread(r),
           "throughput_unit": m.get("unit"), "tc": m.get("tensor_cores_used"),
           "aligned": kernel_verdict.get("aligned"), "misaligned": kernel_verdict.get("misaligned"),
           "fix": kernel_verdict.get("fix"), "padded_ms": padded.get("median_ms"), "padded_gain": padded.get("gain"),
           "verdict": advice_summary(r) if kind(r) == "advise" else None, "warnings": r.get("warnings")}
    for key in ("throughput", "speedup_fp32", "speedup_prev", "mfu", "peak_mem_gib", "tc_share", "backend",
                "numpy_ms", "torch_ms", "e2e_pageable_ms", "e2e_pinned_ms", "crossover"):
        row[key] = m.get(key)
    row.update({f"shape_{k}": v for k, v in (r.get("shape") or {}).items()})
    acc = m.get("accuracy")
    row.update({f"accuracy_{k}": v for k, v in acc.items()} if isinstance(acc, dict) else {})
    return {k: plain(v) for k, v in row.items()}


def plain(value) -> str:
    """A spreadsheet cell: no JSON, one line. yes/no for flags, 'k=v; k=v' for a dict, '; '-joined lists."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return "; ".join(f"{k}={plain(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "; ".join(plain(v) for v in value)
    return " ".join(str(value).splitlines())     # one line a cell


def to_flat_csv(run: dict, results: list[dict]) -> str:
    rows = [flat_row(run, r) for r in results]
    extra = sorted({k for row in rows for k in row} - set(FLAT_COLUMNS))   # shape_* and accuracy_* columns
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=[*FLAT_COLUMNS, *extra], restval="")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


FORMATS = {"json": to_json, "csv": to_csv, "mlperf": to_mlperf, "flat-csv": to_flat_csv}


def add_parser(sub) -> None:
    p = sub.add_parser("export")
    p.add_argument("run", type=int, help="run id (see `tcperf runs`)")
    p.add_argument("--format", default="json", help="json | csv | mlperf | flat-csv (any format in export.FORMATS)")
    p.add_argument("--out", default=None, help="file to write (default: stdout)")
    add_db(p)


def main(args) -> int:
    if args.format not in FORMATS:
        raise choices("format", args.format, FORMATS)
    store = Store.open(args.db)
    run = store.run(args.run)
    text = FORMATS[args.format](run, store.results(run["id"]))
    if args.out:
        write_file(args.out, text)
    else:
        sys.stdout.write(text)
    return 0
