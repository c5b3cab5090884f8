"""The launcher (real gloo ranks started by the tests: a rank that raises, a rank that hangs, nothing left running),
torchrun's in-process path, and `tcperf models --nproc 2` and `--nproc 4` (the DDP benchmark's tcperf side) on a CPU."""
import json
import os
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

from tcperf import cli, recipes
from tcperf.distributed import launch, overlap, parallel
from tcperf.distributed.overlap import Kernel
from tcperf.errors import UserError
from tcperf.records import Case, Job, Result
from tcperf.store import Store

HERE = "test_distributed"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- tasks the ranks run (imported by name in each spawned rank) ---------------------------------------------------
def ok_task(case, device, job):
    """Every rank's pid gathered on rank 0; a collective, so a rank missing would show."""
    pids = [None] * dist.get_world_size()
    dist.all_gather_object(pids, os.getpid())
    return Result("t", {}, "p", metrics={"pids": pids, "world": dist.get_world_size()})


def crash_task(case, device, job):
    if dist.get_rank() == 1:
        raise ValueError("boom on purpose")
    dist.barrier()
    return Result("t", {}, "p")


def hang_task(case, device, job):
    launch.beat("set-up")
    if dist.get_rank() == 1:
        time.sleep(600)
    launch.beat("barrier")
    dist.barrier()
    return Result("t", {}, "p")


def _case(task, i: int) -> Case:
    return Case("t", {"i": i}, "p", task, suite="s")


def _gone(pids) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


def test_a_rank_that_raises_or_hangs_is_named_and_the_run_goes_on():
    t0 = time.monotonic()
    cases = [_case(ok_task, 0), _case(crash_task, 1), _case(hang_task, 2), _case(ok_task, 3)]
    rows = launch.run_cases(cases, torch.device("cpu"), Job(timeout=4), nproc=2)
    assert [r.status for r in rows] == ["ok", "error", "timeout", "ok"]
    crashed, hung = rows[1].message, rows[2].message
    assert crashed.startswith("rank 1:") and "boom on purpose" in crashed
    assert "rank 1 at 'set-up'" in hung and "rank(s) 0 waited" in hung and "every rank stopped" in hung
    assert [r.shape for r in rows] == [{"i": i} for i in range(4)]    # each failed row says which case it was
    assert rows[0].metrics["world"] == 2
    first, last = rows[0].metrics["pids"], rows[3].metrics["pids"]
    assert set(first).isdisjoint(last)                           # fresh ranks after each failure
    assert _gone(first + last)                                   # nothing left running
    assert time.monotonic() - t0 < 90


def test_the_rank_behind_is_the_one_named():
    progress = launch._Progress(3, timeout=0.0)
    progress.heard(0, "case", 0)
    progress.heard(1, "case", 0)
    progress.heard(2, "case", 0)
    progress.heard(0, "beat", "all_reduce 1 KiB: time")
    progress.heard(2, "beat", "all_reduce 1 KiB: time")
    stuck = progress.stuck()
    assert stuck["status"] == "timeout"
    assert "rank 1 at 'case 0 start'" in stuck["message"] and "rank(s) 0, 2 waited" in stuck["message"]


def test_under_torchrun_the_cases_run_in_this_process(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(launch.free_port()))
    assert launch.under_torchrun() and launch.check_nproc(None, torch.device("cpu")) == 1
    try:
        rows = launch.run_cases([_case(ok_task, 0)], torch.device("cpu"), Job(timeout=30), nproc=1)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    assert rows[0].metrics["pids"] == [os.getpid()]


