"""Does `tcperf advise` pick the right recipe? On a GPU: advise, then time the whole recipe grid by hand.
Each case advises and times the grid in the same call, and holds the advisor's pick against the fastest recipe
that passes by hand.

By hand: a plain loop per recipe (the step tcperf.engine prepares, its accuracy checked against fp32 strict as the
advisor checks it, then hand_loops.WINDOWS (3) windows of --hand-seconds (1 s) of back-to-back calls with CUDA
events around each window, after engine.TIMING's warm-up: total time over total calls).

The grid (a recipe that prepare rejects is an error row):
    eager      the advisor's bases in the case's mode (tcperf.advisor.trials.default_recipes): fp32, tf32,
               amp_fp16, amp_bf16, + fp16 and bf16 weights (inference), + channels_last (2-D convs)
    compiled   each eager base's "+compile" and "+cuda_graphs" (recipes.on_top: amp_bf16's are "compile" and
               "cuda_graphs"), training also "+step_graph" (a whole-step CUDA graph); fp8 and int8 (inference),
               the bases that are compiled already, and their "+cuda_graphs" (and "+step_graph")
    picks      every repeat's pick that is not in the grid (a mixed recipe, prepared with the recipe it modifies
               and the modules the advisor kept in fp32)
Recipes whose skip_reason rules them out on this GPU or mode (fp8 below sm89, torchao missing) are pruned.
Pruning rules, each on evidence from the eager rows, timed first (what is pruned is printed and stored):
    1. fp32 strict's compiled forms are skipped when fp32 eager is > FP32_PRUNE (3) x slower than the fastest
       eager recipe that passes: compile fuses the elementwise work, it cannot make fp32's matmuls 3x faster;
    2. a base's compiled forms are skipped when its eager form does not pass by hand (fails the check or
       errors), unless an advice called that compiled form ok; compile changes speed, not the precision.
A pick is always timed, pruned or not. Compiled warm-ups are shared through torch's on-disk caches (inductor's FX
graph and AOT autograd caches, on by default): the advisor's workers compiled the same graphs first, so the hand
loop's compiles mostly hit them; the first call's seconds are in each hand row ("first s").

Accuracy, as the advisor judges it (tcperf.engine.reference and its check, tcperf.accuracy): inference,
||out - ref|| / ||ref|| over all floating-point outputs against fp32 strict within the advice's tolerance (when
fp32's output is all zero or constant, as torchvision's ViT with its zero-initialised head gives, the input of the
last layer is compared instead); training, accuracy.DEFAULT_STEPS (16) steps' losses against fp32 strict's (the
recipe keeps at least 90% of the loss fall fp32 makes over the window, with fp32's own run-to-run spread over
accuracy.NOISE_RUNS (2) perturbed runs as the floor).

Targets, all checked (a case's verdict is PASS when every one holds):
    ratio     best hand ms / hand ms of the pick >= TARGET (0.95), for every repeat's pick; the pick passes by hand
    healthy   no healthy recipe called failing: training, fp32 / tf32 / amp_fp16 / amp_bf16 / bf16 in any
              compiled or channels_last form (not fp8, int8, mixed); inference, one the advisor called failing
              that passes by hand
    repeats   with --repeats N >= 2: max hand ms of the N picks / min <= REPEAT_SPREAD (1.03)
    time      each advise call's wall time <= ADVISE_S_TARGET (llama_infer: 90 s), checked on an H200 only
Why seconds, not 20 calls: at its power cap an H200 ran fp16_overflow's compiled fp8 step at 0.55 ms for a while
and 0.72 ms for a while (benchmarks/step_timing.py); a loop of 5 x 20 calls caught the slow spell and the advisor
the fast one, and they disagreed by 44%.

    python benchmarks/advise_gpu.py [--cases llama_infer,...] [--repeats N] [--hand-seconds S] [--out DIR]
                                    [--db PATH] [--timeout S] [--deadline S] [--size gpu|cpu] [--check-build]

Cases (CASES; random weights at seed 0, nothing downloaded):
    linear_head_infer, linear_head_train   examples/linear_head.py:factory: nn.Linear(4096, 50257) head, batch 24
    vit_b16_infer                          torchvision vit_b_16, batch 64, 3 x 224 x 224
    bert_infer, bert_train                 transformers BertForSequenceClassification(BertConfig()), 2 labels,
                                           batch 32 x 128 tokens, keyword inputs (train adds labels, out.loss)
    convnext_t_infer                       timm convnext_tiny, batch 64, 3 x 224 x 224
    resnet50_train                         tcperf.models resnet50 (torchvision), full config, batch 64
    gpt2_train                             tcperf.models gpt2 (small: 12 layers, 768 wide), batch 8 x 1024 tokens
  from factory files in tests/thirdparty/ (GPU size: gpu_<factory>; --size cpu takes <factory>, the tiny twin
  from the same code, for --check-build and the CPU tests):
    llama_infer, llama_train   hf_llama.py:factory_infer / factory: LlamaForCausalLM, 768 wide, 12 layers,
                               12 heads, MLP 2048, vocab 32000 (134M), 8 x 512 tokens; train: labels=input_ids
    t5_infer, t5_train         hf_t5.py:factory_infer / factory: T5ForConditionalGeneration, t5-small's shape
                               (512 wide, 6 + 6 layers; 60M), 16 x 256; input_ids + decoder_input_ids / labels
    lstm_infer, lstm_train     lstm_tagger.py:factory: embedding 512, 2-layer LSTM 1024, 64 tags, vocab 10k,
                               64 x 128 tokens, cross-entropy per token
    effnet_infer               timm_effnet.py:factory: timm efficientnet_b0, batch 128, 3 x 224 x 224
    swin_infer                 timm_swin.py:factory: timm swin_tiny_patch4_window7_224, batch 64
    unet_infer, unet_train     diffusion_unet.py:factory: conv blocks (GroupNorm, SiLU, timestep embedding),
                               3 levels with skips, self-attention at 16 x 16; width 128, 32 x 3 x 64 x 64,
                               takes (x, t); train: MSE against the noise
The advisor's workers rebuild a factory-file case from its file (target_of, at the size of --size); the others'
specs are pickled to them.

The whole list takes hours: each case advises (1-3 min each repeat) and compiles up to ~14 recipes by hand. Under
a 10-minute limit, run one case per invocation with the same --out (advise_gpu.json keeps the rows of earlier
pieces; a case run again replaces its row), e.g.
    python benchmarks/advise_gpu.py --cases llama_infer --out out/advise
    python benchmarks/advise_gpu.py --cases llama_infer --repeats 3 --hand-seconds 0.5 --out out/advise
Each case's row is written as soon as it is done. --timeout S is passed to the advisor (per recipe). --deadline S
(seconds after the invocation starts) ends a hand grid that would run past a call's limit: no row starts after it,
the rows not reached are named, and the case is INCOMPLETE rather than killed unwritten (a check that failed on
the rows reached still makes it FAIL). The advisor's picks are timed right after the eager rows, so a cut grid
still times them. A case that raises (timm missing, say) is an error row and the next case runs. Prints a table;
exits 1 if any case of this invocation fails; stores each advice as an "advise" run in --db. --check-build builds
every selected case on the CPU (--size cpu: the tiny twins), runs it once (the loss too for training) and checks
that the advisor's workers can get it (no GPU needed).
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import io
import json
import operator
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from hand_loops import WINDOWS, window  # beside this script: the hand loops' clock
from tcperf import accuracy, engine, models, recipes
from tcperf import source
from tcperf.advisor import api
from tcperf.advisor.trials import default_recipes
from tcperf.source import load_source, on_device, save_source

ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.95             # best hand ms / hand ms of the pick
REPEAT_SPREAD = 1.03      # max hand ms of the repeated picks / min
ADVISE_S_TARGET = {"llama_infer": 90.0}    # seconds an advise call, on an H200
FP32_PRUNE = 3.0          # fp32 eager this many times slower than the fastest passing eager: no compiled fp32
HEALTHY = ("fp32", "tf32", "amp_bf16", "amp_fp16", "bf16")     # the precisions training must not call failing


# --- the cases ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One case: built by `build(mode, batch) -> (model, inputs, loss_fn, targets)` at its one size, or from a
    factory file (`cpu` and `gpu`: the factories of --size cpu and gpu; the file sets the batch). Inference compares
    the outputs with fp32's, training the losses."""
    name: str
    mode: str
    build: Callable | None = None
    batch: int | None = None
    file: Path | None = None
    cpu: str = "factory"
    gpu: str = "gpu_factory"


