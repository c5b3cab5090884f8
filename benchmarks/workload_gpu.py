"""The advisor on streams it has never seen (issue 57): for each stream of the set, every relevant recipe as a plain
hand loop, alone and cold in a process of its own, and `tcperf advise FILE:factory --steps N --json` held against
the best of them.

The streams (STREAMS; factory files under benchmarks/streams/, each with a `factory()` at GPU size and a `tiny()`
at CPU size, random weights, seeded, nothing downloaded; `--list` gives their parameters and shapes):
    detector      CNN, dense detector: torchvision ResNet-50 FPN + RetinaNet heads, batch 8, each side 320..800 px
    classifier    CNN classifier: timm ConvNeXt-Tiny, batch 32, square sides 160..384 px (8 shapes)
    vit           vision transformer: timm ViT-B/16 at dynamic image size, batch 16, each side 224..384 px
    gru_asr       recurrent: bidirectional-GRU acoustic model, batch 16, 200..1600 frames, output 1/4 as long
    conv_seq      1-D convolutional sequence model (QuartzNet-style), batch 32, 256..2048 frames on the LAST dim
    deberta       encoder: transformers DeBERTa-v3-base-like token tagger, batch 16, lengths 32..512
    qwen_prefill  decoder prefill: transformers Qwen2-0.5B-like (GQA), batch 1, 64..4096 tokens
    gpt2_train    decoder training (--mode train): transformers GPT-2 small, batch 8, lengths 128..1024
    t5            encoder-decoder: transformers T5-small-like, batch 8, source 32..512 and target 8..128 apart
  and the two of examples/ (by name only, not in `all`): bert (examples/bert_stream.py), llama
  (examples/llama_prefill.py). --size tiny takes each file's `tiny` factory, for a smoke run with --device cpu.

The plain loops (benchmarks/plain_stream.py, one fresh process a recipe, empty TORCHINDUCTOR_CACHE_DIR and
TRITON_CACHE_DIR, PyTorch's defaults wherever the recipe says nothing: cuDNN autotuning off unless named): fp32's
outputs of steps 0..2 as the reference, two cold warm-up passes over the stream on the wall clock (the one-time
cost: both passes less two steady ones), the check against fp32 (padded recipes' outputs cut back to the real
positions; padding refused up front where an output dimension follows no input's), then --passes steady passes
between CUDA events (the step: median pass / steps, with min-max). Job cost at N steps = one-time + N x step.

Recipe labels are the advisor's (tcperf.recipes: "fp16", "amp_bf16", "bf16+cuda_graphs@pad64", "compile@dynamic")
plus two words of the plain loops only, "+channels_last" on any precision and "+cudnn_benchmark". A label becomes
the Hand its loop runs (hand_of: weights or autocast dtype, TF32, channels_last where the model has 2-D
convolutions, torch.compile's mode and dynamic, marking, padding, cuDNN autotuning, a fused optimizer), and the
advice's pick is matched to the stored loop with the same Hand, whatever its label ("compile" is amp_bf16 +
channels_last + compile). The default grid (grid()), from the stream's mode and whether it has 2-D convolutions:
    eager       every precision of the mode (infer: fp32 tf32 amp_fp16 amp_bf16 fp16 bf16; train: fp32 tf32
                amp_fp16 amp_bf16), and for convolutional models each but fp32 again with +channels_last
    compiled    the lead precision (--lead: bf16, amp_bf16 in training; +channels_last for convolutional models)
                in every WAYS: compile@static (only where the stream has no more shapes than Dynamo's recompile
                limit: past it a static compile runs the rest eagerly), compile@dynamic, compile@marked,
                cuda_graphs@dynamic, cuda_graphs@marked, cuda_graphs@pad64, cuda_graphs@pad128 (after one padded
                recipe is refused, the others are skipped with its reason)
    again       eager rows whose job is within REPEAT_WITHIN of the best at some N run in up to --repeat-eager
                processes, between the advice calls, their passes pooled (a host-bound step moves between
                processes: BERT's eager 5.4-9.5 ms a batch on one H100 within the hour, 2026-11-26)
    the pick    a stored advice's pick with no loop of its Hand is added to the stream's work
A warm-up stops past --cap seconds, or earlier past BEST_SLACK x the best job stored at the largest N (it cannot
come within the target then): "> X", a lower bound of its job.

Targets (with --advise: `python -m tcperf advise FILE:factory --steps N --json [--mode train]`, each N in its own
process with empty compile caches), per stream and N:
    ratio       the pick's job (its plain loop's one-time + N x step) <= BEST_SLACK (1.05) x the best plain loop's
    stated      the advice's own one-time cost and step time for its pick within STATED_SLACK (15%) of the plain loop
                of the same recipe (a one-time cost within ONE_TIME_FLOOR_S of it counts as within)

    python benchmarks/workload_gpu.py --list [--size full]                     # the streams, parameters, shapes
    python benchmarks/workload_gpu.py --streams detector,gru_asr [--recipes LABELS] [--advise [100,10000]]
        [--job-steps 100,10000] [--passes 5] [--cap 150] [--deadline S] [--again] [--out DIR]
    python benchmarks/workload_gpu.py --plan                                    # calls of <= ~9 min on one GPU
    python benchmarks/workload_gpu.py --streams gru_asr,conv_seq --size tiny --device cpu --stream 6 --passes 2 \\
        --recipes fp32,bf16@pad64 --out /tmp/wl                                # CPU smoke run

Rows of the same stream, size, device, GPU, mode and stream length merge into OUT/workload_gpu.json across calls
(rows measured otherwise are left alone, not mixed: another --out, or --again to start afresh); a row or an advice
stored already is not run again (but for errors, tried twice), so the same command run again goes on where the
last one stopped, and --deadline S (nothing starts after S seconds) keeps a call short; --again measures again what
the call asks. Each call prints the environment (GPU, clocks, power limit, driver, CUDA, cuDNN, torch, triton,
transformers, timm, torchvision, commit, other processes on the GPU), a table a stream, the advice against the
plain loops, the targets, a summary of every stream and what is left; writes OUT/workload_gpu.json and .txt; the
children's stderr goes to OUT/logs/. Exits 1 if a target fails.

Time (guesses, EST_S, until a GPU run replaces them: not yet run on a GPU at the commit that made this set): an
eager recipe ~50 s a process (imports, fp32's reference, 2 warm-up + 1 check + 5 steady passes), a compiled one
~150 s, an advise call ~400 s; a stream's grid 20-27 min, the set ~5-6 h of one H100 in ~60 calls of <= 9 min
(--plan prints them).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(1, str(ROOT))     # this checkout's tcperf before an installed one (another worktree's, say)

import plain_stream  # noqa: E402 - beside this script: the plain loop a child process runs
from plain_stream import Hand  # noqa: E402


@dataclass(frozen=True)
class Stream:
    name: str
    file: str               # the factory file, from the repository's root
    mode: str               # infer | train: the advisor's --mode
    conv: bool              # has 2-D convolutions (channels_last applies; tcperf.engine.has_conv2d decides alike)
    family: str
    own: bool = True        # one of the set (benchmarks/streams/), not an example

    def target(self, size: str) -> str:
        return f"{self.file}:{FACTORY[size]}"


STREAMS = {s.name: s for s in (
    Stream("detector", "benchmarks/streams/detector.py", "infer", True, "CNN, dense detector (torchvision)"),
    Stream("classifier", "benchmarks/streams/classifier.py", "infer", True, "CNN classifier (timm ConvNeXt-T)"),
    Stream("vit", "benchmarks/streams/vit.py", "infer", True, "vision transformer (timm ViT-B/16)"),
    Stream("gru_asr", "benchmarks/streams/gru_asr.py", "infer", False, "recurrent, output shorter than input"),
    Stream("conv_seq", "benchmarks/streams/conv_seq.py", "infer", False, "1-D convolutional sequence model"),
    Stream("deberta", "benchmarks/streams/deberta.py", "infer", False, "encoder (transformers DeBERTa-v3)"),
    Stream("qwen_prefill", "benchmarks/streams/qwen_prefill.py", "infer", False, "decoder prefill (Qwen2)"),
    Stream("gpt2_train", "benchmarks/streams/gpt2_train.py", "train", False, "decoder training (GPT-2)"),
    Stream("t5", "benchmarks/streams/t5.py", "infer", False, "encoder-decoder (transformers T5)"),
    Stream("bert", "examples/bert_stream.py", "infer", False, "encoder (examples/, BERT-base)", own=False),
    Stream("llama", "examples/llama_prefill.py", "infer", False, "decoder prefill (examples/, Llama)", own=False),
)}
FACTORY = {"full": "factory", "tiny": "tiny"}

EAGER = {"infer": ("fp32", "tf32", "amp_fp16", "amp_bf16", "fp16", "bf16"),
         "train": ("fp32", "tf32", "amp_fp16", "amp_bf16")}
LEAD = {"infer": "bf16", "train": "amp_bf16"}        # --lead's default: the compiled ways' precision
WAYS = ("compile@static", "compile@dynamic", "compile@marked", "cuda_graphs@dynamic", "cuda_graphs@marked",
        "cuda_graphs@pad64", "cuda_graphs@pad128")
OWN_WORDS = ("channels_last", "cudnn_benchmark")      # plain-loop words a label may carry beyond tcperf's
UNCOVERED = ("fp8", "int8", "step_graph", "autotune", "chunked_ce", "fastest_batch", "transform")

TOLERANCE = 0.05          # ||out - ref|| / ||ref|| (a loss's, in training) a recipe may reach
BEST_SLACK = 1.05         # the pick's job <= this x the best plain loop's
STATED_SLACK = 0.15       # the advice's one-time and step within this share of the plain loop's
ONE_TIME_FLOOR_S = 1.0    # one-time costs this close count as within (a process start's noise)
REPEAT_WITHIN = 1.25      # eager rows within this of the best job at some N run in more processes
CHILD_MARGIN_S = 300      # a child's seconds beyond its cap (imports, fp32 reference, check, steady passes)
PLAN_DEADLINE_S = 330    # --plan's calls: none starts a recipe later, so a call ends within ~9 minutes
EST_S = {"eager": 50, "compiled": 150, "advise": 400}   # --plan's guesses, seconds a row or an advise call on one
#                         H100 (2026-11-25/26 by hand: ~25 s a process besides its warm-up; warm-ups 5 s eager to
#                         ~100 s for Llama's pad128; advise 311-362 s on issue 57's streams)


# --- labels -> the loops they run -------------------------------------------------------------------------------------
def recipe_of(label: str):
    """tcperf's Recipe for a label and the plain-loop words it carried ({'channels_last', ...})."""
    from tcperf import recipes
    head, at, shapes = label.partition("@")
    words = head.split("+")
    own = {w for w in words[1:] if w in OWN_WORDS}
    rest = "+".join(w for i, w in enumerate(words) if i == 0 or w not in own) + at + shapes
    return recipes.get(rest), own


