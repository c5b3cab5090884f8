"""Does `tcperf advise` pick the right recipe? On a GPU, advise on eight cases, then redo the recipes by hand.
By hand: a plain loop (recipes.prepare, an accuracy check, then 3 windows of 1 s of back-to-back calls with CUDA
events around each window: total time over total calls) holds the advisor's pick against the fastest recipe that
stays within the same tolerance by hand.
Target: on every case the pick is at least 0.90 as fast as the best by hand (ratio = best hand ms / hand ms of the
pick >= 0.90), the pick passes by hand, and no healthy recipe is called failing.

By hand, each case re-times every recipe the advisor ran (status ok or fails) that does not compile, the compiled
ones among the advisor's two fastest passing recipes, the pick itself, and any compiled recipe it called failing
but timed faster than the pick. A mixed recipe (fp32 kept in some modules) is rebuilt with
tcperf.advisor.sensitive.keep_fp32 and prepared with the recipe it modifies.
Accuracy by hand: inference, the relative error ||out - ref|| / ||ref|| over all floating-point outputs against
fp32 strict (when fp32's output is all zero or constant, as torchvision's ViT with its zero-initialised head gives,
the input of the last leaf module called is compared instead); training, the advisor's own status for the recipe
(its losses over its steps against fp32 strict's, within fp32's own noise) and a finite loss in 3 steps by hand.
Healthy recipes: mixed-precision training of these models is sound, so a training case fails when the advisor
calls fp32, tf32, amp_bf16, amp_fp16 or bf16 (or any compiled / channels_last form of them, not fp8 or int8)
failing; an inference case fails when it calls a recipe failing that passes by hand.

Why seconds, not 20 calls: at its power cap an H200 ran fp16_overflow's compiled fp8 step at 0.55 ms for a while
and 0.72 ms for a while (benchmarks/step_timing.py); a loop of 5 x 20 calls caught the slow spell and the advisor
the fast one, and they disagreed by 44%.

    python benchmarks/advise_gpu.py [--cases linear_head_infer,...] [--out DIR] [--db PATH] [--timeout S]

Cases (random weights at seed 0, nothing downloaded):
    linear_head_infer, linear_head_train   examples/linear_head.py: nn.Linear(4096, 50257) head, batch 24
    vit_b16_infer                          torchvision vit_b_16, batch 64, 3 x 224 x 224
    bert_infer, bert_train                 transformers BertForSequenceClassification(BertConfig()), 2 labels,
                                           batch 32 x 128 tokens, keyword inputs (train adds labels, out.loss)
    convnext_t_infer                       timm convnext_tiny, batch 64, 3 x 224 x 224
    resnet50_train                         tcperf.models resnet50 (torchvision), full config, batch 64
    gpt2_train                             tcperf.models gpt2 (small: 12 layers, 768 wide), batch 8 x 1024 tokens
The whole list takes well over 10 minutes: the advisor runs each recipe in a worker process and compiles up to
5 recipes a case (compile on its two fastest eager recipes, cuda_graphs on the fastest, fp8, int8; 30-70 s each for
the larger models), and the hand loop compiles up to 2 more. Under a 10-minute limit, run it in pieces with the same --out
(advise_gpu.json keeps the rows of earlier pieces; a case run again replaces its row):
    --cases linear_head_infer,linear_head_train
    --cases vit_b16_infer
    --cases bert_infer
    --cases bert_train
    --cases convnext_t_infer
    --cases resnet50_train
    --cases gpt2_train
Each case's row is written as soon as it is done. --timeout S is passed to the advisor (per recipe). A case that
raises (timm missing, say) is an error row and the next case runs. Prints a table; exits 1 if any case of this
invocation fails; stores each advice as an "advise" run in --db. --check-build builds every selected case on the
CPU, runs it once and checks that the advisor's workers can get it (no GPU needed).
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
from pathlib import Path

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET = 0.90             # best hand ms / hand ms of the pick
TOP = 2                   # compiled recipes re-timed by hand: those among the advisor's TOP fastest passing
TRAIN_CHECK_STEPS = 3
HEALTHY = ("fp32", "tf32", "amp_bf16", "amp_fp16", "bf16")
TIMED = ("ok", "fails")   # advisor statuses with a step that ran


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
CASES = {     # name -> (builder, mode)
    "linear_head_infer": (build_linear_head, "infer"),
    "linear_head_train": (build_linear_head, "train"),
    "vit_b16_infer": (build_vit_b16, "infer"),
    "bert_infer": (build_bert, "infer"),
    "bert_train": (build_bert, "train"),
    "convnext_t_infer": (build_convnext_t, "infer"),
    "resnet50_train": (_tcperf_model("resnet50", 64), "train"),
    "gpt2_train": (_tcperf_model("gpt2", 8), "train"),
}
# the advisor runs each recipe in a worker process, which rebuilds a spec from its factory file when given one (a
# class imported from a file does not unpickle there) and unpickles it otherwise
TARGETS = {"linear_head_infer": LINEAR_HEAD, "linear_head_train": LINEAR_HEAD}


def build_spec(case: str):
    """-> (tcperf.advisor.load.Spec on the CPU, random weights at seed 0; mode)."""
    from tcperf.advisor import load
    builder, mode = CASES[case]
    model, inputs, loss_fn, targets = builder(mode)
    spec = load.build(model, inputs, loss_fn, None, case, targets)
    spec.name = case
    return spec, mode


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


def check_train(step, advisor_status: str) -> dict:
    losses = [float(step()) for _ in range(TRAIN_CHECK_STEPS)]     # sync point, once a step
    finite = all(math.isfinite(x) for x in losses)
    return {"losses": losses, "finite": finite, "passes": finite and advisor_status == "ok"}


# --- by hand ----------------------------------------------------------------------------------------------------------
def hand_time(step, seconds: float = 1.0, windows: int = 3) -> dict:
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


def compiles(name: str) -> bool:
    from tcperf.recipes import get
    try:
        return bool(get(name).compile)
    except Exception:      # noqa: BLE001 - a name the recipes module does not know: assume the expensive case
        return True


def hand_recipes(advice) -> list:
    """The advisor's results to redo by hand: every one that ran (ok or fails) and does not compile, the compiled
    ones among its TOP fastest passing, the pick, and compiled ones called failing but timed faster than the pick."""
    ran = [r for r in advice.recipes if r.status in TIMED]
    passing = sorted((r for r in ran if r.status == "ok" and r.step_ms), key=lambda r: r.step_ms)
    rec = advice.verdict.get("recommended")
    pick_ms = next((r.step_ms for r in ran if r.recipe == rec and r.step_ms), None)
    keep = {r.recipe for r in passing[:TOP]} | {rec}
    keep |= {r.recipe for r in ran if r.status == "fails" and r.step_ms and pick_ms and r.step_ms < pick_ms}
    return [r for r in ran if not compiles(r.base or r.recipe) or r.recipe in keep]


def by_hand_one(model, spec, r, mode, device, ref, tolerance) -> dict:
    row = {"recipe": r.recipe, "base": r.base, "keep_fp32": list(r.keep_fp32 or []), "advisor_status": r.status,
           "advisor_ms": r.step_ms}
    try:
        step = prepare(model, spec, r.base or r.recipe, mode, device, r.keep_fp32 or ())
        row.update(check_infer(step, ref, tolerance) if mode == "infer" else check_train(step, r.status))
        row.update(hand_time(step))
        del step
    except Exception as e:      # noqa: BLE001 - a recipe that cannot run by hand is a row, not a crash
        row.update(passes=False, why=f"{type(e).__name__}: {str(e).strip()[:160]}")
    finally:
        release()
    return row


def by_hand(model, spec, advice, mode, device) -> list[dict]:
    """The chosen recipes prepared, checked and timed in a plain loop; one row each."""
    model = model.to(device)
    ref = infer_reference(model, spec, device) if mode == "infer" else None
    rows = []
    for r in hand_recipes(advice):
        row = by_hand_one(model, spec, r, mode, device, ref, advice.tolerance)
        print(f"  by hand {row['recipe']}: {_f(row.get('ms'))} ms (advisor {_f(row['advisor_ms'])}), "
              f"passes {row.get('passes')} {row.get('why', '')}", flush=True)
        rows.append(row)
    return rows


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
    return [h["recipe"] for h in hand if h["advisor_status"] == "fails" and h.get("passes")]


def advise(spec, mode, device, timeout):
    import tcperf.advisor.api as api
    extra = {"timeout": timeout} if timeout is not None else {}
    if spec.name in TARGETS and "target" in inspect.signature(api.run).parameters:
        extra["target"] = TARGETS[spec.name]
    return api.run(copy.copy(spec), mode=mode, device=device,
                   log=lambda text: print(f"  {spec.name}: {text}", flush=True), **extra)


def one(case: str, device, args) -> dict:
    t_case = time.perf_counter()
    spec, mode = build_spec(case)
    model = copy.deepcopy(spec.model)          # the hand loop's own copy, whatever the advisor does to its model
    t0 = time.perf_counter()
    advice = advise(spec, mode, device, args.timeout)
    advise_s = time.perf_counter() - t0
    run_id = advice.save(args.db, f"benchmarks/advise_gpu.py {case}")
    spec.model = None
    release()
    t0 = time.perf_counter()
    hand = by_hand(model, spec, advice, mode, device)
    row = summarize(case, mode, advice, hand)
    row.update(advise_s=advise_s, hand_s=time.perf_counter() - t0, case_s=time.perf_counter() - t_case,
               run_id=run_id)
    return row


def summarize(case, mode, advice, hand) -> dict:
    rec = advice.verdict.get("recommended")
    passing = [h for h in hand if h.get("passes") and h.get("ms")]
    best = min(passing, key=lambda h: h["ms"]) if passing else None
    mine = next((h for h in hand if h["recipe"] == rec), {})
    ratio = best["ms"] / mine["ms"] if mine.get("ms") and best else None
    sick = healthy_failing(advice, hand, mode)
    ok = ratio is not None and ratio >= TARGET and bool(mine.get("passes")) and not sick
    return {"case": case, "mode": mode, "recommended": rec, "advisor_ms": advice.verdict.get("step_ms"),
            "speedup": advice.verdict.get("speedup"), "tolerance": advice.tolerance,
            "hand_ms_recommended": mine.get("ms"), "recommended_passes_by_hand": mine.get("passes"),
            "best_by_hand": best["recipe"] if best else None, "best_hand_ms": best["ms"] if best else None,
            "ratio": ratio, "healthy_failing": sick, "verdict": "PASS" if ok else "FAIL", "hand": hand,
            "advice": advice.to_dict() if hasattr(advice, "to_dict") else None}


def error_row(case: str, e: BaseException, t0: float) -> dict:
    import traceback
    traceback.print_exc()
    return {"case": case, "mode": CASES[case][1], "verdict": "ERROR", "error": f"{type(e).__name__}: {e}"[:300],
            "case_s": time.perf_counter() - t0, "hand": [], "healthy_failing": []}


# --- output ---------------------------------------------------------------------------------------------------------
def _s(x) -> str:
    return "" if x is None else str(x)


def _f(x) -> str:
    return f"{x:.4g}" if isinstance(x, (int, float)) and x else ""


def print_table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"tcperf advise vs by hand · {torch.cuda.get_device_name()} · torch {torch.__version__}")
    for col in ("case", "recommended", "advisor ms", "hand ms (rec.)", "best by hand", "hand ms (best)",
                "best/rec", "accuracy ok", "healthy failing", "verdict", "advise s", "case s"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["case"], str(r.get("recommended") or r.get("error", "")), _f(r.get("advisor_ms")),
                  _f(r.get("hand_ms_recommended")), str(r.get("best_by_hand") or ""), _f(r.get("best_hand_ms")),
                  f"{r['ratio']:.3f}" if r.get("ratio") else "", _s(r.get("recommended_passes_by_hand")),
                  ", ".join(r["healthy_failing"]), r["verdict"], f"{r.get('advise_s', 0):.0f}",
                  f"{r.get('case_s', 0):.0f}")
    Console(width=200).print(t)
    for r in rows:
        timed = [h for h in r["hand"] if h.get("ms") and h.get("advisor_ms")]
        if timed:
            print(f"{r['case']}: ms a step, advisor / by hand: " + ", ".join(
                f"{h['recipe']} {h['advisor_ms']:.4g}/{h['ms']:.4g} ({h['advisor_ms'] / h['ms']:.2f})"
                for h in timed))
        for name in r["healthy_failing"]:
            print(f"FAIL {r['case']}: healthy recipe called failing: {name}")
        if r.get("ratio") is not None and r["ratio"] < TARGET:
            print(f"FAIL {r['case']}: the pick {r['recommended']} is {r['ratio']:.3f} of {r['best_by_hand']}'s speed")


def write_json(path: Path, rows: list[dict]) -> None:
    """Merge into advise_gpu.json: rows of earlier invocations stay, a case run again replaces its row."""
    old = json.loads(path.read_text()).get("rows", []) if path.exists() else []
    mine = {r["case"] for r in rows}
    merged = [r for r in old if r.get("case") not in mine] + rows
    path.write_text(json.dumps({"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                                "torch": torch.__version__, "target": TARGET, "rows": merged},
                               indent=1, default=str))


def pickles(spec) -> str:
    import io
    try:
        torch.save(spec, io.BytesIO())
        return "pickled spec"
    except Exception as e:      # noqa: BLE001
        return f"NOT picklable ({type(e).__name__}: {str(e)[:80]}): the advisor runs it in-process, no timeout"


def check_build(cases: list[str]) -> int:
    """Build every case on the CPU and run it once (the loss too for training): no GPU needed."""
    failed = 0
    for case in cases:
        t0 = time.perf_counter()
        try:
            spec, mode = build_spec(case)
            spec.model.train(mode == "train")
            with torch.no_grad():
                out = spec.model(*spec.args, **spec.kwargs)
            loss = hand_loss(spec)(out, spec.targets) if mode == "train" else None
            ref = flat(out)
            leaf = last_leaf(spec.model, spec, "cpu") if degenerate(ref) else None
            params = sum(p.numel() for p in spec.model.parameters())
            worker = "factory file" if case in TARGETS else pickles(spec)
            print(f"{case}: {type(spec.model).__name__} {params / 1e6:.1f}M params, {ref.numel()} output values"
                  + (f", loss {float(loss):.4g}" if loss is not None else "")
                  + (f", degenerate output: compare the input of {leaf}" if leaf else "")
                  + f"; to the advisor's workers: {worker} ({time.perf_counter() - t0:.1f} s)", flush=True)
        except Exception as e:      # noqa: BLE001
            failed += 1
            print(f"{case}: ERROR {type(e).__name__}: {e}", flush=True)
    return 1 if failed else 0


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from: {', '.join(CASES)}")
    ap.add_argument("--out", default="out")
    ap.add_argument("--db", default=None)
    ap.add_argument("--timeout", type=float, default=None, help="seconds per recipe, passed to the advisor")
    ap.add_argument("--check-build", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; choose from: {', '.join(CASES)}")
    return args


def main() -> int:
    args = parse_args()
    if args.check_build:
        return check_build(args.cases)
    if not torch.cuda.is_available():
        print("advise_gpu.py needs a CUDA GPU")
        return 1
    device = torch.device("cuda")
    os.makedirs(args.out, exist_ok=True)
    path = Path(args.out) / "advise_gpu.json"
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
    print_table(rows)
    print(f"wrote {path}")
    return 0 if all(r["verdict"] == "PASS" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
