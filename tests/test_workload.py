"""Advice for a workload (tcperf.workload, tcperf.stream, tcperf.advisor.job, tcperf.advisor.streams): the stream
drawn from a factory's workload, recompiles counted, padded recipes judged at the real positions, the job weighed
(one-time cost + N x step), and every bad workload one line naming the step."""
import math
import sys
from types import SimpleNamespace
import textwrap
import time

import pytest
import torch
import torch.nn as nn

from conftest import commands_side_by_side
from tcperf import engine, recipes, source, stream, workload
from tcperf.advisor import job, verdict
from tcperf.advisor.trials import RecipeResult
from tcperf.records import Result
from tcperf.advisor.streams import family, root_of
from tcperf.cli import main
from tcperf.errors import UserError
from tcperf.store import Store

ENCODER = '''
import torch, torch.nn as nn

class Encoder(nn.Module):
    """Embedding, one attention layer (with a key mask, or without one), a per-position head."""
    def __init__(self, masked=True):
        super().__init__()
        self.emb, self.head, self.masked = nn.Embedding(50, 16), nn.Linear(16, 3), masked
        self.att = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, input_ids, attention_mask):
        h = self.emb(input_ids)
        h, _ = self.att(h, h, h, key_padding_mask=(attention_mask == 0) if self.masked else None)
        return self.head(h)                                         # (B, L, 3): one output a position


def work(step):
    g = torch.Generator().manual_seed(step)
    n = int(torch.randint(5, 40, (1,), generator=g))               # lengths 5..39: one bucket of 64
    return {"input_ids": torch.randint(1, 50, (2, n), generator=g), "attention_mask": torch.ones(2, n, dtype=torch.long)}


def factory():
    return {"model": Encoder().eval(), "workload": work}


def unmasked():
    return {"model": Encoder(masked=False).eval(), "workload": work}


def raises():
    def w(step):
        if step == 5:
            raise ValueError("no batch here")
        return work(step)
    return {"model": Encoder(), "workload": w}


def unlike():
    def w(step):
        x = work(step)
        if step == 3:
            x["input_ids"] = x["input_ids"].float()
        return x
    return {"model": Encoder(), "workload": w}


def rejects():
    def w(step):
        x = work(step)
        if step == 9:
            x["input_ids"][0, 0] = 99                               # past the embedding's 50 rows
        return x
    return {"model": Encoder(), "workload": w}


def empty():
    return {"model": Encoder(), "workload": []}
'''


@pytest.fixture
def files(tmp_path):
    path = tmp_path / "enc.py"
    path.write_text(textwrap.dedent(ENCODER))
    return path


# --- the stream -----------------------------------------------------------------------------------------------------
def test_a_callable_workload_is_drawn_seeded_and_a_list_in_a_seeded_order():
    steps = workload.draw(lambda i: torch.randn(3 + i % 4, 8), count=10)
    again = workload.draw(lambda i: torch.randn(3 + i % 4, 8), count=10)
    assert len(steps) == 10 and all(torch.equal(a[0][0], b[0][0]) for a, b in zip(steps, again))
    items = [torch.full((i + 1, 2), float(i)) for i in range(5)]
    drawn = [a[0] for a, _ in workload.draw(items, count=64, seed=3)]
    assert sorted(int(t[0, 0]) for t in drawn) == [0, 1, 2, 3, 4]      # all of a short list, each once
    assert [int(t[0, 0]) for t in drawn] == [int(a[0][0, 0]) for a, _ in workload.draw(items, count=64, seed=3)]


def test_padding_fills_the_varying_dimensions_and_unpad_cuts_only_them():
    ids, labels = torch.ones(2, 37, dtype=torch.long), torch.ones(2, 37, dtype=torch.long)
    hidden = torch.randn(2, 37)          # a fixed-size input: never padded
    varying = {0: {1: 500}, 1: {1: 500}}
    padded, sizes = workload.pad((ids, labels, hidden), varying, 64, ["input_ids", "labels", "hidden"])
    assert padded[0].shape == (2, 64) and int(padded[0][0, 40]) == 0
    assert int(padded[1][0, 40]) == -100 and padded[2] is hidden       # labels: cross-entropy's ignore_index
    out = {"h": torch.randn(2, 64, 64), "pooled": torch.randn(2, 64)}  # the width (64) is no padded dimension
    cut = workload.unpad(out, sizes)
    assert cut["h"].shape == (2, 37, 64) and cut["pooled"].shape == (2, 37)
    assert workload.bucket(37, 64) == 64 and workload.bucket(64, 64) == 64 and workload.bucket(65, 64) == 128
    assert workload.bucket(490, 64, 500) == 500                         # never past the workload's longest


def test_varying_dims_and_buckets_of_a_stream():
    stream = [(torch.zeros(2, n), torch.zeros(3)) for n in (5, 9, 70, 5)]
    assert workload.varying_dims(stream) == {0: {1: 70}}
    assert workload.distinct_shapes(stream) == 3


def test_recipe_names_with_shapes():
    r = recipes.get("bf16+cuda_graphs@pad64")
    assert r.cuda_graphs and r.weights == "bfloat16" and r.pad_to == 64 and "multiples of 64" in r.describe()
    assert recipes.get("bf16+compile@dynamic").shapes == "dynamic"
    with pytest.raises(UserError, match="not compiled"):
        recipes.get("bf16@dynamic")
    with pytest.raises(UserError, match="shapes"):
        recipes.get("bf16+compile@wobbly")
    assert root_of("bf16+cuda_graphs@pad64") == "bf16" and root_of("cuda_graphs") == "amp_bf16"
    assert family("bf16", "cuda") == ["bf16+compile@marked", "bf16+cuda_graphs@marked", "bf16+compile@dynamic",
                                      "bf16+cuda_graphs@dynamic", "bf16+cuda_graphs@pad128", "bf16+cuda_graphs@pad64",
                                      "bf16+compile"]
    assert family("bf16", "cpu") == ["bf16@pad64", "bf16@pad128"]


# --- recompiles counted -------------------------------------------------------------------------------------------
def _stream(lengths):
    return [(torch.randn(n, 8),) for n in lengths]


EAGER_PASS = """
import json, sys, torch
from tcperf import stream
model = torch.nn.Linear(4, 2)
first = stream.first_pass(lambda x: model(*x), [(torch.randn(n, 4),) for n in (3, 5, 3, 7)], "cpu")
print(json.dumps({"dynamo": "torch._dynamo" in sys.modules, "steps": first.steps, "compiles": first.compiles,
                  "graphs": first.graphs}))
"""