def hand_of(label: str, conv: bool, mode: str) -> Hand:
    """The Hand a label runs on a model with (conv) or without 2-D convolutions in `mode`; KeyError where the
    plain loops do not cover it (fp8, int8, whole-step graphs ...) or the mode does not take it."""
    from tcperf import precision
    try:
        r, own = recipe_of(label)
    except Exception as e:      # noqa: BLE001 - tcperf's UserError: not a recipe
        raise KeyError(f"{label}: {e}") from None
    left_out = [name for name in UNCOVERED if getattr(r, name, None)]
    if left_out or mode not in r.modes:
        raise KeyError(f"no plain loop for {label}" + (f" ({', '.join(left_out)})" if left_out else f" in {mode}"))
    p = precision.get(r.precision)
    return Hand(weights=r.weights, autocast=str(p.autocast).replace("torch.", "") if p.autocast else None,
                tf32=p.tf32, channels_last=conv and (r.channels_last or "channels_last" in own),
                compile=r.compile, graphs=r.cuda_graphs, shapes=r.shapes,
                cudnn_benchmark="cudnn_benchmark" in own or bool(getattr(r, "cudnn_benchmark", False)),  # where
                # tcperf's recipes come to name cuDNN autotuning (issue 57), a field of that name is read too
                fused=mode == "train" and r.fused)


