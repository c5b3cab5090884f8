"""The engine the ladder and the advisor share (tcperf.engine, tcperf.accuracy, tcperf.spec): outputs of any shape,
the training criterion against fp32's own noise, a degenerate reference, fp32 islands in fp16 weights."""
import dataclasses
import math
from collections import namedtuple

import pytest
import torch
import torch.nn as nn

import tcperf
from conftest import child_env
from tcperf import accuracy, engine, recipes
from tcperf.spec import Spec, map_tensors, tensors


# --- outputs of any shape -------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Out:
    logits: torch.Tensor
    extra: tuple


Pair = namedtuple("Pair", "a b")


def test_map_tensors_keeps_every_container_type():
    t = torch.ones(2)
    out = map_tensors(lambda x: x * 2, {"x": (t, [t]), "p": Pair(t, 3), "d": Out(t, (t,))})
    assert isinstance(out["p"], Pair) and out["p"].b == 3 and isinstance(out["d"], Out)
    assert float(out["d"].extra[0].sum()) == 4 and isinstance(out["x"][1], list)
    assert len(tensors(out)) == 5


def test_a_model_output_stays_indexable_by_position():
    """BERT indexes its encoder's ModelOutput by position (outputs[1]): a plain dict there was the KeyError: 1."""
    modeling = pytest.importorskip("transformers.modeling_outputs")
    o = modeling.BaseModelOutputWithPooling(last_hidden_state=torch.ones(1, 2), pooler_output=torch.zeros(1))
    cast = map_tensors(lambda x: x.double(), o)
    assert type(cast) is type(o) and cast[1].dtype == torch.float64 and cast.pooler_output.dtype == torch.float64


# --- training: against fp32's own noise ------------------------------------------------------------------------------
def test_gradscaler_calibration_skips_are_aligned_not_divergence():
    ref = [5.0, 4.0, 3.0, 2.0, 1.0]
    losses = [5.0, 5.0, 5.0, 4.0, 3.0]          # two skipped steps: the same weights, the same loss
    acc = accuracy.compare_training(losses, [True, True, False, False, False], {"losses": ref, "noise": [ref]})
    assert acc["gap"] == 0 and acc["skipped_steps"] == 2
    assert accuracy.judge(acc, "train", 0.02)[2]
    unaligned = accuracy.compare_training(losses, [False] * 5, {"losses": ref, "noise": [ref]})
    assert not accuracy.judge(unaligned, "train", 0.02)[2]


def test_a_chaotic_fp32_widens_the_bound_and_says_so():
    ref = [0.7, 1.8, 0.9, 0.72, 0.70]
    noisy = [0.7, 0.9, 1.7, 0.75, 0.69]                     # fp32 itself, weights x (1 + 1e-6 noise)
    reference = {"losses": ref, "noise": [noisy]}
    close = accuracy.compare_training([0.7, 1.0, 2.5, 0.8, 0.72], [False] * 5, reference)
    err, what, passes, why = accuracy.judge(close, "train", 0.02)
    assert passes and "fp32's own noise" in close["criterion"] and "noise floor" in close["criterion"]
    far = accuracy.compare_training([0.7, 9.0, 9.0, 9.0, 9.0], [False] * 5, reference)
    assert not accuracy.judge(far, "train", 0.02)[2]
    nan = accuracy.compare_training([0.7, math.nan, 1, 1, 1], [False] * 5, reference)
    assert accuracy.judge(nan, "train", 0.02)[3] == "NaN/inf in the loss"


def test_the_training_reference_measures_fp32_against_itself():
    torch.manual_seed(0)
    spec = Spec(nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.1), nn.Linear(32, 4)), (torch.randn(8, 16),),
                targets=torch.randint(0, 4, (8,)))
    ref = engine.reference(spec, "train", "cpu", steps=6)
    assert len(ref["losses"]) == 6 and len(ref["noise"]) == accuracy.NOISE_RUNS
    assert ref["noise_floor"] > 0          # other dropout masks and perturbed weights: fp32's run-to-run noise