def _gen():
    return torch.Generator().manual_seed(1)


def _images(make):
    """A torchvision or timm classifier at seed 0 on `batch` random 3 x 224 x 224 images."""
    def build(mode, batch):
        torch.manual_seed(0)
        return make(), (torch.randn(batch, 3, 224, 224, generator=_gen()),), None, None
    return build


def _vit_b16():
    import torchvision
    return torchvision.models.vit_b_16(weights=None)


def _convnext_t():
    import timm
    return timm.create_model("convnext_tiny", pretrained=False)


def _bert(mode, batch, tokens=128):
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(0)
    cfg = BertConfig(num_labels=2)
    model = BertForSequenceClassification(cfg)
    g = _gen()
    inputs = {"input_ids": torch.randint(0, cfg.vocab_size, (batch, tokens), generator=g),
              "attention_mask": torch.ones(batch, tokens, dtype=torch.long),
              "token_type_ids": torch.zeros(batch, tokens, dtype=torch.long)}
    if mode == "train":
        inputs["labels"] = torch.randint(0, 2, (batch,), generator=g)
        return model, inputs, operator.attrgetter("loss"), None     # out.loss; unlike a lambda it pickles
    return model, inputs, None, None


def _tcperf_model(name: str):
    """A model of tcperf.models in its full configuration, on its own synthetic batch."""
    def build(mode, batch):
        mod = models.get(name)
        cfg = models.config(mod, "full")
        torch.manual_seed(0)
        model = mod.build(cfg)
        inputs, targets = mod.make_batch(cfg, batch, "cpu", _gen())
        return model, inputs, mod.loss_fn, targets
    return build


