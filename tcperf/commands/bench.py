"""`tcperf bench --suite NAME`: a kernel suite at the asked precisions, stored, printed as a table sorted as asked.

    tcperf bench --suite deepbench-gemm-train --precision fp32,tf32,bf16,fp16
    tcperf bench --suite deepbench-gemm-train --filter application=DeepSpeech --limit 10 --sort tflops
    tcperf bench --suite deepbench-conv-train --filter layout=NHWC --filter pass=fwd,bwd_data --json

--filter KEY=VALUE[,VALUE...] keeps the cases whose tag (application, set, note, density: substring match, any
case) or shape parameter (m, layout, pass, ...: exact match) or op equals one of the values; repeat it to require
several. On a GPU every case is also profiled (the kernels that ran and whether they used Tensor Cores;
--no-profile skips it) and every misaligned case is timed again at its padded shape (the fix, measured).
"""
from __future__ import annotations

import datetime

from .. import env as envmod
from .. import suites
from ..errors import UserError
from ..precision import parse_list
from ..store import case_key
from ..table import results_table
from ..tensorcore import padding_note
from .common import add_measuring, console, job_from, measure_into_store, print_json

GPU_PRECISIONS = "fp32,tf32,bf16,fp16"
CPU_PRECISIONS = "fp32,bf16"


def add_parser(sub) -> None:
    p = sub.add_parser("bench")
    p.add_argument("--suite", required=True, help="suite name (see `tcperf suites`)")
    p.add_argument("--precision", default=None,
                   help=f"comma-separated precisions (default: {GPU_PRECISIONS} on a GPU, {CPU_PRECISIONS} on the CPU)")
    p.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE[,VALUE]",
                   help="keep cases whose tag or shape parameter matches (repeatable)")
    p.add_argument("--limit", type=int, default=None, help="only the first N cases of the suite (after --filter)")
    p.add_argument("--sort", default="order", choices=tuple(SORTS), help="order of the printed table")
    p.add_argument("--no-profile", action="store_true", help="skip recording the kernels that ran (faster)")
    add_measuring(p)


def main(args) -> int:
    device = envmod.parse_device(args.device)
    names = args.precision or (GPU_PRECISIONS if device.type == "cuda" else CPU_PRECISIONS)
    precisions = [p.name for p in parse_list(names)]
    if not precisions:
        raise UserError("--precision is empty; give e.g. fp32,tf32,bf16,fp16")
    cases = select(suites.load(args.suite, device.type), args.filter, args.limit)
    cases = suites.with_precisions(cases, precisions)
    if not cases:
        raise UserError(f"suite {args.suite!r} has no case at precision(s) {', '.join(precisions)} for its ops")
    profile = device.type == "cuda" and not args.no_profile
    run_id, _, store = measure_into_store("bench", cases, args, job_from(args, profile=profile, pad=True),
                                          label=args.suite)
    results = sort_results(store.results(run_id), cases, args.sort)
    if args.json:
        print_json({"run": store.run(run_id), "results": results})
    else:
        print_bench(store, store.run(run_id), results)
    return 0


# --- choosing cases -----------------------------------------------------------------------------------------------
def select(cases: list, filters: list[str], limit: int | None) -> list:
    """Suite rows (tcperf.suites.Row) matching every --filter, the first `limit` of them; UserError for a filter
    that cannot match."""
    for text in filters:
        key, values = _parse_filter(text)
        known = {k for c in cases for k in (*c.tags, *c.shape, "op")}
        if key not in known:
            raise UserError(f"unknown filter key {key!r}; choose from: {', '.join(sorted(known, key=str.lower))}")
        cases = [c for c in cases if _matches(c, key, values)]
    if limit is not None:
        if limit < 1:
            raise UserError(f"--limit must be >= 1 (got {limit})")
        cases = cases[:limit]
    if not cases:
        why = f"no case matches {' and '.join(filters)}" if filters else "the suite has no case on this device"
        raise UserError(why)
    return cases


def _parse_filter(text: str) -> tuple[str, list[str]]:
    key, sep, value = text.partition("=")
    if not sep or not key or not value:
        raise UserError(f"malformed filter {text!r}; expected KEY=VALUE[,VALUE...], e.g. application=DeepSpeech")
    return key.strip(), [v.strip().lower() for v in value.split(",") if v.strip()]


def _matches(case, key: str, values: list[str]) -> bool:
    if key in case.tags:
        return any(v in str(case.tags[key]).lower() for v in values)
    have = case.op if key == "op" else case.shape.get(key)
    return have is not None and str(have).lower() in values


# --- sorting and printing -----------------------------------------------------------------------------------------
SORTS = {
    "order": None,                                                   # the suite's order, precisions as asked
    "tflops": lambda r: -(r.get("tflops") or 0.0),
    "time": lambda r: r.get("median_ms") if r.get("median_ms") is not None else float("inf"),
    "precision": lambda r: r["precision"],
    "case": lambda r: (r["metrics"] or {}).get("label", ""),
    "gain": lambda r: -((r["metrics"] or {}).get("padded") or {}).get("gain", 0.0),
    "status": lambda r: r["status"],
}


def sort_results(results: list[dict], cases: list[dict], how: str) -> list[dict]:
    """The suite's order (each case at each precision, as asked), then, stably, the asked key."""
    position = {case_key(c.op, c.shape, c.precision): i for i, c in enumerate(cases)}
    ordered = sorted(results, key=lambda r: position.get(r["case_key"], len(position)))
    return ordered if SORTS[how] is None else sorted(ordered, key=SORTS[how])


def print_bench(store, run: dict, results: list[dict]) -> None:
    when = datetime.datetime.fromtimestamp(run["started"]).strftime("%Y-%m-%d %H:%M")
    title = f"run {run['id']} · bench · {run['device']} · {when} · {len(results)} results · {run['status']}"
    gpu = run["env"].get("gpu", {}).get("name")
    console.print(results_table(results, gpu, store.ceilings(run["device"]), title=title))
    padded = [r for r in results if (r.get("metrics") or {}).get("padded")]
    if padded:
        console.print("[bold]padding, measured:[/]")
    for r in padded:
        note = padding_note(r["shape"], r["metrics"]["padded"])
        console.print(f"  {r['op']} {r['metrics'].get('label', '')} {r['precision']}: {note}", highlight=False)
    for w in run.get("warnings") or []:
        console.print(f"[yellow]warning:[/] {w}")
