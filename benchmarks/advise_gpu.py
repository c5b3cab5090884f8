"""Does `tcperf advise` pick the right recipe? On a GPU: advise, then time the whole recipe grid by hand.
Each case advises and times the grid in the same call, and holds the advisor's pick against the fastest recipe
that passes by hand.

By hand: a plain loop per recipe (recipes.prepare, an accuracy check against fp32 strict, then 3 windows of
--hand-seconds (1 s) of back-to-back calls with CUDA events around each window: total time over total calls).

The grid (recipe names are opaque strings for recipes.get / recipes.prepare; one that get or prepare rejects is an
error row, except the optional tiers below, which are pruned with a note when this tcperf does not know them):
    eager      fp32, tf32, amp_fp16, amp_bf16, + fp16 and bf16 weights (inference), + channels_last (2-D convs)
    compiled   each eager base's "+compile" and "+cuda_graphs" (recipes.on_top: amp_bf16's are "compile" and
               "cuda_graphs"), training also "+step_graph" (a whole-step CUDA graph; optional);
               fp8 and int8 (inference) where they apply, and their "+cuda_graphs" (optional)
    picks      every repeat's pick that is not in the grid (a mixed recipe rebuilt with
               tcperf.advisor.sensitive.keep_fp32 and prepared with the recipe it modifies)
Recipes whose skip_reason rules them out on this GPU or mode (fp8 below sm89, torchao missing) are pruned.
Pruning rules, each on evidence from the eager rows, timed first (what is pruned is printed and stored):
    1. fp32 strict's compiled forms are skipped when fp32 eager is > FP32_PRUNE (3) x slower than the fastest
       eager recipe that passes: compile fuses the elementwise work, it cannot make fp32's matmuls 3x faster;
    2. a base's compiled forms are skipped when its eager form does not pass by hand (fails the check or
       errors), unless an advice called that compiled form ok; compile changes speed, not the precision.
A pick is always timed, pruned or not. Compiled warm-ups are shared through torch's on-disk caches (inductor's FX
graph and AOT autograd caches, on by default): the advisor's workers compiled the same graphs first, so the hand
loop's compiles mostly hit them; the first call's seconds are in each hand row ("first s").

Accuracy by hand: inference, ||out - ref|| / ||ref|| over all floating-point outputs against fp32 strict within
the advice's tolerance (when fp32's output is all zero or constant, as torchvision's ViT with its zero-initialised
head gives, the input of the last leaf module called is compared instead); training, 16 steps' losses against fp32
strict's, judged as the advisor judges (tcperf.accuracy: the recipe keeps at least 90% of the loss fall fp32 makes
over the window, with fp32's own run-to-run spread over 2 perturbed runs as the floor).

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

Cases (random weights at seed 0, nothing downloaded):
    linear_head_infer, linear_head_train   examples/linear_head.py: nn.Linear(4096, 50257) head, batch 24
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
The advisor's workers rebuild a factory-file case from its file (TARGETS, the target of --size).

The whole list takes hours: each case advises (1-3 min each repeat) and compiles up to ~14 recipes by hand. Under
a 10-minute limit, run one case per invocation with the same --out (advise_gpu.json keeps the rows of earlier
pieces; a case run again replaces its row), e.g.
    python benchmarks/advise_gpu.py --cases llama_infer --out out/advise
    python benchmarks/advise_gpu.py --cases llama_infer --repeats 3 --hand-seconds 0.5 --out out/advise
Each case's row is written as soon as it is done. --timeout S is passed to the advisor (per recipe). --deadline S
(seconds after the invocation starts) ends a hand grid that would run past a call's limit: no row starts after it,
the rows not reached are named, and the case is INCOMPLETE rather than killed unwritten (a check that failed on
the rows reached still makes it FAIL). The advisor's picks are timed right after the eager rows, so a cut grid
still times them. A case that
raises (timm missing, say) is an error row and the next case runs. Prints a table; exits 1 if any case of this
invocation fails; stores each advice as an "advise" run in --db. --check-build builds every selected case on the
CPU (--size cpu: the tiny twins), runs it once (the loss too for training) and checks that the advisor's workers
can get it (no GPU needed).
"""
from __future__ import annotations