LINEAR_HEAD = ROOT / "examples" / "linear_head.py"
THIRDPARTY = ROOT / "tests" / "thirdparty"
CASES = {c.name: c for c in (
    Case("linear_head_infer", "infer", file=LINEAR_HEAD, cpu="factory", gpu="factory"),
    Case("linear_head_train", "train", file=LINEAR_HEAD, cpu="factory", gpu="factory"),
    Case("vit_b16_infer", "infer", _images(_vit_b16), batch=64),
    Case("bert_infer", "infer", _bert, batch=32),
    Case("bert_train", "train", _bert, batch=32),
    Case("convnext_t_infer", "infer", _images(_convnext_t), batch=64),
    Case("resnet50_train", "train", _tcperf_model("resnet50"), batch=64),
    Case("gpt2_train", "train", _tcperf_model("gpt2"), batch=8),
    Case("llama_infer", "infer", file=THIRDPARTY / "hf_llama.py", cpu="factory_infer", gpu="gpu_factory_infer"),
    Case("llama_train", "train", file=THIRDPARTY / "hf_llama.py"),
    Case("t5_infer", "infer", file=THIRDPARTY / "hf_t5.py", cpu="factory_infer", gpu="gpu_factory_infer"),
    Case("t5_train", "train", file=THIRDPARTY / "hf_t5.py"),
    Case("lstm_infer", "infer", file=THIRDPARTY / "lstm_tagger.py"),
    Case("lstm_train", "train", file=THIRDPARTY / "lstm_tagger.py"),
    Case("effnet_infer", "infer", file=THIRDPARTY / "timm_effnet.py"),
    Case("swin_infer", "infer", file=THIRDPARTY / "timm_swin.py"),
    Case("unet_infer", "infer", file=THIRDPARTY / "diffusion_unet.py"),
    Case("unet_train", "train", file=THIRDPARTY / "diffusion_unet.py"),
)}


def mode_of(case: str) -> str:
    return CASES[case].mode


def target_of(case: str, size: str = "gpu") -> str | None:
    """'path/to/file.py:factory' for the advisor's workers, which rebuild a spec from its factory file (a class
    imported from a file does not unpickle there), or None: the spec is pickled to them."""
    c = CASES[case]
    return f"{c.file}:{c.gpu if size == 'gpu' else c.cpu}" if c.file else None


def build_spec(case: str, size: str = "gpu"):
    """-> (tcperf.spec.Spec on the CPU, random weights at seed 0; mode). size: the factory-file cases'
    size ("gpu" | "cpu"); the others have one size."""
    c = CASES[case]
    if c.file:
        spec = source.load_spec(target_of(case, size))
    else:
        model, inputs, loss_fn, targets = c.build(c.mode, c.batch)
        spec = source.build(model, inputs, loss_fn, None, case, targets)
    spec.name = case
    return spec, c.mode


def release(device) -> None:
    engine._release(device)
    torch._dynamo.reset()      # one recipe's compiled graphs must not serve the next


# --- the grid -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Hand:
    """One recipe to time by hand: the row's name, the recipe prepared, the modules kept in fp32 (mixed recipes)."""
    recipe: str
    runs: str
    keep: tuple = ()
    base: str | None = None         # the eager base whose compiled form this is


def bases(mode: str, quantized: bool) -> list[str]:
    """The advisor's search bases in this mode, in ladder order: the eager ones, or fp8 and int8."""
    return [n for n in default_recipes() if mode in recipes.get(n).modes
            and bool(recipes.get(n).fp8 or recipes.get(n).int8) == quantized]


def ruled_out(name: str, mode: str, device) -> str | None:
    """The recipe's own skip reason on this device and mode (fp8 below sm89, torchao missing), or None."""
    try:
        return recipes.get(name).skip_reason(mode, device)
    except Exception:      # noqa: BLE001 - a name get() rejects: prepare() says so in its error row
        return None


