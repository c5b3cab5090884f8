"""`tcperf generate`: a causal LM's prefill and decode at every precision, against the memory-bandwidth limit.

Decoding one token at batch 1 reads every weight once, so its limit is memory bandwidth; as the batch grows the
step turns compute-bound and the Tensor Cores decide again. For each precision (and KV cache dtype), loop and batch
this prints time to first token, inter-token latency (median, p90, p99), tokens/s per user and in total, the bytes a
decode step must read over its time as achieved bandwidth and its share of the copy bandwidth `tcperf ceilings`
measured, prefill TFLOPS and MFU, accuracy against bf16, and the batch where decode turns compute-bound (the
roofline's and the measured one). Rows are stored (run kind "generate", op "generate"; op "generate.crossing" for
the crossing of each sweep) and a plot per model is written: tokens/s per user against total tokens/s.

    tcperf generate                                       # Llama-3.2-1B's shape, every precision, batch 1..256
    tcperf generate llama-1b --precision bf16,int8wo,int4wo-128 --kv bf16 --batch 1,16,64 --loop plain
    tcperf generate meta-llama/Llama-3.2-3B --loop hf     # a transformers config (random weights)
    tcperf generate my_lm.py:factory --loop hf --device cpu --batch 1,2 --prompt 16 --output 8

The hand loop is tcperf.generate.loop (gpt-fast's way); the hf loop is transformers' generate with a static cache.
"""
from __future__ import annotations

import os

import torch
from rich.table import Table

from .. import env as envmod
from .. import peaks
from ..errors import UserError
from ..generate import accounting, hf, measure, quant
from ..generate import model as plain
from ..table import status_cell
from .common import (add_measuring, beside_store, console, err_console, measure_into_store, positive_ints,
                     print_json)

LOOPS = ("plain", "hf")
STOPPED = ("error", "timeout")       # statuses of a case that failed to run: exit status 1
DEFAULTS = {  # device type -> model, batches, prompt, output
    "cuda": (plain.DEFAULT, "1,2,4,8,16,32,64,128,256", "128", "128"),
    "cpu": ("tiny", "1,2,4", "16", "16"),
}


def add_parser(sub) -> None:
    p = sub.add_parser("generate",
                       description="Prefill and decode of a causal LM with a static KV cache, timed apart, over "
                                   "batch sizes and prompt / output lengths, at every precision. --rep-ms is the "
                                   "time budget of timed generations a batch (default 1000).")
    p.add_argument("model", nargs="?", default=None,
                   help=f"{' | '.join(plain.CONFIGS)} (random weights), a transformers config name, or "
                        f"file.py:factory returning a causal LM (default: {plain.DEFAULT}; tiny on a CPU)")
    p.add_argument("--precision", default=",".join(quant.DEFAULT),
                   help=f"comma list of {', '.join(quant.RECIPES)} (default: {','.join(quant.DEFAULT)})")
    p.add_argument("--kv", default="bf16,fp8", help="KV cache dtypes: bf16 (the activation dtype), fp8 (default both)")
    p.add_argument("--batch", default=None, help="batch sizes (default 1,2,4,...,256; 1,2,4 on a CPU)")
    p.add_argument("--prompt", default=None, help="prompt lengths, a comma list (default 128; 16 on a CPU)")
    p.add_argument("--output", default=None, help="tokens generated, a comma list (default 128; 16 on a CPU)")
    p.add_argument("--loop", default="plain,hf", help="plain (tcperf's hand loop), hf (transformers' generate)")
    p.add_argument("--no-compile", action="store_true",
                   help="no torch.compile: the plain loop captures its eager step in a CUDA graph by hand")
    p.add_argument("--plot-dir", default=None,
                   help="where the plot per model is written (default: the results store's folder)")
    p.add_argument("--seed", type=int, default=0, help="the random weights' and prompts' seed")
    add_measuring(p)
    p.set_defaults(func=main, rep_ms=1000.0, timeout=900.0)


def ints(text: str, what: str) -> list[int]:
    return sorted(set(positive_ints(text, f"--{what}")))


def loops(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in LOOPS]
    if bad or not names:
        raise UserError(f"unknown --loop {text!r}; choose from: {', '.join(LOOPS)}")
    return names


def plan(args, device) -> tuple[dict, list[dict]]:
    """The source and every case, checked (UserError for bad input, before anything runs)."""
    model, batches, prompts, outputs = DEFAULTS["cuda" if device.type == "cuda" else "cpu"]
    src = hf.source(args.model or model)
    recipes = quant.parse_list(args.precision, args.kv)
    batches = ints(args.batch or batches, "batch")
    prompts, outputs = ints(args.prompt or prompts, "prompt"), ints(args.output or outputs, "output")
    loop_names = loops(args.loop)
    check_fits(src, batches[0], max(prompts), max(outputs), device)
    cases, reasons = [], []
    for r in recipes:
        for loop_name in loop_names:
            skip = _skipped(src, r, loop_name, device)     # one row says so, not one a batch
            reasons += [skip] if skip else []
            cases += [measure.case(src, loop_name, r.name, b, p, n, max_batch=batches[-1], seed=args.seed,
                                   compile=False if args.no_compile else None)
                      for p in prompts for n in outputs for b in (batches[:1] if skip else batches)]
    if len(reasons) == len(recipes) * len(loop_names):
        raise UserError(f"nothing to measure for {src['name']}: {'; '.join(dict.fromkeys(reasons))}")
    return src, cases


