"""The model ladder on a GPU (issue 4): the full ladder for ResNet-50 (batch 256) and GPT-2 small (16 x 1024),
training and inference, plus the LSTM language model and DCGAN on the rungs up to torch.compile (training) and
channels_last (inference); every cell in a worker process (one per recipe and mode, serving every model), stored
in one run, printed as ladder tables, checked against the targets.

    python benchmarks/models_gpu.py [--out DIR] [--db PATH] [--rep-ms 600] [--quick] [--models resnet50,gpt2]
                                    [--modes train] [--recipes fp32,compile,fused,step_graph] [--no-hand]
                                    [--profile] [--ab-rounds 8]

Targets (issue 35), printed beside the hand loops: ResNet-50 training best rung >= 7,500 img/s on an H200 (>= 6,450
on an H100) and >= 1.12x the best rung up to step_graph in the same call; GPT-2 small training (16 x 1024) best rung
>= 500k tokens/s on an H200 and >= 1.15x the best rung up to step_graph; amp_bf16 >= 320k on an H200; each best rung
faster than the plain hand loops timed in the same call before the ladder, at the model's own batch
(benchmarks/hand_loops.py: amp_bf16 (+ channels_last) + torch.compile + fused AdamW, and the same with the whole
step in one CUDA graph). After the ladder each model's best passing rung and best hand loop are built again in this
process and timed in --ab-rounds interleaved rounds (A B, B A, ...): the verdict "faster than the hand loop" is the
rounds' ratios, all above 1, since the GPU's clocks drift between moments minutes apart (ResNet-50's whole-step
graph and its hand-written twin read 0.1% and 1.6% apart on two H200s under sw_power_cap, 2026-11-27); written after
that call, not yet run on a GPU. Only rows whose training check passed count. The rungs past step_graph (autotune,
chunked_ce, pool_kernel, batch: tcperf.recipes) are each one thing on top of it (bn_relu_pool and
"pool_kernel+autotune" on top of pool_kernel, bn_relu on top of bn_relu_pool); --profile shows where each one's step
goes, by kernel kind (tcperf.profiler.kind: matmul, attention, normalization, pooling, softmax/loss, optimizer,
copies, elementwise, reductions, communication), and under a missed target the best rung's kinds: what holds it.
Writes models_gpu.json (the run, every row, the checks and the wall time) under --out (default ./out); the store is
--db (default OUT/models.db). --quick: the small configurations of ResNet-50 and GPT-2 on every rung (a smoke test
of every GPU code path: compile, CUDA graphs, fp8, int8; the figures mean nothing). The full plan runs past one
10-minute device call (torch.compile of the full models is most of it): on an H200 (2026-11-25) ResNet-50 and GPT-2
training on fp32, amp_bf16, channels_last, compile, fused and step_graph took 309 s, and their hand loops 94 s more;
split it with --models and --recipes, e.g. --models gpt2 --modes train --recipes step_graph,chunked_ce,batch. Both
models' best rungs and hand loops in one call (issue 35), without ResNet-50's batch search (a compile of minutes for
each batch it tries): --modes train --recipes step_graph,chunked_ce,gpt2:batch --profile (on an H100, 2026-11-27:
GPT-2's three rungs, search and hand loops 270 s; ResNet-50's rung and hand loops about 150 s)."""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch
from rich.console import Console

from hand_loops import AB_ROUNDS, WARMUP, WINDOWS, interleaved, plain_loop, plain_step  # beside this script
from tcperf import engine, env, ladder, models, recipes, source
from tcperf.commands.models import print_ladder
from tcperf.profiler import kinds_line
from tcperf.records import Job, TimingConfig
from tcperf.store import Store

