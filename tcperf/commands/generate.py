"""`tcperf generate`: a causal LM's prefill and decode at every precision, against the memory-bandwidth limit.

Decoding one token at batch 1 reads every weight once, so its limit is memory bandwidth; as the batch grows the
step turns compute-bound and the Tensor Cores decide again. For each precision (and KV cache dtype), loop and batch
this prints time to first token, inter-token latency (median, p90, p99), tokens/s per user and in total, the bytes a
decode step must read over its time as achieved bandwidth and its share of the copy bandwidth `tcperf ceilings`
measured, prefill TFLOPS and MFU, the kernel check (and on trained weights perplexity against bf16), and the batch
where decode turns compute-bound (the roofline's and the measured one). Rows are stored (run kind "generate", op
"generate"; op "generate.crossing" for the crossing of each sweep) and a plot per model is written: tokens/s per
user against total tokens/s.

    tcperf generate                         # the headline: Llama-3.2-1B's shape, bf16 / int8wo / int4wo-128, batch 1
    tcperf generate --sweep                 # every precision, KV bf16 and fp8, batch 1..256, both loops
    tcperf generate stdlib                  # the model tcperf trains: each precision's perplexity
    tcperf generate ./my-llama --text notes.txt   # a save_pretrained folder's own weights, judged on your text

docs/generate.md has more examples. The hand loop is tcperf.generate.loop (gpt-fast's way); the hf loop is
transformers' generate with a static cache. What torch.compile compiled is kept beside the store
(tcperf.compile_cache): the compile column says "hit" when a second run found it there, "miss" when it compiled
from scratch.
"""
from __future__ import annotations

import os

import torch
from rich import box
from rich.table import Table

from .. import env as envmod
from .. import peaks
from .. import quant as core_quant
from ..errors import UserError
from ..generate import accounting, hf, parts, quant, sweep, trained
from ..generate import model as plain
from ..records import Result
from ..compare import claim
from ..store import Store
from ..table import footnotes, status_cell
from .common import (add_measuring, beside_store, console, err_console, job_from, measure_into_store, positive_ints,
                     print_json)

LOOPS = ("plain", "hf")
STOPPED = ("error", "timeout")       # statuses of a case that failed to run: exit status 1
DEFAULTS = {  # device type -> model, prompt, output, the headline's batches, --sweep's batches
    "cuda": (plain.DEFAULT, "128", "128", "1", "1,2,4,8,16,32,64,128,256"),
    "cpu": ("tiny", "16", "16", "1", "1,2,4"),
}
SWEEP_TIME = "half an hour and more on one GPU: 7 precisions x 2 KV caches x 2 loops, each compiled once"


def add_parser(sub) -> None:
    p = sub.add_parser("generate",
                       description="Prefill and decode of a causal LM with a static KV cache, timed apart, over "
                                   "batch sizes and prompt / output lengths, at every precision. --rep-ms is the "
                                   "time budget of timed generations a batch (default 1000).")
    p.add_argument("model", nargs="?", default=None,
                   help=f"{' | '.join(plain.CONFIGS)} (random weights), {trained.NAME} (a small model tcperf trains "
                        f"once a machine: model accuracy judged), a transformers config name, or file.py:factory "
                        f"returning a causal LM (default: {plain.DEFAULT}; tiny on a CPU)")
    p.add_argument("--sweep", action="store_true",
                   help=f"the full sweep: every precision ({','.join(quant.SWEEP)}), KV cache bf16 and fp8, batch "
                        f"1..256 (1,2,4 on a CPU), the plain and hf loops. Expected time: {SWEEP_TIME}. Without it: "
                        f"the headline, {','.join(quant.HEADLINE)} at batch 1 in the plain loop (minutes)")
    p.add_argument("--precision", default=None,
                   help=f"comma list of {', '.join(quant.RECIPES)} (default: {','.join(quant.HEADLINE)}; --sweep: "
                        f"{','.join(quant.SWEEP)})")
    p.add_argument("--kv", default=None, help="KV cache dtypes: bf16 (the activation dtype), fp8 (default bf16; "
                                              "--sweep: both)")
    p.add_argument("--batch", default=None, help="batch sizes (default 1; --sweep: 1,2,4,...,256, 1,2,4 on a CPU)")
    p.add_argument("--prompt", default=None, help="prompt lengths, a comma list (default 128; 16 on a CPU)")
    p.add_argument("--output", default=None, help="tokens generated, a comma list (default 128; 16 on a CPU)")
    p.add_argument("--loop", default=None, help="plain (tcperf's hand loop), hf (transformers' generate); default "
                                                "plain, --sweep: plain,hf")
    p.add_argument("--kernel", default="default",
                   help="the weight-only layers' kernel: default (Inductor's fused GEMV for int8wo, tinygemm for "
                        "int4wo), triton (tcperf.kernels.gemv's), or auto (int8wo: tcperf.kernels.gemv's, int4wo: tinygemm, the "
                        "fastest of each on Llama-3.2-1B's layers in benchmarks/gemv_gpu.py)")
    p.add_argument("--no-compile", action="store_true",
                   help="no torch.compile: the plain loop captures its eager step in a CUDA graph by hand")
    p.add_argument("--plot-dir", default=None,
                   help="where the plot per model is written (default: the results store's folder)")
    p.add_argument("--seed", type=int, default=0, help="the random weights' and prompts' seed")
    p.add_argument("--text", default=None, metavar="FILE",
                   help=f"a UTF-8 text file: with MODEL a local transformers folder holding weights and a tokenizer "
                        f"(save_pretrained's), each precision's perplexity on it and top-1 agreement with bf16, "
                        f"judged against the limits the trained model gets (at most {hf.TEXT_ROWS} windows of "
                        f"{hf.TEXT_TOKENS} tokens)")
    add_measuring(p)
    p.set_defaults(rep_ms=1000.0, timeout=900.0)