def eager_grid(model, mode: str) -> list[Hand]:
    convs = engine.has_conv2d(model)
    return [Hand(n, n, base=n) for n in bases(mode, quantized=False) if recipes.get(n).needs != "conv2d" or convs]


def tiers(base: str, mode: str) -> list[str]:
    """The compiled forms of `base`: compile (fp8 and int8 are compiled already), then the graph forms of `mode`."""
    graphs = [e for e in recipes.EXTRAS if e != "compile" and mode in recipes.get(e).modes]
    first = base if recipes.get(base).compile else recipes.on_top(base, "compile")
    return [first, *(recipes.on_top(base, e) for e in graphs)]


def compiled_grid(eager_rows: list[dict], advices, mode: str) -> tuple[list[Hand], list[str]]:
    """The compiled forms of every eager base and fp8 / int8, less what the pruning rules drop: (to time, notes)."""
    todo, notes, seen = [], [], {r["recipe"] for r in eager_rows}
    called_ok = {r.recipe for a in advices for r in a.recipes if r.status == "ok" and not r.keep_fp32}
    # channels_last's compiled forms are amp_bf16's ("compile", "cuda_graphs")
    eager = [(r["recipe"], prune_reason(r, eager_rows)) for r in eager_rows if r["recipe"] != "channels_last"]
    for base, why in [*eager, *((q, None) for q in bases(mode, quantized=True))]:
        for name in tiers(base, mode):
            if name in seen:
                continue
            seen.add(name)
            if why and name not in called_ok:
                notes.append(f"{name}: {why}")
                continue
            todo.append(Hand(name, name, base=base))
    return todo, notes


def prune_reason(row: dict, eager_rows: list[dict]) -> str | None:
    """Why the compiled forms of this eager row's base need no timing (rules 1 and 2 of the docstring), or None."""
    if not row.get("passes"):
        return f"{row['recipe']} eager does not pass by hand ({row.get('why') or row.get('check') or 'accuracy'})"
    fastest = min((r["ms"] for r in eager_rows if r.get("passes") and r.get("ms")), default=None)
    if row["recipe"] == "fp32" and fastest and row.get("ms") and row["ms"] > FP32_PRUNE * fastest:
        return f"fp32 eager {row['ms']:.4g} ms > {FP32_PRUNE:g} x the fastest passing eager {fastest:.4g} ms"
    return None


def pick_entries(advices, done: set[str]) -> list[Hand]:
    """Each advice's pick that the grid did not time (a mixed one with its base and kept modules)."""
    out = []
    for advice in advices:
        rec = advice.verdict.get("recommended")
        r = next((r for r in advice.recipes if r.recipe == rec), None)
        if rec and rec not in done:
            done.add(rec)
            out.append(Hand(rec, (r.base if r else None) or rec, tuple((r.keep_fp32 if r else None) or ())))
    return out


def skipped_here(hands: list[Hand], mode: str, device) -> tuple[list[Hand], list[str]]:
    """The hands whose recipe applies on this device and mode, and a note for each of the others."""
    keep, notes = [], []
    for h in hands:
        why = ruled_out(h.runs, mode, device)
        if why:
            notes.append(f"{h.recipe}: {why}")
        else:
            keep.append(h)
    return keep, notes


# --- by hand ----------------------------------------------------------------------------------------------------------
def hand_time(step, device, seconds: float = 1.0, windows: int = WINDOWS) -> dict:
    """ms a call over `windows` windows of about `seconds` of back-to-back calls each (CUDA events around each
    window): {"ms": total time / total calls, "windows": [ms a call in each window]}."""
    end = time.perf_counter() + engine.TIMING["warmup_ms"] / 1e3
    while time.perf_counter() < end:     # warm-up
        step()
    spans = [window(step, device, seconds=seconds) for _ in range(windows)]
    return {"ms": sum(ms for ms, _ in spans) / sum(n for _, n in spans), "windows": [ms / n for ms, n in spans]}


@dataclass
class Bench:
    """What every hand row needs: the spec (the hand model and its inputs on the device), the mode, the device,
    fp32's reference (tcperf.engine.reference), the first advice (its statuses, times and tolerance) and the window
    length."""
    spec: object
    mode: str
    device: torch.device
    ref: dict
    advice: object
    seconds: float
    deadline: float | None = None   # perf_counter after which no row starts


def advisor_row(advice, name: str):
    return next((r for r in advice.recipes if r.recipe == name), None)


def check(b: Bench, step, holder: dict) -> dict:
    """The step's accuracy against fp32 strict's, judged as the advisor judges it."""
    acc = engine._check(step, b.spec, b.mode, accuracy.DEFAULT_STEPS, b.ref, holder)
    err, _, passes, why = accuracy.judge(acc, b.mode, b.advice.tolerance)
    row = {"rel_error" if b.mode == "infer" else "loss_gap": err, "passes": passes}
    return {**row, "check": why} if why else row