def test_bad_nproc_is_one_line(monkeypatch, capsys):
    with pytest.raises(UserError, match="bad --nproc 0"):
        launch.check_nproc(0, torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(UserError, match="only 2 CUDA GPU"):
        launch.check_nproc(3, torch.device("cuda"))
    for argv in (["comm", "--device", "cpu", "--nproc", "0"], ["models", "gpt2", "--device", "cpu", "--nproc", "0"],
                 ["models", "gpt2", "--device", "cpu", "--nproc", "2", "--mode", "infer"],
                 ["models", "gpt2", "--device", "cpu", "--nproc", "2", "--parallel", "zero"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err


# --- scaling and exposed communication --------------------------------------------------------------------------
def test_the_profiles_kernels_are_read_raw_as_torch_profilers_events_list_them():
    """parallel.kernels_of reads Kineto's events raw (p.events() made a FunctionEvent of each, 0.7 s a profile): the
    operators torch.profiler lists, with their names and times (us from the trace's start), and those it leaves out
    (aten::is_leaf, aten::_version, ...) left out too. p.events() also merges an operator into its caller of the
    same name (aten::sum's redispatch within aten::sum): here both stay, so the figures (unions of intervals) are
    the same and only the count of profiled operators differs."""
    from collections import Counter

    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    x = torch.randn(8, 8, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU]) as p:
        (x @ x).relu().sum().backward()
    listed = [Kernel(e.name, e.time_range.start, e.time_range.end) for e in p.events()
              if e.device_type == DeviceType.CPU and (e.name.startswith("aten::") or overlap.is_comm(e.name))]
    raw = parallel.kernels_of(p.profiler.kineto_results, gpu=False)
    assert len(listed) > 5 and not Counter(listed) - Counter(raw)
    for k in Counter(raw) - Counter(listed):           # each within a listed call of the same name
        assert any(o.name == k.name and o.start_us <= k.start_us and k.end_us <= o.end_us for o in listed), k
    assert overlap.breakdown(raw, 1, 1.0) == overlap.breakdown(listed, 1, 1.0)


def test_exposed_communication_is_what_no_other_work_hides():
    comm = [(0, 10), (5, 15), (30, 40)]        # union: 0-15, 30-40 = 25
    other = [(2, 4), (12, 20), (35, 36)]       # hides 2 + 3 + 1 = 6
    assert overlap.total(overlap.union(comm)) == 25
    assert overlap.exposed(comm, other) == 19
    assert overlap.exposed(comm, []) == 25 and overlap.exposed([], other) == 0
    assert overlap.exposed([(0, 10)], [(0, 10)]) == 0


# Two steps of 100 µs each on one GPU's timeline (µs). Step 1: an all-reduce 60-90, hidden by a GEMM 50-70 and a copy
# 85-88 (on other streams), so 60-70 and 85-88 are hidden, 70-85 and 88-90 exposed (17 µs). Step 2: two overlapping
# all-reduce kernels 150-170 and 160-190 (union 150-190), a GEMM 100-155 and an elementwise kernel 180-185: exposed
# 155-180 and 185-190 (30 µs). Kernels overlapping kernels (two GEMMs at 0-40) count once.
TRACE = [Kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 0, 40), Kernel("ampere_sgemm_128x64_nn", 10, 30),
         Kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 50, 70),
         Kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 60, 90),
         Kernel("Memcpy DtoD (Device -> Device)", 85, 88),
         Kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 100, 155),
         Kernel("ncclKernel_AllReduce_RING_LL_Sum_bfloat16", 150, 170),
         Kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 160, 190),
         Kernel("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >", 180, 185)]


def test_exposed_share_on_a_synthetic_trace_is_exact():
    figures = overlap.exposed_share(TRACE, steps=2, step_ms=0.1)
    assert figures["comm_ms"] == pytest.approx((30 + 40) / 2 / 1e3)           # 35 µs of communication a step
    assert figures["exposed_comm_ms"] == pytest.approx((17 + 30) / 2 / 1e3)    # 23.5 µs exposed a step
    assert figures["exposed_comm_share"] == pytest.approx(0.235)
    assert figures["compute_ms"] == pytest.approx((40 + 20 + 3 + 55 + 5) / 2 / 1e3)  # the rest's union, a step
    assert overlap.exposed_share(TRACE[:3], steps=1, step_ms=0.1)["exposed_comm_share"] == 0
    assert overlap.exposed_share(TRACE, steps=2, step_ms=None)["exposed_comm_share"] is None
    shuffled = list(reversed(TRACE))                                          # order does not matter
    assert overlap.exposed_share(shuffled, steps=2, step_ms=0.1) == figures


def test_where_a_step_goes_adds_up_on_the_synthetic_trace():
    """TRACE per step of 100 µs: computation 63 + 60 µs; step 1's all-reduce exposed 17 µs; step 2's 155-160
    all-reduce alone (5), 160-170 all-reduce and reduce-scatter together (split 5 + 5), 170-180 and 185-190
    reduce-scatter alone (15); idle 40-50, 90-100 and 190-200 (30)."""
    found = overlap.breakdown(TRACE, steps=2, step_ms=0.1)
    want = {"compute": 61.5, "all_reduce": 13.5, "all_gather": 0, "reduce_scatter": 10, "other_comm": 0, "idle": 15}
    assert found["ms"] == pytest.approx({k: v / 1e3 for k, v in want.items()})
    assert found["share"] == pytest.approx({k: v / 100 for k, v in want.items()})
    exposed = overlap.exposed_share(TRACE, steps=2, step_ms=0.1)["exposed_comm_ms"]
    assert sum(found["ms"][k] for k in ("all_reduce", "reduce_scatter")) == pytest.approx(exposed)
    assert overlap.cause(found["share"]).startswith("idle 15% of a step: no kernel runs: the step is host-bound")