def test_an_eager_first_pass_does_not_import_dynamo():
    """An eager recipe's worker never compiles: its first pass watches no compiles and imports nothing for it
    (importing torch._dynamo cost 3-5 s of an eager recipe's first call on an H200's host, its pass 1.5 s)."""
    import json
    import subprocess
    from conftest import child_env
    done = subprocess.run([sys.executable, "-c", EAGER_PASS], env=child_env(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"dynamo": False, "steps": 4, "compiles": 0,
                                                                 "graphs": 0}


@pytest.mark.parametrize("dynamic, compiles, stopped", [(False, 4, True), (None, 2, False)])
def test_recompiles_are_counted_and_a_recompile_per_shape_stops_the_first_pass(dynamic, compiles, stopped):
    """Dynamo's own counters on a tiny model fed six lengths: static compiles at each new shape and is stopped
    after three in a row (stream.RECOMPILE_STOP); automatic dynamic compiles twice (static, then symbolic) and runs the
    stream."""
    torch._dynamo.reset()
    model = torch.compile(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)), backend="eager",
                          dynamic=dynamic)
    first = stream.first_pass(lambda x: model(*x), _stream([3, 4, 5, 6, 7, 8]), "cpu")
    assert first.graphs == compiles and first.compiles == compiles
    assert bool(first.stopped) == stopped and (first.steps == 4 if stopped else first.steps == 6)
    assert "recompiles per shape" in first.stopped if stopped else not first.stopped
    assert len(first.outputs) == workload.CHECK_STEPS


class _Ranged(nn.Module):
    """A branch on the length: the symbolic graph guards L < 8 and compiles once more past it (as Inductor's
    pad_mm guarded a tiny encoder's length on an H100: compiles at L = 9, 5 and 28, then none)."""
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 2)

    def forward(self, x):
        return self.lin(x) if x.shape[0] < 8 else self.lin(x) * 2


def test_automatic_dynamic_compiling_a_third_time_on_a_range_guard_is_not_a_recompile_per_shape():
    torch._dynamo.reset()
    model = torch.compile(_Ranged(), backend="eager")
    first = stream.first_pass(lambda x: model(*x), _stream([3, 4, 9, 10, 11, 12, 5]), "cpu")
    assert first.graphs == 3 and not first.stopped and first.steps == 7


def test_a_static_compile_is_stopped_at_its_first_recompile():
    """dynamic=False cannot make a symbolic graph: one recompile at a new shape proves a compile a shape."""
    torch._dynamo.reset()
    model = torch.compile(nn.Linear(8, 2), backend="eager", dynamic=False)
    first = stream.first_pass(lambda x: model(*x), _stream([3, 4, 5, 6]), "cpu", per_shape=1)
    assert first.compiles == 2 and first.steps == 2
    assert first.stopped == "compiled again at the first new shape, static (dynamic=False): it recompiles per shape"


def test_a_padded_recipe_compiling_once_a_bucket_is_not_stopped_as_recompiling_per_shape():
    """Each new bucket compiles once by design: three in a row is no recompile per shape (an H100 run stopped
    BERT's padded recipes this way before)."""
    torch._dynamo.reset()
    model = torch.compile(nn.Linear(8, 2), backend="eager", dynamic=False)
    lengths = [3, 70, 140, 200, 5, 72]                 # buckets of 64: 64, 128, 192, 256, then met again
    pad = lambda x: (nn.functional.pad(x[0], (0, 0, 0, workload.bucket(x[0].shape[0], 64) - x[0].shape[0])),)
    key = lambda x: workload.shape_key(pad(x))
    first = stream.first_pass(lambda x: model(*pad(x)), _stream(lengths), "cpu", key=key, per_shape=False)
    assert not first.stopped and first.steps == 6 and first.graphs == 4 and first.keys == 4


class FakeClock:
    """A clock each step of a warm-up moves on by `step_s`: the seconds a compile would take, without waiting."""

    def __init__(self, step_s: float):
        self.now, self.step_s = 0.0, step_s

    def __call__(self) -> float:
        return self.now

    def step(self, x):
        self.now += self.step_s


@pytest.mark.parametrize("steps, best_s, budget_s, stopped_after", [
    (10_000, 12.0, None, 3),      # 3 s of warm-up + 9,997 steps at 1 ms > 12 s: cannot win after its 3rd step
    (10_000, 60.0, None, None),   # the whole stream's 20 s + 9,980 x 1 ms = 30 s < 60 s: never stopped
    (None, 12.0, None, None),     # a long job: the step decides, so no warm-up is too long
    (None, 12.0, 7.5, 8),         # ... but the budget still ends: after 8 s of its 7.5 s
])
def test_a_warm_up_is_stopped_only_by_its_jobs_arithmetic_or_the_budget(steps, best_s, budget_s, stopped_after):
    """No cap in seconds (issue 57): on a fake clock, 1 s a step of a 20-step stream whose speed of light is 1 ms."""
    clock = FakeClock(1.0)
    limit = stream.Limit(steps, sol_ms=1.0, best_s=best_s, budget_s=budget_s)
    first = stream.first_pass(clock.step, _stream([3] * 20), "cpu", limit=limit, per_shape=0, clock=clock)
    if stopped_after is None:
        assert first.stopped == "" and first.steps == 20
    else:
        assert first.steps == stopped_after
        assert ("cannot win" if budget_s is None else "--budget ran out") in first.stopped


def _stream_case(spec, name, tmp_path, **more):
    args = engine.RecipeArgs(name, "infer", spec=spec, reference=str(tmp_path / "ref.pt"), tolerance=0.05, **more)
    return engine.recipe_case(args, op="advise.stream", shape={})


def _session(spec, name, tmp_path, **more):
    return engine.StreamSession(_stream_case(spec, name, tmp_path, **more), "cpu").time()


def _first_pass(spec, name, tmp_path):
    """The session's first pass only, which judges accuracy (its first steps against fp32 on the unpadded inputs):
    the timed passes after it (a wall pass and stream.PASSES steady ones) change no status or error."""
    return engine.StreamSession(_stream_case(spec, name, tmp_path), "cpu").first()


def test_a_stream_session_compiles_dynamic_shapes_twice_and_times_the_steady_state(files, tmp_path):
    spec = source.load_spec(f"{files}:factory")
    row = _session(spec, "fp32+compile@dynamic", tmp_path)
    st = row.metrics["stream"]
    assert row.status == "ok" and st["steps"] == st["length"] == workload.STREAM_STEPS
    assert 1 <= st["graphs"] <= 3 and st["distinct"] > 10
    assert row.median_ms > 0 and 0 <= st["one_time_s"] <= st["seconds"] + st["second_s"]
    assert row.error < 1e-4