def by_hand_one(b: Bench, h: Hand) -> dict:
    r = advisor_row(b.advice, h.recipe)
    row = {"recipe": h.recipe, "runs": h.runs, "keep_fp32": list(h.keep), "advisor_status": r.status if r else None,
           "advisor_ms": r.step_ms if r else None}
    if b.deadline is not None and time.perf_counter() > b.deadline:
        row.update(passes=None, not_reached=True, why="not reached before --deadline")
        print(f"  by hand {row['recipe']}: not reached before --deadline", flush=True)
        return row
    try:
        t0, holder = time.perf_counter(), {}
        step = engine._prepare(b.spec, recipes.get(h.runs), b.mode, b.device, keep=h.keep, tap=b.ref.get("tap"),
                               holder=holder)
        row.update(check(b, step, holder))
        row["first_s"] = time.perf_counter() - t0          # prepare + the check's calls: compile time included
        row.update(hand_time(step, b.device, b.seconds))
        del step
    except Exception as e:      # noqa: BLE001 - a recipe that cannot run by hand is a row, not a crash
        row.update(passes=False, why=f"{type(e).__name__}: {str(e).strip()[:160]}")
    finally:
        release(b.device)
    advisor = f"{row['advisor_status']} {_f(row['advisor_ms'])}".strip() if r else "not run"
    print(f"  by hand {row['recipe']}: {_f(row.get('ms'))} ms (advisor: {advisor}), passes {row.get('passes')}, "
          f"first call {row.get('first_s', 0):.1f} s {row.get('why', '')}", flush=True)
    return row


def make_bench(spec, advices, mode, device, seconds, deadline=None) -> Bench:
    """fp32 strict's reference on the hand spec (its outputs, or its losses and noise runs)."""
    ref = engine.reference(spec, mode, device)
    if engine.reference_note(ref):
        print(f"  {engine.reference_note(ref)}", flush=True)
    return Bench(spec, mode, device, ref, advices[0], seconds, deadline)


def contenders_first(hands: list[Hand], advices) -> list[Hand]:
    """The compiled rows in the order a --deadline should cut them last: the advisor's picks, then the rows it
    timed, fastest first (where a cut grid is most likely still to hold the best), then the rest in the grid's order.
    BERT training on an H100 (2026-11-27) reached 6 of its 18 rows in the grid's order, not its two runners-up."""
    picks = {a.verdict.get("recommended") for a in advices}

    def key(h: Hand):
        ms = [r.step_ms for a in advices if (r := advisor_row(a, h.recipe)) and r.status == "ok" and r.step_ms]
        return h.recipe not in picks, min(ms) if ms else float("inf")
    return sorted(hands, key=key)           # stable: the grid's order among rows the advisor did not time


def by_hand(spec, advices, mode, device, seconds, deadline=None) -> tuple[list[dict], list[str]]:
    """The grid timed by hand: eager first, then the compiled forms the pruning rules leave (contenders_first's
    order), then any pick not yet timed. -> (one row a recipe, what was pruned)."""
    b = make_bench(spec, advices, mode, device, seconds, deadline)
    eager, pruned = skipped_here(eager_grid(spec.model, mode), mode, device)
    rows = [by_hand_one(b, h) for h in eager]
    compiled, notes = compiled_grid(rows, advices, mode)
    compiled, skipped = skipped_here(compiled, mode, device)
    pruned += notes + skipped
    for note in pruned:
        print(f"  pruned {note}", flush=True)
    rows += [by_hand_one(b, h) for h in contenders_first(compiled, advices)]
    rows += [by_hand_one(b, h) for h in pick_entries(advices, {r["recipe"] for r in rows})]
    return rows, pruned


# --- one case -------------------------------------------------------------------------------------------------------
def healthy(name: str) -> bool:
    """fp32 / tf32 / amp_bf16 / amp_fp16 / bf16, plain, channels_last or compiled: no fp8, int8 or extension."""
    try:
        rec = recipes.get(name)
    except Exception:      # noqa: BLE001 - a mixed recipe's label
        return name in HEALTHY
    return rec.precision in HEALTHY and not (rec.fp8 or rec.int8 or rec.transform)


def healthy_failing(advice, hand, mode) -> list[str]:
    """Training: the healthy recipes the advisor called failing. Inference: those called failing that pass by hand."""
    if mode == "train":
        return [r.recipe for r in advice.recipes
                if r.status == "fails" and not r.keep_fp32 and healthy(r.base or r.recipe)]
    fails = {r.recipe for r in advice.recipes if r.status == "fails"}
    return [h["recipe"] for h in hand if h["recipe"] in fails and h.get("passes")]


