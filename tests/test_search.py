"""The advisor's search and runoff, on the CPU: the decision rule against injected noise and ties, the grid's
tiers, pruning on measured kernel time and the budget (through a scripted bench: no model, no GPU), and the probe
that meets a model which hangs or dies before any recipe starts (real worker processes, through the CLI)."""
import functools
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import side_by_side
from tcperf.advisor import runoff, search
from tcperf.advisor.trials import Item
from tcperf.records import Result

ROOT = Path(__file__).resolve().parents[1]
KILLERS = ROOT / "tests" / "thirdparty" / "killers.py"


# --- the runoff's decision ---------------------------------------------------------------------------------------
def noisy_rounds(true_ms: dict, rounds: int, seed: int, spell=(0.75, 1.45), jitter=0.01) -> dict:
    """Each round slowed by one shared spell factor (the GPU's power-cap spells), each window by its own jitter."""
    rng = random.Random(seed)
    times = {n: [] for n in true_ms}
    for _ in range(rounds):
        f = rng.uniform(*spell)
        for n, t in true_ms.items():
            times[n].append(t * f * (1 + rng.uniform(-jitter, jitter)))
    return times


RANK = {"eager": (0, 0), "compiled": (1, 0), "graphs": (2, 0)}


@pytest.mark.parametrize("seed", range(40))
def test_noise_does_not_flip_the_pick(seed):
    """Spells that change a whole round by up to 45% and 1% window noise: a 5% lead is found every time."""
    times = noisy_rounds({"graphs": 1.00, "compiled": 1.05, "eager": 1.30}, runoff.ROUNDS, seed)
    v = runoff.decide(times, RANK)
    assert v["pick"] == "graphs"
    assert v["runner_up"] == "compiled"
    assert 0.03 < v["margin"] < 0.07 and v["spread"] < 0.03


@pytest.mark.parametrize("seed", range(20))
def test_a_real_tie_goes_to_the_simpler_recipe(seed):
    times = noisy_rounds({"graphs": 1.000, "eager": 1.004}, runoff.ROUNDS, seed)
    v = runoff.decide(times, RANK)
    assert v["pick"] == "eager"
    assert v["fastest"] in ("graphs", "eager")
    assert "within the noise" in runoff.sentence(v) or v["fastest"] == "eager"


def test_a_lead_within_the_rounds_spread_is_a_tie():
    """3% ahead on the median, but the rounds disagree by more than that: not called."""
    times = {"graphs": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0], "eager": [0.96, 1.10, 0.97, 1.09, 0.99, 1.03]}
    v = runoff.decide(times, RANK)
    assert v["pick"] == "eager"


def test_a_recipe_slower_in_every_round_is_beaten_though_its_stalls_widen_the_spread():
    """ConvNeXt-T's runoff on an H100 (2026-11-27), times verbatim: fp16+compile 1% behind in four rounds and 9% and
    22% behind in two. The stalls made the spread 5.9% and the tie went to the simpler, stalling recipe."""
    times = {"bf16+cuda_graphs": [4.3197, 4.3348, 4.3356, 4.3350, 4.3359, 4.3333],
             "fp16+compile": [4.3692, 4.3726, 4.7420, 4.3709, 4.3674, 5.2677],
             "fp16+cuda_graphs": [4.5334, 4.5318, 4.5323, 4.5301, 4.5288, 4.5279]}
    rank = {"fp16+compile": (1, 0), "bf16+cuda_graphs": (2, 0), "fp16+cuda_graphs": (2, 0)}
    v = runoff.decide(times, rank)
    assert v["pick"] == "bf16+cuda_graphs" and v["tied"] == []
    assert not runoff.beats(times["bf16+cuda_graphs"][:3], times["fp16+compile"][:3])   # 3 rounds: too few to say


def test_rounds_interleave_and_rotate():
    calls = []
    timers = {n: (lambda ms, n=n: calls.append(n) or 1.0) for n in "ABC"}
    times = runoff.run(timers, rounds=3, window=200)
    assert calls == list("ABCBCACAB")
    assert times == {n: [1.0] * 3 for n in "ABC"}


def test_a_recipe_failing_in_the_runoff_leaves_it():
    timers = {"A": lambda ms: 1.0, "B": lambda ms: None}
    assert runoff.run(timers, rounds=3) == {"A": [1.0] * 3}