def test_a_padded_recipe_that_changes_the_real_positions_is_rejected(files, tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    masked = _first_pass(source.load_spec(f"{files}:factory"), "fp32@pad64", tmp_path / "a")
    assert masked.status == "ok" and masked.error < 1e-4       # the mask hides the padding
    unmasked = _first_pass(source.load_spec(f"{files}:unmasked"), "fp32@pad64", tmp_path / "b")
    assert unmasked.status == "wrong" and "real positions" in unmasked.message and unmasked.error > 0.05


# --- the job ------------------------------------------------------------------------------------------------------
def _timed(name, step_ms, one_time_s=None, status="ok", first_call_s=None):
    r = RecipeResult(name, status, timing={"mean_ms": step_ms, "median_ms": step_ms, "iqr_ms": 0.0,
                                           "min_ms": step_ms, "n": 5, "samples": []}, first_call_s=first_call_s,
                     error=0.01, criterion="output rel. error")
    if one_time_s is not None:
        r.stream = {"one_time_s": one_time_s, "length": 64}
    return r


def test_sixty_seconds_of_compile_for_a_twice_faster_step_loses_at_100_steps_and_wins_at_10000():
    eager, compiled = _timed("bf16", 20.0, 0.0), _timed("bf16+cuda_graphs@pad64", 10.0, 60.0)
    assert job.pick([eager, compiled], 100) is eager                  # 2 s against 61 s
    assert job.pick([eager, compiled], 10_000) is compiled            # 200 s against 160 s
    assert job.pick([eager, compiled], None) is compiled              # a long job: the step decides
    assert job.break_even(compiled, eager) == pytest.approx(6_000)    # 60 s / 10 ms
    s = job.summary([eager, compiled], 100, eager="bf16")
    assert s["pick"] == "bf16" and s["long"]["recipe"] == compiled.recipe
    assert s["long"]["from_steps"] == pytest.approx(6_000)
    long = job.summary([eager, compiled], None, eager="bf16")
    assert long["short"] == {"recipe": "bf16", "below_steps": pytest.approx(6_000)}
    assert "pay back after 6,000 steps against bf16" in job.sentence(long)
    compiled.stream.update(compiles=2, captures=8)
    assert "60 s of warm-up (2 compiles, 8 CUDA graph captures) pay back" in job.sentence(
        job.summary([eager, compiled], None, eager="bf16"))


def test_on_one_input_the_compile_is_the_first_call_less_a_step():
    r = _timed("bf16+compile", 2.0, first_call_s=30.002)
    assert job.one_time_s(r) == pytest.approx(30.0)


def test_the_verdict_on_a_workload_picks_the_cheapest_job_and_never_a_recompile_per_shape():
    grid = [_timed("fp32", 40.0), _timed("bf16", 10.0)]
    stopped = RecipeResult("bf16+compile", "skipped", message="warm-up stopped: compiled again at each of the first "
                           "3 new shapes: it recompiles per shape")
    stream_results = [_timed("bf16", 20.0, 0.0), stopped, _timed("bf16+cuda_graphs@pad64", 10.0, 60.0)]
    for r in stream_results:
        r.stream = r.stream or {}
    short = verdict.decide(grid, [], "infer", "cuda", stream=stream_results, steps=100,
                           varying={"input_ids": {"1": 39}})
    assert short["recommended"] == "bf16" and "bf16+compile" in short["stream_failing"]
    long = verdict.decide(grid, [], "infer", "cuda", stream=stream_results, steps=10_000,
                          varying={"input_ids": {"1": 39}})
    assert long["recommended"] == "bf16+cuda_graphs@pad64" and long["speedup_versus"] == pytest.approx(2.0)
    assert "prepare_batch" in long["snippets"]["pytorch"] and "multiple=64" in long["snippets"]["pytorch"]
    text = verdict.headline(long, 0.05)
    assert "2.00x faster a step than bf16 eager on the workload" in text and "a job of 10,000 steps" in text


# --- bad workloads: one line naming the step, exit 2, nothing stored ------------------------------------------------
@pytest.mark.parametrize("factory, words", [
    ("raises", "workload(5) raised ValueError: no batch here"),
    ("unlike", "workload step 3 gives (input_ids=float32"),
    ("rejects", "rejects workload step 9"),
    ("empty", "non-empty list"),
])
def test_a_bad_workload_is_one_line_naming_the_step(advised, factory, words):
    rc, _, err, db = advised[factory]
    err = err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("tcperf:") and words in err[0], err
    assert Store.open(db).runs() == []


def test_bad_steps_exit_2(files, db_path, capsys):
    rc = main(["advise", f"{files}:factory", "--db", db_path, "--device", "cpu", "--steps", "0"])
    assert rc == 2 and "steps must be a whole number" in capsys.readouterr().err
    assert Store.open(db_path).runs() == []


@pytest.fixture(scope="module")
def advised(tmp_path_factory):
    """The module's `tcperf advise` command lines that run whole, each as main() runs it for `python -m tcperf`, in two
    fresh processes side by side, a stream advice and two bad workloads in each (conftest.commands_side_by_side; one
    at a time, in this process, they took 54 s on 2 cores, a worker importing torch or a stream recipe measured with
    a core idle): {name: (exit status, stdout, stderr, the store's path)}."""
    folder = tmp_path_factory.mktemp("advised")
    (folder / "enc.py").write_text(textwrap.dedent(ENCODER))
    (folder / "lm.py").write_text(textwrap.dedent(LM))
    lines = {"unmasked": [f"{folder / 'enc.py'}:unmasked", "--device", "cpu", "--recipes", "fp32,bf16", "--json"],
             "lm_train": [f"{folder / 'lm.py'}:factory", "--mode", "train", "--device", "cpu", "--recipes",
                          "fp32,amp_bf16", "--check-steps", "4", "--json"],
             **{bad: [f"{folder / 'enc.py'}:{bad}", "--device", "cpu"] for bad in ("raises", "unlike", "rejects",
                                                                                     "empty")}}
    ran = commands_side_by_side({name: ["advise", *words, "--db", str(folder / f"{name}.db")]
                                 for name, words in lines.items()})
    return {name: (*result, str(folder / f"{name}.db")) for name, result in ran.items()}


def test_advise_on_a_workload_on_the_cpu_checks_padding_and_stores_the_stream(advised):
    rc, stdout, stderr, db_path = advised["unmasked"]
    assert rc == 0, stderr[-2000:]
    import json
    out = json.loads(stdout)
    by = {r["recipe"]: r for r in out["stream"]}
    assert by["bf16"]["status"] == "ok" and by["bf16@pad64"]["status"] == "fails"
    assert out["workload"]["distinct"] > 10
    assert {k: list(v) for k, v in out["workload"]["varying"].items()} == {"input_ids": ["1"], "attention_mask": ["1"]}
    rows = Store.open(db_path).results(out["run"])
    assert {r["precision"] for r in rows if r["op"] == "advise.stream"} == {"bf16", "bf16@pad64", "bf16@pad128"}
    assert not math.isnan(out["workload"]["flops_per_step"])
    row = next(r for r in rows if r["precision"] == "bf16" and r["op"] == "advise.stream")
    setup = row["metrics"]["stream"]["setup"]           # where its set-up went
    assert setup["load_s"] > 0 and setup["reference_and_prepare_s"] > 0 and setup["worker_imports_s"] > 0


# --- on a GPU ---------------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("name", ["bf16+cuda_graphs@pad64", "bf16+compile@marked", "bf16+cuda_graphs@dynamic"])
def test_gpu_a_stream_session_warms_up_once_then_replays(cuda, files, tmp_path, name):
    spec = source.load_spec(f"{files}:factory")
    case = _stream_case(spec, name, tmp_path, cold=str(tmp_path / "cold"))
    session = engine.StreamSession(case, cuda)
    session.time()
    row = session.profile()
    st = row.metrics["stream"]
    assert row.status == "ok", row.message
    assert st["steps"] == st["length"] and st["graphs"] >= 1 and row.median_ms > 0
    if "cuda_graphs" in name:
        assert st["captures"] >= 1                    # counted from Dynamo's CUDA-graph recording callbacks
    assert row.metrics["kernel_ms"] > 0 and row.error < 0.05
    assert 0 < row.metrics["gpu_busy"] <= 1 and 0 < row.metrics["profiled_steps"] <= engine.PROFILE_STEPS


@pytest.mark.gpu
def test_gpu_the_speed_of_light_of_a_gemm_step(cuda):
    from tcperf import peaks
    from tcperf.advisor import limit
    found = peaks.measure_now(cuda, "bf16")
    assert 100 < found["bf16"] < 3000 and 500 < found["bandwidth"] < 10_000
    r = RecipeResult("bf16", "ok", timing={"mean_ms": 1.0, "median_ms": 1.0})
    r.kernel_ms, r.matmul_ms = 0.9, 0.8
    got = limit.of(r, 2 * 4096 ** 3, 4096 * 4096, "infer", found)
    assert got["bound"] == "math" and got["share"] == pytest.approx(2 * 4096 ** 3 / 1e9 / found["bf16"])
    assert got["parts"]["host_gaps_ms"] == pytest.approx(0.1)


# --- third-party models on their workloads (transformers, tiny configurations) -------------------------------------
@pytest.mark.parametrize("example", ["bert_stream", "llama_prefill"])
def test_padding_a_transformers_models_stream_keeps_its_real_positions(example, tmp_path):
    """BERT's mask hides the padded positions; a causal decoder never looks ahead at them: each padded recipe
    matches fp32 on the unpadded inputs, at the real positions."""
    pytest.importorskip("transformers")
    from pathlib import Path
    target = f"{Path(__file__).resolve().parents[1] / 'examples' / example}.py:tiny"
    spec = source.load_spec(target)
    assert len(spec.workload) == workload.STREAM_STEPS and workload.distinct_shapes(engine.stream_of(spec)) > 5
    for name in ("fp32@pad64", "bf16@pad128"):
        row = _first_pass(spec, name, tmp_path)
        assert row.status == "ok", (name, row.message)
        assert row.error < (1e-4 if name.startswith("fp32") else 0.05), (name, row.error)


def test_the_padded_snippet_runs_and_matches_the_model_at_the_real_positions(files):
    """What a user pastes pads each batch as measured, compiles, and at the real positions gives what the model
    gives on the unpadded batch."""
    from tcperf.advisor.trials import setup_of
    from tcperf.advisor.snippets import plain
    spec = source.load_spec(f"{files}:factory")
    model, batch = spec.model, spec.workload[0][1]
    code = plain(setup_of("fp32+compile@pad64", varying={"input_ids": {"1": 39}, "attention_mask": {"1": 39}}),
                 "infer", "cpu")
    assert "def prepare_batch(batch, multiple=64)" in code and "dynamic=False" not in code
    assert "maybe_mark_dynamic(t, d)" in code
    ns = {"model": model, "x": dict(batch)}
    with torch.no_grad():
        expected = model(**batch)
    exec(code, ns)
    length = batch["input_ids"].shape[1]
    got = ns["outputs"]
    assert got.shape[1] == 39 and torch.allclose(got[:, :length], expected, atol=1e-5)


def test_a_job_inside_the_spread_of_the_cheapest_is_a_tie_and_the_least_warm_up_wins():
    """A host-bound eager step spreads (BERT-base on an H100: passes of 6.5-9.5 ms a batch); a compiled recipe whose
    job lands inside that spread is no win worth its 34 s of warm-up (the advisor's numbers of 2026-11-25)."""
    eager = _timed("bf16", 8.72, 4.6)
    eager.timing["samples"] = [6.5, 8.72, 9.5]
    marked = _timed("bf16+compile@marked", 5.26, 33.6)
    marked.timing["samples"] = [5.16, 5.26, 5.36]
    assert job.job_s(marked, 10_000) < job.job_s(eager, 10_000)        # 86.2 s against 91.8 s ...
    assert job.interval(eager, 10_000)[0] < job.interval(marked, 10_000)[1]   # ... inside eager's 69.6-99.6 s
    assert [r.recipe for r in job.tied([eager, marked], 10_000)] == ["bf16", "bf16+compile@marked"]
    assert job.pick([eager, marked], 10_000) is eager
    assert "a tie within the spread of the timed passes with bf16+compile@marked" in job.sentence(
        job.summary([eager, marked], 10_000, eager="bf16"))
    assert job.pick([eager, marked], 100_000) is marked       # 560 s against 655-955 s: no tie


LM = '''
import operator, torch, torch.nn as nn, torch.nn.functional as F


class LM(nn.Module):
    """A causal language model as transformers' models train: labels = inputs, the loss inside (each position
    predicts the next; cross-entropy's ignore_index, -100, skips a label). Torch only: a worker that imports
    transformers spends 5-9 s on it (2 cores), and this test starts six."""
    def __init__(self):
        super().__init__()
        self.emb, self.head = nn.Embedding(128, 32), nn.Linear(32, 128)
        self.att = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, input_ids, attention_mask, labels):
        h = self.emb(input_ids)
        causal = torch.ones(h.shape[1], h.shape[1], dtype=torch.bool, device=h.device).triu(1)
        h = h + self.att(h, h, h, attn_mask=causal, key_padding_mask=attention_mask == 0, need_weights=False)[0]
        logits = self.head(h)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())
        return {"logits": logits, "loss": loss}


def work(step):                    # a language model's data loader: batches of varying length, labels = inputs
    g = torch.Generator().manual_seed(step)
    n = int(torch.randint(8, 40, (), generator=g))
    ids = torch.randint(1, 128, (2, n), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def factory():
    torch.manual_seed(0)
    return {"model": LM(), "workload": work, "loss_fn": operator.itemgetter("loss")}
'''


def test_training_on_a_workload_pads_the_labels_with_the_ignore_index(advised):
    """--mode train on batches of varying length (LM): the padded recipes' losses (labels padded with -100, which the
    model's cross-entropy ignores) match fp32's on the unpadded batches."""
    rc, stdout, stderr, _ = advised["lm_train"]
    assert rc == 0, stderr[-2000:]
    import json
    out = json.loads(stdout)
    by = {r["recipe"]: r for r in out["stream"]}
    assert set(by) == {"amp_bf16", "amp_bf16@pad64", "amp_bf16@pad128"}
    assert all(r["status"] == "ok" and r["error"] < 0.01 for r in by.values()), by
    assert "labels" in out["workload"]["varying"]


def test_the_leading_precisions_and_their_ways_on_the_stream():
    """Issue 57: within LEAD of the best, and where the best is host-bound the precision whose GEMM/conv/attention
    kernels are the shortest (what a compiled way leaves); channels_last with each reduced precision on convolutions;
    fp8 and int8 (compiled by definition) not among the eager roots; the ways FAMILY makes of a precision, CUDA graphs
    first where the step is host-bound, last but padded where the GPU is busy, padding left out where refused."""
    from tcperf.advisor import streams

    def grid(busy):
        return [_timed("fp32", 21.2), _timed("fp16", 27.9), _timed("fp16+compile", 14.0), _timed("bf16", 60.0),
                _timed("int8", 9.0)] + [RecipeResult("tf32", "fails")] if busy else \
            [_timed("fp32", 21.2), _timed("fp16", 30.0), _timed("int8", 9.0)]
    fast = grid(False)
    for r in fast:
        r.gpu_busy = 0.99
    assert streams.leading(fast, convs=False) == [("fp32", ())]
    assert streams.leading(fast, convs=True) == [("fp32", ())]         # strict fp32 keeps its layout
    slow = grid(True)
    for r, matmul in zip(slow, (10.0, 6.0, 6.0, 3.0, 1.0)):
        r.gpu_busy, r.matmul_ms = 0.3, matmul     # a host-bound step: launches set its pace, not the precision
    assert [p for p, _ in streams.leading(slow, convs=False)] == ["fp16", "bf16"]
    assert [p for p, _ in streams.leading(slow, convs=True)] == ["fp16+channels_last", "fp16",
                                                                   "bf16+channels_last", "bf16"]
    for r in slow:
        r.gpu_busy = 0.95
    assert [p for p, _ in streams.leading(slow, convs=False)] == ["fp16"]
    ways = streams.family("fp16+channels_last", "cuda")
    assert ways[0] == "fp16+channels_last+compile@marked" and "fp16+channels_last+cuda_graphs@pad64" in ways
    assert streams.family("bf16", "cuda", graphs_first=True)[:4] == [
        "bf16+cuda_graphs@marked", "bf16+cuda_graphs@dynamic", "bf16+compile@marked", "bf16+compile@dynamic"]
    assert streams.family("bf16", "cuda", busy=True) == [
        "bf16+compile@marked", "bf16+compile@dynamic", "bf16+cuda_graphs@pad128", "bf16+cuda_graphs@pad64",
        "bf16+compile", "bf16+cuda_graphs@marked", "bf16+cuda_graphs@dynamic"]
    assert not any("pad" in w for w in streams.family("fp16", "cuda", pad_refused="output 0's dimension 1 ..."))
    assert streams.on("bf16", streams.way_of("fp16+cuda_graphs@marked")) == "bf16+cuda_graphs@marked"
    assert streams.on("int8", ("", "marked")) == "int8@marked"
    assert streams.family("amp_bf16", "cuda")[0] == "compile@marked"          # the ladder's compile


def test_a_short_job_leads_with_the_precisions_whose_first_call_is_short():
    """conv_seq's grid on an H100 (2026-11-28, call 2): fp16 and amp_fp16 step fastest (8.3-8.5 ms) but their first
    call took 32-39 s, cuDNN searching at the example's shape; over the stream that cost 102-115 s. At 100 steps the
    advice measured only amp_fp16 (job 115.8 s against tf32's 2.1). Ranked by first call + N x step, tf32 and amp_bf16
    lead at 100 steps, the fp16s at 10,000."""
    from tcperf.advisor import streams
    grid = [_timed(name, step, first_call_s=first) for name, step, first in (
        ("fp32", 25.34, 15.4), ("tf32", 14.87, 0.4), ("amp_fp16", 8.31, 31.7), ("amp_bf16", 15.68, 0.5),
        ("fp16", 8.46, 38.8), ("bf16", 15.59, 22.6))]
    for r in grid:
        r.gpu_busy = 0.98
    assert [p for p, _ in streams.leading(grid, convs=False, steps=100)] == ["tf32", "amp_bf16"]
    assert [p for p, _ in streams.leading(grid, convs=False, steps=10_000)] == ["amp_fp16", "fp16"]
    assert [p for p, _ in streams.leading(grid, convs=False)] == ["amp_fp16", "fp16"]      # no job: the step


def test_over_many_shapes_what_a_second_shape_costs_is_paid_at_each_new_one():
    """conv_seq on an H200 (2026-11-28, 63 shapes in 64 steps): amp_fp16's first call 2.7 s against tf32's 0.43, and
    its plain loop's warm-up over the stream 96 s (1.5 s a new shape), its job at 10,000 steps 211 s against tf32's
    eager 180. With each recipe's call at a second shape (here the plain loops' warm-up over the shapes), tf32 and
    bf16 lead at 10,000 steps and fp16 does not; T5's reduced precisions, whose first calls (1.5 s against fp32's
    0.5) are paid once, lead by their step."""
    from tcperf.advisor import streams

    def grid(rows):
        made = []
        for name, step, first, again in rows:
            r = _timed(name, step, first_call_s=first)
            r.gpu_busy, r.new_shape_s = 0.98, again + step / 1e3
            made.append(r)
        return made
    conv_seq = grid((("fp32", 24.91, 0.46, 0.005), ("tf32", 13.98, 0.43, 0.006), ("amp_fp16", 7.99, 2.66, 1.49),
                     ("amp_bf16", 15.58, 0.49, 0.015), ("fp16", 8.17, 2.37, 1.89), ("bf16", 15.48, 0.54, 0.01)))
    at_10000 = [p for p, _ in streams.leading(conv_seq, False, 10_000, shapes=63)]
    assert at_10000[:3] == ["tf32", "bf16", "amp_bf16"] and "fp16" not in at_10000, at_10000
    assert [p for p, _ in streams.leading(conv_seq, False, 100, shapes=63)] == ["tf32", "bf16"]
    assert [p for p, _ in streams.leading(conv_seq, False, 10_000)][:2] == ["amp_fp16", "fp16"]   # one shape
    t5 = grid((("fp32", 24.2, 0.5, 0.05), ("bf16", 15.2, 1.54, 0.08), ("amp_bf16", 16.1, 1.68, 0.08)))
    assert [p for p, _ in streams.leading(t5, False, 10_000, shapes=64)][:2] == ["bf16", "amp_bf16"]


def test_an_eager_recipe_on_a_workload_times_its_first_call_at_a_second_shape():
    """prepare_checked on a stream's spec (the GRU model's CPU size): an eager recipe also runs once at the stream's
    first shape other than the example's and records how long that took; a compiled recipe (its new shapes are
    compiles, measured on the stream) and a spec without a workload do not."""
    from tcperf import engine, recipes, source
    spec = source.load_spec("benchmarks/streams/gru_asr.py:tiny")
    row, _ = engine.prepare_checked(spec, recipes.get("fp32"), "infer", torch.device("cpu"), check=False)
    assert row.metrics["new_shape_s"] > 0 and len(row.metrics["new_shape_window"]) == 2
    compiled, _ = engine.prepare_checked(spec, recipes.get("fp32+compile"), "infer", torch.device("cpu"), check=False)
    spec.workload = None
    plain, _ = engine.prepare_checked(spec, recipes.get("fp32"), "infer", torch.device("cpu"), check=False)
    assert compiled.ok and plain.ok, (compiled.message, plain.message)
    assert "new_shape_s" not in compiled.metrics and "new_shape_s" not in plain.metrics
    spec = source.load_spec("benchmarks/streams/gru_asr.py:tiny")
    real = spec.model.forward
    spec.model.forward = lambda x, *a, **k: real(x, *a, **k) if x.shape == spec.args[0].shape else 1 / 0
    failed, _ = engine.prepare_checked(spec, recipes.get("fp32"), "infer", torch.device("cpu"), check=False)
    assert failed.ok and "new_shape_s" not in failed.metrics and "ZeroDivisionError" in failed.metrics[
        "new_shape_error"]          # the recipe stands; its stream will say what a new shape does


def test_graphs_come_first_where_their_saving_outruns_the_whole_budget_left():
    """T5 on an H200 (2026-11-28): bf16 eager 23 ms a step at 17% GPU busy, 3.9 ms of kernels; at 10,000 steps graphs
    would save 191 s, more than the 89 s of budget left: measured first. At 100 steps (1.9 s), or with the GPU busy,
    or without a budget, or where torch.compile runs the model's recurrent layers eagerly (the GRU on an H200: graphs
    @marked 25.6-34.0 ms a step against eager's 22.9), eager comes first."""
    import time as clock
    from tcperf.advisor import streams
    eager, graphed = _timed("bf16", 23.0), _timed("bf16", 23.0)
    eager.gpu_busy, graphed.kernel_ms = 0.17, 3.9
    plan = lambda steps, deadline: streams.Plan(None, {}, steps, None, deadline, None, None)
    left = clock.perf_counter() + 89
    assert plan(10_000, left).graphs_first(eager, graphed)
    assert not plan(100, left).graphs_first(eager, graphed)
    assert not plan(10_000, None).graphs_first(eager, graphed)
    eager.gpu_busy = 0.95
    assert not plan(10_000, left).graphs_first(eager, graphed)
    eager.gpu_busy = 0.17         # a GRU's step: torch.compile runs nn.GRU eagerly, CUDA graphs cannot capture it
    assert not streams.Plan(None, {"untraced": ["GRU"]}, 10_000, None, left, None, None).graphs_first(eager, graphed)


def test_the_probe_names_the_layers_torch_compile_runs_eagerly():
    """The GRU acoustic model (its CPU size): nn.GRU, which Dynamo runs eagerly unless allow_rnn is set; T5-like
    encoders have none."""
    from tcperf import source
    from tcperf.advisor.probe import untraced
    assert untraced(source.load_spec("benchmarks/streams/gru_asr.py:tiny").model) == ["GRU"]
    assert untraced(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())) == []
    lstm = torch.nn.ModuleDict({"a": torch.nn.LSTM(4, 4), "b": torch.nn.GRU(4, 4)})
    assert untraced(lstm) == ["GRU", "LSTM"]