def advise(spec, mode, device, timeout, target):
    extra = {"timeout": timeout} if timeout is not None else {}
    return api.run(spec, mode=mode, device=device, target=target,
                   log=lambda text: print(f"  {spec.name}: {text}", flush=True), **extra)


def advise_repeats(spec, model, mode, device, case, args) -> tuple[list, list[float], list]:
    """--repeats advise calls, each on its own copy of the case's weights: (advices, wall seconds, store run ids)."""
    advices, seconds, run_ids = [], [], []
    for i in range(args.repeats):
        mine = copy.copy(spec)
        mine.model = copy.deepcopy(model)             # the advisor moves its model to the GPU
        t0 = time.perf_counter()
        advice = advise(mine, mode, device, args.timeout, target_of(case, args.size))
        seconds.append(time.perf_counter() - t0)
        print(f"== {case} advise {i + 1}/{args.repeats}: {advice.verdict.get('recommended')} in "
              f"{seconds[-1]:.0f} s", flush=True)
        advices.append(advice)
        run_ids.append(advice.save(args.db, f"benchmarks/advise_gpu.py {case}"))
        del mine
        release(device)
    return advices, seconds, run_ids


def one(case: str, device, args) -> dict:
    t_case = time.perf_counter()
    spec, mode = build_spec(case, args.size)
    model = copy.deepcopy(spec.model)          # the hand loop's own copy, whatever the advisor does to its model
    advices, advise_s, run_ids = advise_repeats(spec, model, mode, device, case, args)
    spec.model = None
    t0 = time.perf_counter()
    hand_spec = on_device(dataclasses.replace(spec, model=model), device)
    hand, pruned = by_hand(hand_spec, advices, mode, device, args.hand_seconds, args.deadline_at)
    row = summarize(case, mode, advices, hand, advise_s)
    row.update(pruned=pruned, hand_s=time.perf_counter() - t0, case_s=time.perf_counter() - t_case,
               run_ids=run_ids, size=args.size, hand_seconds=args.hand_seconds)
    return row


def pick_rows(advices, hand, advise_s, best) -> list[dict]:
    """Each repeat's pick with its hand time and ratio (best hand ms / its hand ms)."""
    out = []
    for i, (advice, secs) in enumerate(zip(advices, advise_s)):
        rec = advice.verdict.get("recommended")
        mine = next((h for h in hand if h["recipe"] == rec), {})
        ratio = best["ms"] / mine["ms"] if mine.get("ms") and best else None
        out.append({"repeat": i + 1, "recommended": rec, "advisor_ms": advice.verdict.get("step_ms"),
                    "advise_s": secs, "hand_ms": mine.get("ms"), "passes": mine.get("passes"), "ratio": ratio})
    return out


def spread_of(picks: list[dict]) -> float | None:
    """max / min hand ms of the repeats' picks (None with one repeat or a pick not timed)."""
    ms = [p["hand_ms"] for p in picks]
    return max(ms) / min(ms) if len(ms) > 1 and all(ms) else None


def checks(case, picks, sick, spread, gpu) -> dict:
    """The checked targets of the module docstring: {name: True / False} (time: None when not checked here)."""
    limit = ADVISE_S_TARGET.get(case)
    timed = limit is not None and "H200" in (gpu or "")
    return {"ratio": all(p["ratio"] is not None and p["ratio"] >= TARGET for p in picks),
            "pick_passes": all(bool(p["passes"]) for p in picks), "healthy": not sick,
            "repeats": None if len(picks) < 2 else spread is not None and spread <= REPEAT_SPREAD,
            "time": all(p["advise_s"] <= limit for p in picks) if timed else None}


def summarize(case, mode, advices, hand, advise_s) -> dict:
    passing = [h for h in hand if h.get("passes") and h.get("ms")]
    best = min(passing, key=lambda h: h["ms"]) if passing else None
    picks = pick_rows(advices, hand, advise_s, best)
    sick = sorted({name for a in advices for name in healthy_failing(a, hand, mode)})
    spread = spread_of(picks)
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    ok = checks(case, picks, sick, spread, gpu)
    unreached = [h["recipe"] for h in hand if h.get("not_reached")]
    if any(p["recommended"] in unreached for p in picks):
        ok.update(ratio=None, pick_passes=None, repeats=None)     # not shown either way
    verdict = "FAIL" if any(v is False for v in ok.values()) else "INCOMPLETE" if unreached else "PASS"
    first = picks[0]
    return {"case": case, "mode": mode, "recommended": first["recommended"], "advisor_ms": first["advisor_ms"],
            "tolerance": advices[0].tolerance, "hand_ms_recommended": first["hand_ms"],
            "recommended_passes_by_hand": first["passes"], "best_by_hand": best["recipe"] if best else None,
            "best_hand_ms": best["ms"] if best else None, "ratio": min((p["ratio"] or 0) for p in picks),
            "picks": picks, "repeat_spread": spread, "advise_s": advise_s, "healthy_failing": sick, "checks": ok,
            "verdict": verdict, "not_reached": unreached, "hand": hand,
            "advice": [a.to_dict() if hasattr(a, "to_dict") else None for a in advices]}