import argparse
import copy
import gc
import importlib.util
import inspect
import json
import math
import operator
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET = 0.95             # best hand ms / hand ms of the pick
REPEAT_SPREAD = 1.03      # max hand ms of the repeated picks / min
ADVISE_S_TARGET = {"llama_infer": 90.0}    # seconds an advise call, on an H200
FP32_PRUNE = 3.0          # fp32 eager this many times slower than the fastest passing eager: no compiled fp32
TRAIN_CHECK_STEPS = 16    # training steps compared with fp32's (tcperf.accuracy.DEFAULT_STEPS)
NOISE_RUNS = 2            # perturbed fp32 runs that set fp32's own noise (tcperf.accuracy.NOISE_RUNS)
WINDOWS = 3
HEALTHY = ("fp32", "tf32", "amp_bf16", "amp_fp16", "bf16")
EAGER = {"infer": ("fp32", "tf32", "amp_fp16", "amp_bf16", "fp16", "bf16"),
         "train": ("fp32", "tf32", "amp_fp16", "amp_bf16")}
QUANT = {"infer": ("fp8", "int8"), "train": ("fp8",)}


# --- the cases ------------------------------------------------------------------------------------------------------
def _gen():
    return torch.Generator().manual_seed(1)


def build_linear_head(mode):
    path = ROOT / "examples" / "linear_head.py"
    spec = importlib.util.spec_from_file_location("advise_gpu_linear_head", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module               # torch.compile looks modules up here
    spec.loader.exec_module(module)
    made = module.factory()
    train = mode == "train"
    return made["model"], made["inputs"], made["loss_fn"] if train else None, made["targets"] if train else None


def build_vit_b16(mode):
    import torchvision
    torch.manual_seed(0)
    return torchvision.models.vit_b_16(weights=None), (torch.randn(64, 3, 224, 224, generator=_gen()),), None, None


def build_convnext_t(mode):
    import timm
    torch.manual_seed(0)
    model = timm.create_model("convnext_tiny", pretrained=False)
    return model, (torch.randn(64, 3, 224, 224, generator=_gen()),), None, None


def build_bert(mode):
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(0)
    cfg = BertConfig(num_labels=2)
    model = BertForSequenceClassification(cfg)
    g = _gen()
    inputs = {"input_ids": torch.randint(0, cfg.vocab_size, (32, 128), generator=g),
              "attention_mask": torch.ones(32, 128, dtype=torch.long),
              "token_type_ids": torch.zeros(32, 128, dtype=torch.long)}
    if mode == "train":
        inputs["labels"] = torch.randint(0, 2, (32,), generator=g)
        return model, inputs, operator.attrgetter("loss"), None     # out.loss; unlike a lambda it pickles
    return model, inputs, None, None


def _tcperf_model(name, batch):
    def build(mode):
        from tcperf import models
        mod = models.get(name)
        cfg = models.config(mod, "full")
        torch.manual_seed(0)
        model = mod.build(cfg)
        inputs, targets = mod.make_batch(cfg, batch, "cpu", _gen())
        return model, inputs, mod.loss_fn, targets
    return build


LINEAR_HEAD = f"{ROOT / 'examples' / 'linear_head.py'}:factory"
CASES = {     # name -> (builder, mode); the factory-file cases are in FAMILIES
    "linear_head_infer": (build_linear_head, "infer"),
    "linear_head_train": (build_linear_head, "train"),
    "vit_b16_infer": (build_vit_b16, "infer"),
    "bert_infer": (build_bert, "infer"),
    "bert_train": (build_bert, "train"),
    "convnext_t_infer": (build_convnext_t, "infer"),
    "resnet50_train": (_tcperf_model("resnet50", 64), "train"),
    "gpt2_train": (_tcperf_model("gpt2", 8), "train"),
}
THIRDPARTY = ROOT / "tests" / "thirdparty"
FAMILIES = {  # name -> (file in tests/thirdparty, factory at CPU size (GPU size: "gpu_" + it), mode)
    "llama_infer": ("hf_llama.py", "factory_infer", "infer"),
    "llama_train": ("hf_llama.py", "factory", "train"),
    "t5_infer": ("hf_t5.py", "factory_infer", "infer"),
    "t5_train": ("hf_t5.py", "factory", "train"),
    "lstm_infer": ("lstm_tagger.py", "factory", "infer"),
    "lstm_train": ("lstm_tagger.py", "factory", "train"),
    "effnet_infer": ("timm_effnet.py", "factory", "infer"),
    "swin_infer": ("timm_swin.py", "factory", "infer"),
    "unet_infer": ("diffusion_unet.py", "factory", "infer"),
    "unet_train": ("diffusion_unet.py", "factory", "train"),
}
ALL_CASES = [*CASES, *FAMILIES]
# the advisor runs each recipe in a worker process, which rebuilds a spec from its factory file when given one (a
# class imported from a file does not unpickle there) and unpickles it otherwise
TARGETS = {"linear_head_infer": LINEAR_HEAD, "linear_head_train": LINEAR_HEAD}


def mode_of(case: str) -> str:
    return FAMILIES[case][2] if case in FAMILIES else CASES[case][1]


def target_of(case: str, size: str = "gpu") -> str | None:
    """'path/to/file.py:factory' for the advisor's workers, or None (the spec is pickled to them)."""
    if case not in FAMILIES:
        return TARGETS.get(case)
    file, name, _ = FAMILIES[case]
    return f"{THIRDPARTY / file}:{'gpu_' + name if size == 'gpu' else name}"


def build_spec(case: str, size: str = "gpu"):
    """-> (tcperf.advisor.load.Spec on the CPU, random weights at seed 0; mode). size: the factory-file cases'
    size ("gpu" | "cpu"); the others have one size."""
    from tcperf.advisor import load
    if case in FAMILIES:
        spec = load.load_spec(target_of(case, size))
    else:
        builder, mode = CASES[case]
        model, inputs, loss_fn, targets = builder(mode)
        spec = load.build(model, inputs, loss_fn, None, case, targets)
    spec.name = case
    return spec, mode_of(case)



# --- the model as recipes.prepare takes it --------------------------------------------------------------------------
class Keywords(nn.Module):
    """The model called with keyword tensors, taken positionally (recipes.prepare passes positional inputs only)."""

    def __init__(self, model: nn.Module, names: list[str]):
        super().__init__()
        self.model, self.names = model, list(names)

    def forward(self, *tensors):
        return self.model(**dict(zip(self.names, tensors)))


def hand_model(model, spec, keep=()):
    """The model for prepare(): the named modules kept in fp32 (a copy) for a mixed recipe, keyword inputs bound."""
    from tcperf.advisor.sensitive import keep_fp32
    if keep:
        model = keep_fp32(copy.deepcopy(model), list(keep), "cuda")
    return Keywords(model, list(spec.kwargs)) if spec.kwargs else model


def hand_inputs(spec, device) -> tuple:
    return tuple(x.to(device) for x in (*spec.args, *spec.kwargs.values()))


def hand_loss(spec):
    """prepare() calls loss_fn(outputs, targets); a loss_fn given without targets takes the outputs only."""
    if spec.loss_fn is None or spec.targets is not None:
        return spec.loss_fn
    return lambda outputs, _targets: spec.loss_fn(outputs)


def prepare(model, spec, name, mode, device, keep=()):
    from tcperf import recipes
    torch.manual_seed(0)
    targets = spec.targets.to(device) if torch.is_tensor(spec.targets) else spec.targets
    return recipes.prepare(hand_model(model, spec, keep), name, mode, hand_inputs(spec, device), device,
                           loss_fn=hand_loss(spec), targets=targets)


def release():
    import torch._dynamo
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    torch._dynamo.reset()      # one recipe's compiled graphs must not serve the next


# --- accuracy by hand -----------------------------------------------------------------------------------------------
def floats(x) -> list[torch.Tensor]:
    """Every floating-point tensor of an output, flattened, in order (a HuggingFace output: its logits)."""
    if torch.is_tensor(x):
        return [x.detach().reshape(-1)] if x.is_floating_point() else []
    if getattr(x, "logits", None) is not None:
        return floats(x.logits)
    if isinstance(x, dict):
        return [t for v in x.values() for t in floats(v)]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in floats(v)]
    return []


