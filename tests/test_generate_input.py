"""`tcperf generate` on input it cannot measure (issue 33), on a CPU: a BERT config folder, a factory returning an
encoder, a mistyped name on an offline machine and a factory in a loop that cannot run it are each one line and
exit 2 with nothing stored; int4 runs on transformers' loop at batches 2 and 4 (the lm_head's strided input); a case
that fails makes the exit status 1 and says which."""
import contextlib
import io
import json
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from tcperf import cli
from tcperf import quant as core_quant
from tcperf import source
from tcperf.commands import generate as command
from tcperf.errors import UserError
from tcperf.store import Store

TINY = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=128,
            pad_token_id=0, bos_token_id=0, eos_token_id=0)
FACTORIES = {
    "encoder.py": """
        from transformers import BertConfig, BertModel
        def factory():
            return BertModel(BertConfig(**{tiny}))
    """,
    "gpt2.py": """
        from transformers import GPT2Config, GPT2LMHeadModel
        def factory():
            return GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=128, bos_token_id=0,
                                              eos_token_id=0))
    """,
}


@pytest.fixture
def folder(tmp_path):
    for name, text in FACTORIES.items():
        (tmp_path / name).write_text(textwrap.dedent(text).format(tiny=TINY))
    return tmp_path


def refused(tmp_path, capsys, *argv) -> str:
    """Run the command in this process: exit 2, one line on stderr, no run stored. Returns the line."""
    db = str(tmp_path / "r.db")
    rc = cli.main(["generate", "--device", "cpu", "--db", db, "--plot-dir", str(tmp_path), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("tcperf: "), err
    assert Store.open(db).runs() == []
    return err[0]


def generate(tmp_path, capsys, *argv) -> tuple[int, dict, str]:
    """The command in this process, as refused() runs it (its cases still run in worker processes), tiny lengths:
    (exit status, its JSON, stderr). A `python -m tcperf` of its own cost each test 3-5 s more on 2 cores, importing
    torch, transformers and matplotlib again; `python -m tcperf` itself is tested in test_cli_core."""
    capsys.readouterr()
    rc = cli.main(["generate", "--device", "cpu", "--db", str(tmp_path / "r.db"), "--json", "--plot-dir",
                   str(tmp_path), "--prompt", "4", "--output", "3", "--rep-ms", "1", *argv])
    out, err = capsys.readouterr()
    return rc, json.loads(out) if out.strip() else {}, err


def test_bert_config_folder_is_not_a_causal_lm(tmp_path, capsys):
    from transformers import BertConfig
    BertConfig(**TINY).save_pretrained(tmp_path / "bert")     # BertLMHeadModel exists, but it sees every position
    line = refused(tmp_path, capsys, str(tmp_path / "bert"))
    assert "(BertConfig) is not a causal LM: changing the last token changed the logits of earlier" in line


def test_factory_returning_an_encoder_is_not_a_causal_lm(folder, capsys):
    line = refused(folder, capsys, f"{folder / 'encoder.py'}:factory")
    assert "is not a causal LM: token ids (1, 8) give a BaseModelOutputWithPoolingAndCrossAttentions" in line


def test_mistyped_name_answers_at_once_with_the_names_that_exist(tmp_path, capsys):
    start = time.perf_counter()
    line = refused(tmp_path, capsys, "lama-1b")                 # offline, the hub client retried for 29 s
    assert time.perf_counter() - start < 8
    assert "unknown model 'lama-1b'" in line
    assert "choose from: llama-1b, llama-3b, llama-8b, tiny, stdlib, file.py:factory, or a local transformers folder" in line


def test_offline_hub_is_not_asked(monkeypatch):
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert not source.hub_reachable()
    with pytest.raises(UserError, match="the hub cannot be reached"):
        source.load_config("no-such-org/no-such-model", known=("tiny",))


def test_plain_loop_refuses_a_transformers_factory(folder, capsys):
    line = refused(folder, capsys, f"{folder / 'gpt2.py'}:factory", "--loop", "plain", "--precision", "bf16")
    assert "nothing to measure" in line and "this factory's model runs in the hf loop (--loop hf)" in line


def test_plain_loop_row_is_skipped_beside_the_hf_loop(folder, capsys):
    rc, out, err = generate(folder, capsys, f"{folder / 'gpt2.py'}:factory", "--precision", "bf16", "--kv", "bf16",
                            "--batch", "1,2", "--loop", "plain,hf")
    assert rc == 0, err[-2000:]
    rows = {(r["shape"]["loop"], r["shape"]["batch"]): r for r in out["results"] if r["op"] == "generate"}
    assert rows[("plain", 1)]["status"] == "skipped" and ("plain", 2) not in rows        # one row says why
    assert "runs in the hf loop" in rows[("plain", 1)]["message"]
    assert rows[("hf", 1)]["status"] == rows[("hf", 2)]["status"] == "ok"


def test_int4_runs_on_the_transformers_loop_at_batch_2_and_4(tmp_path, capsys):
    from transformers import LlamaConfig
    LlamaConfig(**{**TINY, "hidden_size": 64, "num_key_value_heads": 1}).save_pretrained(tmp_path / "llama")
    rc, out, err = generate(tmp_path, capsys, str(tmp_path / "llama"), "--loop", "hf", "--precision", "int4wo-32",
                            "--kv", "bf16", "--batch", "1,2,4")
    assert rc == 0, err[-2000:]
    rows = {r["shape"]["batch"]: r for r in out["results"] if r["op"] == "generate"}
    assert {b: r["status"] for b, r in rows.items()} == {1: "ok", 2: "ok", 4: "ok"}, \
        [r.get("message") for r in rows.values()]
    assert all(r["metrics"]["itl_ms"]["median"] > 0 for r in rows.values())


def test_int4_layer_takes_a_strided_input():
    """transformers' lm_head reads hidden[:, -1:]: (B, 1, K) rows T * K apart, which the CPU kernel refused."""
    lin = torch.nn.Linear(64, 32, bias=False).to(torch.bfloat16)
    layer = core_quant.Int4WeightOnlyLinear(lin, 32)
    hidden = torch.randn(4, 5, 64, dtype=torch.bfloat16)
    x = hidden[:, -1:]
    assert not x.reshape(-1, 64).is_contiguous()
    torch.testing.assert_close(layer(x), layer(x.contiguous()), rtol=0, atol=0)


def test_a_failed_case_sets_the_exit_status_and_says_which(capsys):
    from rich.console import Console
    ok = {"op": "generate", "precision": "bf16", "status": "ok", "message": "",
          "shape": {"model": "tiny", "loop": "hf", "batch": 1}}
    wrong = {**ok, "status": "wrong", "message": "logits' relative error 0.4 > tolerance 0.3"}
    error = {**ok, "precision": "int4wo-32", "status": "error", "message": "RuntimeError: expect A to be contiguous",
             "shape": {**ok["shape"], "batch": 2}}
    out = Console(file=sys.stderr, width=80)
    assert command.failures([ok, wrong], out) == 0                # timed all the same: the table says FAIL
    assert command.failures([ok, wrong, error], out) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == ["1 of 3 case(s) failed:",
                   "  int4wo-32 · hf loop · batch 2: error: RuntimeError: expect A to be contiguous"]


# --- the default run: the headline; the sweep behind --sweep ----------------------------------------------------
def _plan(*argv):
    args = cli.build_parser("generate").parse_args(["generate", "--device", "cpu", *argv])
    return command.plan(args, torch.device("cpu"))[1]


def test_a_precision_the_loop_cannot_run_is_a_row_made_without_a_worker():
    """transformers' loop keeps its KV cache in the model's dtype: int8wo+kvfp8 there is skipped by the parent
    (tcperf.runner's `known` rows), one row, with the reason the worker would have given."""
    cases = _plan("--loop", "plain,hf", "--precision", "bf16,int8wo+kvfp8", "--batch", "1,2")
    known = [c for c in cases if c.known]
    assert [(c.precision, c.shape["loop"], c.shape["batch"]) for c in known] == [("int8wo+kvfp8", "hf", 1)]
    row = known[0].known
    assert row.status == "skipped" and "KV cache" in row.message and row.metrics["loop"] == "hf"
    assert len(cases) - len(known) == 6                       # bf16 in both loops, int8wo+kvfp8 plain, at 1 and 2


def test_default_is_the_headline_and_sweep_is_everything(capsys):
    headline = {(c.precision, c.shape["loop"], c.shape["batch"]) for c in _plan()}
    assert headline == {(p, "plain", 1) for p in ("bf16", "int8wo", "int4wo-128")}
    sweep = _plan("--sweep")
    assert {c.precision for c in sweep} >= {"fp8-row", "int4wo-32", "int8wo+kvfp8"}
    assert {c.shape["loop"] for c in sweep} == {"plain", "hf"} and {c.shape["batch"] for c in sweep} == {1, 2, 4}
    with pytest.raises(SystemExit):
        cli.main(["generate", "--help"])
    assert "Expected time: half an hour" in " ".join(capsys.readouterr().out.split())


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """`tcperf generate` with its defaults at tiny lengths, printed (no --json), in this process as generate() runs it,
    once for the two tests below (a run each: 4-7 s on 2 cores): (exit status, stdout, stderr, the store's path)."""
    db = str(tmp_path_factory.mktemp("default_run") / "r.db")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):      # capsys is one test's
        rc = cli.main(["generate", "--device", "cpu", "--db", db, "--plot-dir", str(Path(db).parent), "--prompt",
                       "4", "--output", "3", "--rep-ms", "1"])
    return rc, out.getvalue(), err.getvalue(), db


def test_default_run_prints_the_headline(default_run):
    """Its rows read back from the store (the rows --json prints, as generate() reads them)."""
    rc, text, err, db = default_run
    assert rc == 0, err[-2000:]
    rows = [r for r in Store.open(db).results(Store.open(db).run()["id"]) if r["op"] == "generate"]
    assert {r["precision"] for r in rows} == {"bf16", "int8wo", "int4wo-128"}
    assert "Batch 1, tiny" in text and "int8wo:" in text and "not judged on random weights" in text


def test_the_table_says_which_run_it_stored_and_where(default_run):
    """Issue 58: `generate` never said which run it stored; it says so as `tcperf run` does."""
    rc, text, err, db = default_run
    assert rc == 0 and "Batch 1, tiny" in text and f"stored as run 1 in {db}" in err