def error_row(case: str, e: BaseException, t0: float) -> dict:
    traceback.print_exc()
    return {"case": case, "mode": mode_of(case), "verdict": "ERROR", "error": f"{type(e).__name__}: {e}"[:300],
            "case_s": time.perf_counter() - t0, "hand": [], "healthy_failing": [], "picks": [], "pruned": []}


# --- output ---------------------------------------------------------------------------------------------------------
# --- output ---------------------------------------------------------------------------------------------------------
def _s(x) -> str:
    return "" if x is None else str(x)


def _f(x) -> str:
    return f"{x:.4g}" if isinstance(x, (int, float)) and x else ""


def _joined(picks: list[dict], key: str, fmt=str) -> str:
    values = [fmt(p[key]) for p in picks]
    return values[0] if len(set(values)) == 1 else " / ".join(values)


def table_row(r: dict) -> list[str]:
    picks = r.get("picks") or []
    spread = r.get("repeat_spread")
    return [r["case"], _joined(picks, "recommended") if picks else r.get("error", ""), _f(r.get("advisor_ms")),
            _joined(picks, "hand_ms", _f) if picks else "", str(r.get("best_by_hand") or ""),
            _f(r.get("best_hand_ms")), f"{r['ratio']:.3f}" if r.get("ratio") else "",
            _s(r.get("recommended_passes_by_hand")), ", ".join(r["healthy_failing"]),
            f"{spread:.3f}" if spread else "", " / ".join(f"{p['advise_s']:.0f}" for p in picks),
            f"{r.get('hand_s', 0):.0f}", r["verdict"]]


def print_table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"tcperf advise vs the grid by hand · {torch.cuda.get_device_name()} · torch {torch.__version__}"
                    f" · target ratio {TARGET}, repeats {REPEAT_SPREAD}")
    for col in ("case", "recommended", "advisor ms", "hand ms (rec.)", "best by hand", "hand ms (best)",
                "best/rec (min)", "accuracy ok", "healthy failing", "repeat spread", "advise s", "hand s",
                "verdict"):
        t.add_column(col)
    for r in rows:
        t.add_row(*table_row(r))
    Console(width=220).print(t)
    for r in rows:
        print_details(r)


def print_details(r: dict) -> None:
    timed = [h for h in r["hand"] if h.get("ms")]
    if timed:
        print(f"{r['case']}: ms a step by hand (advisor's): " + ", ".join(
            f"{h['recipe']} {h['ms']:.4g}" + (f" ({h['advisor_ms']:.4g})" if h.get("advisor_ms") else "")
            + ("" if h.get("passes") else " x") for h in sorted(timed, key=lambda h: h["ms"])))
    if r.get("pruned"):
        print(f"{r['case']}: pruned: " + "; ".join(r["pruned"]))
    for name in r["healthy_failing"]:
        print(f"FAIL {r['case']}: healthy recipe called failing: {name}")
    if r.get("not_reached"):
        print(f"INCOMPLETE {r['case']}: not reached before --deadline: {', '.join(r['not_reached'])}")
    for p in r.get("picks", []):
        if p["recommended"] in r.get("not_reached", ()):
            continue
        if p["ratio"] is None or p["ratio"] < TARGET:
            print(f"FAIL {r['case']}: repeat {p['repeat']}'s pick {p['recommended']} is {_f(p['ratio']) or '?'} "
                  f"of {r['best_by_hand']}'s speed")
    for name, ok in (r.get("checks") or {}).items():
        if ok is False and name in ("repeats", "time"):
            print(f"FAIL {r['case']}: {name} target missed (spread {_f(r.get('repeat_spread'))}, advise s "
                  f"{', '.join(f'{s:.0f}' for s in r.get('advise_s', []))})")


def write_json(path: Path, rows: list[dict]) -> None:
    """Merge into advise_gpu.json: rows of earlier invocations stay, a case run again replaces its row."""
    old = json.loads(path.read_text()).get("rows", []) if path.exists() else []
    mine = {r["case"] for r in rows}
    merged = [r for r in old if r.get("case") not in mine] + rows
    path.write_text(json.dumps({"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                                "torch": torch.__version__, "target": TARGET, "repeat_spread": REPEAT_SPREAD,
                                "rows": merged}, indent=1, default=str))