def ints(text: str, what: str) -> list[int]:
    return sorted(set(positive_ints(text, f"--{what}")))


def loops(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or any(n not in LOOPS for n in names):
        raise UserError(f"unknown --loop {text!r}; choose from: {', '.join(LOOPS)}")
    return names


def plan(args, device) -> tuple[dict, list[dict]]:
    """The source and every case, checked (UserError for bad input, before anything runs)."""
    model, prompts, outputs, headline, every = DEFAULTS["cuda" if device.type == "cuda" else "cpu"]
    src = hf.source(args.model or model)
    recipes = quant.parse_list(args.precision or ",".join(quant.SWEEP if args.sweep else quant.HEADLINE),
                               args.kv or ("bf16,fp8" if args.sweep else "bf16"))
    batches = ints(args.batch or (every if args.sweep else headline), "batch")
    prompts, outputs = ints(args.prompt or prompts, "prompt"), ints(args.output or outputs, "output")
    loop_names = loops(args.loop or ("plain,hf" if args.sweep else "plain"))
    kernel = quant.kernel_choice(args.kernel)
    if src["kind"] == "trained":
        src["size"] = trained.size_of(device)
    if args.text is not None:
        src["text"] = judged_text(src, args.text)
    check_fits(src, batches[0], max(prompts), max(outputs), device)
    cases, reasons = [], []
    for r in recipes:
        for loop_name in loop_names:
            on = quant.kernel_for(r, kernel)
            skip = _skipped(src, r, loop_name, device) or quant.kernel_reason(on, device)   # one row, not one a batch
            reasons += [skip] if skip else []
            for c in (sweep.case(src, loop_name, r.name, b, p, n, max_batch=batches[-1], seed=args.seed,
                                   compile=False if args.no_compile else None, kernel=on)
                      for p in prompts for n in outputs for b in (batches[:1] if skip else batches)):
                cases.append(c.replace(known=sweep.skipped_row(c, skip)) if skip else c)   # no worker for a skip
    if len(reasons) == len(recipes) * len(loop_names):
        raise UserError(f"nothing to measure for {src['name']}: {'; '.join(dict.fromkeys(reasons))}")
    return src, cases


def judged_text(src: dict, path: str) -> str:
    """--text's file, checked before anything runs (UserError: exit 2, one line): it needs a folder with weights
    and a tokenizer, and a text the tokenizer reads."""
    if not src.get("saved_weights"):
        raise UserError(f"--text needs MODEL to be a local transformers folder with weights (*.safetensors or "
                        f"pytorch_model*.bin); {src['name']} has none: random weights are not judged")
    if not src.get("tokenizer"):
        raise UserError(f"--text needs a tokenizer in {src['name']} (tokenizer.json, tokenizer.model or vocab.json, "
                        f"as the tokenizer's save_pretrained writes them)")
    hf.text_tokens(src["name"], path)
    return os.path.abspath(path)


def train_once(src: dict, db: str | None, device) -> None:
    """The trained model's weights into src (trained beside the store the first time, said on stderr)."""
    path = trained.path_for(beside_store(Store.open(db), ""), src["size"])
    if not path.exists():
        err_console.print(f"Training {trained.NAME} once for this machine ({trained.describe(src['size'])}): "
                          f"{path}", highlight=False)
    src["weights"] = str(trained.ensure(path.parent, device))
    src["trained"] = trained.info(src["weights"])


def _skipped(src: dict, r, loop_name: str, device) -> str | None:
    """Why this recipe cannot run in this loop on this device (the worker's row says the same), else None."""
    probe = sweep.case(src, loop_name, r.name, 1, 1, 1, max_batch=1)
    return quant.unsupported(r, device) or sweep.loop_reason(probe, r)


def check_fits(src: dict, batch: int, prompt: int, output: int, device) -> None:
    """The smallest batch must fit in the device's memory (weights in bf16 + its KV cache and activations):
    UserError when it cannot. Larger batches that do not fit are recorded as out of memory by the sweep."""
    args = hf.args_of(src) if src["kind"] in ("builtin", "trained") else None
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
    if src["kind"] == "trained":
        train_once(src, args.db, device)
    if device.type == "cpu" and args.model is None:
        err_console.print("No CUDA GPU: the tiny configuration on the CPU (name a model to override).")
    ceilings = peaks.measured(args.db, device)      # copy bandwidth, TFLOPS; without them the rows say so
    job = job_from(args, ceilings=ceilings, compile_cache=str(beside_store(Store.open(args.db), "")))
    run_id, results, store = measure_into_store("generate", cases, args, job, label="generate")
    for row in crossings(results):
        store.add_result(run_id, row)
    rows = store.results(run_id)
    folder = args.plot_dir or str(beside_store(store, ""))
    plots = [plot(rows, model, folder) for model in sorted({r["shape"]["model"] for r in rows})]
    if args.json:
        print_json({"run": store.run(run_id), "results": rows, "plots": plots})
    else:
        print_generate(rows, console)
        print_headline(rows, console)
        print_accuracy(rows, src, console)
        for path in filter(None, plots):
            console.print(f"plot: {path}")
        err_console.print(f"stored as run {run_id} in {store.where}", markup=False, highlight=False, soft_wrap=True)
    return failures(rows, err_console)


def failures(rows: list[dict], out) -> int:
    """Cases that did not run to the end (an exception, a timeout) or whose kernel failed its check against its own
    dequantised weights (a bug), said on stderr after a count: exit status 1 when there are any, else 0. An
    out-of-memory batch (the end of its sweep) and a recipe outside its perplexity limit (FAIL) do not count."""
    failed = [r for r in rows if r["op"] == "generate" and (r["status"] in STOPPED or kernel_failed(r))]
    if not failed:
        return 0
    out.print(f"[red]{len(failed)} of {sum(r['op'] == 'generate' for r in rows)} case(s) failed[/]:", highlight=False)
    for r in failed:
        s = r["shape"]
        out.print(f"  {r['precision']} · {s['loop']} loop · batch {s['batch']}: {r['status']}: {r['message']}",
                  highlight=False, markup=False, soft_wrap=True)
    return 1


def kernel_failed(r: dict) -> bool:
    return (r.get("metrics") or {}).get("kernel", {}).get("passed") is False


# --- the crossing of each sweep ---------------------------------------------------------------------------------
def crossings(results: list[Result]) -> list[Result]:
    """One row (op "generate.crossing") per model, loop, precision and lengths with three batches or more measured:
    the roofline's crossing batch beside the measured one (tcperf.generate.accounting.measured_batch)."""
    groups: dict[tuple, list[Result]] = {}
    for r in results:
        if r.op == "generate" and r.status in ("ok", "wrong"):
            s = r.shape
            groups.setdefault((s["model"], s["loop"], r.precision, s["prompt"], s["output"]), []).append(r)
    out = []
    for (model, loop_name, precision, prompt, output), rows in groups.items():
        rows.sort(key=lambda r: r.shape["batch"])
        m = rows[-1].metrics
        points = [{"batch": r.shape["batch"], "bytes": r.bytes, "flops": r.flops, "ms": r.median_ms} for r in rows]
        measured = accounting.measured_batch(points, m["dims"], m["decode"]["context"]) if len(points) >= 3 else None
        if measured is None:
            continue
        out.append(Result("generate.crossing", {"model": model, "loop": loop_name, "prompt": prompt, "output": output},
                          precision, suite="generate",
                          metrics={"roofline_batch": m.get("roofline_batch"), "measured": measured,
                                   "peak": m.get("peak"), "batches": [p["batch"] for p in points],
                                   "ratio": measured["batch"] / m["roofline_batch"]
                                   if measured["batch"] and m.get("roofline_batch") else None}))
    return out


# --- the table and the plot -------------------------------------------------------------------------------------
def _ms(d: dict | None, key: str = "median") -> str:
    return f"{d[key]:.3g}" if d and d.get(key) is not None else ""


def accuracy_cell(m: dict) -> str:
    """The kernel check, then the model's accuracy where it was judged."""
    k, a = m.get("kernel"), m.get("accuracy") or {}
    if not k:
        return ""
    kernel = f"kernel {k['rel_error']:.1g}" + ("" if k["passed"] else " [bold red]BUG[/]") if k["layers"] else ""
    if not a.get("judged"):
        return kernel
    verdict = "" if a["passed"] else "[bold red]FAIL[/] "
    return (f"{kernel} · {verdict}ppl {a['perplexity']:.3g} ({a['rise']:+.1%}, limit +{a['limit']:.0%}) · "
            f"top1 {a['top1_agree']:.0%}").lstrip(" ·")


def compile_cell(m: dict) -> str:
    """The warm-up's seconds (torch.compile's time), and whether the compile cache served it (tcperf.compile_cache):
    "3.1 hit", "95.2 miss"; nothing after the seconds when nothing was compiled."""
    if m.get("compile_s") is None:
        return ""
    status = m.get("compile_cache") or "off"
    return f"{m['compile_s']:.1f}" + ("" if status == "off" else f" {status}")


def generate_table(rows: list[dict], title: str) -> Table:
    """A row a precision and batch; each note numbered once below the table (they repeat down a sweep)."""
    numbers, notes = footnotes(rows, lambda r: [r.get("message") or "", *(r.get("warnings") or []),
                                                *((r.get("metrics") or {}).get("notes") or [])])
    t = Table(title=title, caption="\n".join(f"{i}. {text}" for i, text in enumerate(notes, 1)) or None,
              caption_justify="left", box=box.SIMPLE, pad_edge=False)     # 120 columns (tokens/s in total: --json)
    for col in ("precision", "batch", "TTFT ms", "ITL ms p50/p99", "tok/s", "GB/s", "% BW", "prefill TF", "MFU",
                "compile", "accuracy", "note"):
        t.add_column(col, justify="left" if col in ("precision", "accuracy", "note") else "right",
                     overflow="fold", no_wrap=col not in ("accuracy", "note", "compile"),   # "95.2 miss" may wrap
                     min_width={"accuracy": 12, "compile": 7}.get(col))
    for r, number in zip(rows, numbers):
        m = r.get("metrics") or {}
        itl, dec, pre = m.get("itl_ms"), m.get("decode") or {}, m.get("prefill") or {}
        status = "" if r["status"] == "ok" else f" {status_cell(r['status'])}"
        t.add_row(precision_label(r) + status, str(r["shape"]["batch"]),
                  _ms(m.get("ttft_ms")) if m.get("ttft_ms") else "",
                  f"{_ms(itl)}/{_ms(itl, 'p99')}" if itl else "",
                  f"{m['tokens_s_user']:,.0f}" if m.get("tokens_s_user") else "",
                  f"{dec['gbps']:,.0f}" if dec.get("gbps") else "",
                  f"{dec['bw_share']:.0%}" if dec.get("bw_share") else "",
                  f"{pre['tflops']:.3g}" if pre.get("tflops") else "",
                  f"{pre['mfu']:.0%}" if pre.get("mfu") else "",
                  compile_cell(m),
                  accuracy_cell(m), number.replace(",", " "))
    return t


def precision_label(r: dict) -> str:
    """The precision, and the kernel where it is not the default: 'int8wo · triton'."""
    kernel = r["shape"].get("kernel")
    return f"{r['precision']} · {kernel}" if kernel else r["precision"]


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


def headline_line(r: dict, bf16: dict | None) -> str:
    """One precision at batch 1: tokens/s, against bf16's and against what the bytes allow; the roofline's batch."""
    m = r["metrics"]
    tps, dec, peak = m["tokens_s_user"], m["decode"], m.get("peak") or {}
    ratio = f" ({vs_bf16(r, bf16)})" if bf16 and bf16 is not r else ""
    text = f"  {precision_label(r)}: {tps:,.0f} tokens/s{ratio}"
    if peak.get("bandwidth_gbs"):
        limit = peak["bandwidth_gbs"] * 1e9 / dec["bytes"]
        text += (f"; the bytes allow {limit:,.0f} ({dec['bytes'] / 1e9:.3g} GB a step at {peak['bandwidth_gbs']:,.0f} "
                 f"GB/s, {peak['bandwidth_source']}): {tps / limit:.0%} of the limit")
    roof = m.get("roofline_batch")
    return text + (f"; compute-bound from batch {roof:,.0f} on the roofline" if roof else "")


def vs_bf16(r: dict, bf16: dict) -> str:
    """'0.70x bf16' where the two inter-token latencies differ beyond their spread (tcperf.compare.claim), else 'vs
    bf16: n.s.' (on a CPU it printed 0.70x from latencies of IQR/median 36-43% whose spreads overlapped, issue 58)."""
    ok, _ = claim(*sorted((r, bf16), key=lambda x: x["median_ms"]))
    return f"{r['metrics']['tokens_s_user'] / bf16['metrics']['tokens_s_user']:.2f}x bf16" if ok else "vs bf16: n.s."


def print_headline(rows: list[dict], out) -> None:
    """Batch 1 of each precision against the byte limit (the plain loop, the first lengths)."""
    ones = [r for r in rows if r["op"] == "generate" and r["shape"]["batch"] == 1 and r["shape"]["loop"] == "plain"
            and r["status"] in ("ok", "wrong") and (r.get("metrics") or {}).get("tokens_s_user")]
    if not ones:
        return
    bf16 = next((r for r in ones if r["precision"] == "bf16"), None)
    s = ones[0]["shape"]
    out.print(f"Batch 1, {s['model']}, prompt {s['prompt']}, output {s['output']}:\n" +
              "\n".join(headline_line(r, bf16) for r in ones), highlight=False)
    steps = [(r, r["metrics"]["parts"]) for r in ones if "step_ms" in (r["metrics"].get("parts") or {})]
    if steps:
        out.print("Where the decode step goes (profiled; tcperf.generate.parts):\n" +
                  "\n".join(f"  {precision_label(r)}: {parts.sentence(p)}" for r, p in steps), highlight=False)


def print_accuracy(rows: list[dict], src: dict, out) -> None:
    """What the accuracy column means, once under the tables."""
    out.print(f"Kernel check: each quantized layer against its own dequantised weights, on every run "
              f"(tolerance {core_quant.KERNEL_TOLERANCE:g}; a failure is a bug).", highlight=False)
    if src.get("text"):
        a = next((r["metrics"]["accuracy"] for r in rows if (r.get("metrics") or {}).get("accuracy", {}).get("judged")),
                 None)
        about = a["text"] if a else f"{src['text']} (not judged in any row: see the notes)"
        out.print(f"Model accuracy: perplexity on {about} against bf16's, {quant.PERPLEXITY_BASIS}. Weights and "
                  f"tokenizer: {src['name']}.", highlight=False)
        return
    if src.get("saved_weights"):
        out.print(f"Model accuracy: not judged; `--text FILE` judges {src['name']}'s own weights on your text.",
                  highlight=False)
        return
    if src["kind"] != "trained":
        out.print(f"{sweep.NOT_JUDGED}: `tcperf generate {trained.NAME}` judges each precision's perplexity on "
                  f"a model tcperf trains once a machine; `tcperf generate FOLDER --text FILE` judges a local "
                  f"transformers folder's own weights on your text.", highlight=False)
        return
    t = src.get("trained") or {}
    out.print(f"Model accuracy: perplexity on held-out standard-library bytes against bf16's, {quant.PERPLEXITY_BASIS}."
              f" {trained.NAME}: {t.get('parameters', 0) / 1e6:.2f} M parameters, {t.get('steps')} steps trained "
              f"in {t.get('train_s', 0):.0f} s on this machine ({src.get('weights')}).", highlight=False)


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