def _skipped(src: dict, r, loop_name: str, device) -> str | None:
    """Why this recipe cannot run in this loop on this device (the worker's row says the same), else None."""
    probe = measure.case(src, loop_name, r.name, 1, 1, 1, max_batch=1)
    return quant.unsupported(r, device) or measure.loop_reason(probe, r)


def check_fits(src: dict, batch: int, prompt: int, output: int, device) -> None:
    """The smallest batch must fit in the device's memory (weights in bf16 + its KV cache and activations):
    UserError when it cannot. Larger batches that do not fit are recorded as out of memory by the sweep."""
    args = hf.args_of(src) if src["kind"] == "builtin" else None
    if args is None:
        return
    total = _memory(device)
    need = 2 * accounting.parameters(args) + batch * accounting.row_memory(args, prompt, output, 2)
    if total and need > total:
        raise UserError(f"batch {batch} of {src['name']} at {prompt}+{output} tokens does not fit: it needs ~"
                        f"{need / 2**30:.1f} GiB, the {device.type.upper()} has {total / 2**30:.1f} GiB")


def _memory(device) -> int | None:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def main(args) -> int:
    device = envmod.parse_device(args.device)
    src, cases = plan(args, device)
    if device.type == "cpu" and args.model is None:
        err_console.print("No CUDA GPU: the tiny configuration on the CPU (name a model to override).")
    ceilings = peaks.measured(args.db, device)      # copy bandwidth, TFLOPS; without them the rows say so
    run_id, results, store = measure_into_store("generate", cases, args, label="generate",
                                                extra={"ceilings": ceilings} if ceilings else None)
    for row in crossings(results):
        store.add_result(run_id, row)
    rows = store.results(run_id)
    folder = args.plot_dir or str(beside_store(store, ""))
    plots = [plot(rows, model, folder) for model in sorted({r["shape"]["model"] for r in rows})]
    if args.json:
        print_json({"run": store.run(run_id), "results": rows, "plots": plots})
    else:
        print_generate(rows, console)
        for path in filter(None, plots):
            console.print(f"plot: {path}")
    return failures(rows, err_console)


def failures(rows: list[dict], out) -> int:
    """Cases that did not run to the end (an exception, a timeout) said on stderr, one line each after a count:
    exit status 1 when there are any, else 0. An out-of-memory batch ends its sweep by design, and a recipe outside
    its accuracy tolerance was timed all the same (the table's FAIL): neither counts here."""
    failed = [r for r in rows if r["op"] == "generate" and r["status"] in STOPPED]
    if not failed:
        return 0
    out.print(f"[red]{len(failed)} of {sum(r['op'] == 'generate' for r in rows)} case(s) failed[/]:", highlight=False)
    for r in failed:
        s = r["shape"]
        out.print(f"  {r['precision']} · {s['loop']} loop · batch {s['batch']}: {r['status']}: {r['message']}",
                  highlight=False, markup=False, soft_wrap=True)
    return 1


# --- the crossing of each sweep ---------------------------------------------------------------------------------
def crossings(results: list[dict]) -> list[dict]:
    """One row (op "generate.crossing") per model, loop, precision and lengths with three batches or more measured:
    the roofline's crossing batch beside the measured one (tcperf.generate.accounting.measured_batch)."""
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        if r["op"] == "generate" and r["status"] in ("ok", "wrong"):
            s = r["shape"]
            groups.setdefault((s["model"], s["loop"], r["precision"], s["prompt"], s["output"]), []).append(r)
    out = []
    for (model, loop_name, precision, prompt, output), rows in groups.items():
        rows.sort(key=lambda r: r["shape"]["batch"])
        m = rows[-1]["metrics"]
        context = m["decode"]["context"]
        points = [{"batch": r["shape"]["batch"], "bytes": r["bytes"], "flops": r["flops"], "ms": r["median_ms"]}
                  for r in rows]
        measured = accounting.measured_batch(points, m["dims"], context) if len(points) >= 3 else None
        if measured is None:
            continue
        out.append({"op": "generate.crossing", "suite": "generate", "precision": precision, "status": "ok",
                    "shape": {"model": model, "loop": loop_name, "prompt": prompt, "output": output},
                    "metrics": {"roofline_batch": m.get("roofline_batch"), "measured": measured,
                                "peak": m.get("peak"), "batches": [p["batch"] for p in points],
                                "ratio": measured["batch"] / m["roofline_batch"]
                                if measured["batch"] and m.get("roofline_batch") else None}})
    return out


# --- the table and the plot -------------------------------------------------------------------------------------
def _ms(d: dict | None, key: str = "median") -> str:
    return f"{d[key]:.3g}" if d and d.get(key) is not None else ""