UP_TO_COMPILE = ["fp32", "tf32", "amp_fp16", "amp_bf16", "channels_last", "compile"]
FULL = {  # mode -> model -> recipes; batches are each model's own: ResNet-50 256, GPT-2 16, LSTM 64, DCGAN 128
    "train": {"resnet50": recipes.default_climb(), "gpt2": recipes.default_climb(), "lstm": UP_TO_COMPILE,
              "dcgan": UP_TO_COMPILE},
    "infer": {"resnet50": recipes.default_climb(), "gpt2": recipes.default_climb(), "lstm": UP_TO_COMPILE[:-1],
              "dcgan": UP_TO_COMPILE[:-1]},
}
QUICK = {
    "train": {"resnet50": recipes.default_climb(), "gpt2": recipes.default_climb(), "lstm": ["fp32", "amp_bf16"],
              "dcgan": ["fp32", "amp_bf16"]},
    "infer": {"resnet50": recipes.default_climb(), "gpt2": recipes.default_climb()},
}
QUICK_BATCH = 8
TARGETS = (  # model, mode, which rows, least throughput by GPU, least gain over the rungs up to step_graph (issue 35)
    ("resnet50", "train", "best", {"H200": 7500.0, "H100": 6450.0}, 6450.0 / 5757.0),
    ("gpt2", "train", "best", {"H200": 500_000.0}, 1.15),
    ("gpt2", "train", "amp_bf16", {"H200": 320_000.0}, None),
)
BEFORE = recipes.LADDER[:recipes.LADDER.index("step_graph") + 1]   # the rungs issue 35 started from
HAND = {  # model -> the plain loops the best training rung is held against (hand_loops.plain_loop's `how`)
    "resnet50": {"compile + fused": {"autocast": torch.bfloat16, "channels_last": True, "compile": True,
                                     "fused": True},
                 "compile + fused + step graph": {"autocast": torch.bfloat16, "channels_last": True,
                                                  "compile": True, "fused": True, "graph": True}},
    "gpt2": {"compile + fused": {"autocast": torch.bfloat16, "compile": True, "fused": True},
             "compile + fused + step graph": {"autocast": torch.bfloat16, "compile": True, "fused": True,
                                              "graph": True}},
}
HAND_STEPS = 40


def own_batch(name: str, config: str) -> int:
    """The batch a model's rungs and hand loops run at: QUICK_BATCH in the small configuration, else its own."""
    return QUICK_BATCH if config == "small" else models.config(models.get(name), config)["batch"]


def mode_cases(mode: str, plan: dict, config: str, models_wanted) -> list:
    """Every model's cells for one mode, ordered by rung: one worker per recipe serves all the models."""
    cases = [c for name, names in plan.items() if name in models_wanted
             for c in ladder.cells([name], mode, names, [own_batch(name, config)], config=config)]
    rank = {name: i for i, name in enumerate(recipes.LADDER)}
    return sorted(cases, key=lambda c: rank[c.precision])


def run_ladders(store: Store, run_id: int, plans: dict, config: str, device, rep_ms: float, ceilings: dict,
                models_wanted, modes, profile: bool = False, timeout: float = 600.0) -> list[dict]:
    rows = []

    def keep(result) -> None:
        store.add_result(run_id, result)
        r = result.to_row()                  # as the store keeps it: what the checks below read
        rows.append(r)
        m = r.get("metrics") or {}
        print(f"  {r['shape'].get('model')} {r['shape'].get('mode')} {r['precision']}: {r['status']} "
              f"{m.get('throughput') or 0:,.0f} {m.get('unit', '')} {r.get('message') or ''}"[:160], flush=True)
        if m.get("kernel_ms"):
            print(f"    profile: step {r.get('mean_ms') or 0:.2f} ms, kernels {m['kernel_ms']:.2f} ms (GPU busy "
                  f"{m.get('gpu_busy') or 0:.0%}), matmul/conv {m.get('matmul_ms') or 0:.2f} ms, Tensor Core share "
                  f"{m.get('tc_share') or 0:.0%}", flush=True)
            if m.get("kernel_kinds"):
                print(f"      by kind, a step: {kinds_line(m['kernel_kinds'])}", flush=True)
            for which, group in list((m.get("kernel_leaders") or {}).items())[:6]:
                names = "; ".join(f"{k['ms']:.2f} ms {k['name'][:70]}" for k in group)
                print(f"        {which}: {names}", flush=True)
            for k in m.get("kernels") or []:
                print(f"      {k['time_us'] / 3e3:7.2f} ms a step (of 3 profiled)  {k['name'][:110]}", flush=True)

    for mode in modes:
        t0 = time.time()
        job = Job(TimingConfig(rep_ms=rep_ms), profile=profile, ceilings=ceilings, timeout=timeout)
        ladder.climb(mode_cases(mode, plans.get(mode, {}), config, models_wanted), device, job, on_result=keep)
        print(f"{mode}: {time.time() - t0:.0f} s", flush=True)
    return rows