def test_a_host_bound_stream_tries_its_ways_at_the_precision_with_the_shortest_matmuls():
    """T5 on an H100: eager bf16 and tf32 both ran 12-14 ms a step (launch-bound), and tf32's ways were tried; bf16's
    CUDA graphs made it 2.1 ms. Where the eager step is host-bound the ways go to the shortest GEMM kernels."""
    from tcperf.advisor import streams
    plan = streams.Plan(None, {}, 10_000, lambda name: None, None, None, None)
    tf32, bf16 = _timed("tf32", 12.0, 0.2), _timed("bf16", 13.0, 3.0)
    tf32.matmul_ms, bf16.matmul_ms = 3.0, 1.5
    plan.stage.results = [tf32, bf16]
    assert plan.family_root([("tf32", ()), ("bf16", ())]) == ("tf32", ())       # GPU-bound: the cheaper eager job
    tf32.gpu_busy = bf16.gpu_busy = 0.3
    assert plan.family_root([("tf32", ()), ("bf16", ())]) == ("bf16", ())


def test_on_a_gpu_the_stream_measures_eager_then_graphs_at_the_shortest_matmuls_then_int8(monkeypatch):
    """streams.run's order on a GPU, with each recipe's measurement faked (T5's shape on an H100): the leading eager
    root; host-bound there, CUDA graphs at the precision with the shortest kernels next (on 4 x H200 at cf96fd1
    three eager roots used T5's whole --budget and its 27x shorter graphed step was never tried); the precision with
    the shortest GEMMs and its ways; then the eager roots the example input ranked behind by more than the noise
    (bf16, 11.6%), the best way at the other roots, and int8 last, its varying dimensions marked."""
    from types import SimpleNamespace
    from tcperf.advisor import streams
    steps = {"tf32": 12.0, "bf16": 13.0, "bf16+cuda_graphs@marked": 2.1, "bf16+cuda_graphs@dynamic": 2.2,
             "bf16+compile@marked": 4.5, "bf16+compile@dynamic": 4.6, "bf16+compile": 4.6,
             "amp_fp16+cuda_graphs@marked": 2.0}
    ran = []

    def measured(cls, name):
        r = _timed(name, steps.get(name, 10.0), 40.0 if "@" in name or "+" in name else 0.3)
        r.gpu_busy, r.matmul_ms = (0.3, 3.0 if root_of(name) == "tf32" else 1.5)
        return r
    monkeypatch.setattr(streams.Plan, "_alone", lambda self, name, keep, label: ran.append(name) or name)
    monkeypatch.setattr(streams.RecipeResult, "from_result", classmethod(measured))
    grid = [_timed("tf32", 12.1), _timed("bf16", 13.5), _timed("fp16", 24.6), _timed("amp_fp16", 14.0)]
    for r, matmul, kernels in zip(grid, (3.0, 1.5, 1.6, 1.4), (4.0, 3.9, 4.4, 4.2)):
        r.gpu_busy, r.matmul_ms, r.kernel_ms = 0.3, matmul, kernels     # amp_fp16: the shortest GEMMs, not kernels
    stage = streams.run(SimpleNamespace(device=torch.device("cuda")), grid, {}, 10_000, later=("int8",))
    assert ran[:4] == ["tf32", "bf16+cuda_graphs@marked", "amp_fp16", "amp_fp16+cuda_graphs@marked"], ran
    assert ran.index("amp_fp16+compile@marked") < ran.index("bf16") and "amp_fp16+cuda_graphs@dynamic" not in ran
    [twin] = [r for r in stage.results if r.recipe == "amp_fp16+cuda_graphs@dynamic"]     # marked passed: same kernels
    assert twin.status == "skipped" and "amp_fp16+cuda_graphs@marked passed" in twin.message
    assert "tf32+cuda_graphs@marked" in ran and ran[-1] == "int8@marked" and "fp16" not in ran
    assert job.pick([r for r in stage.results if r.passes], 10_000).recipe == "amp_fp16+cuda_graphs@marked"
    ran.clear()            # a budget of 60 s left, less than graphs' 81 s saving at 10,000 steps: graphs first
    streams.run(SimpleNamespace(device=torch.device("cuda")), grid, {}, 10_000, later=("int8",),
                deadline=time.perf_counter() + 60)
    assert ran[:2] == ["bf16+cuda_graphs@marked", "tf32"], ran