def flat(x) -> torch.Tensor:
    parts = floats(x)
    return torch.cat([t.double() for t in parts]) if parts else torch.zeros(0, dtype=torch.float64)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    if out.shape != ref.shape or not torch.isfinite(out).all():
        return math.inf
    norm = float(torch.linalg.vector_norm(ref))
    diff = float(torch.linalg.vector_norm(out - ref))
    return diff / norm if norm > 0 else diff


def degenerate(ref: torch.Tensor) -> bool:
    """All zero or constant: nothing to compare (torchvision's ViT zero-initialises its head)."""
    return ref.numel() == 0 or float(ref.abs().max()) == 0 or bool((ref == ref.reshape(-1)[0]).all())


def last_leaf(model, spec, device) -> str | None:
    """The name of the last leaf module the forward calls (forward pre-hooks on every leaf, one fp32 call)."""
    order = []
    leaves = [(n, m) for n, m in model.named_modules() if n and not any(True for _ in m.children())]
    handles = [m.register_forward_pre_hook(lambda mod, args, n=n: order.append(n)) for n, m in leaves]
    try:
        with torch.no_grad():
            model.eval()(*spec.args, **spec.kwargs)
    finally:
        for h in handles:
            h.remove()
    return order[-1] if order else None


def install_capture(model, name: str) -> dict:
    """A forward pre-hook on `name` storing its first input in the returned dict at every call. prepare() deep-copies
    the model with its hooks, so every recipe's copy stores there too (torch.compile traces the hook in); the hook
    stays on while the step is timed, in every recipe alike."""
    store: dict = {}

    def capture(module, args):
        store["x"] = args[0]
    model.get_submodule(name).register_forward_pre_hook(capture)
    return store


