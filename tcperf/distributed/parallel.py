"""The model ladder on many GPUs (`tcperf models --nproc N`): each training cell is measured on one GPU, as the
ladder always does, and then on N ranks under each way of PARALLELS that applies: DDP, and FSDP2 as torchtitan
applies it (transformer models only), resharding after forward or not (docs/many-gpus.md has the options).

The options each cell ran with are stored with its row (metrics.parallel_options). The N-rank cell runs through
the same engine as every other cell (tcperf.engine.measure), with `wrap` putting DDP or fully_shard around the
recipe's copy before torch.compile and the optimizer see it. Every rank trains on the same synthetic batch, so
the averaged gradients are the one-GPU gradients and the accuracy check holds the losses against the same fp32
reference. Each rank times TIMED_STEPS back-to-back steps (the same number everywhere: each step holds
collectives); the slowest rank's mean sets the step time, and

    total throughput   = N x items a step / step time
    scaling efficiency = total throughput / (N x the same recipe's throughput on one GPU)
    exposed comm share = time a communication kernel runs while no other kernel does, per step, over the step
                         time (exposed_comm; on a CPU gloo works on threads of its own: the profiler's CPU events)

On 2 x H200 (NVLink, torch 2.11), ResNet-50 bf16 + channels_last, batch 256 a GPU, DDP: 4,641 img/s on one GPU,
9,254 on two (issue 14: efficiency 0.997).

    cases = cells(ladder.cells(["gpt2"], "train", ["amp_bf16"], None), nproc=2, parallels=["ddp", "fsdp2"])
    rows = climb(cases, torch.device("cuda"), Job(timeout=600), on_result=store_it)
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .. import engine, ladder, models, precision, recipes
from .. import source
from ..errors import choices
from ..profiler import gpu_busy
from ..records import Case, Job, Result
from ..runner import Rows
from . import launch, overlap

TIMED_STEPS = 20
TIMING = {"warmup_ms": 0.0, "rep_ms": 0.0, "min_reps": TIMED_STEPS, "max_reps": TIMED_STEPS}   # the checks warmed up
WARM_PROFILED = 2       # steps under the profiler before the ones it records: the ranks' profiler start-up settles
PROFILED_STEPS = 5      # steps the exposed communication is averaged over
RANK_SHARE = 0.9        # of the cell's --timeout, for the ranks: the worker that started them answers in time
RESHARD = ("default", "always", "never")


@dataclass(frozen=True)
class Parallel:
    """One way to spread a training step over ranks, with the options that matter for its speed."""
    name: str
    kind: str                       # "ddp" | "fsdp2"
    bucket_cap_mb: float = 25.0     # DDP: gradients are all-reduced in buckets of this size (torch's default)
    bucket_view: bool = True        # DDP gradient_as_bucket_view: gradients live in the buckets (no copy into them)
    reshard: str = "default"        # FSDP2 reshard_after_forward: "default" = every block but the last (torchtitan),
                                    # "always", "never" (parameters kept gathered from forward to backward)
    about: str = ""

    def options(self, rec: recipes.Recipe) -> dict:
        """What the wrapper is given under recipe `rec`, as stored with the row."""
        if self.kind == "ddp":       # static_graph: the models' graphs are fixed, but DDPOptimizer (compile) rejects it
            return {"gradient_as_bucket_view": self.bucket_view, "bucket_cap_mb": self.bucket_cap_mb,
                    "static_graph": not rec.compile}
        dtype = precision.get(rec.precision).autocast       # bf16 for amp_bf16, fp16 for amp_fp16, None for fp32/tf32
        return {"param_dtype": str(dtype).removeprefix("torch.") if dtype else None, "reduce_dtype": "float32",
                "reshard_after_forward": self.reshard, "units": "every block, then the model"}


PARALLELS: dict[str, Parallel] = {p.name: p for p in (
    Parallel("ddp", "ddp", about="DistributedDataParallel: gradient buckets all-reduced during backward"),
    Parallel("ddp_bucket100", "ddp", bucket_cap_mb=100.0,
             about="DDP with 100 MB buckets: fewer, larger all-reduces, the last one later in backward"),
    Parallel("ddp_no_view", "ddp", bucket_view=False,
             about="DDP with gradients copied into its buckets (gradient_as_bucket_view=False, torch's default)"),
    Parallel("fsdp2", "fsdp2", about="fully_shard per block, then the model; params in the autocast dtype"),
    Parallel("fsdp2_no_reshard", "fsdp2", reshard="never",
             about="FSDP2 keeping the gathered parameters from forward to backward (ZeRO-2-like)"),
)}


# --- cases (parent side) --------------------------------------------------------------------------------------------
def parse(text: str) -> list[str]:
    """'ddp,fsdp2' -> names in PARALLELS; UserError naming the valid choices."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    for n in names or [""]:
        if n not in PARALLELS:
            raise choices("--parallel", n, PARALLELS)
    return names


