"""Which way to spread a user's training step over N GPUs (`tcperf advise FILE:factory --mode train --nproc N`).

DDP and FSDP2 with the options that matter for their speed (OPTIONS, as tcperf.distributed.parallel.PARALLELS
configures them: DDP with 25 MB buckets, 100 MB buckets, gradients copied into the buckets; FSDP2 resharding every
block but the last after forward, or none) are each timed on the user's model at N ranks through the same N-rank
machinery as `tcperf models --nproc N` (parallel.measure_ranked: tcperf.engine's step with the wrapper around it,
the accuracy check against fp32 on one GPU, TIMED_STEPS steps back to back, the slowest rank's mean, the profile
that says where a step goes), beside the same recipe on one GPU. Every rank trains on the factory's batch, so each
rank's losses are the one-GPU losses and the check holds them against the same fp32 reference.

    total throughput   = N x items a step / step time   (items: the factory's batch, the inputs' first dimension)
    scaling efficiency = total throughput / (N x the same recipe's throughput on one GPU)

The pick is the option with the highest total throughput among those whose accuracy check passed (at one N the
efficiency ranks them the same way); the advice prints it with its margin over the runner-up, and a script to paste
(plain torch.distributed, the torchrun line that launches it). Nothing of the user's runs in the parent: the one-GPU
row runs in a worker, the options on N rank workers (one set for all of them, fresh ones after a failure).

    rows = run(cases("examples/gpt2_small.py:factory", "amp_bf16", 4, 3, "/tmp/ref.pt"), torch.device("cuda"))
    best, ranked = pick(rows)
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import engine, precision, recipes, source
from ..records import Case, Job, Result
from ..runner import Rows, run_cases
from ..distributed import launch, parallel

OPTIONS = ("ddp", "ddp_bucket100", "ddp_no_view", "fsdp2", "fsdp2_no_reshard")   # names in parallel.PARALLELS
OP = "advise.parallel"
SCRIPT_STEPS = 10       # steps the pasted script trains (on the factory's batch: your loop feeds it your data)


@dataclass(frozen=True)
class StrategyArgs:
    target: str             # path/to/file.py:factory
    steps: int              # training steps the accuracy check compares
    reference: str          # fp32's reference file: made by the one-GPU row, read by the ranks


def cases(target: str, recipe: str, nproc: int, steps: int, reference: str) -> list[Case]:
    """The one-GPU row, then each of OPTIONS on `nproc` ranks."""
    path, factory = source.split_target(target)
    shape = {"model": f"{path.name}:{factory}", "mode": "train"}
    args = StrategyArgs(target, steps, reference)
    one = Case(OP, shape, recipe, one_gpu_task, suite="advise", args=args)
    return [one, *(Case(OP, {**shape, "nproc": nproc, "parallel": p}, recipe, rank_task, suite="advise", args=args)
                   for p in OPTIONS)]


def run(cases: list[Case], device, job: Job = Job(), *, on_result=None) -> list[Result]:
    """The one-GPU row in a worker (it makes the fp32 reference), then every option on one set of N ranks, in turn
    (engine.measure starts each from a clean slate: compiled graphs dropped, memory freed; a rank that fails or
    hangs is recorded and fresh ranks take the options left); each N-rank row completed with its scaling efficiency."""
    seen = Rows(on_result, complete=parallel.add_scaling)
    one = [c for c in cases if not c.shape.get("nproc")]
    ranked = [c for c in cases if c.shape.get("nproc")]
    run_cases(one, device, job, on_result=seen.add)
    if ranked:
        launch.run_cases(ranked, device, job, nproc=ranked[0].shape["nproc"], on_result=seen.add)
    return seen


def pick(rows: list[Result | dict]) -> tuple[dict | None, list[dict]]:
    """(the fastest N-rank row that passed its check, or None; every N-rank row that did, fastest first)."""
    rows = [r.to_row() if isinstance(r, Result) else r for r in rows]
    ranked = sorted((r for r in rows if (r.get("shape") or {}).get("nproc") and r["status"] == "ok"
                     and (r.get("metrics") or {}).get("throughput")),
                    key=lambda r: -r["metrics"]["throughput"])
    return (ranked[0] if ranked else None), ranked


def verdict(best: dict | None, ranked: list[dict]) -> str:
    """One sentence: the pick, its throughput and efficiency, its margin over the runner-up and where its step goes."""
    if best is None:
        return "no option passed its accuracy check and was timed: nothing to pick"
    m = best["metrics"]
    eff = f", scaling efficiency {m['scaling_efficiency']:.2f}" if m.get("scaling_efficiency") else ""
    line = f"pick {m['parallel']}: {m['throughput']:,.0f} {m.get('unit') or ''} on {m['nproc']} ranks{eff}"
    if len(ranked) > 1:
        runner_up = ranked[1]["metrics"]
        line += f"; {m['throughput'] / runner_up['throughput'] - 1:.1%} ahead of {runner_up['parallel']}"
    return line + (f"; {m['cause']}" if m.get("cause") else "")


# --- in the workers -------------------------------------------------------------------------------------------------
def user_spec(target: str, device) -> source.Spec:
    """The factory's model and batch on `device` (the same weights and inputs in every process: load_spec seeds);
    items a step: the inputs' first dimension where the factory gives none."""
    spec = source.on_device(source.load_spec(target, seed=0), torch.device(device))
    if spec.items is None:
        first = next((t for t in (*spec.args, *spec.kwargs.values()) if torch.is_tensor(t) and t.dim()), None)
        spec.items, spec.unit = (first.shape[0] if first is not None else 1), "samples/s"
    return spec


