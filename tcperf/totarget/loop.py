"""One seeded run: train a workload under one recipe until the validation metric first reaches the target, or
the budget (steps, minutes) runs out, or the loss turns NaN (status `diverged`).

The step is tcperf.recipes.prepare's (the ladder's own: precision context, GradScaler, channels_last, compile);
each new batch is copied into the step's input and target tensors, so compiled and graphed steps see static
buffers. Evaluation runs on the fixed schedule (every task.eval_every steps, the first after the warm-up) with the
uncompiled module, under the recipe's precision. Every part is timed apart with the host clock at
synchronisation points (end-to-end wall time is what a user pays for): WARMUP_STEPS steps (compile included),
the steady steps, each evaluation; tcperf.totarget.clock sums them per policy.

    row = train_to_target(task, "amp_bf16", torch.device("cuda"), seed=0, target=1.6, budget=Budget(max_steps=5000))
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass

import torch

from .. import engine, precision, recipes
from ..records import Case, Job, Result
from ..spec import Spec
from . import build, reached, stats

WARMUP_STEPS = 3       # compile (forward and backward), cuDNN autotuning and CUDA-graph recording happen here
OP = "totarget.run"


@dataclass(frozen=True)
class Budget:
    max_steps: int | None = None
    max_minutes: float | None = None      # wall time of the run after initialisation


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)    # sync point: the host clock reads finished GPU work


def _steps(step, targets, task, gen, sched, n: int, feed_first: bool):
    loss = None
    for i in range(n):
        if feed_first or i:
            x, y = task.batch(gen)
            step.inputs[0].copy_(x)
            targets.copy_(y)
        loss = step()
        if sched is not None:
            sched.step()
    return loss


def _evaluate(task, step: recipes.Step, device: torch.device) -> float:
    model = getattr(step.model, "_orig_mod", step.model)       # eager: no recompilation for eval mode or shape
    model.eval()
    try:
        with torch.no_grad(), precision.apply(precision.get(step.recipe.precision), device.type,
                                              benchmark_cudnn=step.recipe.cudnn_benchmark):   # as its training
            return task.evaluate(model)
    finally:
        model.train()


def prepare(task, rec: recipes.Recipe, device: torch.device, seed: int):
    """(step, targets, generator, scheduler), or a skip reason (str) when the recipe does not apply here. Every
    seeded run compiles afresh (engine.fresh): a later seed in the same worker would otherwise reuse the first
    one's compiled code, and its time to target would leave out the compile a user pays."""
    if rec.step_graph and task.lr_at:
        return (f"{rec.name}: a whole-step CUDA graph replays the learning rate it captured; "
                f"{task.workload}'s schedule changes it every step")
    engine.fresh(device, rec)
    torch.manual_seed(seed)
    gen = torch.Generator(device=device).manual_seed(seed)
    model = task.make_model()
    x, y = task.batch(gen)
    why = engine.skip_reason(rec, Spec(model.to(device), (x,)), "train", device)
    if why:
        return why
    step = recipes.prepare(model, rec, "train", (x,), device, loss_fn=task.loss_fn, optimizer=task.optimizer, targets=y)
    sched = torch.optim.lr_scheduler.LambdaLR(step.optimizer, task.lr_at) if task.lr_at else None
    return step, y, gen, sched


def train_to_target(task, recipe, device, *, seed: int, target: float, budget: Budget) -> dict:
    """One run -> {status, message, trace, steps, warmup_s, ...}; status ok (reached), not_reached, diverged or
    skipped."""
    rec, device = recipes.with_cudnn_benchmark(recipes.get(recipe)), torch.device(device)
    t_init = time.perf_counter()
    made = prepare(task, rec, device, seed)
    if isinstance(made, str):
        return {"status": "skipped", "message": made, "trace": []}
    step, targets, gen, sched = made
    _sync(device)
    init_s = time.perf_counter() - t_init
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*lr_scheduler.step.*")   # GradScaler's skipped first steps
        out = _run(task, step, targets, gen, sched, device, target, budget)
    return {**out, "init_s": init_s, "notes": list(step.notes)}


def _run(task, step, targets, gen, sched, device, target: float, budget: Budget) -> dict:
    start = time.perf_counter()
    cap = budget.max_steps or math.inf
    first = int(min(WARMUP_STEPS, cap))
    loss = _steps(step, targets, task, gen, sched, first, feed_first=False)
    _sync(device)
    warmup_s, train_s, eval_s, steps, trace = time.perf_counter() - start, 0.0, 0.0, first, []
    while True:
        n = int(min(task.eval_every - steps % task.eval_every, cap - steps))
        t0 = time.perf_counter()
        if n > 0:
            loss = _steps(step, targets, task, gen, sched, n, feed_first=True)
        _sync(device)
        t1 = time.perf_counter()
        metric = _evaluate(task, step, device)
        t2 = time.perf_counter()
        steps, train_s, eval_s = steps + max(n, 0), train_s + t1 - t0, eval_s + t2 - t1
        loss_value = float(loss)
        trace.append({"step": steps, "epoch": steps / task.steps_per_epoch, "metric": metric, "loss": loss_value,
                      "train_s": train_s, "warmup_s": warmup_s, "eval_s": eval_s})
        status = _status(metric, loss_value, target, task.higher_is_better, steps, cap, t2 - start, budget)
        if status:
            return {"status": status[0], "message": status[1], "trace": trace, "steps": steps,
                    "warmup_steps": first, "warmup_s": warmup_s}


def _status(metric, loss, target, higher, steps, cap, wall_s, budget: Budget):
    if not (math.isfinite(loss) and math.isfinite(metric)):
        return "diverged", f"non-finite {'loss' if not math.isfinite(loss) else 'metric'} at step {steps}"
    if reached(metric, target, higher):
        return "ok", ""
    if steps >= cap:
        return "not_reached", f"not reached within --max-steps {steps}"
    if budget.max_minutes is not None and wall_s >= budget.max_minutes * 60:
        return "not_reached", f"not reached within --max-minutes {budget.max_minutes:g}"
    return None


# --- the worker's entry point ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunArgs:
    """One seeded run beyond its identity: the workload's options (tcperf.totarget.build), the target, the budget
    and the clock its time to target is read on."""
    options: dict
    target: float
    budget: Budget
    clock: str


def task(case: Case, device, job: Job) -> Result:
    """One seeded run in a worker process (tcperf.runner records a crash, OOM or hang for this case): build the
    workload on the device (data preparation, timed), train to target, return the store row."""
    t0 = time.perf_counter()
    work = build(case.args.options, device)
    _sync(device)
    prep_s = time.perf_counter() - t0
    out = train_to_target(work, case.precision, device, seed=case.seed, target=case.args.target,
                          budget=case.args.budget)
    return stats.run_row(case, work, out, prep_s)


def case(options: dict, recipe: str, seed: int, target: float, budget: Budget, clock: str, metric: str) -> Case:
    """The runner's case for one seeded run of one recipe (a worker per recipe serves its seeds)."""
    return Case(OP, {"workload": options["workload"], metric: target, "seed": seed, "clock": clock}, recipe, task,
                suite="runs", seed=seed, args=RunArgs(options, target, budget, clock))