def test_the_sentence_states_margin_and_spread():
    v = runoff.decide({"bf16+cuda_graphs": [2.50, 2.52, 2.55, 2.51, 2.53, 2.52],
                       "fp16+cuda_graphs": [2.58, 2.60, 2.63, 2.59, 2.61, 2.60]}, {})
    text = runoff.sentence(v)
    assert text.startswith("bf16+cuda_graphs: 2.52 ms, 3.") and "% +- " in text
    assert "ahead of fp16+cuda_graphs (6 interleaved rounds)" in text


# --- the grid, through a scripted bench ----------------------------------------------------------------------
class Script:
    """A worker whose rows come from a table: {label: (step_ms, matmul_ms, kernel_ms, passes)}; the call that makes
    its recipe is logged as "open"."""

    def __init__(self, label: str, table: dict, log: list):
        self.label, self.table, self.log, self.case = label, table, log, None

    def call(self, target, *args, timeout: float, hold: bool = False, **kwargs):
        name = "open" if hold else target
        self.log.append((name, self.label))
        step, matmul, kernel, ok = self.table[self.label]
        row = Result("advise.recipe", {}, self.label, "ok" if ok else "wrong", message="" if ok else "too far",
                     metrics={"matmul_ms": matmul, "kernel_ms": kernel})
        if name == "time":
            row = row.replace(mean_ms=step, median_ms=step, iqr_ms=0.0, min_ms=step, n=10, samples=[step] * 10)
        if name == "window":
            return float(step)
        return row

    def pause(self):
        self.log.append(("pause", self.label))

    def resume(self):
        self.log.append(("resume", self.label))

    def close(self):
        self.log.append(("close", self.label))


class ScriptedBench:
    kind = "a recipe"

    def __init__(self, table: dict, mode: str = "infer"):
        import torch
        self.table, self.mode, self.device, self.timeout = table, mode, torch.device("cuda"), 60.0
        self.log, self.reported = [], []

    def open(self, item: Item):
        return Script(item.label or item.recipe, self.table, self.log)

    def report(self, r):
        self.reported.append(r.recipe)


TABLE = {   # label: (step ms, matmul ms, kernel ms, passes)
    "fp32": (10.0, 9.0, 9.8, True), "tf32": (4.0, 3.0, 3.8, True), "amp_bf16": (2.0, 1.0, 1.8, True),
    "bf16": (1.9, 0.9, 1.6, True), "fp16": (1.8, 0.9, 1.6, False),
    "tf32+compile": (3.5, 3.0, 3.2, True), "tf32+cuda_graphs": (3.3, 3.0, 3.2, True),
    "compile": (1.4, 1.0, 1.2, True), "cuda_graphs": (1.25, 1.0, 1.2, True),
    "bf16+compile": (1.3, 0.9, 1.1, True), "bf16+cuda_graphs": (1.2, 0.9, 1.1, True),
}


def test_the_grid_builds_tiers_on_passing_recipes_and_prunes_on_kernel_time():
    bench = ScriptedBench(TABLE)
    s = search.Search(bench, jobs=2)
    results = s.run([Item(n) for n in ("fp32", "tf32", "amp_bf16", "bf16", "fp16")])
    done = {r.recipe: r.status for r in results}
    # fp16 failed its check: nothing is built on it
    assert "fp16+compile" not in done
    # fp32's GEMMs alone (9 ms) exceed the best step: its compile tier is pruned, with the reason
    assert done["fp32+compile"] == "skipped" and "fp32+compile" in s.pruned
    assert done["fp32+cuda_graphs"] == "skipped" and "fp32+cuda_graphs" in s.pruned
    # every passing 16-bit recipe got both tiers
    for name in ("compile", "cuda_graphs", "bf16+compile", "bf16+cuda_graphs"):
        assert done[name] == "ok"
    # the runoff ran among the leaders only (within LEAD_MARGIN of the best) and picked the fastest
    windows = {label for call, label in bench.log if call == "window"}
    assert windows == {"bf16+cuda_graphs", "cuda_graphs", "bf16+compile", "compile"}
    assert s.decision["pick"] == "bf16+cuda_graphs"
    # every session was closed
    opened = {label for call, label in bench.log if call == "open"}
    closed = {label for call, label in bench.log if call == "close"}
    assert opened == closed