# --- a reference that says nothing ----------------------------------------------------------------------------------
class ZeroHead(nn.Module):
    """Like torchvision's ViT: the classifier starts at zero, so every recipe's logits are exactly 0."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(16, 32), nn.GELU())
        self.head = nn.Linear(32, 4)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, x):
        return self.head(self.trunk(x))


def scramble(model, mode):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 10 * p.std().clamp(min=1e-3))
    return ["weights scrambled"]


SCRAMBLED = recipes.Recipe("scrambled", "fp32", transform=scramble)


def test_a_degenerate_reference_compares_the_last_layers_input():
    torch.manual_seed(0)
    spec = Spec(ZeroHead(), (torch.randn(8, 16),), name="zero_head")
    ref = engine.reference(spec, "infer", "cpu")
    assert ref["degenerate"] == "all zero" and ref["tap"] == "head"
    row = engine.measure(spec, SCRAMBLED, "infer", "cpu", ref=ref, time_it=False)
    assert row.status == "wrong" and row.metrics["accuracy"]["compared"] == "input of head"
    assert "degenerate (all zero)" in row.warnings[0] and "input of head" in row.warnings[0]
    fine = engine.measure(spec, "amp_bf16", "infer", "cpu", ref=ref, time_it=False)
    assert fine.status == "ok" and 0 < fine.error < 0.05


def nudge(model, mode):
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1 + 1e-4)
    return ["weights nudged"]


SCRAMBLED_COMPILED = recipes.Recipe("scrambled_compiled", "fp32", compile=True, transform=scramble)
NUDGED_COMPILED = recipes.Recipe("nudged_compiled", "fp32", compile=True, transform=nudge)


def test_a_layer_swap_far_off_fails_before_its_compile(monkeypatch):
    """fp8, int8 and transforms are checked without torch.compile first: far off, nothing is compiled; close, the
    recipe compiles and is judged as compiled."""
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda model, **kw: compiled.append(kw) or model)
    torch.manual_seed(0)
    spec = Spec(nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)), (torch.randn(8, 16),))
    ref = engine.reference(spec, "infer", "cpu")
    row = engine.measure(spec, SCRAMBLED_COMPILED, "infer", "cpu", ref=ref, tolerance=0.05, time_it=False)
    assert row.status == "wrong" and row.metrics["checked"] == "eager" and not compiled
    assert "checked before compiling" in row.message and row.error > 2 * 0.05
    row = engine.measure(spec, NUDGED_COMPILED, "infer", "cpu", ref=ref, tolerance=0.05, time_it=False)
    assert row.status == "ok" and "checked" not in row.metrics and len(compiled) == 1


# --- fp16 weights, with fp32 islands --------------------------------------------------------------------------------
class Energy(nn.Module):
    """An L2 norm taken the long way: its squares pass fp16's 65504 though its output is small."""

    def forward(self, x):
        return (x * 300).pow(2).sum(-1, keepdim=True).sqrt() / 300


class Overflows(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16, 16)
        self.energy = Energy()
        self.out = nn.Linear(17, 4)

    def forward(self, x):
        h = self.inp(x)
        return self.out(torch.cat([h, self.energy(h)], -1))


def test_fp16_weights_fail_and_are_repaired_with_an_fp32_island():
    torch.manual_seed(0)
    advice = tcperf.advise(Overflows(), torch.randn(8, 16), device="cpu", recipes=["fp32", "fp16"], isolate=False)
    by = {r.recipe: r for r in advice.recipes}
    assert by["fp16"].status == "fails" and "NaN/inf" in by["fp16"].message
    assert advice.sensitive["float16 weights"]["modules"] == ["energy"]
    mixed = next(r for r in advice.recipes if r.keep_fp32)
    assert mixed.status == "ok", mixed.message
    assert mixed.recipe == "fp16+fp32[energy]" and mixed.base == "fp16"


