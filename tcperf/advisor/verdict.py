"""The verdict: the recipe to use (choose_for: the runoff's pick, or the cheapest job of `steps` on one input or a
workload's stream), its speedup and accuracy cost, the shape fixes worth making (measured), and the code to paste.

    v = decide(results, fixes, device_type="cuda")
    v["recommended"], v["speedup"], v["accuracy"]       # 'amp_bf16+compile', 3.1, {...}

On a CPU nothing is timed: the verdict names the recipes that pass the accuracy check and says that the speed
verdict needs a CUDA GPU; its snippets are for the passing recipe measured best (candidate), marked as untimed.
"""
from __future__ import annotations

from . import job as jobmod
from . import runoff
from .lint import Layer
from .trials import RecipeResult, setup_of
from .snippets import all_snippets

GPU_NEEDED = "speed verdicts need a CUDA GPU: this ran on the CPU, so only the shape lint and accuracy were checked"
HOST_BOUND = 0.8     # GPU busy below this share of a step: the host sets the pace


def choose(results: list[RecipeResult], decision: dict | None = None) -> RecipeResult | None:
    """The runoff's pick (tcperf.advisor.runoff); without a runoff, the fastest recipe that passes the tolerance
    (timed ones only)."""
    timed = [r for r in results if r.passes and r.step_ms]
    picked = [r for r in timed if decision and r.recipe == decision.get("pick")]
    if picked:
        return picked[0]
    return min(timed, key=lambda r: r.step_ms) if timed else None


def candidate(results: list[RecipeResult]) -> RecipeResult | None:
    """Without a speed verdict (a CPU): of the passing recipes other than fp32 strict, the one measured best, the
    fastest where timed, else the nearest fp32. The ladder's last passing rung was offered before: bf16 code on a
    CPU where fp16 passed with a tenth of its error, and ran 100x faster there (issue 58)."""
    passing = [r for r in results if r.passes]
    others = [r for r in passing if r.recipe != "fp32"] or passing
    timed = [r for r in others if r.step_ms]
    if timed:
        return min(timed, key=lambda r: r.step_ms)
    return min(others, key=lambda r: r.error if r.error is not None else float("inf"), default=None)


def accuracy_cost(r: RecipeResult) -> dict:
    keys = ("rel_error", "max_abs_error", "max_abs_ref", "top1_agree", "metric", "metric_fp32", "metric_change",
            "loss", "loss_fp32", "loss_change", "fall", "fall_fp32", "kept", "skipped_steps")
    return {"criterion": r.criterion, "error": r.error, **{k: r.accuracy[k] for k in keys if k in r.accuracy}}


def faster_but_failing(results: list[RecipeResult], chosen: RecipeResult | None) -> list[dict]:
    """Recipes that were faster than the choice but missed the tolerance: what the choice gives up, and why."""
    limit = chosen.step_ms if chosen else float("inf")
    return [{"recipe": r.recipe, "step_ms": r.step_ms, "speedup": r.speedup, "why": r.message}
            for r in results if r.status == "fails" and r.step_ms and r.step_ms < limit]


def host_bound_note(r: RecipeResult) -> str | None:
    """When the GPU idles for part of the chosen recipe's step, say so and what helps."""
    if r.gpu_busy is None or r.gpu_busy >= HOST_BOUND:
        return None
    cure = ("a larger batch" if setup_of(r.base or r.recipe).compile == "reduce-overhead"
            else "CUDA graphs (the cuda_graphs recipe) or a larger batch")
    return (f"the GPU is busy {r.gpu_busy:.0%} of a {r.recipe} step and waits for the host (Python, kernel "
            f"launches) the rest: this step's time follows the CPU's speed, and {cure} would help")


def unstable_note(chosen: RecipeResult, results: list[RecipeResult], by_job: bool = False) -> str | None:
    """When the chosen recipe's step time was unstable, say so, and how close the runner-up is. by_job: the
    results are a workload's recipes, weighed by the job (a faster step may have lost on its warm-up)."""
    t = chosen.timing or {}
    if not t.get("unstable"):
        return None
    others = [r for r in results if r.passes and r.step_ms and r is not chosen]
    runner = min(others, key=lambda r: r.step_ms) if others else None
    where, decided = (("over the stream's passes", "the job's cost decided") if by_job else
                      ("in the search", "the runoff's interleaved rounds decided"))
    note = (f"{chosen.recipe}'s step time was unstable {where} (IQR {t['spread']:.0%} of the median, "
            f"fastest step {t['min_ms']:.3g} ms): {decided}")
    if runner and runner.step_ms >= chosen.step_ms:
        note += f"; the runner-up, {runner.recipe}, took {runner.step_ms / chosen.step_ms - 1:.0%} longer"
    elif runner:
        note += (f"; {runner.recipe}'s step is {1 - runner.step_ms / chosen.step_ms:.0%} shorter, but its "
                 f"one-time cost outweighs what it saves over the job")
    return note