def accuracy_cell(a: dict | None) -> str:
    if not a:
        return ""
    if a.get("nonfinite"):
        return "[red]NaN/inf[/]"
    verdict = "" if a["passed"] else "[bold red]FAIL[/] "
    return f"{verdict}err {a['rel_error']:.2g} (tol {a['tolerance']:.2g}) · top1 {a['top1_agree']:.0%}"


def generate_table(rows: list[dict], title: str) -> Table:
    t = Table(title=title)
    for col in ("precision", "batch", "status", "TTFT ms ± IQR", "ITL ms p50 / p90 / p99", "tok/s user",
                "tok/s total", "decode GB/s", "% copy BW", "prefill TFLOPS", "MFU", "compile s", "accuracy", "note"):
        t.add_column(col, justify="left" if col in ("precision", "status", "accuracy", "note") else "right",
                     overflow="fold")
    for r in rows:
        m = r.get("metrics") or {}
        itl, dec, pre = m.get("itl_ms"), m.get("decode") or {}, m.get("prefill") or {}
        t.add_row(r["precision"], str(r["shape"]["batch"]), status_cell(r["status"]),
                  f"{_ms(m.get('ttft_ms'))} ± {_ms(m.get('ttft_ms'), 'iqr')}" if m.get("ttft_ms") else "",
                  f"{_ms(itl)} / {_ms(itl, 'p90')} / {_ms(itl, 'p99')}" if itl else "",
                  f"{m['tokens_s_user']:,.0f}" if m.get("tokens_s_user") else "",
                  f"{m['tokens_s_total']:,.0f}" if m.get("tokens_s_total") else "",
                  f"{dec['gbps']:,.0f}" if dec.get("gbps") else "",
                  f"{dec['bw_share']:.0%}" if dec.get("bw_share") else "",
                  f"{pre['tflops']:.3g}" if pre.get("tflops") else "",
                  f"{pre['mfu']:.0%}" if pre.get("mfu") else "",
                  f"{m['compile_s']:.1f}" if m.get("compile_s") is not None else "",
                  accuracy_cell(m.get("accuracy")),
                  r.get("message") or "; ".join([*(r.get("warnings") or []), *(m.get("notes") or [])]))
    return t


def crossing_line(r: dict) -> str:
    m, s = r["metrics"], r["shape"]
    roof, meas = m.get("roofline_batch"), m["measured"]
    roof_text = f"{roof:.0f}" if roof else "none (memory-bound at every batch, or no peak known)"
    meas_text = f"{meas['batch']:.0f}" if meas.get("batch") else "none"
    basis = m.get("peak") or {}
    ratio = f" ({m['ratio']:.2f}x the roofline's)" if m.get("ratio") else ""
    note = f"; {meas['note']}" if meas.get("note") else ""
    return (f"  {r['precision']} ({s['loop']}, {s['prompt']}+{s['output']}): compute-bound from batch {roof_text} on "
            f"the roofline ({basis.get('tflops') or 0:.0f} TFLOPS {basis.get('source') or ''}, "
            f"{basis.get('bandwidth_gbs') or 0:,.0f} GB/s {basis.get('bandwidth_source') or ''}); measured "
            f"{meas_text}{ratio}: {meas['achieved_gbps_small']:,.0f} GB/s at the smallest batch, "
            f"{meas['achieved_tflops_large']:.0f} TFLOPS at the largest{note}")


def print_generate(rows: list[dict], out) -> None:
    """One table per model, loop and lengths; then where each precision's decode turns compute-bound."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["op"] == "generate":
            s = r["shape"]
            groups.setdefault((s["model"], s["loop"], s["prompt"], s["output"]), []).append(r)
    for (model, loop_name, prompt, output), group in groups.items():
        out.print(generate_table(group, f"{model} · {loop_name} loop · prompt {prompt} · output {output}"))
    lines = [crossing_line(r) for r in rows if r["op"] == "generate.crossing"]
    if lines:
        out.print("Where decode turns compute-bound:\n" + "\n".join(lines))


def plot(rows: list[dict], model: str, folder: str) -> str | None:
    """tokens/s per user against total tokens/s, one line per precision (and loop): the serving trade-off."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    lines: dict[str, list] = {}
    for r in rows:
        m = r.get("metrics") or {}
        if r["op"] == "generate" and r["shape"]["model"] == model and m.get("tokens_s_total"):
            s = r["shape"]
            key = f"{r['precision']} · {s['loop']} · {s['prompt']}+{s['output']}"
            lines.setdefault(key, []).append((s["batch"], m["tokens_s_total"], m["tokens_s_user"]))
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for key, pts in sorted(lines.items()):
        pts.sort()
        ax.plot([p[1] for p in pts], [p[2] for p in pts], marker="o", label=key)
        for b, x, y in pts:
            ax.annotate(str(b), (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
    ax.set(xscale="log", xlabel="total tokens/s (labels: batch)", ylabel="tokens/s per user",
           title=f"{model}: decode, per user against in total")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"generate-{model.replace('/', '_').replace(':', '_')}.png")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
