"""`tcperf advise` on real third-party models, run as a user runs it: the CLI in a subprocess, on the CPU.

What these tests prove:
- models the advisor did not write load and measure end to end: Hugging Face BERT (keyword inputs, a ModelOutput,
  the loss inside the model), torchvision's ViT, timm's ConvNeXt; exit status 0, no traceback, JSON on stdout
  with a "run", a "recipes" list and a "verdict", fp32 strict "ok" and no recipe ending in "error";
- outputs in a tuple, a plain dataclass or a dict are compared, in inference and (the dataclass) in training;
- a constant reference output (torchvision zero-initialises the ViT head, so a fresh ViT outputs zeros) is called
  degenerate rather than vouched for;
- a model that kills its process (os._exit) or hangs under autocast costs only its own recipe: amp_bf16 ends as
  "error" / "timeout", fp32 is still measured, reported "ok" and stored in the results store.

The factories are in tests/thirdparty/ (tiny configs, random weights, nothing downloaded). BERT in training runs
`python -m tcperf advise` in a subprocess, as a user does; ViT, ConvNeXt and the tiny MLPs of outputs.py and
killers.py call the CLI's main in this process (their recipes still run in worker processes of their own, as
always): a `python -m tcperf` of its own costs 4-5 s on 2 cores (importing torch and tcperf again) and told those
tests nothing more. BERT in inference and the containers in inference run tcperf.advise in this process without
workers (the same engine; a worker's start-up, transformers' import with it, told them nothing more).
"""
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tcperf import cli

ROOT = Path(__file__).resolve().parents[1]
FACTORIES = ROOT / "tests" / "thirdparty"
TIMEOUT_S = 540          # one whole `tcperf advise` run; pytest's own limit is 600 s
# Marked slow: over ~20 s on 2 CPU cores (each recipe runs in its own worker process, which imports torch).


def advise(target: str, tmp_path, *options: str, mode: str = "infer", timeout: float = TIMEOUT_S, capfd=None):
    """Run `tcperf advise tests/thirdparty/<target> --device cpu --json` (with capfd: the CLI's main in this process,
    its stdout and stderr, the workers' included, read at the file descriptors); check what every run must satisfy
    and return (the parsed JSON, {recipe: status}, the store's path, stdout)."""
    db = tmp_path / "t.db"
    argv = ["advise", str(FACTORIES / target), "--mode", mode, "--device", "cpu", "--db", str(db), "--json", *options]
    if capfd is None:
        proc = subprocess.run([sys.executable, "-m", "tcperf", *argv], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT)
        returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    else:
        capfd.readouterr()
        returncode = cli.main(argv)
        stdout, stderr = capfd.readouterr()
    where = f"{' '.join(argv)}\n--- stderr (tail) ---\n{stderr[-4000:]}\n--- stdout (head) ---\n{stdout[:2000]}"
    assert returncode == 0, f"exit status {returncode}: {where}"
    assert "Traceback" not in stderr, where
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError as e:
        pytest.fail(f"stdout is not JSON ({e}): {where}")
    assert {"run", "recipes", "verdict"} <= set(data), f"keys {sorted(data)}"
    assert isinstance(data["recipes"], list) and data["recipes"], data["recipes"]
    for r in data["recipes"]:
        assert {"recipe", "status"} <= set(r), r
    statuses = {r["recipe"]: r["status"] for r in data["recipes"]}
    assert statuses.get("fp32") == "ok", f"fp32 strict: {statuses}\n{where}"
    return data, statuses, db, stdout


def no_errors(statuses: dict) -> None:
    errors = sorted(name for name, status in statuses.items() if status == "error")
    assert not errors, f"recipes ending in error: {errors} (all: {statuses})"


def stored(db: Path) -> list[tuple[str, str]]:
    """(precision, status) of every row of the store's `results` table."""
    assert db.is_file(), f"no store at {db}"
    with sqlite3.connect(db) as con:
        return con.execute("SELECT precision, status FROM results").fetchall()


# --- Hugging Face BERT -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_hf_bert_train(tmp_path):
    pytest.importorskip("transformers")
    _, statuses, _, _ = advise("hf_bert.py:factory", tmp_path, mode="train")
    no_errors(statuses)