def infer_reference(model, spec, device) -> dict:
    """fp32 strict by hand: {"ref": flat outputs, "store": capture dict or None, "leaf": name or None}. When the
    output is degenerate, a capture hook goes on the model's last leaf and its input becomes the reference."""
    step = prepare(model, spec, "fp32", "infer", device)
    ref = flat(step()).clone()
    del step
    release()
    if not degenerate(ref):
        return {"ref": ref, "store": None, "leaf": None}
    spec_dev = copy.copy(spec)
    spec_dev.args, spec_dev.kwargs = tuple(a.to(device) for a in spec.args), {k: v.to(device) for k, v in
                                                                             spec.kwargs.items()}
    leaf = last_leaf(copy.deepcopy(model).to(device), spec_dev, device)
    store = install_capture(model, leaf)
    step = prepare(model, spec, "fp32", "infer", device)
    step()
    ref = flat(store["x"]).clone()
    del step
    release()
    print(f"  fp32's output is all zero or constant: comparing the input of its last leaf module, {leaf}")
    return {"ref": ref, "store": store, "leaf": leaf}


def check_infer(step, ref: dict, tolerance: float) -> dict:
    store = ref["store"]
    if store is not None:
        store.clear()              # a hook that did not fire must not hand on the previous recipe's tensor
    out = step()
    if store is not None and "x" not in store:
        raise RuntimeError(f"the capture hook on {ref['leaf']} did not fire in this recipe's step")
    got = flat(store["x"] if store is not None else out)
    err = rel_error(got, ref["ref"])
    return {"rel_error": err, "passes": err <= tolerance}


def perturbed(model, seed: int):
    """A copy with its weights scaled by 1 + PERTURBATION N(0, 1): fp32's own run-to-run noise (tcperf.engine)."""
    from tcperf import accuracy
    model, gen = copy.deepcopy(model), torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.mul_(1 + accuracy.PERTURBATION * torch.randn(p.shape, generator=gen).to(p.device, p.dtype))
    return model