def applies(parallel: str, model: str) -> bool:
    """FSDP2 is measured on the transformer models (their blocks are the units it shards); DDP on every model."""
    return PARALLELS[parallel].kind == "ddp" or models.get(model).KIND == "transformer"


def cells(one_gpu: list[Case], nproc: int, parallels) -> list[Case]:
    """Each one-GPU cell followed by the same cell on `nproc` ranks under each parallel that applies to it."""
    out = []
    for case in one_gpu:
        out.append(case)
        out += [case.replace(task=run_cell, shape={**case.shape, "nproc": nproc, "parallel": p})
                for p in parallels if applies(p, case.shape["model"])]
    return out


def climb(cases: list[Case], device, job: Job = Job(), *, on_result=None) -> list[Result]:
    """ladder.climb (run_cases's signature), each N-rank row completed with its scaling efficiency."""
    seen = Rows(on_result, complete=add_scaling)
    ladder.climb(cases, device, job, on_result=seen.add)
    return seen


def add_scaling(row: Result, earlier: list[Result]) -> None:
    """scaling_efficiency and speedup_1gpu of an N-rank row against the same recipe's one-GPU row."""
    s, m = row.shape or {}, row.metrics
    if not s.get("nproc") or not m.get("throughput"):
        return
    same = {k: v for k, v in s.items() if k not in ("nproc", "parallel")}     # the one-GPU row's shape
    one = [r for r in earlier if r.shape == same and r.precision == row.precision and r.metrics.get("throughput")]
    if one:
        single = one[-1].metrics["throughput"]
        m.update(one_gpu_throughput=single, speedup_1gpu=m["throughput"] / single,
                 scaling_efficiency=m["throughput"] / (s["nproc"] * single))


def run_cell(case: Case, device, job: Job) -> Result:
    """In the ladder's worker process: the cell on its ranks, each given RANK_SHARE of the cell's timeout so that
    this worker answers in time; the row rank 0 made (or the failure recorded)."""
    ranks = dataclasses.replace(job, timeout=job.timeout * RANK_SHARE)
    return launch.run_cases([case.replace(task=cell_task)], device, ranks, nproc=case.shape["nproc"])[0]


# --- on every rank --------------------------------------------------------------------------------------------------
def cell_task(case: Case, device, job: Job) -> Result:
    """The cell on this rank: the ladder's model and batch measured under DDP or FSDP2 (measure_ranked)."""
    s, a = case.shape, case.args
    rec, par = recipes.with_cudnn_benchmark(recipes.get(case.precision)), PARALLELS[s["parallel"]]
    launch.beat(f"{s['model']} {rec.name} {par.name}: set-up")
    base = ladder._base(s["model"], s["mode"], rec, s["batch"], models.get(s["model"]), a.config)
    cell = source.builtin(s["model"], a.config, s["batch"], case.seed, device)
    row = measure_ranked(cell, rec, par, s["mode"], device, job, steps=a.steps, reference=a.reference)
    row.op, row.suite, row.shape = base.op, base.suite, s
    row.metrics = {**base.metrics, **row.metrics,
                   "label": f"{s['model']} {s['mode']} b={s['batch']} x{s['nproc']} {par.name}"}
    return row