@pytest.mark.parametrize("name, kind", [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_reduce"),
    ("ncclKernel_AllReduce_RING_LL_Sum_bfloat16", "all_reduce"), ("ncclDevKernel_AllGather_RING_LL", "all_gather"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "reduce_scatter"), ("ncclDevKernel_SendRecv", "other_comm"),
    ("c10d::_allgather_base_", "all_gather"), ("c10d::_reduce_scatter_base_", "reduce_scatter"),
    ("gloo:all_reduce", "all_reduce"), ("sm90_xmma_gemm_bf16bf16_bf16f32", None),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >", None)])
def test_communication_kernels_are_sorted_by_kind(name, kind):
    assert overlap.comm_kind(name) == kind


# An FSDP2-like step of 100 µs: a GEMM 0-30, an all-gather alone 30-50 (exposed), a GEMM 50-80 overlapping a
# reduce-scatter 60-85 (exposed 80-85), idle 85-100.
FSDP_STEP = [Kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 0, 30), Kernel("ncclDevKernel_AllGather_RING_LL", 30, 50),
             Kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 50, 80),
             Kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 60, 85)]


@pytest.mark.parametrize("kernels, step_ms, starts", [
    (FSDP_STEP, 0.1, "exposed all-gather 20% of a step: parameter all-gathers"),
    (FSDP_STEP[:1], 0.031, "compute 97% of a step: compute-bound"),       # 1 µs idle: under LOSS_FLOOR
    ([Kernel("gemm", 0, 10), Kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10, 90)], 0.1,
     "exposed all-reduce 80% of a step: gradient all-reduces"),
    ([Kernel("gemm", 0, 50), Kernel("ncclDevKernel_SendRecv", 50, 60)], 0.06, "exposed other communication 17%"),
])
def test_the_cause_is_the_largest_part_beyond_computation(kernels, step_ms, starts):
    share = overlap.breakdown(kernels, steps=1, step_ms=step_ms)["share"]
    assert sum(share.values()) == pytest.approx(1.0)
    assert overlap.cause(share).startswith(starts), overlap.cause(share)


def test_a_step_timed_faster_than_its_profile_has_no_idle_and_shares_of_one():
    """The profiled steps ran slower than the timed ones (the profiler's cost): idle is 0, the shares still add up."""
    found = overlap.breakdown(FSDP_STEP, steps=1, step_ms=0.05)
    assert found["ms"]["idle"] == 0 and sum(found["share"].values()) == pytest.approx(1.0)
    assert found["share"]["all_gather"] == pytest.approx(20 / 85)
    assert overlap.breakdown_line(found["share"]) == "compute 71%, exposed all-gather 24%, exposed reduce-scatter 6%"


def test_a_profile_without_communication_is_unmeasured_not_zero(monkeypatch):
    """Two ranks whose profiles hold no communication kernel (as 2 H200s' did): the figures are unmeasured, not 0.0."""
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(dist, "all_reduce", lambda t: t.mul_(2))           # two ranks that saw the same
    row = Result("model", {}, "fp32", mean_ms=40.0)
    monkeypatch.setattr(parallel, "profiled_kernels", lambda step, device: TRACE[:4])
    parallel.exposed_comm(row, None, torch.device("cpu"))
    assert row.metrics["exposed_comm_share"] is not None and row.metrics["profiled_comm_kernels"] == 2
    assert sum(row.metrics["breakdown"].values()) == pytest.approx(1.0)
    assert row.metrics["breakdown"]["idle"] > 0.99 and row.metrics["cause"].startswith("idle")   # 90 µs of 40 ms
    compute_only = [k for k in TRACE if not overlap.is_comm(k.name)]
    monkeypatch.setattr(parallel, "profiled_kernels", lambda step, device: compute_only)
    row = Result("model", {}, "fp32", mean_ms=40.0)
    parallel.exposed_comm(row, None, torch.device("cpu"))
    m = row.metrics
    assert m["exposed_comm_share"] is None and m["comm_ms"] is None and m["profiled_comm_kernels"] == 0
    assert m["breakdown"] is None and m["cause"] is None
    assert "none of them communication" in m["exposed_note"]