def train_reference(model, spec, device) -> dict:
    """fp32 strict by hand: the losses of TRAIN_CHECK_STEPS steps and the noise floor of NOISE_RUNS perturbed runs."""
    from tcperf import accuracy, engine
    losses, _ = engine.train_losses(prepare(model, spec, "fp32", "train", device), TRAIN_CHECK_STEPS)
    noise = [engine.train_losses(prepare(perturbed(model, i + 1), spec, "fp32", "train", device),
                                 TRAIN_CHECK_STEPS)[0] for i in range(NOISE_RUNS)]
    release()
    return {"losses": losses, "noise_floor": accuracy.noise_floor(losses, noise)}


def check_train(step, ref: dict, tolerance: float) -> dict:
    """The recipe's losses over TRAIN_CHECK_STEPS steps against fp32's, judged as tcperf.accuracy judges them."""
    from tcperf import accuracy, engine
    losses, skipped = engine.train_losses(step, TRAIN_CHECK_STEPS)     # sync point, once a step
    acc = accuracy.compare_training(losses, skipped, ref)
    err, _, passes, why = accuracy.judge(acc, "train", tolerance)
    out = {"loss_gap": err, "losses": losses[:3], "passes": passes}
    return {**out, "check": why} if why else out


# --- the grid -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Hand:
    """One recipe to time by hand: the row's name, the recipe prepared, the modules kept in fp32 (mixed recipes)."""
    recipe: str
    runs: str
    keep: tuple = ()
    base: str | None = None         # the eager base whose compiled form this is


def known(name: str) -> str | None:
    """None when recipes.get takes the name; else one line saying why not."""
    from tcperf.recipes import get
    try:
        get(name)
        return None
    except Exception as e:      # noqa: BLE001 - an unknown name or a combination this tcperf refuses
        return f"not a recipe here ({type(e).__name__}: {str(e).strip().split(';')[0][:100]})"


def ruled_out(name: str, mode: str, device) -> str | None:
    """The recipe's own skip reason on this device and mode (fp8 below sm89, torchao missing), or None."""
    from tcperf.recipes import get
    try:
        return get(name).skip_reason(mode, device)
    except Exception:      # noqa: BLE001 - a name get() rejects: prepare() says so in its error row
        return None


def has_conv2d(model) -> bool:
    return any(isinstance(m, nn.Conv2d) for m in model.modules())


def eager_grid(model, mode: str) -> list[Hand]:
    names = [*EAGER[mode], *(["channels_last"] if has_conv2d(model) else [])]
    return [Hand(name, name, base=name) for name in names]


def tiers(base: str, mode: str) -> list[tuple[str, bool]]:
    """(name, optional) of the compiled forms of `base`; optional ones are pruned when recipes.get rejects them."""
    from tcperf.recipes import on_top
    if base in QUANT[mode]:
        out = [(base, False), (on_top(base, "cuda_graphs"), True)]
    else:
        out = [(on_top(base, "compile"), False), (on_top(base, "cuda_graphs"), False)]
    if mode == "train":
        graph = on_top(base, "step_graph")
        out.append((graph if not known(graph) else f"{base}+step_graph", True))
    return out