def checks(rows: list[dict], gpu: str) -> dict:
    """Each target whose rows this call ran (a rung left out by --recipes is no check, not a miss): the best row
    that passed its training check, against the least throughput for this GPU (where the issue names one) and, for
    "best", its gain over the best of the rungs up to step_graph in the same call (the issue's gain on an H100)."""
    out = {}
    for model, mode, which, least_by_gpu, gain_least in TARGETS:
        ran = [r for r in rows if r["shape"].get("model") == model and r["shape"].get("mode") == mode
               and r["status"] == "ok"]
        mine = [r for r in ran if which == "best" or r["precision"] == which]
        if not mine:
            continue
        best = max(mine, key=lambda r: r["metrics"]["throughput"])
        value = best["metrics"]["throughput"]
        least = next((v for name, v in least_by_gpu.items() if name in gpu), None)
        before = max((r for r in ran if r["precision"] in BEFORE), key=lambda r: r["metrics"]["throughput"],
                     default=None)
        gain = value / before["metrics"]["throughput"] if before and gain_least else None
        out[f"{model} {mode} {which}"] = {
            "recipe": best["precision"], "batch": best["metrics"].get("batch") or best["shape"]["batch"],
            "throughput": value,
            "unit": best["metrics"].get("unit"), "target": least, "meets": least is not None and value >= least,
            "before": before["precision"] if before else None, "gain": gain, "gain_target": gain_least,
            "meets_gain": gain is not None and gain >= gain_least,
            "kinds": best["metrics"].get("kernel_kinds"), "gpu_busy": best["metrics"].get("gpu_busy")}
    return out