def test_scaling_efficiency_is_against_the_same_recipe_on_one_gpu():
    one = Result("model", {"model": "gpt2", "mode": "train", "batch": 4}, "amp_bf16", metrics={"throughput": 100.0})
    other = one.replace(precision="fp32", metrics={"throughput": 10.0})
    row = Result("model", {**one.shape, "nproc": 2, "parallel": "ddp"}, "amp_bf16", metrics={"throughput": 190.0})
    parallel.add_scaling(row, [one, other])
    assert row.metrics["scaling_efficiency"] == pytest.approx(0.95)
    assert row.metrics["speedup_1gpu"] == pytest.approx(1.9)


def test_fsdp2_cells_only_for_transformers():
    from tcperf import ladder
    one = [ladder.cell_case(m, "train", "fp32", 2) for m in ("gpt2", "resnet50")]
    out = parallel.cells(one, 2, ["ddp", "fsdp2"])
    assert [(c.shape["model"], c.shape.get("parallel")) for c in out] == [
        ("gpt2", None), ("gpt2", "ddp"), ("gpt2", "fsdp2"), ("resnet50", None), ("resnet50", "ddp")]
    assert out[1].task is parallel.run_cell and out[0].task is ladder.cell_task


# --- DDP and FSDP2 as their users configure them, on 2 gloo ranks ----------------------------------------------------
def wrapped_task(case, device, job):
    """GPT-2 small wrapped by parallel.wrap under the case's recipe; what the wrappers hold and what a forward sees."""
    from tcperf import models, precision, recipes
    torch.manual_seed(0)
    mod = models.get("gpt2")
    model, rec = mod.build(mod.CONFIGS["small"]), recipes.get(case.precision)
    seen = []
    model.blocks[0].attn.qkv.register_forward_hook(lambda m, args, out: seen.append(str(m.weight.dtype)))
    wrapped = parallel.wrap(model, parallel.PARALLELS[case.shape["parallel"]], rec)
    inputs, _ = mod.make_batch(mod.CONFIGS["small"], 2, device, torch.Generator().manual_seed(0))
    with precision.apply(rec.precision, "cpu"):
        wrapped(*inputs).float().sum().backward()
    return Result("t", {}, rec.name, metrics={**describe(wrapped), "forward": seen})


def describe(wrapped) -> dict:
    """What a DDP or FSDP2 wrapper was configured with, read back from the wrapper itself."""
    if isinstance(wrapped, torch.nn.parallel.DistributedDataParallel):
        return {"ddp": [wrapped.gradient_as_bucket_view, wrapped.bucket_bytes_cap / 2**20, wrapped.static_graph]}
    units = [wrapped, *wrapped.blocks]
    policies = [u._get_fsdp_state()._mp_policy for u in units]
    groups = [u._get_fsdp_state()._fsdp_param_group for u in wrapped.blocks]
    return {"fsdp": [type(u).__name__.startswith("FSDP") for u in units],
            "policy": [list(p) for p in sorted({(str(p.param_dtype), str(p.reduce_dtype)) for p in policies})],
            "reshard": [g.post_forward_mesh_info is not None for g in groups]}


WRAPPED = [  # recipe, parallel, what the wrapper holds and the dtype of a block's weight during forward
    ("amp_bf16", "fsdp2", {"fsdp": [True] * 3, "policy": [["torch.bfloat16", "torch.float32"]],
                           "reshard": [True, False], "forward": ["torch.bfloat16"]}),
    ("fp32", "fsdp2_no_reshard", {"fsdp": [True] * 3, "policy": [["None", "torch.float32"]],
                                  "reshard": [False, False], "forward": ["torch.float32"]}),
    ("amp_bf16", "ddp", {"ddp": [True, 25.0, True], "forward": ["torch.float32"]}),   # autocast casts per op
    ("amp_bf16+compile", "ddp", {"ddp": [True, 25.0, False]}),      # wrapped only (a forward would compile)
]