def test_precisions_the_example_ranks_behind_wait_for_the_first_ones_ways(monkeypatch):
    """conv_seq's grid on an H200 (2026-11-28, 56135c1; 63 shapes in 64 steps, the GPU busy throughout): tf32 leads,
    bf16, amp_bf16, amp_fp16 and fp16 within LEAD of it but 8-12% behind, past their steps' spread. On the stream all three
    eager recipes ran 17.9-18.0 ms, as tf32 did, and used the budget before any way of meeting the shapes; the best
    plain loop is padded (graphs @pad64, 14.8 ms). Now tf32's ways come straight after it, compile and padding before
    CUDA graphs at unpadded shapes (the GPU never waits for the host), automatic dynamic not after marking passed
    (the same kernels), then the eager recipes ranked behind.
    On the detector's convolutions each precision's channels_last comes before it (fp16 + channels_last was the best
    plain loop, 9.2 ms against fp16's 15.3), and bf16, 2.4% behind fp16, after fp16's ways."""
    from types import SimpleNamespace
    from tcperf.advisor import streams
    ran = []

    def measured(cls, name):
        r = _timed(name, 17.9, 1.5)
        r.gpu_busy, r.matmul_ms, r.kernel_ms = 1.0, 16.6, 17.9
        return r
    monkeypatch.setattr(streams.Plan, "_alone", lambda self, name, keep, label: ran.append(name) or name)
    monkeypatch.setattr(streams.RecipeResult, "from_result", classmethod(measured))
    grid = []
    for name, step, iqr, first, again in (("fp32", 24.81, 0.032, 0.30, 0.05), ("tf32", 13.94, 0.016, 0.28, 0.15),
                                          ("amp_fp16", 7.93, 0.017, 2.31, 1.31), ("amp_bf16", 15.50, 0.006, 0.42, 0.11),
                                          ("fp16", 8.14, 0.014, 1.98, 1.33), ("bf16", 15.46, 0.006, 0.34, 0.09)):
        r = _timed(name, step, first_call_s=first)
        r.timing["iqr_ms"], r.new_shape_s, r.gpu_busy, r.kernel_ms, r.matmul_ms = iqr, again, 0.99, step, step * 0.9
        grid.append(r)
    roots = streams.leading(grid, False, 10_000, shapes=63)
    assert [p for p, _ in roots] == ["tf32", "bf16", "amp_bf16", "amp_fp16", "fp16"], roots
    assert not any(streams.close(grid, k, roots[0], 10_000, 63) for k in roots[1:])
    streams.run(SimpleNamespace(device=torch.device("cuda")), grid, {"distinct": 63}, 10_000)
    assert ran[:4] == ["tf32", "tf32+compile@marked", "tf32+cuda_graphs@pad128", "tf32+cuda_graphs@pad64"], ran
    assert ran.index("tf32+cuda_graphs@marked") < ran.index("bf16") < ran.index("amp_bf16") < ran.index("amp_fp16")
    detector = [_timed("fp16", 17.60, first_call_s=1.39), _timed("bf16", 18.02, first_call_s=1.49)]
    for r, iqr in zip(detector, (0.013, 0.034)):
        r.timing["iqr_ms"], r.gpu_busy, r.new_shape_s = iqr, 0.95, 0.1
    roots = streams.leading(detector, True, 10_000, shapes=59)
    assert [p for p, _ in roots] == ["fp16+channels_last", "fp16", "bf16+channels_last", "bf16"]
    assert [streams.close(detector, k, roots[0], 10_000, 59) for k in roots] == [True, True, False, False]