def one_gpu_task(case: Case, device, job: Job) -> Result:
    """The recipe on one device, timed as the ranks time it; it makes the fp32 reference the ranks read."""
    a, rec = case.args, recipes.with_cudnn_benchmark(recipes.get(case.precision))
    row = engine.measure(user_spec(a.target, device), rec, "train", device, reference_file=a.reference,
                         steps=a.steps, timing=parallel.TIMING, flops=True, ceilings=job.ceilings)
    return _named(row, case)


def rank_task(case: Case, device, job: Job) -> Result:
    """On every rank: the user's model under the case's option (parallel.measure_ranked)."""
    a, par = case.args, parallel.PARALLELS[case.shape["parallel"]]
    rec = recipes.with_cudnn_benchmark(recipes.get(case.precision))
    launch.beat(f"{par.name}: set-up")
    reference = a.reference if os.path.exists(a.reference) else None   # else each rank makes its own
    row = parallel.measure_ranked(user_spec(a.target, device), rec, par, "train", device, job, steps=a.steps,
                                  reference=reference)
    return _named(row, case)


def _named(row: Result, case: Case) -> Result:
    row.op, row.suite, row.shape, row.precision = case.op, case.suite, case.shape, case.precision
    ranks = f" x{case.shape['nproc']} {case.shape['parallel']}" if case.shape.get("nproc") else " one GPU"
    row.metrics["label"] = f"{case.shape['model']}{ranks}"
    return row


# --- the code to paste ----------------------------------------------------------------------------------------------
def launch_line(nproc: int, script: str = "train.py") -> str:
    return f"torchrun --standalone --nproc-per-node {nproc} {script}"


def script(target: str, best: dict) -> str:
    """A whole training script for the pick: the user's factory, the wrapper with the options measured, the recipe
    (precision, channels_last, torch.compile, fused AdamW) and a loop; it runs as it is under launch_line()."""
    rec, par = recipes.get(best["precision"]), parallel.PARALLELS[best["metrics"]["parallel"]]
    path, factory = source.split_target(target)
    lines = [f"# tcperf advise --nproc {best['metrics']['nproc']}: {par.name} ({par.about}), recipe {rec.name}",
             f"# launch: {launch_line(best['metrics']['nproc'])}", *HEAD,
             f'user = load("{Path(path).resolve()}")', "torch.manual_seed(0)  # every rank builds the same model",
             f"model, x, y, loss_fn = unpack(user.{factory}())", *_recipe_lines(rec, before_wrap=True),
             *_wrap_lines(par, rec), *_recipe_lines(rec, before_wrap=False), *_loop_lines(rec)]
    return "\n".join(lines) + "\n"


HEAD = ['import importlib.util', 'import os', '', 'import torch', 'import torch.distributed as dist', '', '',
        'def load(path):', '    spec = importlib.util.spec_from_file_location("user_model", path)',
        '    module = importlib.util.module_from_spec(spec)', '    spec.loader.exec_module(module)',
        '    return module', '', '',
        'def unpack(made):  # what the factory returned: a dict, (model, inputs) or a model',
        '    if isinstance(made, dict):',
        '        return made["model"], made.get("inputs"), made.get("targets"), made.get("loss_fn")',
        '    if isinstance(made, (tuple, list)):', '        return made[0], made[1], None, None',
        '    return made, made.example_inputs, None, None', '', '',
        'dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")',
        'local = int(os.environ["LOCAL_RANK"])',
        'device = torch.device("cuda", local) if torch.cuda.is_available() else torch.device("cpu")',
        'if device.type == "cuda":', '    torch.cuda.set_device(device)',
        'torch.backends.cudnn.benchmark = True  # measured so: cuDNN times its algorithms at each new shape']