def test_in_process_and_isolated_runs_agree():
    """The Python API pickles the spec to a worker process; without isolation the same engine runs here."""
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)), torch.randn(8, 16)
    here = tcperf.advise(model, x, device="cpu", recipes=["fp32", "amp_bf16"], isolate=False)
    there = tcperf.advise(model, x, device="cpu", recipes=["fp32", "amp_bf16"])
    assert [r.error for r in here.recipes] == [r.error for r in there.recipes]


# --- on a GPU -------------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_cuda_graphs_train_and_bf16_weights_compile(cuda):
    from tcperf import ladder
    for model, recipe, mode in (("gpt2", "cuda_graphs", "train"), ("gpt2", "bf16+compile", "infer"),
                                ("resnet50", "fp16+cuda_graphs", "infer"), ("resnet50", "amp_fp16", "train")):
        r = ladder.measure_cell(model, mode, recipe, 16, cuda, config="small", timing={"rep_ms": 50})
        assert r.status == "ok", (model, recipe, mode, r.message)
        assert r.metrics["throughput"] > 0


@pytest.mark.gpu
def test_gpu_the_grid_compiles_and_graphs_the_passing_recipes(cuda):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024))
    advice = tcperf.advise(model, torch.randn(256, 1024), device="cuda")
    status = {r.recipe: r.status for r in advice.recipes}
    for name in ("compile", "cuda_graphs", "bf16+compile", "bf16+cuda_graphs", "fp16+cuda_graphs"):
        assert status.get(name) in ("ok", "skipped"), (name, status)     # skipped: pruned, with its reason
    assert sum(s == "ok" for n, s in status.items() if "cuda_graphs" in n) >= 2
    v = advice.verdict
    assert v["recommended"] and v["speedup"] > 1
    assert v["runoff"]["rounds"] >= 3 and v["margin"].startswith(v["recommended"])
    assert status.get("fp8") != "skipped" or "compute capability" in \
        next(r.message for r in advice.recipes if r.recipe == "fp8")            # Linear-heavy: tried
    assert advice.phases["total_s"] > 0 and "runoff_s" in advice.phases


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["step_graph", "tf32+step_graph"])
def test_gpu_a_whole_step_graph_trains_like_the_eager_step(cuda, recipe):
    """The whole step (optimizer included) in one CUDA graph: the first replay is the model's first step, so its
    losses follow the same recipe without the graph."""
    from tcperf import engine, recipes
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.LayerNorm(512), nn.GELU(), nn.Linear(512, 10))
    x, y = torch.randn(64, 256, device=cuda), torch.randint(0, 10, (64,), device=cuda)
    plain = recipes.get(recipe).precision
    graphed = engine.train_losses(recipes.prepare(model, recipe, "train", x, cuda, targets=y), 8)[0]
    eager = engine.train_losses(recipes.prepare(model, plain, "train", x, cuda, targets=y), 8)[0]
    assert graphed[-1] < graphed[0]
    assert max(abs(a - b) for a, b in zip(graphed, eager)) < 0.05 * eager[0], (graphed, eager)


def test_a_model_from_a_users_file_reaches_the_worker():
    """A model whose class lives in the user's file (imported by tcperf under its own module name) is pickled by
    reference: the worker imports that file first."""
    from pathlib import Path

    from tcperf import source
    spec = source.load_spec(str(Path(__file__).resolve().parent.parent / "examples" / "awkward_mlp.py:small"))
    advice = tcperf.advise(spec.model, spec.args, device="cpu", recipes=["fp32", "amp_bf16"])
    assert [r.status for r in advice.recipes] == ["ok", "ok"], [r.message for r in advice.recipes]