def measure_ranked(spec, rec: recipes.Recipe, par: Parallel, mode: str, device, job: Job, *, steps: int,
                   reference: str | None = None) -> Result:
    """On this rank: engine.measure with `par` around the recipe's model (TIMED_STEPS steps back to back, then
    the profile that says where a step goes), then the totals over the ranks. Any model a spec holds: the ladder's
    (cell_task) or a user's (tcperf.advisor.strategy)."""
    row = engine.measure(spec, rec, mode, device, reference_file=reference, steps=steps, timing=TIMING,
                         flops=True, ceilings=job.ceilings, wrap=functools.partial(wrap, parallel=par, rec=rec),
                         probe=exposed_comm)
    row.metrics.update(parallel=par.name, nproc=dist.get_world_size(), parallel_options=par.options(rec))
    _totals(row, spec.items, device)
    return row


def wrap(model: torch.nn.Module, parallel: Parallel, rec: recipes.Recipe) -> torch.nn.Module:
    """DDP around the model, or FSDP2 on its blocks then on the model, with `parallel`'s options under `rec`."""
    if rec.step_graph:
        raise recipes.NotApplicable("a whole-step CUDA graph across ranks (the collectives inside the capture) is "
                                    "not measured: its one-GPU figure is the ladder's")
    opts = parallel.options(rec)
    if parallel.kind == "ddp":
        device = next(model.parameters()).device
        ids = [device.index] if device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, **opts)
    return shard(model, precision.get(rec.precision).autocast, parallel.reshard)


def shard(model: torch.nn.Module, param_dtype: torch.dtype | None, reshard: str = "default") -> torch.nn.Module:
    """FSDP2 as torchtitan applies it: fully_shard on every block of the model's ModuleLists, the root last, each
    with MixedPrecisionPolicy(param_dtype, reduce_dtype=float32) (the all-gathers move param_dtype, the gradient
    reduce-scatters float32); reshard_after_forward per `reshard` (RESHARD)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    blocks = [b for blocks in model.modules() if isinstance(blocks, torch.nn.ModuleList) for b in blocks]
    for i, block in enumerate(blocks):
        after = {"always": True, "never": False}.get(reshard, i < len(blocks) - 1)   # the last is gathered next
        fully_shard(block, mp_policy=policy, reshard_after_forward=after)
    fully_shard(model, mp_policy=policy, reshard_after_forward=reshard != "never")
    return model


def _totals(row: Result, items: int | None, device) -> None:
    """Total throughput from the slowest rank's mean step (every rank steps together)."""
    if row.mean_ms is None:
        return
    [step_ms] = launch.slowest([row.mean_ms], device)
    row.metrics.update(rank0_mean_ms=row.mean_ms, slowest_rank_ms=step_ms)
    row.mean_ms = step_ms
    if items:
        n = dist.get_world_size()
        row.metrics.update(throughput=n * items / (step_ms * 1e-3), per_gpu=items / (step_ms * 1e-3))


# --- exposed communication ------------------------------------------------------------------------------------------
def exposed_comm(row: Result, step, device) -> None:
    """engine.measure's probe: the exposed communication and where a step's time goes (tcperf.distributed.overlap)
    in the profiled steps, averaged over the steps and the ranks. Ranks that communicate and show no communication
    kernel in the profile leave the figures unmeasured (None, with the reason): 0.0 would claim a step that waits on
    nothing. gpu_busy (GPUs only): the share of a step in which some kernel runs (computation or exposed
    communication); the rest waits on the host."""
    kernels = profiled_kernels(step, device)
    figures = overlap.exposed_share(kernels, PROFILED_STEPS, row.mean_ms)
    parts = overlap.breakdown(kernels, PROFILED_STEPS, row.mean_ms)["ms"]
    seen = sum(overlap.is_comm(k.name) for k in kernels)
    mine = [figures["comm_ms"], figures["exposed_comm_ms"], seen, len(kernels), figures["compute_ms"], row.mean_ms,
            *parts.values()]
    both = torch.tensor(mine, dtype=torch.float64, device=device)
    dist.all_reduce(both)                       # gloo has no AVG: a sum over the ranks, then / n
    n = dist.get_world_size()
    comm_ms, exposed_ms, comm_seen, all_seen, compute_ms, step_ms, *part_ms = (both / n).tolist()
    basis = "GPU kernels" if device.type == "cuda" else "CPU events (gloo runs on its own threads)"
    counts = {"exposed_steps": PROFILED_STEPS, "exposed_basis": basis,
              "profiled_kernels": round(all_seen * n), "profiled_comm_kernels": round(comm_seen * n)}
    if n > 1 and comm_seen == 0:
        row.metrics.update(comm_ms=None, exposed_comm_ms=None, exposed_comm_share=None, breakdown=None, cause=None,
                           **counts, exposed_note=f"not measured: the profile held {counts['profiled_kernels']} "
                                                  f"{'kernels' if device.type == 'cuda' else 'events'}, none of them "
                                                  "communication")
        return
    busy = gpu_busy(compute_ms + exposed_ms, step_ms) if device.type == "cuda" else None
    share = _shares(dict(zip(parts, part_ms)), step_ms)
    row.metrics.update(comm_ms=comm_ms, exposed_comm_ms=exposed_ms, rank0_exposed_comm_ms=mine[1],
                       exposed_comm_share=min(1.0, exposed_ms / step_ms) if step_ms else None,
                       compute_ms=compute_ms, gpu_busy=busy, breakdown=share, cause=overlap.cause(share),
                       breakdown_ms=dict(zip(parts, part_ms)), **counts)