def compiled_grid(eager_rows: list[dict], advices, mode: str) -> tuple[list[Hand], list[str]]:
    """The compiled forms of every eager base and fp8 / int8, less what the pruning rules drop: (to time, notes)."""
    todo, notes, seen = [], [], {r["recipe"] for r in eager_rows}
    called_ok = {r.recipe for a in advices for r in a.recipes if r.status == "ok" and not r.keep_fp32}
    bases = [(r["recipe"], prune_reason(r, eager_rows)) for r in eager_rows if r["recipe"] != "channels_last"]
    for base, why in [*bases, *((q, None) for q in QUANT[mode])]:
        for name, optional in tiers(base, mode):
            if name in seen:
                continue
            seen.add(name)
            unknown = known(name) if optional else None
            if unknown or (why and name not in called_ok):
                notes.append(f"{name}: {unknown or why}")
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
def hand_time(step, seconds: float = 1.0, windows: int = WINDOWS) -> dict:
    """ms a call over `windows` windows of about `seconds` of back-to-back calls each (CUDA events around each
    window): {"ms": total time / total calls, "windows": [ms a call in each window]}."""
    end = time.perf_counter() + 0.2
    while time.perf_counter() < end:     # warm-up
        step()
    total_ms, total_calls, per_window = 0.0, 0, []
    for _ in range(windows):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        calls, deadline = 0, time.perf_counter() + seconds
        start.record()
        while time.perf_counter() < deadline:
            step()
            calls += 1
        stop.record()
        torch.cuda.synchronize()     # sync point: read the events once the calls are done
        ms = start.elapsed_time(stop)
        total_ms, total_calls = total_ms + ms, total_calls + calls
        per_window.append(ms / calls)
    return {"ms": total_ms / total_calls, "windows": per_window}


@dataclass
class Bench:
    """What every hand row needs: the hand model (on the device), the spec, the mode, the device, the accuracy
    check (step -> dict with "passes"), the first advice (its statuses and times) and the window length."""
    model: nn.Module
    spec: object
    mode: str
    device: torch.device
    check: object
    advice: object
    seconds: float
    deadline: float | None = None   # perf_counter after which no row starts


def advisor_row(advice, name: str):
    return next((r for r in advice.recipes if r.recipe == name), None)


def by_hand_one(b: Bench, h: Hand) -> dict:
    r = advisor_row(b.advice, h.recipe)
    row = {"recipe": h.recipe, "runs": h.runs, "keep_fp32": list(h.keep), "advisor_status": r.status if r else None,
           "advisor_ms": r.step_ms if r else None}
    if b.deadline is not None and time.perf_counter() > b.deadline:
        row.update(passes=None, not_reached=True, why="not reached before --deadline")
        print(f"  by hand {row['recipe']}: not reached before --deadline", flush=True)
        return row
    try:
        t0 = time.perf_counter()
        step = prepare(b.model, b.spec, h.runs, b.mode, b.device, h.keep)
        row.update(b.check(step))
        row["first_s"] = time.perf_counter() - t0          # prepare + the check's calls: compile time included
        row.update(hand_time(step, b.seconds))
        del step
    except Exception as e:      # noqa: BLE001 - a recipe that cannot run by hand is a row, not a crash
        row.update(passes=False, why=f"{type(e).__name__}: {str(e).strip()[:160]}")
    finally:
        release()
    advisor = f"{row['advisor_status']} {_f(row['advisor_ms'])}".strip() if r else "not run"
    print(f"  by hand {row['recipe']}: {_f(row.get('ms'))} ms (advisor: {advisor}), passes {row.get('passes')}, "
          f"first call {row.get('first_s', 0):.1f} s {row.get('why', '')}", flush=True)
    return row


def make_bench(model, spec, advices, mode, device, seconds, deadline=None) -> Bench:
    model, tol = model.to(device), advices[0].tolerance
    if mode == "infer":
        ref = infer_reference(model, spec, device)
        check = lambda step: check_infer(step, ref, tol)      # noqa: E731
    else:
        ref = train_reference(model, spec, device)
        check = lambda step: check_train(step, ref, tol)      # noqa: E731
    return Bench(model, spec, mode, device, check, advices[0], seconds, deadline)