def test_graphs_floor_is_the_compiled_kernels_only_at_the_same_shapes():
    """conv_seq on an H200 (2026-11-28): tf32 + compile @marked's kernels (16.1 ms a step) bound CUDA graphs at the
    same shapes from below, but not padded ones, whose kernels differ (graphs @pad128's plain loop: 15.4 ms)."""
    from tcperf.advisor import streams
    plan = streams.Plan(None, {}, 10_000, lambda name: 1.0, None, None, None)
    compiled = _timed("tf32+compile@marked", 16.4, 10.1)
    compiled.kernel_ms = 16.1
    plan.stage.results = [compiled]
    assert plan.floor_ms("tf32+cuda_graphs@marked") == 16.1
    assert plan.floor_ms("tf32+cuda_graphs@pad128") == 1.0 and plan.floor_ms("bf16+cuda_graphs@marked") == 1.0


def test_a_recipe_that_cannot_win_at_its_speed_of_light_is_not_started(monkeypatch):
    """A cheapest job of 10 s measured; a recipe whose 10,000 steps at its speed of light (2 ms) cost 20 s is
    recorded as not started, with the arithmetic, and no worker is opened for it."""
    from tcperf.advisor import streams
    opened = []
    monkeypatch.setattr(streams.Plan, "_alone", lambda self, name, keep, label: opened.append(name) or name)
    monkeypatch.setattr(streams.RecipeResult, "from_result", classmethod(lambda cls, name: _timed(name, 0.9, 1.0)))
    plan = streams.Plan(None, {"length": 64}, 10_000, lambda name: 2.0 if name == "fp32" else 0.5, None, None, None)
    stage = plan.measure(["bf16", "fp32"], ())
    assert opened == ["bf16"]                                   # bf16's job: 1 + 10,000 x 0.9 ms = 10 s
    [skipped] = [r for r in stage.results if r.recipe == "fp32"]
    assert skipped.status == "skipped" and skipped.message.startswith("not started: cannot win")