def grid(stream: Stream, lead: str | None = None) -> list[str]:
    """The stream's default recipes: every precision eager (+channels_last for convolutional models), then the lead
    precision in every way of meeting varying shapes."""
    cl = "+channels_last"
    eager = list(EAGER[stream.mode]) + ([p + cl for p in EAGER[stream.mode][1:]] if stream.conv else [])
    lead = (lead or LEAD[stream.mode]) + (cl if stream.conv else "")
    return eager + [f"{lead}+{way}" for way in WAYS]


def row_of(label: str, rows: dict, stream: Stream) -> str | None:
    """The stored row that runs the loop `label` names (its own, or another label's of the same Hand)."""
    if label in rows:
        return label
    try:
        hand = dataclasses.asdict(hand_of(label, stream.conv, stream.mode))
    except KeyError:
        return None
    return next((name for name, row in rows.items() if row.get("hand") == hand), None)


# --- a plain loop in its own process ----------------------------------------------------------------------------------
def fresh_caches(folder: str) -> dict:
    """The environment of a child whose compiles start cold: empty inductor and Triton caches of its own; the
    tcperf this process imported first on its path."""
    import tcperf
    path = os.pathsep.join(p for p in (str(Path(tcperf.__file__).resolve().parents[1]),
                                       os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "TORCHINDUCTOR_CACHE_DIR": f"{folder}/inductor", "TRITON_CACHE_DIR": f"{folder}/triton",
            "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}


def run_process(cmd: list[str], child_env: dict, timeout: float, log: Path, stdout=None) -> tuple[int | str, float]:
    """Run cmd in its own process group (inductor's compile workers with it); kill the group past timeout."""
    t0 = time.perf_counter()
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, env=child_env, cwd=ROOT, stdout=stdout, stderr=err, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = f"killed after {timeout:.0f} s"
    return rc, time.perf_counter() - t0


def file_name(label: str) -> str:
    """A recipe label as a plain file name: bf16+compile@pad64 -> bf16_compile-pad64."""
    return label.replace("+", "_").replace("@", "-")


def tail(log: Path, lines: int = 8) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""


def child_cmd(stream: Stream, label: str, hand: Hand, cap: float, args, result: Path) -> list[str]:
    return [sys.executable, str(HERE / "plain_stream.py"), "--target", stream.target(args.size), "--mode",
            stream.mode, "--hand", json.dumps(dataclasses.asdict(hand)), "--label", label, "--device", args.device,
            "--stream", str(args.stream), "--passes", str(args.passes), "--cap", str(cap), "--tolerance",
            str(TOLERANCE), "--result", str(result)] + (["--profiler-first"] if args.profiler_first else [])


def run_recipe(stream: Stream, label: str, cap: float, args) -> dict:
    hand = hand_of(label, stream.conv, stream.mode)
    log = Path(args.out) / "logs" / f"{stream.name}.{file_name(label)}.log"
    with tempfile.TemporaryDirectory(prefix="tcperf_wl_") as folder:
        result = Path(folder) / "result.json"
        rc, wall = run_process(child_cmd(stream, label, hand, cap, args, result), fresh_caches(folder),
                               cap + CHILD_MARGIN_S, log, stdout=None)
        row = json.loads(result.read_text()) if result.exists() else {"label": label}
    row.update(hand=dataclasses.asdict(hand), process_s=wall, log=str(log), cap_s=cap)
    if log.stat().st_size == 0:
        log.unlink()                    # a quiet child leaves no log behind
        row["log"] = None
    if rc != 0:
        row.setdefault("error", f"exit {rc}: " + tail(log, 3).replace("\n", " | ")[-300:])
        print(f"  {label}: ERROR {row['error']} (log: {log})", flush=True)
    return row


def pooled(rows: list[dict]) -> dict:
    """One recipe run in several processes as one row: every steady pass pooled (the median over all), the
    median process's warm-up, each process's median pass kept in "process_ms" (what moves between processes)."""
    if len(rows) == 1:
        return rows[0]
    good = [r for r in rows if r.get("pass_ms") and not r.get("capped") and "error" not in r]
    if not good:
        return rows[-1]
    mid = sorted(good, key=lambda r: r["warm_s"])[len(good) // 2]
    return {**mid, "pass_ms": [t for r in good for t in r["pass_ms"]],
            "process_ms": [statistics.median(r["pass_ms"]) for r in good], "processes": len(good)}


# --- the advice -------------------------------------------------------------------------------------------------------
def parse_advice(stdout: str) -> dict:
    """The advisor's JSON (the first JSON object on stdout)."""
    start = stdout.find("{")
    if start < 0:
        raise ValueError("no JSON on stdout")
    return json.JSONDecoder().raw_decode(stdout[start:])[0]


def stated(advice: dict, pick: str | None) -> dict:
    """What the advice states of its pick: one-time seconds and ms a step (its job rows, else its stream rows)."""
    for row in (advice.get("verdict", {}).get("job") or {}).get("rows") or []:
        if row.get("recipe") == pick:
            return {"one_time_s": row.get("one_time_s"), "step_ms": row.get("step_ms")}
    for r in advice.get("stream") or []:
        if r.get("recipe") == pick and r.get("timing"):
            return {"one_time_s": (r.get("stream") or {}).get("one_time_s"), "step_ms": r["timing"].get("mean_ms")}
    return {}


def advise_cmd(stream: Stream, n: int, args) -> list[str]:
    return [sys.executable, "-m", "tcperf", "advise", stream.target(args.size), "--steps", str(n), "--json",
            "--device", args.device, *(["--mode", "train"] if stream.mode == "train" else []),
            *args.advise_args.split()]


def run_advise(stream: Stream, n: int, args) -> dict:
    cmd = advise_cmd(stream, n, args)
    log = Path(args.out) / "logs" / f"{stream.name}.advise{n}.log"
    print(f"== {stream.name}: {' '.join(cmd[1:])}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tcperf_wl_adv_") as folder, tempfile.TemporaryFile("w+") as out:
        rc, wall = run_process(cmd, fresh_caches(folder), args.advise_timeout, log, stdout=out)
        out.seek(0)
        text = out.read()
    log.with_suffix(".json").write_text(text)          # the advice itself, for reading its phases and candidates
    row = {"steps": n, "command": " ".join(cmd[1:]), "wall_s": wall, "log": str(log)}
    try:
        advice = parse_advice(text)
        pick = advice.get("verdict", {}).get("recommended")
        row.update(recommended=pick, stated=stated(advice, pick), total_s=advice.get("phases", {}).get("total_s"),
                   tried={r["recipe"]: r.get("status") for r in advice.get("stream") or []},
                   job_sentence=advice.get("verdict", {}).get("job_sentence"))
    except ValueError as e:
        row["error"] = f"exit {rc}: {e}; " + tail(log, 3).replace("\n", " | ")[-300:]
    print(f"== {stream.name} N={n}: pick {row.get('recommended')} in {wall:.0f} s {row.get('error', '')}", flush=True)
    return row


# --- costs and targets ------------------------------------------------------------------------------------------------
def costs(row: dict, steps: list[int], length: int) -> dict:
    """One-time seconds, ms a step and job seconds at each N (capped: a lower bound, valid for N >= length)."""
    if row.get("capped"):
        return {"lower": True, "job": {n: row["warm_s"] if n >= length else None for n in steps}}
    if not row.get("pass_ms"):
        return {}
    pass_s = statistics.median(row["pass_ms"]) / 1e3
    one_time = row["warm_s"] - plain_stream.WARM_PASSES * pass_s
    return {"lower": False, "ms": pass_s * 1e3 / length, "one_time": one_time,
            "spread": (max(row["pass_ms"]) - min(row["pass_ms"])) / (pass_s * 1e3),
            "job": {n: one_time + n * pass_s / length for n in steps}}


def best_plain(rows: dict, cost: dict, n: int) -> str | None:
    ok = [r for r, row in rows.items() if row.get("passes") and cost[r].get("job") and not cost[r]["lower"]]
    return min(ok, key=lambda r: cost[r]["job"][n], default=None)


def within(stated_value, plain_value, floor: float = 0.0) -> bool | None:
    if stated_value is None or plain_value is None:
        return None
    return abs(stated_value - plain_value) <= max(STATED_SLACK * abs(plain_value), floor)


def judge(stream: Stream, n: int, adv: dict, rows: dict, cost: dict) -> dict:
    """One advice against the plain loops: the pick's job, the best's, their ratio, the stated figures against the
    pick's own loop, and the PASS / FAIL / ? of each target."""
    pick = adv.get("recommended")
    out = {"n": n, "pick": pick, "advise_wall_s": adv.get("wall_s"), "advise_total_s": adv.get("total_s"),
           "error": adv.get("error")}
    best = best_plain(rows, cost, n)
    out.update(best=best, best_job_s=cost[best]["job"][n] if best else None)
    out["capped_below"] = [r for r, c in cost.items() if c.get("lower") and out["best_job_s"]
                           and (c["job"].get(n) or math.inf) < out["best_job_s"]]   # unfinished, might be faster
    loop = row_of(pick, rows, stream) if pick else None
    c = cost.get(loop, {}) if loop else {}
    out.update(loop=loop, pick_job_s=(c.get("job") or {}).get(n), pick_lower=bool(c.get("lower")),
               plain_one_time_s=c.get("one_time"), plain_ms=c.get("ms"), **{f"stated_{k}": v for k, v in
                                                                             (adv.get("stated") or {}).items()})
    out["checks"] = checks(out, rows.get(loop, {}))
    return out


def checks(a: dict, loop_row: dict) -> list[tuple[str, bool | None]]:
    """(what, True | False | None: not known) for the three targets of one advice."""
    if a["error"] or not a["pick"]:
        return [(f"the advice: {a['error'] or 'it recommended nothing'}", False)]
    if a["loop"] is None:
        return [(f"no plain loop of {a['pick']} stored: it is added to this stream's work", None)]
    if loop_row.get("passes") is False:
        return [(f"the pick's plain loop fails the check against fp32 ({loop_row.get('rel_error'):.3g})", False)]
    if loop_row.get("error"):
        return [(f"the pick's plain loop failed ({loop_row['error'][:120]}): run it again", None)]
    job, best = a["pick_job_s"], a["best_job_s"]
    ratio = None if job is None or best is None else job <= BEST_SLACK * best
    if a["pick_lower"] and ratio:          # a capped pick: its job is only known to be above `job`
        ratio = None
    unsure = f"; unfinished, might be faster: {', '.join(a['capped_below'])}" if a["capped_below"] else ""
    return [(f"pick's job <= {BEST_SLACK} x the best plain loop's ({a['best']}{unsure})", ratio),
            (f"stated one-time within {STATED_SLACK:.0%} (or {ONE_TIME_FLOOR_S:g} s) of its plain loop",
             within(a.get("stated_one_time_s"), a["plain_one_time_s"], ONE_TIME_FLOOR_S)),
            (f"stated step within {STATED_SLACK:.0%} of its plain loop",
             within(a.get("stated_step_ms"), a["plain_ms"]))]


def verdict(ok: bool | None) -> str:
    return {True: "PASS", False: "FAIL", None: "?"}[ok]


def summarize(store: dict, steps: list[int]) -> dict:
    """Per stream: every stored row's costs and every stored advice judged."""
    out = {}
    for name, data in store["streams"].items():
        if name not in STREAMS:
            continue
        stream, length = STREAMS[name], data["settings"]["stream"]
        ns = sorted({*steps, *map(int, data["advice"])})
        cost = {r: costs(row, ns, length) for r, row in data["rows"].items()}
        out[name] = {"steps": ns, "costs": cost, "advice": [judge(stream, int(n), adv, data["rows"], cost)
                                                            for n, adv in sorted(data["advice"].items(),
                                                                                 key=lambda kv: int(kv[0]))]}
    return out


# --- output -----------------------------------------------------------------------------------------------------------
def _f(x, fmt="{:.4g}") -> str:
    return "" if x is None else fmt.format(x)


def check_cell(row: dict) -> str:
    if row.get("refused"):
        return row["refused"][:60]
    if row.get("error"):
        return row["error"][:60]
    if row.get("rel_error") is None:
        return ""
    return f"{row['rel_error']:.3g} {'ok' if row['passes'] else 'FAIL'}"


def steady_cell(row: dict, length: int) -> str:
    ms = row.get("pass_ms")
    if not ms:
        return ""
    mid = statistics.median(ms)
    cell = f"{mid / length:.4g} ({min(ms) / length:.4g}-{max(ms) / length:.4g})"
    cell += " UNSTABLE" if (max(ms) - min(ms)) / mid > 0.10 else ""     # practice 9: flagged loudly
    if row.get("process_ms"):
        cell += f"; {len(row['process_ms'])} processes: " + ", ".join(f"{t / length:.3g}" for t in row["process_ms"])
    return cell


def first_cell(row: dict) -> str:
    if row.get("capped"):
        return f"> cap {row.get('cap_s', 0):.0f} ({row['warm_s']:.0f} s, {row['steps_done']} steps)"
    return " + ".join(f"{t:.1f}" for t in row.get("warm_pass_s", []))


def recipe_cells(label: str, row: dict, cost: dict, steps: list[int], length: int) -> list[str]:
    c = cost.get(label, {})
    lt = ">" if c.get("lower") else ""
    jobs = [lt + _f((c.get("job") or {}).get(n), "{:.1f}") if (c.get("job") or {}).get(n) is not None else ""
            for n in steps]
    compiles = "" if row.get("compiles") is None else str(row["compiles"]) + (" limit" if row.get("limit_hit") else "")
    return [label, check_cell(row), first_cell(row), compiles, _f(row.get("shapes"), "{}"),
            steady_cell(row, length), _f(c.get("one_time"), "{:.1f}"), *jobs]


def stream_table(name: str, data: dict, cost: dict, steps: list[int]):
    from rich.table import Table
    s, stream = data["settings"], STREAMS[name]
    t = Table(title=f"{name}: {stream.target(s['size'])} ({stream.mode}) on {s['device']}, {s['stream']} steps; "
                    f"tolerance {TOLERANCE}; job s = one-time + N x step")
    for col in ("recipe", "check (rel. err)", "warm-up s (1st + 2nd)", "compiles", "shapes", "ms a step (min-max)",
                "one-time s", *(f"job s @{n}" for n in steps)):
        t.add_column(col)
    for label, row in data["rows"].items():
        t.add_row(*recipe_cells(label, row, cost, steps, s["stream"]))
    return t


def advice_table(name: str, judged: list[dict]):
    from rich.table import Table
    t = Table(title=f"{name}: the advice against the plain loops")
    for col in ("N", "pick (its loop)", "pick job s", "best plain loop", "best job s", "pick/best",
                "one-time s stated / plain", "ms a step stated / plain", "advise wall s"):
        t.add_column(col)
    for a in judged:
        lt = ">" if a["pick_lower"] else ""
        ratio = a["pick_job_s"] / a["best_job_s"] if a["pick_job_s"] and a["best_job_s"] else None
        t.add_row(str(a["n"]), f"{a['pick'] or a['error'] or ''}" + (f" ({a['loop']})" if a["loop"] not in
                                                                     (None, a["pick"]) else ""),
                  lt + _f(a["pick_job_s"], "{:.1f}"), str(a["best"] or ""), _f(a["best_job_s"], "{:.1f}"),
                  lt + _f(ratio, "{:.3f}"),
                  f"{_f(a.get('stated_one_time_s'), '{:.1f}')} / {_f(a['plain_one_time_s'], '{:.1f}')}",
                  f"{_f(a.get('stated_step_ms'), '{:.3g}')} / {_f(a['plain_ms'], '{:.3g}')}",
                  _f(a["advise_wall_s"], "{:.0f}"))
    return t


def summary_table(summary: dict):
    from rich.table import Table
    t = Table(title="Every stream: the advice's pick against the best plain loop")
    for col in ("stream", "N", "pick", "pick/best", "one-time stated/plain", "step stated/plain", "targets"):
        t.add_column(col)
    for name, s in summary.items():
        for a in s["advice"]:
            ratio = a["pick_job_s"] / a["best_job_s"] if a["pick_job_s"] and a["best_job_s"] else None
            one = a.get("stated_one_time_s") / a["plain_one_time_s"] if a.get("stated_one_time_s") is not None \
                and a["plain_one_time_s"] else None
            step = a.get("stated_step_ms") / a["plain_ms"] if a.get("stated_step_ms") and a["plain_ms"] else None
            t.add_row(name, str(a["n"]), str(a["pick"]), _f(ratio, "{:.3f}"), _f(one, "{:.2f}"), _f(step, "{:.2f}"),
                      " ".join(verdict(ok) for _, ok in a["checks"]))
    return t


def environment(device: str) -> dict:
    """tcperf.env's facts, read in a child process on a GPU: a CUDA context held by this parent would sit beside
    every plain loop (idle contexts slowed a host-bound eager loop by ~8% on an H100, tcperf.advisor.streams)."""
    from tcperf import env as tcenv
    facts = tcenv.collect(device) if not device.startswith("cuda") else _gpu_facts(device)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True)
    others = tcenv.other_gpu_processes(0) if device.startswith("cuda") and _cuda() else None
    return {**facts, "versions": {n: _version(n) for n in ("transformers", "timm", "torchvision")},
            "other_gpu_processes": others, "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "commit": commit.stdout.strip() + (" (modified)" if dirty.stdout.strip() else "")}


def _gpu_facts(device: str) -> dict:
    code = f"import json; from tcperf import env; print(json.dumps(env.collect({device!r}), default=str))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env=fresh_caches(tempfile.gettempdir()))
    return json.loads(done.stdout) if done.returncode == 0 else {"device": device, "error": done.stderr[-300:]}


def env_line(e: dict) -> str:
    g, lib = e.get("gpu") or {}, e.get("libraries") or {}
    gpu = (f"{g.get('name')} ({g.get('sm_count')} SMs, {g.get('sm_clock_max_mhz')} MHz max, "
           f"{g.get('power_limit_w')} W, driver {g.get('driver')})" if g else e.get("device"))
    libs = " · ".join(f"{k} {v}" for k, v in {**{k: lib.get(k) for k in ("torch", "cuda", "cudnn", "triton")},
                                             **e.get("versions", {})}.items() if v)
    busy = f" · other GPU processes: {e['other_gpu_processes']}" if e.get("other_gpu_processes") else ""
    return f"{gpu} · {libs} · {e['date']} · commit {e['commit']}{busy}"


def _cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def report(store: dict, summary: dict, left: list[str], path: Path) -> None:
    from rich.console import Console
    console = Console(width=240, record=True)
    console.print(env_line(store["env"]), markup=False)
    for name, data in store["streams"].items():
        if name not in summary:
            continue
        s = summary[name]
        console.print(stream_table(name, data, s["costs"], s["steps"]))
        for label, row in data["rows"].items():
            if row.get("refused") or row.get("error"):
                console.print(f"  {label}: {row.get('refused') or row['error']}", markup=False)
        if s["advice"]:
            console.print(advice_table(name, s["advice"]))
            for a in s["advice"]:
                for what, ok in a["checks"]:
                    console.print(f"{verdict(ok):4} {name} N={a['n']}: {what}", markup=False)
    if any(s["advice"] for s in summary.values()):
        console.print(summary_table(summary))
    for line in left:
        console.print(line, markup=False)
    path.write_text(console.export_text())


# --- the store of rows, merged across calls ---------------------------------------------------------------------------
def load_store(path: Path, env_now: dict) -> dict:
    """The stored rows of earlier calls, this call's environment, and every call's date, commit, GPU and arguments."""
    old = json.loads(path.read_text()) if path.exists() else {}
    call = {"date": env_now["date"], "commit": env_now["commit"], "gpu": (env_now.get("gpu") or {}).get("name"),
            "argv": sys.argv[1:]}
    return {"env": env_now, "streams": old.get("streams", {}), "calls": [*old.get("calls", []), call]}


def stream_data(store: dict, stream: Stream, args) -> dict | None:
    """The stream's stored rows when they were measured the same way (size, device, GPU, stream length, mode), a
    fresh entry where none are stored or --again asks; None (the stream left alone, with a line saying why) where
    rows measured another way are stored: merged, they would compare one machine's loops with another's advice."""
    settings = {"size": args.size, "device": args.device, "gpu": store["env"].get("gpu", {}).get("name"),
                "stream": args.stream, "mode": stream.mode}
    data = store["streams"].get(stream.name)
    if data and data["settings"] != settings and not args.again:
        print(f"== {stream.name}: its stored rows were measured with {data['settings']}, this call is {settings}: "
              f"left alone (give another --out, or --again to start it afresh)", flush=True)
        return None
    if not data or data["settings"] != settings:
        store["streams"][stream.name] = {"settings": settings, "rows": {}, "advice": {}}
    store["streams"][stream.name].setdefault("runs", {})
    return store["streams"][stream.name]


def save(store: dict, summary: dict, path: Path) -> None:
    """The store, written whole to a temporary file and renamed over the old: a call killed mid-write keeps it."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({**store, "summary": summary, "targets": {
        "tolerance": TOLERANCE, "best_slack": BEST_SLACK, "stated_slack": STATED_SLACK,
        "one_time_floor_s": ONE_TIME_FLOOR_S}}, indent=1, default=str))
    os.replace(tmp, path)


# --- what a stream has left to do -------------------------------------------------------------------------------------
def done(row: dict | None) -> bool:
    """Measured (steady passes), capped or refused; an error is done only after a second try."""
    if not row:
        return False
    return bool(row.get("pass_ms") or row.get("capped") or row.get("refused")) or row.get("tries", 1) >= 2


def skip_reason(label: str, stream: Stream, data: dict, named: bool) -> str | None:
    """Why the default grid leaves a recipe out on this stream, from what its rows showed (None: run it)."""
    rows = data["rows"]
    facts = next((r for r in rows.values() if r.get("distinct")), None)
    hand = hand_of(label, stream.conv, stream.mode)
    if named:
        return None
    if hand.pad and not stream.mode == "train":
        refused = next((r["refused"] for r in rows.values() if r.get("refused")), None)
        if refused:
            return refused
    if hand.compile and hand.shapes == "static" and facts and facts["distinct"] > facts["recompile_limit"]:
        return (f"{facts['distinct']} distinct shapes > Dynamo's recompile limit ({facts['recompile_limit']}): a "
                f"static compile runs the rest eagerly; name it in --recipes to run it anyway")
    return None


def contending(data: dict, steps: list[int]) -> list[str]:
    """Eager rows whose job is within REPEAT_WITHIN of the best plain loop's at some N."""
    length = data["settings"]["stream"]
    cost = {r: costs(row, steps, length) for r, row in data["rows"].items()}
    out = []
    for label, row in data["rows"].items():
        if row.get("hand", {}).get("compile") or not cost[label].get("job") or not row.get("passes"):
            continue
        bests = {n: cost[b]["job"][n] for n in steps if (b := best_plain(data["rows"], cost, n))}
        if any(cost[label]["job"][n] <= REPEAT_WITHIN * best for n, best in bests.items()):
            out.append(label)
    return out


def next_work(stream: Stream, data: dict, args, tried: set) -> tuple[str, object] | None:
    """The stream's next piece of work this call: ("recipe", label) | ("again", label) | ("advise", N), or None.
    In order: the recipes asked for (each stream's grid by default) not stored yet, the picks' loops, eager rows
    again (up to one process more than the advice calls stored, at most --repeat-eager), the advice."""
    asked = args.recipes_for(stream)
    labels = [(label, args.named) for label in asked] + [(pick, True) for pick in picks_without_loop(stream, data)]
    for label, named in labels if asked else []:
        stored = data["rows"].get(row_of(label, data["rows"], stream))
        if ("recipe", label) not in tried and (not done(stored) or args.again and label in asked):
            if not skip_reason(label, stream, data, named):
                return "recipe", label
    wanted = min(args.repeat_eager, 1 + sum(1 for a in data["advice"].values() if a.get("recommended")))
    for label in contending(data, args.steps) if asked else []:
        if ("again", label) not in tried and data["rows"][label].get("processes", 1) < wanted:
            return "again", label
    for n in args.advise:
        stored = data["advice"].get(str(n), {})
        finished = stored.get("recommended") or stored.get("tries", 0) >= 2
        if ("advise", n) not in tried and (args.again or not finished):
            return "advise", n
    return None


def picks_without_loop(stream: Stream, data: dict) -> list[str]:
    picks = [a.get("recommended") for a in data["advice"].values() if a.get("recommended")]
    out = []
    for pick in dict.fromkeys(picks):
        try:
            hand_of(pick, stream.conv, stream.mode)
        except KeyError:
            continue
        if row_of(pick, data["rows"], stream) is None:
            out.append(pick)
    return out


def cap_for(data: dict, args) -> float:
    """--cap, or less: BEST_SLACK x the best job stored at the largest N (a warm-up past it cannot come within
    the target)."""
    n = max(args.steps)
    length = data["settings"]["stream"]
    cost = {r: costs(row, [n], length) for r, row in data["rows"].items()}
    best = best_plain(data["rows"], cost, n)
    return min(args.cap, BEST_SLACK * cost[best]["job"][n]) if best else args.cap


# --- main -------------------------------------------------------------------------------------------------------------
def run_stream(stream: Stream, store: dict, args, path: Path) -> None:
    data, tried = stream_data(store, stream, args), set()
    while data is not None and (work := next_work(stream, data, args, tried)) is not None:
        tried.add(work)
        kind, what = work
        if too_late(args, f"{stream.name} {what}"):
            return
        if kind == "advise":
            tries = data["advice"].get(str(what), {}).get("tries", 0) + 1
            data["advice"][str(what)] = {**run_advise(stream, what, args), "tries": tries}
        else:
            measure(stream, data, what, args, fresh=kind == "recipe" and args.again)
        save(store, summarize(store, args.steps), path)


def measure(stream: Stream, data: dict, label: str, args, fresh: bool = False) -> None:
    """The recipe in one more process (fresh: its earlier processes dropped), its row pooled over them."""
    if fresh:
        data["runs"][label] = []
    runs = data["runs"].setdefault(label, [])
    cap = cap_for(data, args)
    print(f"== {stream.name} {label}" + (f" (process {len(runs) + 1})" if runs else "") +
          (f", warm-up cap {cap:.0f} s" if cap < args.cap else ""), flush=True)
    row = run_recipe(stream, label, cap, args)
    row["tries"] = 1 + sum(1 for r in runs if r.get("error"))
    runs.append(row)
    data["rows"][label] = pooled([r for r in runs if "error" not in r] or runs[-1:])


def too_late(args, what: str) -> bool:
    if args.deadline_at is not None and time.perf_counter() > args.deadline_at:
        print(f"== not reached before --deadline: {what}", flush=True)
        return True
    return False


def left_lines(store: dict, args) -> list[str]:
    """What the streams of this call have left (run the same command again to go on)."""
    lines = []
    for stream in args.streams:
        data, left = store["streams"].get(stream.name), []
        if data is None or data["settings"]["size"] != args.size:
            continue
        while (work := next_work(stream, data, args, set(left))) is not None:
            left.append(work)
        if left:
            lines.append(f"left on {stream.name}: " + ", ".join(f"{k} {w}" for k, w in left))
    return lines or ["nothing left of what this call asks (the same command again runs nothing)"]


def list_streams(args) -> int:
    """--list: each stream's family, file, parameters and shapes at --size (each factory built on the CPU, its
    stream drawn a step at a time: shapes kept, tensors dropped)."""
    import torch
    for stream in STREAMS.values():
        made = plain_stream.load_factory(str(ROOT / stream.target(args.size)))
        params = sum(p.numel() for p in made["model"].parameters())
        shapes = []
        for s in range(args.stream):
            torch.manual_seed(s)
            step = plain_stream.split(made["workload"](s))
            shapes.append({k: tuple(v.shape) for k, v in plain_stream.named(step).items()})
        sizes = {(k, d): sorted({x[k][d] for x in shapes}) for k in shapes[0] for d in range(len(shapes[0][k]))}
        ranges = ", ".join(f"{k} dim {d} {v[0]}..{v[-1]}" for (k, d), v in sizes.items() if len(v) > 1)
        distinct = len({tuple(x.values()) for x in shapes})
        print(f"{stream.name:13} {stream.mode:5} {millions(params):>7}  {stream.family}; {stream.file}\n"
              f"{'':14}step 0 {shapes[0]}; varying: {ranges}; {distinct} shapes in {args.stream} steps", flush=True)
        del made
    return 0


def millions(params: int) -> str:
    return f"{params / 1e6:.1f}M" if params >= 1e6 else f"{params / 1e3:.0f}k"


def plan(args) -> int:
    """--plan: the calls that take the streams asked for through all their work on one GPU, each under ~9 minutes:
    a call of recipes starts none after --deadline (PLAN_DEADLINE_S unless given), and the last it started ends
    within a compiled recipe's time; an advise call runs alone (up to --advise-timeout). Counted from EST_S: any
    line may be run again, and one that finds nothing left says so and ends in seconds."""
    deadline = args.deadline or PLAN_DEADLINE_S
    base = f"python benchmarks/workload_gpu.py --out {args.out}" + (f" --lead {args.lead}" if args.lead else "")
    store = f"{args.out}/workload_gpu.json"
    print(f"# Run each line in a call of its own (<= ~9 min), from a checkout of this code, on one kind of GPU (rows\n"
          f"# of another GPU are kept apart), again while its output ends in 'left on STREAM: ...'. On a machine that\n"
          f"# starts bare at each call, carry {store} into the call, bring it back and put it in {args.out}/:\n"
          f"#   timeout 570 <line> ; cp {args.out}/workload_gpu.json {args.out}/workload_gpu.txt $OUT/ ; "
          f"tar czf $OUT/logs.tgz -C {args.out} logs\n"
          f"# (the store is written after every row: a call cut short keeps what it finished)")
    total = 0.0
    for stream in args.streams:
        labels = args.recipes_for(stream)
        est = sum(EST_S["compiled" if hand_of(r, stream.conv, stream.mode).compile else "eager"] for r in labels)
        ns = args.advise or args.steps
        total += est + EST_S["advise"] * len(ns)
        print(f"# {stream.name} ({stream.mode}): {len(labels)} recipes, about {est / 60:.0f} min by EST_S, then "
              f"{len(ns)} advise calls and the picks' loops")
        for _ in range(max(1, math.ceil(est / (deadline + EST_S["compiled"] / 2)))):
            print(f"{base} --streams {stream.name} --deadline {deadline:.0f}")
        for n in ns:
            print(f"{base} --streams {stream.name} --recipes none --advise {n}")
        print(f"{base} --streams {stream.name} --deadline {deadline:.0f}      # the picks' loops, eager again")
    print(f"# about {total / 3600:.1f} h of GPU in all")
    return 0


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", "--case", default="all", help=f"comma list or 'all' (the set: "
                    f"{', '.join(n for n, s in STREAMS.items() if s.own)}); also: "
                    f"{', '.join(n for n, s in STREAMS.items() if not s.own)}")
    ap.add_argument("--list", action="store_true", help="list the streams with their parameters and shapes")
    ap.add_argument("--plan", action="store_true", help="print the GPU calls that run the streams asked for")
    ap.add_argument("--size", choices=tuple(FACTORY), default="full", help="full (GPU) or tiny (a CPU smoke run)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--stream", type=int, default=None, help="steps in the stream (default: tcperf's, 64)")
    ap.add_argument("--passes", type=int, default=5, help="steady passes timed")
    ap.add_argument("--cap", type=float, default=150.0, help="seconds a recipe's warm-up (its 2 passes) may take")
    ap.add_argument("--job-steps", default="100,10000", help="the N of the job costs (and of a bare --advise)")
    ap.add_argument("--advise", nargs="?", const="", default=None,
                    help="also run `tcperf advise --steps N --json` for these N (a bare --advise: every --job-steps)")
    ap.add_argument("--advise-args", default="", help="more arguments for tcperf advise, e.g. '--budget 150'")
    ap.add_argument("--advise-timeout", type=float, default=480.0, help="seconds an advise call may take")
    ap.add_argument("--recipes", default=None, help="comma list of labels (or 'none'); default: each stream's grid")
    ap.add_argument("--lead", default=None, help="the compiled ways' precision (default: bf16; amp_bf16 in training)")
    ap.add_argument("--repeat-eager", type=int, default=3,
                    help="processes an eager recipe within REPEAT_WITHIN of the best runs in, between the advice calls")
    ap.add_argument("--deadline", type=float, default=None, help="seconds after the start: nothing starts later")
    ap.add_argument("--again", action="store_true", help="measure again what is stored (rows and advice)")
    ap.add_argument("--out", default="out/workload")
    ap.add_argument("--profiler-first", action="store_true",
                    help="each child starts torch.profiler once before anything else, as tcperf's session workers "
                         "do; give it its own --out")
    args = ap.parse_args(argv)
    return check_args(ap, args)


def check_args(ap, args):
    from tcperf.workload import STREAM_STEPS
    names = [n for n, s in STREAMS.items() if s.own] if args.streams == "all" else args.streams.split(",")
    unknown = [n for n in names if n not in STREAMS]
    if unknown:
        ap.error(f"no stream {', '.join(unknown)}; choose from: {', '.join(STREAMS)}")
    args.streams = [STREAMS[n] for n in names]
    args.stream = args.stream or STREAM_STEPS
    args.steps = [int(n) for n in args.job_steps.split(",") if n.strip()]
    args.advise = [] if args.advise is None else ([int(n) for n in args.advise.split(",") if n.strip()] or args.steps)
    args.named = args.recipes is not None
    labels = None if args.recipes is None else [] if args.recipes.strip() == "none" else \
        [r.strip() for r in args.recipes.split(",") if r.strip()]
    for stream in args.streams:
        for label in labels or []:
            try:
                hand_of(label, stream.conv, stream.mode)
            except KeyError as e:
                ap.error(f"{stream.name}: {e}")
    args.recipes_for = lambda stream: grid(stream, args.lead) if labels is None else labels
    if args.stream < plain_stream.CHECK_STEPS or args.passes < 1 or args.repeat_eager < 1:
        ap.error(f"--stream must be >= {plain_stream.CHECK_STEPS}, --passes and --repeat-eager >= 1")
    args.deadline_at = time.perf_counter() + args.deadline if args.deadline else None
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list:
        return list_streams(args)
    if args.plan:
        return plan(args)
    if args.device.startswith("cuda") and not _cuda():
        print("workload_gpu.py needs a CUDA GPU (or --device cpu, with --size tiny)")
        return 1
    (Path(args.out) / "logs").mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / "workload_gpu.json"
    store = load_store(path, environment(args.device))
    print(f"== {env_line(store['env'])}", flush=True)
    for stream in args.streams:
        run_stream(stream, store, args, path)
    summary = summarize(store, args.steps)
    save(store, summary, path)
    report(store, summary, left_lines(store, args), Path(args.out) / "workload_gpu.txt")
    print(f"wrote {path} and {path.with_suffix('.txt')}")
    return 1 if any(ok is False for s in summary.values() for a in s["advice"] for _, ok in a["checks"]) else 0


if __name__ == "__main__":
    sys.exit(main())