def by_hand(model, spec, advices, mode, device, seconds, deadline=None) -> tuple[list[dict], list[str]]:
    """The grid timed by hand: eager first, then the compiled forms the pruning rules leave (the advisor's picks
    first), then any pick not yet timed. -> (one row a recipe, what was pruned)."""
    b = make_bench(model, spec, advices, mode, device, seconds, deadline)
    eager, pruned = skipped_here(eager_grid(model, mode), mode, device)
    rows = [by_hand_one(b, h) for h in eager]
    compiled, notes = compiled_grid(rows, advices, mode)
    compiled, skipped = skipped_here(compiled, mode, device)
    pruned += notes + skipped
    for note in pruned:
        print(f"  pruned {note}", flush=True)
    picks = {a.verdict.get("recommended") for a in advices}
    compiled.sort(key=lambda h: h.recipe not in picks)          # stable: the grid's order otherwise
    rows += [by_hand_one(b, h) for h in compiled]
    rows += [by_hand_one(b, h) for h in pick_entries(advices, {r["recipe"] for r in rows})]
    return rows, pruned


# --- one case -------------------------------------------------------------------------------------------------------
def healthy(name: str) -> bool:
    """fp32 / tf32 / amp_bf16 / amp_fp16 / bf16, plain, channels_last or compiled: no fp8, int8 or extension."""
    from tcperf.recipes import get
    try:
        rec = get(name)
    except Exception:      # noqa: BLE001
        return name in HEALTHY
    return (getattr(rec, "precision", None) in HEALTHY and not getattr(rec, "fp8", False)
            and not getattr(rec, "int8", False) and not getattr(rec, "transform", None))


def healthy_failing(advice, hand, mode) -> list[str]:
    """Training: the healthy recipes the advisor called failing. Inference: those called failing that pass by hand."""
    if mode == "train":
        return [r.recipe for r in advice.recipes
                if r.status == "fails" and not r.keep_fp32 and healthy(r.base or r.recipe)]
    fails = {r.recipe for r in advice.recipes if r.status == "fails"}
    return [h["recipe"] for h in hand if h["recipe"] in fails and h.get("passes")]


def advise(spec, mode, device, timeout, target):
    import tcperf.advisor.api as api
    extra = {"timeout": timeout} if timeout is not None else {}
    if target and "target" in inspect.signature(api.run).parameters:
        extra["target"] = target
    return api.run(spec, mode=mode, device=device,
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
        release()
    return advices, seconds, run_ids


def one(case: str, device, args) -> dict:
    t_case = time.perf_counter()
    spec, mode = build_spec(case, args.size)
    model = copy.deepcopy(spec.model)          # the hand loop's own copy, whatever the advisor does to its model
    advices, advise_s, run_ids = advise_repeats(spec, model, mode, device, case, args)
    spec.model = None
    t0 = time.perf_counter()
    hand, pruned = by_hand(model, spec, advices, mode, device, args.hand_seconds, args.deadline_at)
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
    import traceback
    traceback.print_exc()
    return {"case": case, "mode": mode_of(case), "verdict": "ERROR", "error": f"{type(e).__name__}: {e}"[:300],
            "case_s": time.perf_counter() - t0, "hand": [], "healthy_failing": [], "picks": [], "pruned": []}


# --- output ---------------------------------------------------------------------------------------------------------
def _s(x) -> str:
    return "" if x is None else str(x)


def _f(x) -> str:
    return f"{x:.4g}" if isinstance(x, (int, float)) and x else ""


def _joined(picks: list[dict], key: str, fmt=str) -> str:
    values = [fmt(p[key]) for p in picks]
    return values[0] if len(set(values)) == 1 else " / ".join(values)


def table_row(r: dict) -> list[str]:
    picks, ok = r.get("picks") or [], r.get("checks") or {}
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
    import io
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
    import tempfile
    from tcperf.spec import load_source, save_source
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
    loss = hand_loss(spec)(out, spec.targets) if mode == "train" else None
    ref = flat(out)
    leaf = last_leaf(spec.model, spec, "cpu") if degenerate(ref) else None
    params = sum(p.numel() for p in spec.model.parameters())
    return (f"{type(spec.model).__name__} {params / 1e6:.2f}M params, {ref.numel()} output values"
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
    ap.add_argument("--cases", default=",".join(ALL_CASES), help=f"comma-separated, from: {', '.join(ALL_CASES)}")
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
    unknown = [c for c in args.cases if c not in ALL_CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; choose from: {', '.join(ALL_CASES)}")
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
        release()
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