def test_the_parent_ends_a_first_pass_once_no_step_count_can_make_it_win():
    """The first pass's time limit in the parent: the cheapest job (60 s) less the steps beyond the stream (10,000 -
    64) at the speed of light (2 ms: 19.9 s), or the budget left where that is sooner, plus a second's grace; with
    no job measured, the worker's own time limit."""
    from tcperf import stream
    from tcperf.advisor import streams
    plan = streams.Plan(SimpleNamespace(timeout=600.0), {"length": 64}, 10_000, None, None, None, None)
    wait = plan._first_timeout(stream.Limit(10_000, 2.0, 60.0, None))
    assert wait == pytest.approx(60.0 - 9_936 * 2e-3 + streams.KILL_GRACE_S)
    assert plan._first_timeout(stream.Limit(10_000, 2.0, 60.0, 12.0)) == pytest.approx(13.0)
    assert plan._first_timeout(stream.Limit(None, 2.0, math.inf, None)) == 600.0
    assert stream.Limit(10_000, 2.0, 60.0, None).reason(wait, 0).startswith("cannot win")


def test_past_the_budget_the_stream_still_measures_until_a_recipe_passes_there(monkeypatch):
    """Issue 57 on an H100: the one-shape grid used T5's whole --budget, nothing ran over the stream, and the advice
    recommended bf16 + CUDA graphs from one input's figures (a static graph on 64 shapes). Past the budget the stream
    measures on until one recipe passes over it, and no further."""
    from tcperf.advisor import streams
    outcome, ran = {"fp16": "wrong", "bf16": "ok", "fp32": "ok"}, []

    def alone(self, name, keep, label):
        ran.append((name, self._limit(name).budget_s))
        return name
    monkeypatch.setattr(streams.Plan, "_alone", alone)
    monkeypatch.setattr(streams.RecipeResult, "from_result",
                        classmethod(lambda cls, name: _timed(name, 2.0, 1.0, status=outcome[name])))
    plan = streams.Plan(None, {}, 100, lambda name: None, time.perf_counter() - 1, None, None)
    stage = plan.measure(["fp16", "bf16", "fp32"], ())
    assert ran == [("fp16", None), ("bf16", None)] and stage.untried == ["fp32"]    # no budget stops their warm-up


