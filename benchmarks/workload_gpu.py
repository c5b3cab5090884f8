"""Advice for a workload (issue 32): plain hand loops over a stream of variable-length batches, each recipe cold in
a fresh process, against which `tcperf advise FILE.py:factory --steps N` is held.

The cases (factory files that return a `workload(step) -> inputs` beside the model; random weights):
    bert    examples/bert_stream.py:factory     BERT-base classification, batch 32, lengths 16..512 a step
    llama   examples/llama_prefill.py:factory   Llama-style prefill (LlamaModel, 768 wide, 12 layers), batch 4,
                                                lengths 32..1024 a step
  --size tiny takes each file's `tiny` factory (the same code at CPU size) for a smoke run with --device cpu.

Method, one recipe at a time, each in a FRESH process (`--one RECIPE`) with its own empty TORCHINDUCTOR_CACHE_DIR
and TRITON_CACHE_DIR, so every compile is cold, as on a new machine or container:
    1. the factory's model in fp32 on the device gives the reference outputs of steps 0..2 (unpadded); then the
       model is cast to bf16 (model.to(torch.bfloat16)); the stream is workload(0..S-1), on the device.
    2. warm-up: two passes over the stream, every step once each under torch.no_grad(), each timed by wall clock
       (perf_counter, synchronized at its end). The first pass is the cold one (compiles); the second is there
       because CUDA graph trees (mode="reduce-overhead") run a shape's first call as a warm-up and record it on
       the second, so their one-time cost ends only after it (for the other recipes it is about a steady pass).
       Dynamo's compiles are counters["stats"]["unique_graphs"] after each step, and "limit" marks a recipe whose
       compiles stopped growing at torch._dynamo.config.recompile_limit while new shapes kept coming (Dynamo runs
       those eagerly). A warm-up past --cap seconds is stopped after the step that passes it: "> cap", with the
       steps (of 2 x S) and compiles it had done; it is not checked and its steady passes are not run.
    3. check: steps 0..2 again, the compared tensor (BERT: logits; Llama: last_hidden_state, padded recipes'
       sliced back to the real positions) against fp32's: ||out - ref|| / ||ref||, the largest of the 3; above
       TOLERANCE (0.05) the recipe is FAIL (still timed, never "best").
    4. steady: --passes more passes, each one window of the whole stream back to back (hand_loops.window: CUDA
       events around the pass on a GPU, perf_counter on a CPU), on an idle GPU; median and min-max.
        5. eager recipes (no compile) run in --repeat-eager (3) processes spread over the call, their passes pooled:
       a host-bound step is the CPU's speed, and on one H100 machine (2026-11-26) BERT's eager moved 5.4-9.5 ms a
       batch between processes within the hour (the graphed recipes by ~2%); one process was a coin toss.
    ms a batch = median pass / S; one-time cost = the two warm-up passes - 2 x the median pass; job cost at N
    steps = one-time + N x median pass / S seconds. A capped recipe's job cost is at least its warm-up so far
    (for N >= S, as long as the second pass is no faster than a steady one), shown as "> X".
Reduce-overhead recipes call torch.compiler.cudagraph_mark_step_begin() before every step, in every pass.

The recipes (HAND, keyed by the advisor's labels, tcperf.recipes.SHAPES; "bf16+compile" and "bf16+cuda_graphs",
without "@", are static, as there; a pick with no hand loop is a FAIL, "no hand loop for X"):
    bf16                        eager
    bf16+compile@static         torch.compile(m, dynamic=False): one compile per new length, up to
                                recompile_limit (8), then eager for the lengths beyond it, as torch does
    bf16+compile@dynamic        torch.compile(m): automatic dynamic shapes, torch's default
    bf16+cuda_graphs@dynamic    torch.compile(m, mode="reduce-overhead")
    bf16+compile@marked         torch.compile(m), torch._dynamo.mark_dynamic(t, 1) on every input tensor before
    bf16+cuda_graphs@marked     each call (the second with mode="reduce-overhead"; tcperf's @marked uses
                                maybe_mark_dynamic, which falls back to static where Dynamo specializes instead of
                                raising)
    bf16+compile@padP           every input tensor's sequence dim (1) right-padded with 0 up to a multiple of P
    bf16+cuda_graphs@padP       (64, 128) but never past the stream's longest length (as tcperf.workload.bucket),
                                then marked dynamic as @marked: torch.compile(m[, mode="reduce-overhead"]) compiles
                                once and captures a CUDA graph a bucket; the output sliced back to the real length
    bf16+cuda_graphs@pad128-static  the same padding, torch.compile(m, dynamic=False, mode="reduce-overhead"): one
                                compile a bucket, recompile_limit raised to the stream's number of buckets, as
                                anyone who pads to buckets that way would (Llama's 1024 / 64 = 16 > 8); the
                                advisor's padded recipes were these until 2026-11-25 (warm-ups of 49-101 s)
    bf16+cuda_graphs@static     torch.compile(m, dynamic=False, mode="reduce-overhead"): run only when named
Padding with 0 (input_ids and attention_mask) leaves the compared outputs at the real positions unchanged: BERT
masks the padded keys, Llama's attention is causal (see the examples' docstrings).

Targets, with --advise (`python3 -m tcperf advise examples/<case>.py:factory --steps N --json` for each N of
--job-steps, in a subprocess with its own empty compile caches; its verdict.recommended is the pick):
    every N         the pick's job cost <= EAGER_SLACK (1.05) x eager's: no one-time cost above what it saves
    N >= LARGE_N    the pick's job cost <= BEST_SLACK (1.05) x the best hand recipe's (among those that pass the
    (10000)         check), and < eager's (or the pick is eager)
The job model sees the one-time cost the S-step stream shows: a recipe that compiles or captures per new length
(static, cuda_graphs) meets about S distinct lengths here and more over a long job, so its one-time cost is a
floor there ("shapes" gives the distinct shapes the model saw).

    python benchmarks/workload_gpu.py --case bert [--recipes bf16,...] [--stream 60] [--passes 3] [--cap 150]
                                      [--job-steps 100,10000] [--advise] [--deadline S] [--out DIR]
    python benchmarks/workload_gpu.py --case all --size tiny --device cpu --stream 6 --passes 2 \\
        --recipes bf16,bf16+compile@dynamic,bf16+compile@pad64 --out /tmp/wl          # CPU smoke run

Time on one H100 (torch 2.11): a recipe's process takes ~25 s besides its warm-up (imports, building the model,
fp32's reference, the check, the steady passes); BERT's warm-ups took 5 s (eager) to ~50 s (compile@dynamic, 4
buckets of pad128), Llama's up to ~100 s (pad128's 8 buckets). BERT's bf16, compile and cuda_graphs @dynamic,
@marked and @pad128 took 7.6 min; Llama's the same 8.5 min. Eager's steady passes are launch-bound and vary by up
to 2x from pass to pass on that machine (the graph recipes' by ~2%): use --passes 7 or more for eager's median.

Runs of the same case, size, device and stream merge into OUT/workload_gpu.json (a recipe or N run again replaces
its row), so a grid too long for one call is run in pieces; --recipes none with --advise runs only the advisor.
Each invocation prints the environment, one table a case from all stored rows, the targets, and writes
OUT/workload_gpu.json and OUT/workload_gpu.txt; the children's stderr goes to OUT/logs/. Exits 1 if a target fails.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from hand_loops import window  # beside this script: the hand loops' clock
from tcperf import env as tcenv
from tcperf.worker import ready_device  # the session workers' start: context, cuBLAS, the profiler once

ROOT = Path(__file__).resolve().parent.parent
CASES = {"bert": "examples/bert_stream.py", "llama": "examples/llama_prefill.py"}
COMPARED = {"bert": "logits", "llama": "last_hidden_state"}     # the output field checked against fp32
FACTORY = {"full": "factory", "tiny": "tiny"}
CHECK_STEPS = 3           # stream steps checked against fp32
WARM_PASSES = 2           # passes before the steady ones: CUDA graph trees record a shape on its second call
TOLERANCE = 0.05          # ||out - ref|| / ||ref|| a recipe may reach
EAGER_SLACK = 1.05        # every N: the pick's job cost <= this x eager's
BEST_SLACK = 1.05         # N >= LARGE_N: the pick's job cost <= this x the best hand recipe's
LARGE_N = 10000
CHILD_MARGIN_S = 300      # a child's seconds beyond --cap (imports, fp32 reference, check, steady passes)


# --- the hand recipes -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Hand:
    """A plain loop: torch.compile's arguments (None: eager), mark_dynamic on dim 1, or right-padding of dim 1, the
    model cast to `dtype` (bf16, or fp16 where the one-shape search prefers it)."""
    compile: dict | None = None
    mark: bool = False
    pad: int = 0
    dtype: str = "bf16"

    @property
    def graphs(self) -> bool:
        return (self.compile or {}).get("mode") == "reduce-overhead"


RO = {"mode": "reduce-overhead"}
BF16 = {
    "bf16": Hand(),
    "bf16+compile@static": Hand({"dynamic": False}),
    "bf16+compile@dynamic": Hand({}),
    "bf16+cuda_graphs@dynamic": Hand(RO),
    "bf16+compile@marked": Hand({}, mark=True),
    "bf16+cuda_graphs@marked": Hand(RO, mark=True),
    "bf16+compile@pad64": Hand({}, mark=True, pad=64),
    "bf16+compile@pad128": Hand({}, mark=True, pad=128),
    "bf16+cuda_graphs@pad64": Hand(RO, mark=True, pad=64),
    "bf16+cuda_graphs@pad128": Hand(RO, mark=True, pad=128),
    "bf16+cuda_graphs@pad128-static": Hand({"dynamic": False, **RO}, pad=128),   # no advisor twin since 2026-11-25
    "bf16+cuda_graphs@static": Hand({"dynamic": False, **RO}),          # not in the default grid
}
# the same loops in fp16 (the one-shape search may prefer it: on a Llama prefill bf16 and fp16 tie), not in the grid
HAND = {**BF16, **{"fp16" + name[4:]: dataclasses.replace(h, dtype="fp16") for name, h in BF16.items()}}
GRID = [r for r in BF16 if r != "bf16+cuda_graphs@static"]             # --recipes' default
ALIASES = {f"{p}+{x}": f"{p}+{x}@static" for p in ("bf16", "fp16") for x in ("compile", "cuda_graphs")}  # no @: static


def eager_of(recipe: str) -> str:
    """The eager recipe a pick is weighed against: its own precision, alone ('fp16+cuda_graphs@pad64' -> 'fp16')."""
    return recipe.split("+")[0].split("@")[0]


def canonical(label: str | None) -> str | None:
    return ALIASES.get(label, label)


def hand_for(label: str) -> Hand:
    if canonical(label) not in HAND:
        raise KeyError(f"no hand loop for {label}")
    return HAND[canonical(label)]


# --- inputs -----------------------------------------------------------------------------------------------------------
def map_tensors(fn, x):
    """fn on every tensor of a workload's inputs (a tensor, a tuple of positional args, a dict of keyword args)."""
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, dict):
        return {k: map_tensors(fn, v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(map_tensors(fn, v) for v in x)
    return x


def tensors_of(x) -> list[torch.Tensor]:
    found = []
    map_tensors(found.append, x)
    return found


def seq_len(x) -> int:
    return tensors_of(x)[0].shape[1]


def call(model, x):
    if isinstance(x, dict):
        return model(**x)
    return model(*x) if isinstance(x, (tuple, list)) else model(x)


def compared(out, key: str) -> torch.Tensor:
    return out[key] if key else out


def padded_len(length: int, multiple: int, longest: int) -> int:
    """The next multiple, but never past the stream's longest length (a model's limit, BERT's 512 positions, is
    often the longest a workload has; tcperf.workload.bucket pads the same way)."""
    return min(-(-length // multiple) * multiple, max(longest, length))


def pad_seq(x, multiple: int, longest: int):
    """Every tensor's dim 1 right-padded with 0 (input_ids: the pad id; attention_mask: masked) to its bucket."""
    to = padded_len(seq_len(x), multiple, longest)
    return map_tensors(lambda t: F.pad(t, (0, to - t.shape[1])) if t.dim() >= 2 else t, x)


# --- one recipe, in its own process (--one) ----------------------------------------------------------------------------
def load_factory(case: str, size: str) -> dict:
    """The case's factory file imported under a fixed name (torch.compile and inspect look its module up) and
    its factory called."""
    path = ROOT / CASES[case]
    spec = importlib.util.spec_from_file_location(f"workload_{case}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, FACTORY[size])()


def make_step(hand: Hand, model, key: str, longest: int):
    """step(inputs) -> the compared tensor at the real positions: the recipe's whole per-batch work."""
    runner = model if hand.compile is None else torch.compile(model, **hand.compile)

    def step(x):
        if hand.graphs:
            torch.compiler.cudagraph_mark_step_begin()     # a new step: earlier outputs may be overwritten
        length = seq_len(x)
        if hand.pad:
            x = pad_seq(x, hand.pad, longest)
        if hand.mark:
            map_tensors(lambda t: torch._dynamo.mark_dynamic(t, 1) if t.dim() >= 2 else None, x)
        out = compared(call(runner, x), key)
        return out[:, :length] if hand.pad and out.dim() >= 2 and out.shape[1] == seq_len(x) else out
    return step


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def unique_graphs() -> int:
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


def seen_shapes(stream, hand: Hand, longest: int) -> list[tuple]:
    """The input shape the model gets at each step (after padding)."""
    return [tuple(tuple(t.shape) for t in tensors_of(pad_seq(x, hand.pad, longest) if hand.pad else x))
            for x in stream]


def limit_hit(shapes: list[tuple], compiles: list[int], limit: int) -> bool:
    """Did compiles stop growing at the recompile limit while new shapes kept coming?"""
    seen, before = set(), 0
    for shape, after in zip(shapes, compiles):
        if shape not in seen and after == before and before >= limit:
            return True
        seen.add(shape)
        before = after
    return False


def warm_up(step, stream, cap: float, device) -> dict:
    """WARM_PASSES passes over the stream from cold: each pass's wall seconds and the compiles after every step;
    stopped after the step that takes the whole past cap seconds."""
    compiles, passes, t0 = [], [], time.perf_counter()
    for _ in range(WARM_PASSES):
        start = time.perf_counter()
        for x in stream:
            step(x)
            compiles.append(unique_graphs())
            if time.perf_counter() - t0 > cap and len(compiles) < WARM_PASSES * len(stream):
                sync(device)
                return {"warm_s": time.perf_counter() - t0, "warm_pass_s": passes, "steps_done": len(compiles),
                        "capped": True, "compiles": compiles[-1], "compiles_by_step": compiles}
        sync(device)
        passes.append(time.perf_counter() - start)
    return {"warm_s": sum(passes), "warm_pass_s": passes, "steps_done": len(compiles), "capped": False,
            "compiles": compiles[-1], "compiles_by_step": compiles}


def check(step, stream, refs) -> list[float]:
    """||out - ref|| / ||ref|| of steps 0..2 (.float() copies: a CUDA graph's next replay overwrites its output)."""
    errs = []
    for x, ref in zip(stream, refs):
        out = step(x).float()
        errs.append(float((out - ref).norm() / ref.norm()))
    return errs


def steady(step, stream, passes: int, device) -> list[float]:
    """ms of each pass over the whole stream, each started on an idle GPU."""
    out = []
    for _ in range(passes):
        it = iter(stream)
        sync(device)
        ms, _ = window(lambda: step(next(it)), device, calls=len(stream))
        out.append(ms)
    return out


def prepare(case: str, size: str, device, stream_len: int, dtype: str = "bf16"):
    """(the model on the device in `dtype`, the stream on the device, fp32's outputs of steps 0..2)."""
    spec = load_factory(case, size)
    model = spec["model"].eval().to(device)
    stream = [map_tensors(lambda t: t.to(device), spec["workload"](s)) for s in range(stream_len)]
    with torch.no_grad():
        refs = [compared(call(model, x), COMPARED[case]).float().clone() for x in stream[:CHECK_STEPS]]
    return model.to(getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[dtype])), stream, refs


def run_one(args, row: dict) -> None:
    """The --one child: prepare, warm-up passes, check, steady passes, filling `row` as it goes (written to --result,
    with what it reached, even when a stage raises)."""
    t0, hand, device = time.perf_counter(), hand_for(args.one), torch.device(args.device)
    model, stream, refs = prepare(args.case, args.size, device, args.stream, hand_for(args.one).dtype)
    longest = max(seq_len(x) for x in stream)
    shapes = seen_shapes(stream, hand, longest)
    if hand.pad and not hand.mark:      # one graph a bucket: a hand loop that pads lets each bucket compile
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, len(set(shapes)))
    row.update(shapes=len(set(shapes)), recompile_limit=torch._dynamo.config.recompile_limit,
               setup_s=time.perf_counter() - t0)
    step = make_step(hand, model, COMPARED[args.case], longest)
    with torch.no_grad():
        row.update(warm_up(step, stream, args.cap, device))
        row["limit_hit"] = limit_hit(shapes * WARM_PASSES, row["compiles_by_step"], row["recompile_limit"])
        print(f"  {args.one}: warm-up passes " + " + ".join(f"{t:.1f}" for t in row["warm_pass_s"]) +
              f" s, {row['steps_done']} steps, {row['compiles']} compiles" + (" (capped)" if row["capped"] else ""),
              flush=True)
        if not row["capped"]:
            errs = check(step, stream, refs)
            row.update(rel_errors=errs, rel_error=max(errs), passes=max(errs) <= TOLERANCE)
            print(f"  {args.one}: rel. error vs fp32 " + ", ".join(f"{e:.3g}" for e in errs), flush=True)
            row["pass_ms"] = steady(step, stream, args.passes, device)
    row["wall_s"] = time.perf_counter() - t0


# --- the parent: each recipe in a fresh process ----------------------------------------------------------------------
def child_cmd(case: str, recipe: str, args, result: Path) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--one", recipe, "--case", case, "--size", args.size,
            "--device", args.device, "--stream", str(args.stream), "--passes", str(args.passes),
            "--cap", str(args.cap), "--result", str(result)] + (["--profiler-first"] if args.profiler_first else [])


def fresh_caches(folder: str) -> dict:
    """The environment of a child whose compiles start cold: empty inductor and Triton caches of its own; the
    tcperf this process imported first on its path."""
    path = os.pathsep.join(p for p in (str(Path(tcenv.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH"))
                           if p)
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


def run_recipe(case: str, recipe: str, args) -> dict:
    log = Path(args.out) / "logs" / f"{case}.{file_name(recipe)}.log"
    with tempfile.TemporaryDirectory(prefix="tcperf_wl_") as folder:
        result = Path(folder) / "result.json"
        rc, wall = run_process(child_cmd(case, recipe, args, result), fresh_caches(folder),
                               args.cap + CHILD_MARGIN_S, log)
        row = json.loads(result.read_text()) if result.exists() else {"recipe": recipe}
    row.update(process_s=wall, log=str(log))
    if log.stat().st_size == 0:
        log.unlink()                    # a quiet child leaves no log behind
        row["log"] = None
    if rc != 0:
        row.setdefault("error", f"exit {rc}: " + tail(log, 3).replace("\n", " | ")[-300:])
        print(f"  {recipe}: ERROR {row['error']} (log: {log})", flush=True)
    return row


def parse_advice(stdout: str) -> dict:
    """The advisor's JSON (the first JSON object on stdout)."""
    start = stdout.find("{")
    if start < 0:
        raise ValueError("no JSON on stdout")
    return json.JSONDecoder().raw_decode(stdout[start:])[0]


def run_advise(case: str, steps: int, args) -> dict:
    target = f"{CASES[case]}:{FACTORY[args.size]}"
    cmd = [sys.executable, "-m", "tcperf", "advise", target, "--steps", str(steps), "--json", "--device", args.device]
    log = Path(args.out) / "logs" / f"{case}.advise{steps}.log"
    print(f"== {case}: {' '.join(cmd[1:])}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tcperf_wl_adv_") as folder, \
            tempfile.TemporaryFile("w+") as out:
        rc, wall = run_process(cmd, fresh_caches(folder), args.advise_timeout, log, stdout=out)
        out.seek(0)
        text = out.read()
    row = {"steps": steps, "command": " ".join(cmd[1:]), "wall_s": wall, "log": str(log)}
    try:
        advice = parse_advice(text)
        row.update(recommended=advice.get("verdict", {}).get("recommended"),
                   total_s=advice.get("phases", {}).get("total_s"), verdict=advice.get("verdict"))
    except ValueError as e:
        row["error"] = f"exit {rc}: {e}; " + tail(log, 3).replace("\n", " | ")[-300:]
    print(f"== {case} N={steps}: pick {row.get('recommended')} in {wall:.0f} s {row.get('error', '')}", flush=True)
    return row


# --- summary -----------------------------------------------------------------------------------------------------------
def costs(row: dict, steps: list[int], stream: int) -> dict:
    """One-time seconds, ms a batch and job seconds at each N (capped: a lower bound, valid for N >= stream)."""
    if row.get("capped"):
        return {"lower": True, "job": {n: row["warm_s"] if n >= stream else None for n in steps}}
    if not row.get("pass_ms"):
        return {}
    pass_s = statistics.median(row["pass_ms"]) / 1e3
    one_time = row["warm_s"] - WARM_PASSES * pass_s
    return {"lower": False, "ms": pass_s * 1e3 / stream, "one_time": one_time,
            "job": {n: one_time + n * pass_s / stream for n in steps}}


def best_hand(rows: dict, cost: dict, n: int) -> str | None:
    ok = [r for r, row in rows.items() if row.get("passes") and cost[r].get("job") and not cost[r]["lower"]]
    return min(ok, key=lambda r: cost[r]["job"][n], default=None)


def target_lines(case: str, n: int, pick: str | None, rows: dict, cost: dict) -> tuple[list[str], bool | None]:
    """The PASS / FAIL lines of one advice; ok None when a needed row is missing."""
    if pick is None:
        return [f"FAIL {case} N={n}: the advisor recommended nothing"], False
    if canonical(pick) not in HAND:
        return [f"FAIL {case} N={n}: no hand loop for {pick}"], False
    pick = canonical(pick)
    plain = eager_of(pick)
    if pick not in rows or plain not in rows or not cost[pick].get("job") or not cost[plain].get("job"):
        return [f"?    {case} N={n}: pick {pick} or {plain} not timed by hand (run --recipes {pick},{plain})"], None
    job, eager = cost[pick]["job"][n], cost[plain]["job"][n]
    if job is None or eager is None:
        return [f"?    {case} N={n}: a capped recipe has no job cost for N shorter than the stream"], None
    lines, ok = [], []
    bound = cost[pick]["lower"]     # a capped pick: its job cost is at least `job`
    checks = [(f"pick <= {EAGER_SLACK} x eager", job <= EAGER_SLACK * eager)]
    if n >= LARGE_N:
        best = best_hand(rows, cost, n)
        best_job = cost[best]["job"][n] if best else None
        checks += [(f"pick <= {BEST_SLACK} x best ({best})", best_job is not None and job <= BEST_SLACK * best_job),
                   ("pick < eager (or is eager)", pick == plain or job < eager)]
    for name, holds in checks:
        verdict = "FAIL" if bound and holds is False else ("?" if bound else ("PASS" if holds else "FAIL"))
        ok.append({"PASS": True, "FAIL": False}.get(verdict))
        lines.append(f"{verdict:4} {case} N={n}: {name}")
    return lines, (False if False in ok else None if None in ok else True)


def advice_rows(case: str, data: dict, cost: dict, steps: list[int]) -> list[dict]:
    out = []
    for n in steps:
        adv = data.get("advice", {}).get(str(n))
        if not adv:
            continue
        pick = adv.get("recommended")
        best = best_hand(data["rows"], cost, n)
        lines, ok = target_lines(case, n, pick, data["rows"], cost)
        if adv.get("error"):
            lines, ok = [f"FAIL {case} N={n}: the advise call failed: {adv['error']}"], False
        job = cost.get(canonical(pick), {}).get("job", {}).get(n) if pick else None
        best_job = cost[best]["job"][n] if best else None
        eager_job = cost.get(eager_of(canonical(pick)) if pick else "", {}).get("job", {}).get(n)
        out.append({"n": n, "pick": pick, "pick_job_s": job, "pick_lower": bool(cost.get(canonical(pick), {}).get("lower")),
                    "best": best, "best_job_s": best_job, "eager_job_s": eager_job,
                    "ratio_best": job / best_job if job and best_job else None,
                    "ratio_eager": job / eager_job if job and eager_job else None,
                    "advise_wall_s": adv.get("wall_s"), "advise_total_s": adv.get("total_s"),
                    "error": adv.get("error"), "lines": lines, "ok": ok})
    return out


# --- output --------------------------------------------------------------------------------------------------------------
def _f(x, fmt="{:.4g}") -> str:
    return "" if x is None else fmt.format(x)


def check_cell(row: dict) -> str:
    if row.get("rel_error") is None:
        return ""
    return f"{row['rel_error']:.3g} {'ok' if row['passes'] else 'FAIL'}"


def steady_cell(row: dict, stream: int) -> str:
    ms = row.get("pass_ms")
    if not ms:
        return ""
    cell = f"{statistics.median(ms) / stream:.4g} ({min(ms) / stream:.4g}-{max(ms) / stream:.4g})"
    if row.get("process_ms"):
        cell += f"; {len(row['process_ms'])} processes: " + ", ".join(f"{t / stream:.3g}" for t in row["process_ms"])
    return cell


def first_cell(row: dict) -> str:
    if row.get("capped"):
        return f"> cap ({row['warm_s']:.0f} s, {row['steps_done']} steps)"
    return " + ".join(f"{t:.1f}" for t in row.get("warm_pass_s", []))


def recipe_cells(recipe: str, row: dict, cost: dict, steps: list[int], stream: int) -> list[str]:
    c = cost.get(recipe, {})
    eager = cost.get(eager_of(recipe), {}).get("job", {})
    lt = ">" if c.get("lower") else ""
    jobs = [lt + _f(c.get("job", {}).get(n), "{:.1f}") if c.get("job", {}).get(n) is not None else "" for n in steps]
    vs = [lt + f"{c['job'][n] / eager[n]:.2f}x" if c.get("job", {}).get(n) and eager.get(n) else "" for n in steps]
    compiles = "" if row.get("compiles") is None else str(row["compiles"]) + (" limit" if row.get("limit_hit") else "")
    return [recipe, row.get("error", "")[:60] or check_cell(row), first_cell(row), compiles,
            _f(row.get("shapes"), "{}"), steady_cell(row, stream),
            _f(c.get("one_time"), "{:.1f}"), *jobs, *vs]


def case_table(case: str, data: dict, cost: dict, steps: list[int]):
    from rich.table import Table
    s = data["settings"]
    t = Table(title=f"{case}: {CASES[case]}:{FACTORY[s['size']]} on {s['device']}, stream of {s['stream']} steps, "
                    f"tolerance {TOLERANCE}; job s = one-time + N x steady")
    for col in ("recipe", "check (rel. err)", "warm-up s (1st + 2nd)", "compiles", "shapes", "steady ms/batch (min-max)",
                "one-time s", *(f"job s @{n}" for n in steps), *(f"x eager @{n}" for n in steps)):
        t.add_column(col)
    order = [r for r in HAND if r in data["rows"]]
    for recipe in order:
        t.add_row(*recipe_cells(recipe, data["rows"][recipe], cost, steps, s["stream"]))
    return t


def advice_table(case: str, rows: list[dict]):
    from rich.table import Table
    t = Table(title=f"{case}: the advisor's pick against the hand loops")
    for col in ("N", "pick", "pick job s", "best hand", "best job s", "pick/best", "eager job s", "pick/eager",
                "advise wall s", "advise total_s"):
        t.add_column(col)
    for a in rows:
        lt = ">" if a["pick_lower"] else ""
        t.add_row(str(a["n"]), str(a["pick"] or a.get("error") or ""), lt + _f(a["pick_job_s"], "{:.1f}"),
                  str(a["best"] or ""), _f(a["best_job_s"], "{:.1f}"), lt + _f(a["ratio_best"], "{:.3f}"),
                  _f(a["eager_job_s"], "{:.1f}"), lt + _f(a["ratio_eager"], "{:.3f}"),
                  _f(a["advise_wall_s"], "{:.0f}"), _f(a["advise_total_s"], "{:.0f}"))
    return t


def environment(device: str) -> dict:
    libs = tcenv.libraries()
    gpu = torch.cuda.get_device_name() if device.startswith("cuda") and torch.cuda.is_available() else None
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True)
    return {"gpu": gpu, "device": device, "torch": libs["torch"], "triton": libs["triton"],
            "transformers": _version("transformers"), "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "commit": commit.stdout.strip() + (" (modified)" if dirty.stdout.strip() else "")}


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def summarize(store: dict, steps: list[int]) -> dict:
    """Per case: the costs of every stored row and the advice rows with their targets."""
    out = {}
    for case, data in store["cases"].items():
        cost = {r: costs(row, steps, data["settings"]["stream"]) for r, row in data["rows"].items()}
        out[case] = {"costs": cost, "advice": advice_rows(case, data, cost, steps)}
    return out


def report(store: dict, summary: dict, steps: list[int], path: Path) -> None:
    from rich.console import Console
    console = Console(width=240, record=True)
    e = store["env"]
    console.print(f"GPU {e['gpu'] or '-'} ({e['device']}) · torch {e['torch']} · triton {e['triton']} · "
                  f"transformers {e['transformers']} · {e['date']} · commit {e['commit']}", markup=False)
    for case, data in store["cases"].items():
        console.print(case_table(case, data, summary[case]["costs"], steps))
        if summary[case]["advice"]:
            console.print(advice_table(case, summary[case]["advice"]))
            for a in summary[case]["advice"]:
                for line in a["lines"]:
                    console.print(line, markup=False)
    path.write_text(console.export_text())


# --- the store of rows, merged across invocations ----------------------------------------------------------------------
def load_store(path: Path, env_now: dict) -> dict:
    old = json.loads(path.read_text()) if path.exists() else {}
    return {"env": env_now, "cases": old.get("cases", {})}


def case_data(store: dict, case: str, args) -> dict:
    """The case's stored rows when they were measured the same way (size, device, stream), else a fresh entry."""
    settings = {"size": args.size, "device": args.device, "stream": args.stream}
    data = store["cases"].get(case)
    if data and data["settings"] != settings:
        print(f"== {case}: stored rows were measured with {data['settings']}; starting afresh", flush=True)
        data = None
    store["cases"][case] = data or {"settings": settings, "rows": {}, "advice": {}}
    return store["cases"][case]


def save(store: dict, summary: dict, path: Path) -> None:
    path.write_text(json.dumps({**store, "summary": summary, "targets": {
        "tolerance": TOLERANCE, "eager_slack": EAGER_SLACK, "best_slack": BEST_SLACK, "large_n": LARGE_N}},
        indent=1, default=str))


# --- main ------------------------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=(*CASES, "all"), default="all")
    ap.add_argument("--size", choices=tuple(FACTORY), default="full", help="full (GPU) or tiny (a CPU smoke run)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--stream", type=int, default=60, help="steps in the stream: workload(0..S-1)")
    ap.add_argument("--passes", type=int, default=3, help="steady passes timed")
    ap.add_argument("--cap", type=float, default=150.0, help="seconds a recipe's warm-up (its first 2 passes) may take")
    ap.add_argument("--job-steps", default="100,10000", help="the N of the job costs (and of --advise)")
    ap.add_argument("--advise", action="store_true", help="also run `tcperf advise --steps N --json` for each N")
    ap.add_argument("--advise-timeout", type=float, default=480.0, help="seconds an advise call may take")
    ap.add_argument("--recipes", default=",".join(GRID), help=f"comma list (or 'none') from: {', '.join(HAND)} "
                    "(default: all but the last)")
    ap.add_argument("--repeat-eager", type=int, default=3,
                    help="processes each eager recipe runs in, spread over the call (after the compiled recipes, "
                         "between the advice calls), their passes pooled: a host-bound step moves between processes")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds after the start: no recipe or advise call starts later (those left are named)")
    ap.add_argument("--out", default="out/workload")
    ap.add_argument("--profiler-first", action="store_true",
                    help="each child starts torch.profiler once before anything else, as tcperf's session workers "
                         "do (tcperf.worker.ready_device). Found with it (H100, 2026-11-26): BERT's eager 5.90 and "
                         "5.92 ms a batch against 5.31 and 5.38 without, 5.32 and 5.41 with TEARDOWN_CUPTI=1 (what "
                         "tcperf.profiler.detach_after_profiling sets); give it its own --out")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)      # the child: one recipe
    ap.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.steps = [int(n) for n in args.job_steps.split(",") if n.strip()]
    args.recipes = [] if args.recipes.strip() == "none" else [canonical(r.strip()) for r in args.recipes.split(",")
                                                              if r.strip()]
    unknown = [r for r in args.recipes if r not in HAND]
    if unknown:
        ap.error(f"no hand loop for {', '.join(unknown)}; choose from: {', '.join(HAND)}")
    if args.stream < CHECK_STEPS or args.passes < 1 or args.repeat_eager < 1:
        ap.error(f"--stream must be >= {CHECK_STEPS}, --passes and --repeat-eager >= 1")
    args.deadline_at = time.perf_counter() + args.deadline if args.deadline else None
    return args


def child_main(args) -> int:
    if args.case == "all":
        raise SystemExit("--one needs one --case")
    row = {"recipe": args.one, "profiler_first": args.profiler_first}
    try:
        if args.profiler_first and args.device.startswith("cuda"):
            ready_device(torch.device(args.device), profiler=True)
        run_one(args, row)
    except Exception as e:      # noqa: BLE001 - the row says what failed; the traceback goes to the log
        traceback.print_exc()
        row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]
    Path(args.result).write_text(json.dumps(row))
    return 1 if "error" in row else 0


def too_late(args, what: str) -> bool:
    if args.deadline_at is not None and time.perf_counter() > args.deadline_at:
        print(f"== not reached before --deadline: {what}", flush=True)
        return True
    return False


def run_case(case: str, store: dict, args, path: Path) -> None:
    data = case_data(store, case, args)
    runs: dict[str, list[dict]] = {}

    def measure(recipe: str) -> None:
        if too_late(args, f"{case} {recipe}"):
            return
        print(f"== {case} {recipe}" + (f" (process {len(runs.get(recipe, [])) + 1})" if recipe in runs else ""),
              flush=True)
        runs.setdefault(recipe, []).append(run_recipe(case, recipe, args))
        data["rows"][recipe] = pooled(runs[recipe])
        save(store, summarize(store, args.steps), path)

    def advise(n: int) -> None:
        if not too_late(args, f"{case} advise --steps {n}"):
            data["advice"][str(n)] = run_advise(case, n, args)
            save(store, summarize(store, args.steps), path)

    for recipe in args.recipes:
        measure(recipe)
    host_bound = [r for r in args.recipes if HAND[r].compile is None]
    advice = args.steps if args.advise else []
    for k in range(max(args.repeat_eager - 1, len(advice))):     # eager again, then an advice, in turn
        for recipe in host_bound if k < args.repeat_eager - 1 else ():
            measure(recipe)
        if k < len(advice):
            advise(advice[k])


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


def main() -> int:
    args = parse_args()
    if args.one:
        return child_main(args)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("workload_gpu.py needs a CUDA GPU (or --device cpu, with --size tiny)")
        return 1
    (Path(args.out) / "logs").mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / "workload_gpu.json"
    store = load_store(path, environment(args.device))
    e = store["env"]
    print(f"== GPU {e['gpu']} · torch {e['torch']} · triton {e['triton']} · {e['date']} · commit {e['commit']}")
    for case in CASES if args.case == "all" else [args.case]:
        run_case(case, store, args, path)
    summary = summarize(store, args.steps)
    save(store, summary, path)
    report(store, summary, args.steps, Path(args.out) / "workload_gpu.txt")
    print(f"wrote {path} and {path.with_suffix('.txt')}")
    oks = [a["ok"] for s in summary.values() for a in s["advice"]]
    return 1 if False in oks else 0


if __name__ == "__main__":
    sys.exit(main())