def _shares(ms: dict[str, float], step_ms: float) -> dict[str, float]:
    """The ranks' mean ms a step per part over their mean step (or over the parts' sum where it is larger)."""
    whole = max(step_ms or 0.0, sum(ms.values()))
    return {part: v / whole if whole else 0.0 for part, v in ms.items()}


def profiled_kernels(step, device) -> list[overlap.Kernel]:
    """The kernels (GPU) or operators (CPU) of PROFILED_STEPS steps, after WARM_PROFILED unrecorded ones; every
    rank starts together (a barrier), so none times another's profiler start-up as communication."""
    from torch.profiler import ProfilerActivity, profile, schedule
    gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    dist.barrier()
    # repeat=1: one cycle. With the default (0) the schedule starts a new warm-up after the last recorded step, and
    # p.events() returned that new cycle's empty profile: every exposed share read 0.0 until 2026-11-26.
    plan = schedule(wait=0, warmup=WARM_PROFILED, active=PROFILED_STEPS, repeat=1)
    with profile(activities=activities, schedule=plan) as p:
        for i in range(WARM_PROFILED + PROFILED_STEPS):
            step()
            if gpu and i == WARM_PROFILED + PROFILED_STEPS - 1:
                torch.cuda.synchronize(device)    # sync point: every kernel done before the recording stops
            p.step()
    return kernels_of(p.profiler.kineto_results, gpu)


# what torch.profiler leaves out of its events (torch.autograd.profiler_util._filter_name), so left out here too
UNLISTED = {"[memory]", "[OutOfMemory]", "profiler::_record_function_enter", "profiler::_record_function_enter_new",
            "profiler::_record_function_exit", "aten::is_leaf", "aten::output_nr", "aten::_version"}


def kernels_of(results, gpu: bool) -> list[overlap.Kernel]:
    """A finished profile's Kineto events (its kineto_results) as Kernels: GPU kernels on a GPU; aten operators and
    collectives on a CPU; times in us from the trace's start, as p.events() gives them. Read raw: p.events() makes
    a FunctionEvent of every event and a tree of them, 0.7 s of a CPU core for a tiny GPT-2's 5 profiled steps (9,000
    events; the steps took 0.12 s), on every rank after every option. One difference: p.events() merges a CPU
    operator into its caller of the same name (aten::sum's redispatch); both stay here, which changes the count of
    profiled operators on a CPU, not a figure (the same kind's interval inside its caller's adds nothing to a union)."""
    from torch.autograd import DeviceType
    want, start = (DeviceType.CUDA if gpu else DeviceType.CPU), results.trace_start_ns()
    kernels = []
    for e in results.events():
        name = e.name()
        if e.device_type() != want or name in UNLISTED or getattr(e, "is_hidden_event", lambda: False)():
            continue
        if gpu or name.startswith("aten::") or overlap.is_comm(name):
            name = torch._C._demangle(name) if gpu else name     # as p.events() names a kernel
            kernels.append(overlap.Kernel(name, (e.start_ns() - start) / 1e3, (e.end_ns() - start) / 1e3))
    return kernels