def test_a_recipe_is_not_started_where_the_budget_left_cannot_hold_a_measurements_fixed_seconds(monkeypatch):
    """The advice overran its 150 s by up to 18 s on an H200: a warm-up ended by the budget, then its timing and
    profile. With a measurement done (set-up 4 s, timing and profile 7 s), a warm-up gets the budget less those 7 s,
    and with 10 s left no recipe starts (4 + 7 > 10)."""
    from tcperf.advisor import streams
    budgets = []

    def measured(cls, name):
        r = _timed(name, 2.0, 1.0)
        r.stream["calls_s"] = {"setup": 4.0, "first": 2.0, "time": 6.0, "profile": 0.8, "close": 0.2}
        return r
    monkeypatch.setattr(streams.Plan, "_alone",
                        lambda self, name, keep, label: budgets.append(self._limit(name).budget_s) or name)
    monkeypatch.setattr(streams.RecipeResult, "from_result", classmethod(measured))
    plan = streams.Plan(None, {}, 100, lambda name: None, time.perf_counter() + 30, None, None)
    plan.measure(["fp32", "bf16"], ())
    assert budgets[0] is None and budgets[1] == pytest.approx(30 - 7, abs=0.5)
    assert plan.fixed_s() == (4.0, 7.0)
    plan.deadline = time.perf_counter() + 10
    stage = plan.measure(["fp16"], ())
    assert stage.untried == ["fp16"] and len(budgets) == 2


def test_on_a_workload_the_advice_comes_from_the_stream_only():
    grid = [_timed("fp32", 20.0, 0.5), _timed("bf16+cuda_graphs", 2.1, 45.0)]
    assert verdict.decide(grid, [], "infer", "cuda", stream=None, steps=10_000)["recommended"] == "bf16+cuda_graphs"
    v = verdict.decide(grid, [], "infer", "cuda", stream=[], steps=10_000)
    assert v["recommended"] is None and "stream" in v["note"]
    on_stream = [_timed("fp32", 22.0, 0.5), _timed("bf16", 9.0, 3.0, status="wrong")]
    assert verdict.decide(grid, [], "infer", "cuda", stream=on_stream, steps=10_000)["recommended"] == "fp32"


def test_a_stream_whose_output_is_shorter_than_its_input_has_padding_refused_before_any_warm_up(tmp_path, db_path,
                                                                                                capsys, monkeypatch):
    """The GRU of issue 57 subsamples time by 4: padding cannot be cut back out of its outputs. The probe says so
    and no padded recipe is prepared; the advice says why. With a workload the one-shape grid grows no compiled
    tiers (on an H100 they used the whole --budget of GRU and T5 streams): the stream measures those."""
    from tcperf.advisor import api
    grown, search = [], api.Search
    monkeypatch.setattr(api, "Search", lambda *a, **k: grown.append(k["grow"]) or search(*a, **k))
    path = tmp_path / "subsample.py"
    path.write_text(textwrap.dedent("""
        import torch

        class Subsample(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv1d(8, 16, 4, stride=4)

            def forward(self, x):                      # (batch, frames, 8) -> (batch, frames / 4, 16)
                return self.conv(x.transpose(1, 2)).transpose(1, 2)

        def factory():
            torch.manual_seed(0)
            return {"model": Subsample(), "workload": lambda step: torch.randn(2, 16 * (2 + step % 5), 8)}
    """))
    rc = main(["advise", f"{path}:factory", "--device", "cpu", "--db", db_path, "--json"])
    assert rc == 0
    import json
    out = json.loads(capsys.readouterr().out)
    assert "without following any input dimension" in out["workload"]["pad_refused"]
    assert out["stream"] and not any("pad" in r["recipe"] for r in out["stream"])
    assert any(n.startswith("padded recipes not tried on the workload") for n in out["notes"])
    assert grown == [False]
    streamed = [r["stream"] for r in out["stream"] if r.get("stream")]
    assert streamed and all(st["setup_s"] > 0 for st in streamed)           # a worker's set-up, apart


def test_an_unstable_pick_beside_a_faster_step_that_lost_on_its_warm_up_says_so():
    """A short job on a Llama prefill (H100, 2026-11-25): fp16 eager at 12.2 ms a step, unstable, was picked over
    fp16+cuda_graphs; the note once read 'the runner-up took -92% longer'."""
    from tcperf.advisor import verdict
    eager, graphs = _timed("fp16", 12.2, 5.8), _timed("fp16+cuda_graphs@marked", 1.77, 32.7)
    eager.timing.update(unstable=True, spread=0.58, min_ms=11.5)
    note = verdict.unstable_note(eager, [eager, graphs], by_job=True)
    assert "-9" not in note and "85% shorter" in note and "one-time cost" in note
    assert "over the stream's passes" in note and "runoff" not in note
