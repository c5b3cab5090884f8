"""`tcperf generate FOLDER --text FILE` (issue 33): a user's own transformers folder (weights and tokenizer, as
save_pretrained writes them) judged on the user's own text at every precision, in both loops: tcperf's decoder reads
a Llama folder's weights (checked against transformers' logits), transformers' loop any causal LM (a GPT-2 here).
Bad input exits 2 in one line. Everything is built offline in tmp_path: a tiny model and a BPE tokenizer trained in
memory on a few sentences."""
import json

import pytest
import torch

from tcperf import cli
from tcperf.generate import hf, loop, sweep

SENTENCES = ["the quick brown fox jumps over the lazy dog.", "a tensor core multiplies small matrices quickly.",
             "perplexity is the exponential of the mean cross entropy.", "decoding one token reads every weight once."]


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(SENTENCES * 4, trainers.BpeTrainer(vocab_size=300,
                                                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def _folder(path, kind: str = "llama", weights: bool = True, tokenizer: bool = True):
    """A tiny causal LM saved as save_pretrained saves it: config.json, model.safetensors, tokenizer.json."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    if kind == "llama":
        config = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             intermediate_size=128, vocab_size=320, max_position_embeddings=256,
                             tie_word_embeddings=False, rope_theta=10000.0, bos_token_id=0, eos_token_id=0)
        lm = LlamaForCausalLM(config)
    else:
        config = GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=320, n_positions=256, bos_token_id=0,
                            eos_token_id=0)
        lm = GPT2LMHeadModel(config)
    if weights:
        lm.save_pretrained(path)
    else:
        config.save_pretrained(path)
    if tokenizer:
        _tokenizer().save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "text.txt"
    path.write_text(" ".join(SENTENCES * 100), encoding="utf-8")          # ~2,000 tokens: 8 windows of 256
    return str(path)


def test_a_llama_folders_weights_in_tcperfs_decoder_match_transformers(tmp_path):
    folder = _folder(tmp_path / "llama")
    src = hf.source(folder)
    assert src["saved_weights"] and src["tokenizer"] and hf.plain_mismatch(src) is None
    model = hf.load_plain(src, "cpu", torch.float32)
    lm = hf.build_hf(src, "cpu", torch.float32)
    ids = torch.randint(0, 320, (2, 20), generator=torch.Generator().manual_seed(0))
    model.setup_caches(2, 20)
    torch.testing.assert_close(loop.teacher_forced_logits(model, ids), hf.logits_of(lm, ids), rtol=1e-4, atol=1e-5)


def test_text_is_capped_in_windows(tmp_path, text):
    tokens = hf.text_tokens(_folder(tmp_path / "llama"), text)
    assert tokens.shape == (hf.TEXT_ROWS, 256)                 # the model's 256 positions, under TEXT_TOKENS


def _generate(tmp_path, capsys, *argv) -> dict:
    """The command in this process (its cases run in worker processes all the same): a `python -m tcperf` of its
    own cost 5-7 s more on 2 cores, importing torch, transformers and matplotlib again."""
    capsys.readouterr()                                         # save_pretrained's progress bar
    rc = cli.main(["generate", "--device", "cpu", "--db", str(tmp_path / "r.db"), "--json", "--plot-dir",
                   str(tmp_path), "--prompt", "8", "--output", "4", "--rep-ms", "1", "--batch", "1", *argv])
    out, err = capsys.readouterr()
    assert rc == 0, err[-2000:]
    return json.loads(out)


@pytest.mark.slow
def test_cli_judges_a_folder_on_the_users_text_in_both_loops(tmp_path, text, capsys):
    folder = _folder(tmp_path / "llama")
    out = _generate(tmp_path, capsys, folder, "--text", text, "--precision", "bf16,int8wo", "--loop", "plain,hf")
    rows = {(r["precision"], r["shape"]["loop"]): r for r in out["results"] if r["op"] == "generate"}
    assert len(rows) == 4
    for (name, loop_name), r in rows.items():
        a = r["metrics"]["accuracy"]
        assert a["judged"] and a["perplexity"] < 1e4 and 0 <= a["top1_agree"] <= 1, (name, loop_name, a)
        assert "8 window(s) of 256 tokens" in a["text"] and a["limit"] == (0 if name == "bf16" else 0.01)
        assert r["metrics"]["compile_cache"] in ("hit", "miss", "off")
    # one model, two decoders: tcperf's with the folder's weights gives transformers' perplexity
    plain_ppl = rows[("bf16", "plain")]["metrics"]["accuracy"]["perplexity"]
    assert plain_ppl == pytest.approx(rows[("bf16", "hf")]["metrics"]["accuracy"]["perplexity"], rel=1e-2)


@pytest.mark.slow
def test_cli_judges_a_gpt2_folder_in_the_hf_loop_and_says_so_in_the_table(tmp_path, text, capsys, monkeypatch):
    """The printed table, not --json: the command in this process as in _generate (a `python -m tcperf generate` of
    its own cost 5-7 s more on 2 cores; tests/test_cli_core.py runs the console entry point)."""
    folder = _folder(tmp_path / "gpt2", kind="gpt2")
    monkeypatch.setenv("COLUMNS", "120")
    capsys.readouterr()                                         # save_pretrained's progress bar
    rc = cli.main(["generate", folder, "--text", text, "--device", "cpu", "--db", str(tmp_path / "r.db"),
                   "--plot-dir", str(tmp_path), "--precision", "bf16,int8wo", "--batch", "1", "--prompt", "8",
                   "--output", "4", "--rep-ms", "1", "--loop", "hf"])
    out, err = capsys.readouterr()
    assert rc == 0, err[-2000:]
    assert "ppl " in out and "top1 " in out and "Model accuracy: perplexity on 8 window(s)" in out


def test_a_config_only_folder_is_not_judged(tmp_path):
    from tcperf.records import Job, TimingConfig
    from tcperf.runner import run_case
    src = hf.source(_folder(tmp_path / "config", weights=False))
    assert not src["saved_weights"]
    sweep._SESSIONS.clear()
    row = run_case(sweep.case(src, "plain", "bf16", 1, 4, 3, max_batch=1), torch.device("cpu"),
                   Job(TimingConfig(rep_ms=1.0)))
    sweep._SESSIONS.clear()
    assert row.status == "ok" and row.metrics["accuracy"] == {"judged": False, "note": sweep.NOT_JUDGED}


@pytest.mark.parametrize("case, says", [
    ("no tokenizer", "--text needs a tokenizer in"),
    ("no weights", "--text needs MODEL to be a local transformers folder with weights"),
    ("missing file", "cannot read --text"),
    ("built-in", "--text needs MODEL to be a local transformers folder with weights"),
])
def test_bad_text_exits_2_in_one_line(case, says, tmp_path, text, capsys):
    model = {"no tokenizer": lambda: _folder(tmp_path / "m", tokenizer=False),
             "no weights": lambda: _folder(tmp_path / "m", weights=False),
             "missing file": lambda: _folder(tmp_path / "m"),
             "built-in": lambda: "tiny"}[case]()
    path = str(tmp_path / "no-such.txt") if case == "missing file" else text
    capsys.readouterr()                                         # save_pretrained's progress bar
    rc = cli.main(["generate", model, "--text", path, "--device", "cpu", "--db", str(tmp_path / "r.db")])
    err = capsys.readouterr().err
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1, err


def test_what_tcperfs_decoder_lacks_keeps_a_folders_weights_in_the_hf_loop(tmp_path):
    """Llama 3's RoPE scaling is not in tcperf's decoder: the plain loop runs random weights of the shape and says
    so; the hf loop reads the folder's weights."""
    from transformers import LlamaConfig
    config = LlamaConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=128, vocab_size=320,
                         rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    config.save_pretrained(tmp_path)
    assert "RoPE scaling 'llama3'" in hf.plain_mismatch({"kind": "config", "name": str(tmp_path)})
    assert hf.plain_mismatch(hf.source(_folder(tmp_path / "plain"))) is None