def _recipe_lines(rec: recipes.Recipe, before_wrap: bool) -> list[str]:
    if not before_wrap:
        return ["model = torch.compile(model, dynamic=False)  # after the wrapper, as measured"] if rec.compile else []
    tf32 = precision.get(rec.precision).tf32
    lines = [f'torch.set_float32_matmul_precision("{"high" if tf32 else "highest"}")',
             f"torch.backends.cudnn.allow_tf32 = {tf32}",
             "model = model.to(device)",
             "x = tuple(t.to(device) for t in (x if isinstance(x, (tuple, list)) else (x,)))",
             "y = y.to(device) if y is not None else None",
             "loss_fn = loss_fn or (lambda out, *_: out.float().pow(2).mean())  # your loss here"]
    if rec.channels_last:
        lines += ["model = model.to(memory_format=torch.channels_last)",
                  "x = tuple(t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t for t in x)"]
    return lines


def _wrap_lines(par: parallel.Parallel, rec: recipes.Recipe) -> list[str]:
    opts = par.options(rec)
    if par.kind == "ddp":
        given = ", ".join(f"{k}={v!r}" for k, v in opts.items())
        return ["model = torch.nn.parallel.DistributedDataParallel(",
                f'    model, device_ids=[device.index] if device.type == "cuda" else None, {given})']
    dtype = f"torch.{opts['param_dtype']}" if opts["param_dtype"] else "None"
    each = {"never": "False", "always": "True"}.get(par.reshard, "i < len(blocks) - 1")
    why = "  # the last block is gathered again at once for backward" if par.reshard == "default" else ""
    return ["from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard",
            f"policy = MixedPrecisionPolicy(param_dtype={dtype}, reduce_dtype=torch.float32)",
            "blocks = [b for m in model.modules() if isinstance(m, torch.nn.ModuleList) for b in m]",
            "for i, block in enumerate(blocks):  # every block its own unit, then the model",
            f"    fully_shard(block, mp_policy=policy, reshard_after_forward={each}){why}",
            f"fully_shard(model, mp_policy=policy, reshard_after_forward={par.reshard != 'never'})"]


def _loop_lines(rec: recipes.Recipe) -> list[str]:
    autocast = precision.get(rec.precision).autocast
    ctx = f"torch.autocast(device.type, dtype=torch.{str(autocast).removeprefix('torch.')})" if autocast else None
    fused = ', fused=device.type == "cuda"'
    body = ["out = model(*x)", "loss = loss_fn(out, y) if y is not None else loss_fn(out)"]
    return [f"optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3{fused})  # as measured",
            f"for step in range({SCRIPT_STEPS}):  # your loop: each rank its own part of the data "
            "(DistributedSampler)",
            "    optimizer.zero_grad(set_to_none=True)",
            *([f"    with {ctx}:", *(f"        {b}" for b in body)] if ctx else [f"    {b}" for b in body]),
            "    loss.backward()", "    optimizer.step()",
            'if dist.get_rank() == 0:', '    print(f"loss {loss.item():.4f} after {step + 1} steps")',
            "dist.destroy_process_group()"]


def pick_row(rows: list[Result], target: str) -> Result:
    """The advice as a row of its own (op advise.parallel.pick): the pick, the options ranked, the verdict, the
    script and its launch line; stored after the rows it was picked from."""
    best, ranked = pick(rows)
    first = rows[0] if rows else None
    shape = {k: v for k, v in (first.shape if first else {}).items() if k not in ("nproc", "parallel")}
    nproc = next((r.shape["nproc"] for r in rows if r.shape.get("nproc")), None)
    metrics = {"pick": best["metrics"]["parallel"] if best else None, "verdict": verdict(best, ranked),
               "ranked": [r["metrics"]["parallel"] for r in ranked], "options": list(OPTIONS), "nproc": nproc,
               "script": script(target, best) if best else None,
               "launch": launch_line(nproc) if best else None}
    return Result(f"{OP}.pick", shape, first.precision if first else "", suite="advise",
                  status="ok" if best else "error", message=None if best else metrics["verdict"], metrics=metrics)