def test_after_eager_runs_once_every_eager_recipe_is_in():
    bench = ScriptedBench({**TABLE, "amp_bf16+fp32[head]": (1.95, 1.0, 1.7, True)})
    seen = []

    def more(results):
        seen.append(sorted(r.recipe for r in results if "+" not in r.recipe))
        return [Item("amp_bf16", ("head",), "amp_bf16+fp32[head]", "amp_bf16")]

    s = search.Search(bench, jobs=3)
    results = s.run([Item(n) for n in ("fp32", "tf32", "amp_bf16", "bf16", "fp16")], after_eager=more)
    assert seen == [["amp_bf16", "bf16", "fp16", "fp32", "tf32"]]
    labels = {r.recipe for r in results}
    assert "amp_bf16+fp32[head]" in labels and "amp_bf16+fp32[head]+compile" in labels


def test_misaligned_gemms_lower_the_bound_compile_must_beat():
    """Inductor may pad a misaligned GEMM: the eager time of those layers is no floor for the compiled step."""
    table = {**TABLE, "fp32": (10.0, 9.0, 9.8, True), "fp32+compile": (1.0, 0.5, 0.9, True)}
    layers = [gemm(95.0, issues={"fp32": {}}), gemm(5.0)]
    s = search.Search(ScriptedBench(table), jobs=1, layers=layers)
    results = s.run([Item("fp32"), Item("bf16")])
    assert {r.recipe: r.status for r in results}["fp32+compile"] == "ok"


def gemm(flops: float, kind: str = "gemm", issues=None):
    from tcperf.advisor.lint import Layer
    return Layer("m", "Linear", kind, {}, 1, flops, issues or {})


def test_convolutions_bound_nothing_unless_the_recipe_is_already_channels_last():
    """Inductor lays convolutions out channels-last itself: NCHW eager conv time is no floor for a compiled step."""
    layers = [gemm(80.0, "conv"), gemm(20.0)]
    assert search.loose_share(layers, "tf32", channels_last=False) == pytest.approx(0.8)
    assert search.loose_share(layers, "tf32", channels_last=True) == 0.0
    assert search.loose_share([gemm(80.0, "conv", {"bf16": {}}), gemm(20.0)], "bf16", True) == pytest.approx(0.8)


class Gated(Script):
    """A session whose "open" waits for a gate (a recipe still compiling while another is timed)."""

    def __init__(self, label, table, log, gates):
        super().__init__(label, table, log)
        self.gates = gates

    def call(self, target, *args, timeout, hold=False, **kwargs):
        if hold and self.label == "slow":
            self.gates["slow opening"].set()
            self.gates["release"].wait(10)
        if hold and self.label == "fast":
            self.gates["slow opening"].wait(10)
        row = super().call(target, *args, timeout=timeout, hold=hold, **kwargs)
        if target == "time" and self.label == "fast":
            self.gates["release"].set()
        return row


def _fast_beside_slow(session=None):
    """A search of two recipes, "fast" timed while "slow" still prepares (sessions of class `session`, Gated by
    default): (the bench with its log, the search)."""
    import threading
    gates = {"slow opening": threading.Event(), "release": threading.Event()}
    table = {"fast": (1.0, 0.5, 0.9, True), "slow": (2.0, 1.0, 1.8, True)}
    bench = ScriptedBench(table)
    bench.open = lambda item: (session or Gated)(item.label or item.recipe, table, bench.log, gates)
    s = search.Search(bench, jobs=2, grow=False)
    s.run([Item("fp32", (), "fast", "fp32"), Item("tf32", (), "slow", "tf32")])
    return bench, s


def test_workers_still_preparing_are_stopped_while_a_recipe_is_timed():
    """The GPU runs only the recipe being timed: a worker compiling meanwhile is paused, and resumed after."""
    bench, _ = _fast_beside_slow()
    log = bench.log
    timed = log.index(("time", "fast"))
    assert log.index(("pause", "slow")) < timed < log.index(("resume", "slow"))
    assert ("pause", "fast") not in log            # nothing else was preparing while "slow" was timed


class Timed(Gated):
    """Gated, with "slow"'s first call spanning the time "fast" is timed (0.3 s), its window noted as the engine
    notes it, and carried by the session's later rows as a worker's held row carries it."""

    def call(self, target, *args, timeout, hold=False, **kwargs):
        t0 = time.perf_counter()
        if target == "time" and self.label == "fast":
            time.sleep(0.3)
        row = super().call(target, *args, timeout=timeout, hold=hold, **kwargs)
        if hold:
            t1 = time.perf_counter()
            self.first = {"first_call_s": t1 - t0, "first_call_window": (t0, t1)}
        if isinstance(row, Result):
            row.metrics.update(self.first)
        return row