def fix_rows(layers: list[Layer]) -> list[dict]:
    return [{"module": l.module, "kind": l.kind, "shape": l.label, "count": l.count,
             "fix": next(iter(l.issues.values()))["fix"] if l.cost is None else l.issues[l.cost["precision"]]["fix"],
             "gain": l.cost["gain"], "saved_share": l.cost["saved_share"], "share": l.cost.get("share")}
            for l in layers]


def choose_for(results: list[RecipeResult], stream: list[RecipeResult] | None, decision: dict,
               steps: int | None) -> RecipeResult | None:
    """The recipe to advise: on a workload (stream not None), the cheapest job on its stream and nothing measured on
    one input only; on one input with a job length, the cheapest job; else the runoff's pick (choose)."""
    if stream is not None:
        return jobmod.pick(stream, steps)
    return jobmod.pick(results, steps) if steps is not None else choose(results, decision)


def decide(results: list[RecipeResult], fixes: list[Layer], mode: str, device_type: str,
           kind: str = "transformer", search: dict | None = None, stream: list[RecipeResult] | None = None,
           steps: int | None = None, varying: dict | None = None) -> dict:
    """Everything the report's last section says, as data. search: tcperf.advisor.search's summary (the runoff's
    decision, what was pruned or not tried); stream: the recipes timed on the workload (tcperf.advisor.streams);
    steps: the job's length (None: long enough that one-time costs vanish); varying: the workload's varying
    dimensions by input name, for the snippets."""
    search = search or {}
    decision = search.get("runoff") or {}
    chosen = choose_for(results, stream, decision, steps) if device_type == "cuda" else None
    on_stream, stream = stream is not None, stream or []
    pick = chosen or candidate(results)        # untimed: padding is worth it only compiled
    v = {"speed_measured": device_type == "cuda", "recommended": chosen.recipe if chosen else None,
         "candidate": None if chosen or not pick else pick.recipe,
         "passing": [r.recipe for r in results if r.passes],
         "failing": {r.recipe: r.message for r in results if r.status in ("fails", "error", "oom")},
         "fixes": fix_rows(fixes), "snippets": {}}
    v["search"] = {k: search[k] for k in ("jobs", "budget_s", "pruned", "not_tried", "timeline") if k in search}
    if stream:
        v.update(workload=True, stream_passing=[r.recipe for r in stream if r.passes],
                 stream_failing={r.recipe: r.message for r in stream if not r.passes})
    if chosen and decision.get("pick") == chosen.recipe and not stream and steps is None:
        v.update(runoff=decision, margin=runoff.sentence(decision))
    if chosen and device_type == "cuda":
        v["job"] = jobmod.summary(stream or results, steps, eager=stream[0].recipe if stream else "fp32")
        v["job_sentence"] = jobmod.sentence(v["job"])
        if stream and stream[0].step_ms:
            v.update(versus=stream[0].recipe, speedup_versus=stream[0].step_ms / chosen.step_ms)
    if chosen:
        v.update(speedup=chosen.speedup, step_ms=chosen.step_ms, median_ms=chosen.timing["median_ms"],
                 iqr_ms=chosen.timing["iqr_ms"], gpu_busy=chosen.gpu_busy, host_bound=host_bound_note(chosen),
                 unstable=unstable_note(chosen, stream or results, by_job=bool(stream)),
                 accuracy=accuracy_cost(chosen), gave_up=faster_but_failing(results, chosen))
    elif pick:
        v["accuracy"] = accuracy_cost(pick)
    if device_type != "cuda":
        v["note"] = GPU_NEEDED
    elif not chosen and on_stream and any(r.passes for r in results):
        v["note"] = "no recipe passed over the workload's stream: see the stream's failures"
    elif not chosen:
        v["note"] = "no recipe passed the tolerance and ran: see the failures"
    if pick:
        setup = setup_of(pick.base or pick.recipe, kind, tuple(pick.keep_fp32), varying or {})
        v["snippets"] = all_snippets(setup, mode, "cuda" if device_type == "cuda" else device_type)
    return v


def headline(v: dict, tolerance: float) -> str:
    """One sentence: the answer."""
    if v.get("recommended"):
        acc, step = v["accuracy"], v.get("step_ms") or v["median_ms"]
        if v.get("workload"):
            faster = (f"{v['speedup_versus']:.2f}x faster a step than {v['versus']} eager on the workload"
                      if v.get("speedup_versus") and v["recommended"] != v.get("versus") else
                      "the cheapest job on the workload")
            text = f"Use {v['recommended']}: {faster} ({step:.3g} ms a step over its stream)"
        else:
            text = f"Use {v['recommended']}: {v['speedup']:.2f}x faster than fp32 strict ({step:.3g} ms a step)"
        text += f", {acc['criterion']} {acc['error']:.2g} (tolerance {tolerance:g})"
        return text + (f"; {v['job_sentence']}" if v.get("job_sentence") else "")
    if v.get("candidate"):
        return (f"Passes the accuracy check here: {', '.join(v['passing'])}. "
                f"The code below is for {v['candidate']}, the nearest fp32 of them (its speed is not measured)")
    return "No recipe both ran and stayed within the tolerance"