def test_ddp_and_fsdp2_get_the_options_that_matter_for_speed():
    cases = [_case(wrap_only_task if "compile" in recipe else wrapped_task, i).replace(precision=recipe,
                                                                                         shape={"parallel": par})
             for i, (recipe, par, _) in enumerate(WRAPPED)]
    rows = launch.run_cases(cases, torch.device("cpu"), Job(timeout=60), nproc=2)     # one launch, 2 gloo ranks
    for row, (recipe, par, want) in zip(rows, WRAPPED):
        assert row.status == "ok", row.message
        assert {k: row.metrics[k] for k in want} == want, (recipe, par, row.metrics)


def wrap_only_task(case, device, job):
    from tcperf import models, recipes
    mod = models.get("gpt2")
    par, rec = parallel.PARALLELS[case.shape["parallel"]], recipes.get(case.precision)
    return Result("t", {}, rec.name, metrics=describe(parallel.wrap(mod.build(mod.CONFIGS["small"]), par, rec)))


def test_parallel_options_are_named_as_stored():
    from tcperf import recipes
    assert parallel.PARALLELS["ddp"].options(recipes.get("amp_bf16")) == {
        "gradient_as_bucket_view": True, "bucket_cap_mb": 25.0, "static_graph": True}
    assert parallel.PARALLELS["fsdp2"].options(recipes.get("amp_fp16"))["param_dtype"] == "float16"
    assert parallel.PARALLELS["fsdp2"].options(recipes.get("tf32"))["param_dtype"] is None
    assert parallel.PARALLELS["fsdp2"].options(recipes.get("compile"))["param_dtype"] == "bfloat16"


# --- the ladder on gloo ranks: 2 here, 4 through the DDP benchmark's tcperf side below ------------------------------
def test_models_nproc_2_on_a_cpu_with_ddp_and_fsdp2(db_path, capsys):
    """Both wrappers on one launch of 2 ranks (8 ranks take the same path; 4: the benchmark below, whose tcperf side
    is `tcperf models --nproc 4`; DDP and FSDP2 at 4 ranks with every option: tests/test_strategy.py). fp32 on every
    rank's same batch: the one-GPU losses."""
    code = cli.main(["models", "gpt2", "--device", "cpu", "--recipes", "fp32", "--nproc", "2", "--parallel",
                     "ddp,fsdp2", "--batch", "1", "--steps", "2", "--rep-ms", "20", "--db", db_path])
    assert code == 0
    rows = Store.open(db_path).results(Store.open(db_path).run()["id"])
    out = " ".join(capsys.readouterr().out.split())       # the console's line wrapping undone
    ranked = check_models_nproc(rows, out, 2, ["ddp", "fsdp2"], batch=1)
    for row in ranked:
        assert row["metrics"]["accuracy"]["gap"] < 1e-4        # the same batch on every rank: the one-GPU losses
    options = {"gradient_as_bucket_view": True, "bucket_cap_mb": 25.0, "static_graph": True}
    assert ranked[0]["metrics"]["parallel_options"] == options
    assert "gradient_as_bucket_view=True, bucket_cap_mb=25.0, static_graph=True" in out   # the options, printed


def check_models_nproc(rows: list[dict], out: str, n: int, parallels: list[str], batch: int) -> list[dict]:
    """What `tcperf models gpt2 --nproc N --parallel P` stored and printed (`out`, its wrapping undone): the one-GPU
    row, then a row a wrapper at N ranks, each with its throughput, scaling, exposed communication and where a step
    goes; the N-rank rows."""
    one, *ranked = rows
    assert one["shape"] == {"model": "gpt2", "mode": "train", "batch": batch}
    assert [r["shape"] for r in ranked] == [{**one["shape"], "nproc": n, "parallel": p} for p in parallels]
    assert all(f"{n} ranks · {p}" in out for p in parallels)
    for row in ranked:
        assert row["status"] == "ok", row["message"]
        m = row["metrics"]
        assert m["throughput"] == pytest.approx(n * m["items_per_step"] / (row["mean_ms"] * 1e-3))
        assert m["scaling_efficiency"] == pytest.approx(m["throughput"] / (n * one["metrics"]["throughput"]))
        assert m["exposed_comm_share"] is not None and 0 <= m["exposed_comm_share"] <= 1, m
        assert m["exposed_steps"] == parallel.PROFILED_STEPS
        assert m["profiled_comm_kernels"] > 0       # gloo's collectives, on every rank
        assert sum(m["breakdown"].values()) == pytest.approx(1.0) and set(m["breakdown"]) == {
            p for p, _, _ in overlap.PARTS}
        assert m["cause"] == overlap.cause(m["breakdown"]) and f"the cause: {m['cause']}" in out
    assert "where a step goes: compute " in out
    return ranked