# --- --check-build ----------------------------------------------------------------------------------------------------
def pickles(spec) -> str:
    try:
        torch.save(spec, io.BytesIO())
        return "pickled spec"
    except Exception as e:      # noqa: BLE001
        return f"NOT picklable ({type(e).__name__}: {str(e)[:80]}): the advisor runs it in-process, no timeout"


def worker_gets(spec, target: str | None) -> str:
    """How the advisor's workers get the case: rebuilt from its factory file as a worker rebuilds it (the parent's
    weights loaded into the factory's model: the state_dict keys must match), or pickled."""
    if not target:
        return pickles(spec)
    with tempfile.TemporaryDirectory() as folder:
        rebuilt = load_source(save_source(spec, folder, target), "cpu")
    if sorted(rebuilt.kwargs) != sorted(spec.kwargs) or len(rebuilt.args) != len(spec.args):
        raise RuntimeError(f"the worker's rebuild of {target} takes other inputs")
    return f"factory file {Path(target).name}, rebuilt as a worker does"


def build_one(case: str, size: str) -> str:
    """Build the case on the CPU, run it once (the loss too for training): one line about it."""
    spec, mode = build_spec(case, size)
    spec.model.train(mode == "train")
    with torch.no_grad():
        out = spec.model(*spec.args, **spec.kwargs)
    loss = engine._loss(spec)(out, spec.targets) if mode == "train" else None
    ref = accuracy.check_outputs(out)
    leaf = engine.last_leaf(spec) if accuracy.degenerate(ref) else None
    params = sum(p.numel() for p in spec.model.parameters())
    return (f"{type(spec.model).__name__} {params / 1e6:.2f}M params, {sum(t.numel() for t in ref)} output values"
            + (f", loss {float(loss):.4g}" if loss is not None else "")
            + (f", degenerate output: compare the input of {leaf}" if leaf else "")
            + f"; to the advisor's workers: {worker_gets(spec, target_of(case, size))}")


def check_build(cases: list[str], size: str) -> int:
    """Build every case on the CPU and run it once: no GPU needed."""
    failed = 0
    for case in cases:
        t0 = time.perf_counter()
        try:
            print(f"{case}: {build_one(case, size)} ({time.perf_counter() - t0:.1f} s)", flush=True)
        except Exception as e:      # noqa: BLE001
            failed += 1
            print(f"{case}: ERROR {type(e).__name__}: {e}", flush=True)
    return 1 if failed else 0


# --- main -----------------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from: {', '.join(CASES)}")
    ap.add_argument("--out", default="out")
    ap.add_argument("--db", default=None)
    ap.add_argument("--timeout", type=float, default=None, help="seconds per recipe, passed to the advisor")
    ap.add_argument("--repeats", type=int, default=1, help="advise calls a case (one hand grid); >= 2 checks "
                    f"that the picks' hand times are within {REPEAT_SPREAD}x")
    ap.add_argument("--hand-seconds", type=float, default=1.0, help=f"length of each of the {WINDOWS} timing "
                    "windows by hand")
    ap.add_argument("--size", choices=("gpu", "cpu"), default="gpu",
                    help="the factory-file cases' size: gpu (default) or cpu (their tiny twins); others have one")
    ap.add_argument("--check-build", action="store_true", help="build and run each case once on the CPU")
    ap.add_argument("--deadline", type=float, default=None, help="seconds after the start: no hand row starts "
                    "later; the case is INCOMPLETE, naming the rows not reached")
    args = ap.parse_args(argv)
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    args.deadline_at = time.perf_counter() + args.deadline if args.deadline else None
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; choose from: {', '.join(CASES)}")
    if args.repeats < 1 or args.hand_seconds <= 0:
        ap.error("--repeats must be >= 1 and --hand-seconds > 0")
    return args


def run_cases(args, device, path: Path) -> list[dict]:
    rows = []
    for case in args.cases:
        print(f"== {case}", flush=True)
        t0 = time.perf_counter()
        try:
            rows.append(one(case, device, args))
        except Exception as e:      # noqa: BLE001 - one case that cannot run is a row, the next case runs
            rows.append(error_row(case, e, t0))
        release(device)
        write_json(path, rows)
        print(f"== {case}: {rows[-1]['verdict']} in {rows[-1]['case_s']:.0f} s", flush=True)
    return rows


def main() -> int:
    args = parse_args()
    if args.check_build:
        return check_build(args.cases, args.size)
    if not torch.cuda.is_available():
        print("advise_gpu.py needs a CUDA GPU (--check-build runs on the CPU)")
        return 1
    os.makedirs(args.out, exist_ok=True)
    path = Path(args.out) / "advise_gpu.json"
    rows = run_cases(args, torch.device("cuda"), path)
    print_table(rows)
    print(f"wrote {path}")
    return 0 if all(r["verdict"] == "PASS" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