def test_a_first_call_reads_without_the_seconds_its_worker_was_stopped():
    """A recipe still preparing while another is timed is stopped; its first call must not count those seconds."""
    bench, s = _fast_beside_slow(Timed)
    slow = next(r for r in s.results if r.recipe == "slow")
    assert ("pause", "slow") in bench.log
    assert slow.first_call_s is not None and slow.first_call_s < 0.2      # 0.3 s of it was the pause


def test_unpaused_takes_out_each_pause_inside_the_first_calls_window():
    from tcperf.advisor.pool import unpaused
    row = Result("advise.recipe", {}, "x", "ok", metrics={"first_call_s": 10.0, "first_call_window": (10.0, 20.0)})
    out = unpaused(row, [[5.0, 12.0], [15.0, 16.0], [18.0, None], [25.0, 30.0]])   # 2 + 1 + 2 (to the end) + 0
    assert out.metrics["first_call_s"] == pytest.approx(5.0) and out.metrics["first_call_paused_s"] == 5.0
    assert "first_call_window" not in out.metrics
    kept = unpaused(Result("advise.recipe", {}, "x", "ok", metrics={"first_call_s": 1.0}), [[0.0, 1.0]])
    assert kept.metrics == {"first_call_s": 1.0}
    both = unpaused(Result("advise.recipe", {}, "x", "ok", metrics={
        "first_call_s": 3.0, "first_call_window": (0.0, 3.0), "new_shape_s": 4.0, "new_shape_window": (3.0, 7.0)}),
        [[2.0, 4.0]])                       # a pause across both windows: 1 s out of each
    assert both.metrics == {"first_call_s": 2.0, "first_call_paused_s": 1.0, "new_shape_s": 3.0,
                            "new_shape_paused_s": 1.0}


def test_a_recipes_compiled_tiers_are_queued_together_and_compiled_evidence_tightens_them():
    """Graphs need not wait for X+compile: they compile side by side, and X+compile's kernels, when measured first,
    prune X+cuda_graphs as before."""
    table = {**TABLE, "tf32+compile": (3.5, 3.0, 3.4, True)}
    s = search.Search(ScriptedBench(table), jobs=1)
    tf32 = search.candidate(Item("tf32"))
    above = s._above(tf32, s_result("tf32", 4.0), {"matmul_ms": 3.0})
    assert [(c.label, c.bound_ms) for c in above] == [("tf32+compile", 3.0), ("tf32+cuda_graphs", 3.0)]
    s._add(above)
    s._above(above[0], s_result("tf32+compile", 3.5), {"kernel_ms": 3.4})
    graphs = next(c for c in s.queue if c.label == "tf32+cuda_graphs")
    assert graphs.bound_ms == 3.4 and graphs.bound_from == "tf32+compile's kernels"
    # the whole grid: a best step of 1.2 ms prunes tf32's graphs on either evidence
    results = {r.recipe: r for r in search.Search(ScriptedBench(table), jobs=4).run(
        [Item(n) for n in ("tf32", "amp_bf16", "bf16")])}
    assert results["bf16+cuda_graphs"].status == "ok"


def s_result(label: str, ms: float):
    from tcperf.advisor.trials import RecipeResult
    return RecipeResult(label, "ok", timing={"mean_ms": ms, "median_ms": ms})


def test_without_a_runoff_no_worker_is_kept_and_no_round_is_timed():
    """With a workload the stream decides, so the grid keeps no leader's worker and times no runoff (T5 on an H200:
    9-14 s of its 150 s budget): every worker is closed as its recipe is in, and no 'window' call is made."""
    bench = ScriptedBench(TABLE)
    s = search.Search(bench, jobs=2, grow=False, runoff=False)
    assert {r.recipe for r in s.run([Item("tf32"), Item("bf16"), Item("amp_bf16")])} == {"tf32", "bf16", "amp_bf16"}
    assert not s.alive and s.decision == {} and not any(call == "window" for call, _ in bench.log)
    assert sorted(label for call, label in bench.log if call == "close") == ["amp_bf16", "bf16", "tf32"]
    with_runoff = ScriptedBench(TABLE)
    search.Search(with_runoff, jobs=2, grow=False).run([Item("tf32"), Item("bf16"), Item("amp_bf16")])
    assert any(call == "window" for call, _ in with_runoff.log)