def only_rungs(plans: dict, text: str) -> dict:
    """plans (mode -> model -> rungs) cut to --recipes: a rung for every model, or MODEL:RUNG for that model's only
    (ResNet-50's batch search takes minutes a batch: `step_graph,chunked_ce,gpt2:batch` leaves it out)."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    planned = {m for plan in plans.values() for m in plan}
    mine = {tuple(t.split(":", 1)) for t in items if t.split(":", 1)[0] in planned}
    shared = [t for t in items if t.split(":", 1)[0] not in planned]
    every = set(recipes.parse_list(",".join(shared))) if shared else set()
    for _, rung in mine:
        recipes.get(rung)                              # a mistyped rung: one line, exit 2
    return {mode: {m: [r for r in names if r in every or (m, r) in mine] for m, names in plan.items()}
            for mode, plan in plans.items()}


def check_lines(found: dict, gpu: str) -> list[str]:
    """The checks in words: the value, the rung (its training check passed), the target for this GPU, the gain."""
    lines = []
    for name, c in found.items():
        target = (f"target >= {c['target']:,.0f} on an {gpu}: {'meets' if c['meets'] else 'BELOW'}"
                  if c["target"] is not None else f"no throughput target for an {gpu}")
        gain = (f"; {c['gain']:.3f}x the best rung up to step_graph ({c['before']}), target >= "
                f"{c['gain_target']:.2f}x: {'meets' if c['meets_gain'] else 'BELOW'}" if c["gain"] else "")
        lines.append(f"check {name}: {c['throughput']:,.0f} {c['unit']} ({c['recipe']}, batch {c['batch']}, training "
                     f"check passed); {target}{gain}")
        missed = (c["target"] is not None and not c["meets"]) or (c["gain"] is not None and not c["meets_gain"])
        if missed and c.get("kinds"):
            busy = f", GPU busy {c['gpu_busy']:.0%}" if c.get("gpu_busy") else ""
            lines.append(f"  what holds it, {c['recipe']}'s step by kernel kind{busy}: {kinds_line(c['kinds'])}")
        elif missed:
            lines.append("  what holds it: run with --profile for the best rung's step by kernel kind")
    return lines


def hand_loops(device, models_wanted, config: str) -> dict:
    """Each model's hand loops (HAND: one build and compile each, WINDOWS windows of items/s) at its own batch,
    timed before the ladder: a rung that runs past the call's time cannot take the comparison with it (GPT-2's
    batch rung did on an H100, 2026-11-27), and the loops get the GPU before the ladder has warmed it.
    -> {model: {"batch": ..., "times": {label: [items/s a window]}}}"""
    out = {}
    for name, loops in HAND.items():
        if name not in models_wanted:
            continue
        batch = own_batch(name, config)
        times = {}
        for label, how in loops.items():
            try:
                times[label] = plain_loop(name, config, batch, how, HAND_STEPS, device, windows=WINDOWS)
            except Exception as e:                       # recorded for this loop, the others go on
                print(f"  hand {name} {label}: {type(e).__name__}: {e}"[:200], flush=True)
            release()
            if label in times:
                print(f"hand {name} train b={batch} {label}: " + ", ".join(f"{x:,.0f}" for x in times[label]),
                      flush=True)
        out[name] = {"batch": batch, "times": times}
    return out


def release() -> None:
    """What a hand loop leaves in this process goes before the ladder's workers need the GPU's memory: its compiled
    graphs (Dynamo's caches hold the model) and the allocator's cached blocks."""
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()


def against_hand(rows: list[dict], timed: dict) -> dict:
    """Each model's best training rung (its check passing) against its best hand loop, judged by its best window,
    as the ladder's rung by its mean; printed."""
    out = {}
    for name, t in timed.items():
        best, (top, rate) = _best_train_row(rows, name), _best_hand(t)
        if best is None or top is None:
            continue
        mine = best["metrics"]["throughput"]
        out[name] = {"best_rung": best["precision"], "rung": mine, "hand": t["times"], "hand_best": top,
                     "ratio": mine / rate, "batch": t["batch"], "unit": best["metrics"].get("unit")}
        ran_at = best["metrics"].get("batch") or best["shape"]["batch"]   # the batch rung runs at the one it found
        print(f"{name}: best rung {best['precision']} (batch {ran_at}) {mine:,.0f} / best hand loop ({top}, batch "
              f"{t['batch']}) {rate:,.0f} = {mine / rate:.3f} (target > 1.0: {'meets' if mine > rate else 'BELOW'})",
              flush=True)
    return out


def head_to_head(rows: list[dict], timed: dict, device, config: str, rounds: int) -> dict:
    """Each model's best passing training rung against its best hand loop, both built again in this process after
    the ladder and timed interleaved (hand_loops.interleaved: `rounds` rounds, the order reversed every other one),
    so that a verdict "faster than the hand loop" is not the GPU's drift between the hand loops' moment and the
    rung's (on an H200 under sw_power_cap, 2026-11-27, the same compiled step read 0.1% and 1.6% apart, timed
    minutes apart). Printed; -> {model: {rung, hand, ratios (rung / hand a round), median, low, high}}."""
    out = {}
    for name, t in timed.items():
        best, (top, _) = _best_train_row(rows, name), _best_hand(t)
        if best is None or top is None or rounds < 1:
            continue
        try:
            rates = _interleave(best, name, t["batch"], HAND[name][top], config, device, rounds)
        except Exception as e:                           # recorded for this model, the others go on
            print(f"{name}: interleaved {best['precision']} against the hand loop: {type(e).__name__}: {e}"[:200])
            continue
        finally:
            release()
        ratios = sorted(a / b for a, b in zip(rates["rung"], rates["hand"]))
        median = statistics.median(ratios)
        out[name] = {"rung": best["precision"], "hand": top, "rates": rates, "ratios": ratios, "median": median,
                     "low": ratios[0], "high": ratios[-1]}
        verdict = "faster" if ratios[0] > 1 else "slower" if ratios[-1] < 1 else "no verdict: the rounds disagree"
        print(f"{name}: {best['precision']} / hand loop ({top}), {rounds} interleaved rounds: {median:.3f} "
              f"(rounds {ratios[0]:.3f}-{ratios[-1]:.3f}): {verdict}", flush=True)
    return out


def _best_hand(timed_model: dict) -> tuple[str | None, float | None]:
    """(label, items/s) of a model's fastest hand loop by its best window; (None, None) when none ran."""
    best = {label: max(v) for label, v in timed_model["times"].items() if v}
    top = max(best, key=best.get, default=None)
    return top, best.get(top)


def _best_train_row(rows: list[dict], name: str) -> dict | None:
    return max((r for r in rows if r["shape"].get("model") == name and r["shape"].get("mode") == "train"
                and r["status"] == "ok"), key=lambda r: r["metrics"]["throughput"], default=None)


def rung_of(row: dict) -> tuple[str, int]:
    """The recipe and batch that make a ladder row's step again: the batch rung's are the base it searched on and
    the batch it found; any other row's, its own."""
    m = row["metrics"]
    if recipes.get(row["precision"]).fastest_batch and m.get("base_rung"):
        return m["base_rung"], m.get("batch") or row["shape"]["batch"]
    return row["precision"], row["shape"]["batch"]


def _interleave(row: dict, name: str, hand_batch: int, how: dict, config: str, device, rounds: int) -> dict:
    recipe, batch = rung_of(row)
    spec = source.builtin(name, config, batch, 0, device)
    rung = engine._prepare(spec, recipes.get(recipe), "train", device)
    hand, _, _, hand_items = plain_step(name, config, hand_batch, how, device)
    for _ in range(WARMUP):                              # compiles, captures the graphs, warms the caches
        rung()
        hand()
    return interleaved({"rung": rung, "hand": hand}, {"rung": spec.items, "hand": hand_items}, device, rounds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out")
    ap.add_argument("--db", default=None)
    ap.add_argument("--rep-ms", type=float, default=600.0, help="timing budget of one cell's timed steps")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--models", default="resnet50,gpt2,lstm,dcgan", help="a subset, e.g. resnet50,gpt2")
    ap.add_argument("--modes", default="train,infer", help="train, infer or both (default)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a cell may take, compiling included, "
                    "before it is recorded as timeout and the ladder goes on (ResNet-50's autotune rung compiled for "
                    "over 8 minutes on an H100)")
    ap.add_argument("--no-hand", action="store_true", help="skip the hand loops (timed before the ladder)")
    ap.add_argument("--recipes", default=None, help="only these rungs of each plan, e.g. fp32,compile,step_graph; "
                    "MODEL:RUNG for one model's plan only, e.g. step_graph,chunked_ce,gpt2:batch")
    ap.add_argument("--ab-rounds", type=int, default=AB_ROUNDS, help="after the ladder, each model's best rung "
                    "and best hand loop built again and timed in this many interleaved rounds (0: not)")
    ap.add_argument("--profile", action="store_true", help="profile each cell after its timing: GPU busy, Tensor "
                    "Core share, matmul time, the largest kernels (what holds a rung below its target)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("models_gpu.py needs a CUDA GPU", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    device = torch.device("cuda")
    store = Store.open(args.db or os.path.join(args.out, "models.db"))
    environment = env.collect(device)
    ceilings = store.ceilings(environment["gpu"]["name"]) if hasattr(store, "ceilings") else {}
    run_id = store.start_run("models", "python benchmarks/models_gpu.py" + (" --quick" if args.quick else ""),
                             environment)
    t0 = time.time()
    config = "small" if args.quick else "full"
    timed = {} if args.no_hand or "train" not in args.modes else hand_loops(device, args.models.split(","), config)
    status = "interrupted"
    try:
        plans = QUICK if args.quick else FULL
        if args.recipes:
            plans = only_rungs(plans, args.recipes)
        rows = run_ladders(store, run_id, plans, config, device, 50.0 if args.quick else args.rep_ms, ceilings,
                           args.models.split(","), args.modes.split(","), profile=args.profile, timeout=args.timeout)
        status = "done"
    finally:
        store.finish_run(run_id, status)
    print_ladder(rows, Console(width=200))
    hand = against_hand(rows, timed)
    ab = head_to_head(rows, timed, device, config, args.ab_rounds)
    gpu = environment["gpu"]["name"]
    report = {"run": store.run(run_id), "results": rows, "checks": checks(rows, gpu), "hand": hand, "ab": ab,
              "wall_s": time.time() - t0, "ceilings": ceilings, "quick": args.quick}
    for line in check_lines(report["checks"], gpu):
        print(line)
    with open(os.path.join(args.out, "models_gpu.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    print(f"wall {report['wall_s']:.0f} s; wrote {os.path.join(args.out, 'models_gpu.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