def test_the_grid_names_the_tiers_of_every_recipe():
    from tcperf import recipes
    assert [recipes.on_top(b, e) for b in ("amp_bf16", "bf16", "fp8") for e in ("compile", "cuda_graphs")] == \
        ["compile", "cuda_graphs", "bf16+compile", "bf16+cuda_graphs", "fp8+compile", "fp8+cuda_graphs"]
    assert recipes.get("fp8+cuda_graphs").cuda_graphs and recipes.get("fp8+cuda_graphs").fp8
    assert recipes.get("tf32+step_graph").modes == ("train",)
    from tcperf.errors import UserError
    with pytest.raises(UserError):
        recipes.get("fp8+compile")                      # fp8 compiles already

def test_a_pickled_models_worker_imports_the_users_file_it_names_and_no_other(tmp_path):
    """The worker of a pickled model imports the file its class lives in, not every file its parent imported (a
    Python session that had advised a transformers, a timm and a diffusers model made each later worker import all
    three)."""
    import json
    import subprocess
    import sys
    (tmp_path / "mine.py").write_text("import torch\nclass Net(torch.nn.Module):\n    def __init__(self):\n"
                                      "        super().__init__()\n        self.lin = torch.nn.Linear(4, 3)\n"
                                      "    def forward(self, x):\n        return self.lin(x)\n"
                                      "def factory():\n    return Net(), torch.randn(2, 4)\n")
    (tmp_path / "other.py").write_text("import os\nif os.environ.get('IN_WORKER'):\n"
                                       "    raise RuntimeError('a worker imported a file its model does not name')\n")
    parent = ("import json, sys; from pathlib import Path; from tcperf import records, source\n"
              "spec = source.load_spec(sys.argv[1] + '/mine.py:factory')\n"
              "source.import_file(Path(sys.argv[1]) / 'other.py')\n"
              "print(json.dumps(records.to_wire(source.save_source(spec, sys.argv[1]))))\n")
    worker = ("import json, sys; from tcperf import records, source\n"
              "spec = source.load_source(records.from_wire(json.loads(sys.argv[1])), 'cpu')\n"
              "print(json.dumps([type(spec.model).__module__, sorted(m for m in sys.modules if "
              "m.startswith('tcperf_user_'))]))\n")
    env = child_env()
    saved = subprocess.run([sys.executable, "-c", parent, str(tmp_path)], capture_output=True, text=True, env=env,
                           timeout=120)
    assert saved.returncode == 0, saved.stderr[-2000:]
    src = json.loads(saved.stdout.strip().splitlines()[-1])
    assert src["pickle"] and len(src["files"]) == 2, src
    loaded = subprocess.run([sys.executable, "-c", worker, json.dumps(src)], capture_output=True, text=True,
                            env={**env, "IN_WORKER": "1"}, timeout=120)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    module, imported = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert module.startswith("tcperf_user_mine_") and imported == [module], (module, imported)


def test_cudnn_autotuning_is_off_unless_a_recipe_names_it():
    """Issue 57: every recipe ran with cudnn.benchmark on, and on a stream of 59 image sizes eager's first pass took
    88 s where a plain loop (PyTorch's default, off) took 5-6 s. Off as PyTorch ships it; a recipe that names it
    turns it on, its snippet sets it, and the ladder (whose hand loops set it) keeps it on."""
    from tcperf.advisor.snippets import plain
    from tcperf.advisor.trials import setup_of

    class Seen(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.seen = nn.Linear(4, 4), []

        def forward(self, x):
            self.seen.append(torch.backends.cudnn.benchmark)
            return self.lin(x)
    before = torch.backends.cudnn.benchmark
    for name, on in (("fp32", False), ("amp_bf16+cudnn_benchmark", True),
                     (recipes.with_cudnn_benchmark(recipes.get("fp32")), True)):
        step = recipes.prepare(Seen(), name, "infer", torch.randn(2, 4), "cpu")
        step()
        assert step.model.seen == [on], name
        assert torch.backends.cudnn.benchmark == before                  # restored after the step
    assert "cudnn.benchmark = True" in plain(setup_of("amp_bf16+cudnn_benchmark"), "infer", "cuda")
    assert "cudnn.benchmark" not in plain(setup_of("amp_bf16"), "infer", "cuda")