def test_given_recipes_get_no_tiers_above_them():
    s = search.Search(ScriptedBench(TABLE), jobs=2, grow=False)
    assert {r.recipe for r in s.run([Item("tf32"), Item("bf16")])} == {"tf32", "bf16"}


def test_training_adds_the_whole_step_graph_tier():
    table = {"amp_bf16": (2.0, 1.0, 1.8, True), "compile": (1.4, 1.0, 1.2, True),
             "cuda_graphs": (1.3, 1.0, 1.2, True), "step_graph": (1.1, 1.0, 1.05, True)}
    s = search.Search(ScriptedBench(table, mode="train"), jobs=1)
    results = s.run([Item("amp_bf16")])
    assert {r.recipe for r in results} == set(table)
    assert s.decision["pick"] == "step_graph"


def test_a_spent_budget_names_what_was_not_tried():
    s = search.Search(ScriptedBench(TABLE), jobs=1, budget=1.0, started=time.perf_counter() - 5)
    results = s.run([Item("tf32"), Item("amp_bf16")])
    assert {r.status for r in results} == {"skipped"}
    assert s.untried == ["tf32", "amp_bf16"]
    assert all(r.message.startswith("not tried: --budget 1 s") for r in results)


def test_tiers_sit_on_fp8_and_mixed_recipes_by_name():
    fp8 = search.candidate(Item("fp8"))
    assert fp8.tier == "compile"
    mixed = search.candidate(Item("bf16", ("head",), "bf16+fp32[head]", "bf16"))
    above = search.Search(ScriptedBench(TABLE), jobs=1)._on_top(mixed, "cuda_graphs", 1.0, "x")
    assert (above.item.recipe, above.item.label, above.item.keep) == \
        ("bf16+cuda_graphs", "bf16+fp32[head]+cuda_graphs", ("head",))
    assert search.tier_of("fp8+cuda_graphs") == "cuda_graphs"


# --- the probe: user code that fails before any recipe ----------------------------------------------------------
REFUSED = {
    "factory_never_returns": "calling the model's factory did not finish within --timeout 4 s",
    "factory_forward_hangs": "the model's first fp32 forward on its inputs did not finish within --timeout 4 s",
    "factory_forward_segfaults": "the model's first fp32 forward on its inputs ended its worker process (killed by "
                                 "SIGSEGV",
}


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    """`python -m tcperf advise killers.py:FACTORY --device cpu --timeout 4` for each factory above, as a user runs it
    (the one line of a fresh process, imports and all), the three side by side (one after the other they took
    19 s on 2 cores, a hang's 4 s each with a core idle): {factory: (exit status, stderr, wall seconds, store)}."""
    def advise(factory):
        db = tmp_path_factory.mktemp(factory) / "t.db"
        argv = ["advise", f"{KILLERS}:{factory}", "--device", "cpu", "--timeout", "4", "--db", str(db)]
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "tcperf", *argv], capture_output=True, text=True, timeout=120,
                              cwd=ROOT)
        return proc.returncode, proc.stderr, time.perf_counter() - t0, db
    return dict(zip(REFUSED, side_by_side(*(functools.partial(advise, f) for f in REFUSED))))


@pytest.mark.slow
@pytest.mark.parametrize("factory", REFUSED)
def test_a_model_that_fails_before_the_recipes_is_one_line(refused, factory):
    """--timeout 4: a hang waits it out; the one stage that must finish within it before the forward hangs, the
    factory's call, takes about 0.01 s (the worker's start-up has a timeout of its own)."""
    returncode, stderr, wall, db = refused[factory]
    stage = REFUSED[factory]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert returncode == 2, stderr
    assert lines == [f"tcperf: {stage}" + lines[0][len("tcperf: " + stage):]] and len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert wall < 4 + 25, wall           # --timeout plus the process's and the worker's start (importing torch)
    if db.exists():
        import sqlite3
        assert sqlite3.connect(db).execute("select count(*) from results").fetchone()[0] == 0