# --- the benchmark against plain DDP / FSDP2 loops, end to end on a CPU -----------------------------------------------
@pytest.fixture(scope="module")
def ddp_check(tmp_path_factory):
    """`benchmarks/ddp_gpu.py --check --world 4 --rows gpt2-fsdp2`, once for the two tests below: (its stdout, its
    report, the store its tcperf side wrote). Its tcperf side is `tcperf models gpt2 --recipes amp_bf16 --nproc 4
    --parallel fsdp2 --device cpu --small` on 4 gloo ranks, the one 4-rank run of `tcperf models --nproc` (a run of
    its own beside it cost 18 s on 2 cores)."""
    out = tmp_path_factory.mktemp("ddp_check")
    argv = [sys.executable, "benchmarks/ddp_gpu.py", "--check", "--world", "4", "--rows", "gpt2-fsdp2", "--out",
            str(out), "--db", str(out / "results.db")]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    return done.stdout, json.loads((out / "ddp_gpu.json").read_text()), str(out / "results.db")


@pytest.mark.slow
def test_ddp_benchmark_runs_end_to_end_on_a_cpu(ddp_check):
    """The ladder's FSDP2 cell under amp_bf16 is checked here (bf16 parameters, fp32 reduction, where the step goes
    and the scaling), not in a second run of its own."""
    stdout, report, _ = ddp_check
    assert report["worlds"] == [4]              # 2 ranks: test_models_nproc_2_on_a_cpu_with_ddp_and_fsdp2
    for n in (4,):
        row = report["rows"]["gpt2-fsdp2"][f"x{n}"]
        assert row["plain"]["world"] == n and row["plain"]["throughput"] > 0 and row["ratio"] > 0
        tc = row["tcperf"]
        assert tc["status"] == "ok" and tc["parallel_options"]["param_dtype"] == "bfloat16"
        assert tc["parallel_options"]["reduce_dtype"] == "float32"
        assert 0 <= tc["exposed_comm_share"] <= 1 and tc["scaling_efficiency"] > 0, tc
        assert sum(tc["breakdown"].values()) == pytest.approx(1.0) and tc["cause"]
        assert f"gpt2-fsdp2 x{n}: plain" in stdout
    assert stdout.count("ratio tcperf/plain") == 1 and stdout.count("the cause: ") == 1


@pytest.mark.slow
def test_models_nproc_4_on_a_cpu_is_the_ddp_benchmarks_tcperf_side(ddp_check):
    """`tcperf models --nproc 4` as the benchmark ran it: what it stored, and the table it prints for those rows
    (print_ladder, as the command prints them without --json), checked as the 2-rank run is above; amp_bf16 moves
    bf16 parameters under FSDP2, so its losses are held to the accuracy check (status ok), not to fp32's gap."""
    from rich.console import Console
    from tcperf import models
    from tcperf.commands.models import print_ladder
    _, _, db = ddp_check
    rows = Store.open(db).results(Store.open(db).run()["id"])
    shown = Console(record=True, width=200)
    print_ladder(rows, shown)
    check_models_nproc(rows, " ".join(shown.export_text().split()), 4, ["fsdp2"],
                       batch=models.get("gpt2").CONFIGS["small"]["batch"])
    assert [r["precision"] for r in rows] == ["amp_bf16", "amp_bf16"]


@pytest.mark.parametrize("args, said", [(["--rows", "gpt3-ddp"], "unknown row 'gpt3-ddp'"),
                                        (["--world", "1,2"], "at least 2 ranks"), (["--world", "two"], "bad --world")])
def test_ddp_benchmark_bad_input_is_one_line(args, said, monkeypatch, capsys):
    """main() in this process, as tests/test_benchmarks.py runs the other scripts' bad input (a python of its own
    imported torch again for each: 3 s)."""
    from test_benchmarks import load
    bench = load("ddp_gpu")
    monkeypatch.setattr(sys, "argv", ["benchmarks/ddp_gpu.py", "--check", *args])
    assert bench.main() == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err


def test_the_whole_step_graph_rung_is_not_applicable_across_ranks():
    with pytest.raises(recipes.NotApplicable, match="whole-step CUDA graph across ranks"):
        parallel.wrap(torch.nn.Linear(4, 4), parallel.PARALLELS["ddp"], recipes.get("step_graph"))