def test_hf_bert_infer_every_cpu_recipe_on_its_model_output():
    """BERT in inference, through tcperf.advise in this process (isolate=False: no worker, which would import
    transformers again, 5-6 s each on 2 cores; the CLI in a subprocess took 23 s): every CPU recipe (the whole-model
    fp16 and bf16 casts too, which training skips) on keyword inputs with a padding mask, fp32 "ok", none ending in
    error; the ModelOutput's logits are the one output compared. BERT through the CLI is test_hf_bert_train."""
    pytest.importorskip("transformers")
    import tcperf
    from tcperf import accuracy, source
    spec = source.load_spec(f"{FACTORIES / 'hf_bert.py'}:factory_infer")
    out = spec.model.eval()(*spec.args, **spec.kwargs)
    assert type(out).__name__ == "SequenceClassifierOutput" and not torch.is_tensor(out)
    ref = accuracy.check_outputs(out)
    assert len(ref) == 1 and torch.equal(ref[0], out.logits.detach().float()) and accuracy.degenerate(ref) is None
    advice = tcperf.advise(spec.model, spec.kwargs, device="cpu", isolate=False)
    statuses = {r.recipe: r.status for r in advice.recipes}
    assert statuses.get("fp32") == "ok" and {"amp_bf16", "fp16", "bf16"} <= set(statuses), statuses
    no_errors(statuses)
    assert all(r.error is not None and 0 < r.error < advice.tolerance for r in advice.recipes
               if r.recipe in ("amp_bf16", "fp16", "bf16") and r.status == "ok"), advice.recipes


# --- torchvision ViT: a zero-initialised head, so a constant reference --------------------------------------------
@pytest.mark.slow
def test_tv_vit_infer_says_reference_is_degenerate(tmp_path, capfd):
    pytest.importorskip("torchvision")
    _, statuses, _, stdout = advise("tv_vit.py:factory", tmp_path, capfd=capfd)
    no_errors(statuses)
    assert "degenerate" in stdout.lower(), "the all-zero reference output is not called degenerate anywhere"


# --- timm ConvNeXt -----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_timm_convnext_infer(tmp_path, capfd):
    pytest.importorskip("timm")
    _, statuses, _, _ = advise("timm_convnext.py:factory", tmp_path, capfd=capfd)
    no_errors(statuses)


# --- outputs in containers ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("factory, mode", [("factory_tuple", "infer"), ("factory_dataclass", "infer"),
                                           ("factory_dict", "infer"), ("factory_dataclass", "train")])
def test_container_outputs(tmp_path, capfd, factory, mode):
    """The training case goes through the CLI (its recipes in workers, which import outputs.py for the dataclass).
    Inference on each container runs tcperf.advise on the factory's model in this process (isolate=False): the
    same engine finds and compares the tensors inside the container, with no worker processes (their start-ups
    were 7 of each CLI run's 9 s on 2 cores). Every recipe that ran at a lower precision than fp32 shows a non-zero
    error under the tolerance: the outputs inside the container were found and compared."""
    if mode == "train":
        _, statuses, _, _ = advise(f"outputs.py:{factory}", tmp_path, mode=mode, capfd=capfd)
        no_errors(statuses)
        return
    import tcperf
    from tcperf import source
    spec = source.load_spec(f"{FACTORIES / 'outputs.py'}:{factory}")
    advice = tcperf.advise(spec.model, spec.args, device="cpu", isolate=False)
    statuses = {r.recipe: r.status for r in advice.recipes}
    assert statuses.get("fp32") == "ok", statuses
    no_errors(statuses)
    lower = [r for r in advice.recipes if r.recipe in ("amp_bf16", "fp16", "bf16")]
    assert lower and all(r.status == "ok" and 0 < r.error < advice.tolerance for r in lower), advice.recipes


# --- models that kill or hang their process under autocast ------------------------------------------------------
KILLER_OPTIONS = ("--timeout", "30", "--recipes", "fp32,amp_bf16")


def test_crash_under_autocast_costs_only_its_recipe(tmp_path, capfd):
    _, statuses, db, _ = advise("killers.py:factory_crash", tmp_path, *KILLER_OPTIONS, capfd=capfd)
    assert statuses.get("amp_bf16") == "error", statuses
    assert ("fp32", "ok") in stored(db)


@pytest.mark.slow
def test_hang_under_autocast_times_out(tmp_path, capfd):
    """--timeout 8, not 30: the hang waits it out (36 s of the suite at 30, 23 s at 15, 2 cores). The timeout is
    per call, a worker's start-up apart: fp32's longest (the probe's first forward) takes about 1.3 s."""
    _, statuses, db, _ = advise("killers.py:factory_hang", tmp_path, "--timeout", "8", *KILLER_OPTIONS[2:],
                                capfd=capfd)
    assert statuses.get("amp_bf16") == "timeout", statuses
    assert ("fp32", "ok") in stored(db)