def test_the_probe_hands_the_saved_model_on_before_checking_it(monkeypatch):
    """The spares start loading the model once the probe's first stage saved it, not after the probe's last."""
    import torch
    from tcperf.advisor import probe
    from tcperf.spec import Spec
    order = []
    monkeypatch.setattr(probe.Probe, "check", lambda self: order.append("check") or self.row())
    spec = Spec(torch.nn.Linear(4, 4), (torch.randn(2, 4),), name="lin")
    args = probe.ProbeArgs(None, "infer", None, 2, ("fp32",), "", spec=spec)
    monkeypatch.setattr(probe.Probe, "reference", lambda self: self.row())
    facts = probe.run_probe(args, "cpu", timeout=10, isolate=False, loaded=lambda source: order.append("saved"))
    assert order == ["saved", "check"] and facts.name == "lin"


def test_a_spare_imports_the_users_file_before_the_model_is_saved(tmp_path):
    """What a spare does while the probe builds the model: the user's file, under the name pickles refer to it by."""
    from tcperf import engine
    from tcperf.source import imports_source, module_name
    user = tmp_path / "user_model.py"
    user.write_text("IMPORTED = True\n")
    engine.load_ahead(engine.RecipeArgs("fp32", "infer", source=imports_source([str(user)])))
    assert sys.modules[module_name(user)].IMPORTED


def test_grown_tiers_wait_for_every_eager_recipe_so_the_best_eager_step_prunes_first():
    s = search.Search(ScriptedBench(TABLE), jobs=8)
    results = {r.recipe: r for r in s.run([Item(n) for n in ("fp32", "tf32", "amp_bf16", "bf16", "fp16")])}
    assert results["fp32+compile"].status == "skipped"
    eager_done = max(t["timed"] for t in s.timeline.values() if t["tier"] == "eager" and "timed" in t)
    grown = [t["launched"] for t in s.timeline.values() if t["tier"] != "eager"]
    assert grown and min(grown) >= eager_done


def test_the_spares_are_closed_before_the_runoff():
    class Spares:
        def __init__(self, log):
            self.log = log

        def pause(self):
            pass

        def resume(self):
            pass

        def close(self):
            self.log.append(("close", "spares"))

    bench = ScriptedBench(TABLE)
    bench.spares = Spares(bench.log)
    s = search.Search(bench, jobs=2)
    s.run([Item(n) for n in ("tf32", "amp_bf16", "bf16")])
    first_window = next(i for i, (call, _) in enumerate(bench.log) if call == "window")
    assert bench.log.index(("close", "spares")) < first_window


def test_idle_spares_hold_a_bounded_share_of_the_gpus_memory():
    from tcperf.advisor.trials import spare_limit
    assert spare_limit(80e9) == 16 and spare_limit(24e9) == 4 and spare_limit(1e9) == 1


def test_a_gpu_machine_prepares_five_recipes_for_every_eight_cores(monkeypatch):
    import torch
    monkeypatch.setattr(search.env, "usable_cores", lambda: 16)     # the cores this process may use
    assert search.default_jobs(torch.device("cuda")) == 10 and search.default_jobs(torch.device("cpu")) == 2
    monkeypatch.setattr(search.env, "usable_cores", lambda: 4)
    assert search.default_jobs(torch.device("cuda")) == 2


def test_a_recipe_out_of_memory_beside_other_workers_is_tried_again_alone_before_it_is_stored():
    """Issue 57: two of a detector's recipes were stored as oom while a sibling worker held 14.65 GiB. A recipe that
    runs out of memory in the grid is prepared again once no other worker is alive, and only that row is stored."""
    opened = []

    class Crowded(Script):
        def call(self, target, *args, timeout, hold=False, **kwargs):
            if hold:
                opened.append(self.label)
                if self.label == "bf16" and opened.count("bf16") == 1:
                    return Result("advise.recipe", {}, "bf16", "oom", message="CUDA out of memory (a sibling's)")
            return super().call(target, *args, timeout=timeout, hold=hold, **kwargs)

    bench = ScriptedBench(TABLE)
    bench.open = lambda item: Crowded(item.label or item.recipe, TABLE, bench.log)
    results = search.Search(bench, jobs=2, grow=False).run([Item("fp32"), Item("bf16"), Item("tf32")])
    assert opened.count("bf16") == 2 and opened[-1] == "bf16"            # again, after every other one
    assert [r.status for r in results if r.recipe == "bf16"] == ["ok"]
    assert bench.reported.count("bf16") == 1                              # the oom row never stored
