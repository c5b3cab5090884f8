"""The models `tcperf generate` takes besides its built-ins, and transformers' own generation loop.

MODEL is a built-in name (tcperf.generate.model.CONFIGS; `stdlib`, tcperf.generate.trained), a transformers config
name or folder, or `file.py:factory` returning a causal LM (source() checks that it is causal before anything runs).
Nothing is downloaded but a config: a hub name or a config-only folder runs random weights; a local folder holding
weights runs its own, and with a tokenizer there `--text FILE` judges them on the user's text (text_tokens). The
plain loop runs any Llama-shaped model (a Llama folder's weights mapped into tcperf's decoder by load_plain); the hf
loop any transformers causal LM (a built-in becomes a LlamaForCausalLM of the same shape).

The hf loop is what a user of transformers writes: generate(..., cache_implementation="static"), which on a GPU
compiles the decode forward with mode="reduce-overhead" by itself. Its steps are timed from the streamer's put()
(each token reaches it after a host sync that generate makes anyway, so the gaps are the steps).
"""
from __future__ import annotations

import contextlib
import copy
import time
from pathlib import Path

import torch

from ..errors import UserError, one_line
from ..source import load_config, load_spec
from . import model as plain
from . import trained


def source(name: str) -> dict:
    """MODEL -> {"kind": "builtin" | "config" | "factory", "name": ...}, checked: an unknown name, a config that
    is not a causal LM, or a factory whose model is not causal is a UserError (exit 2, nothing measured). A
    factory's source says whether its model is tcperf's Transformer (the plain loop runs it) or not (the hf loop)."""
    if name in plain.CONFIGS:
        return {"kind": "builtin", "name": name}
    if name == trained.NAME:
        return {"kind": "trained", "name": name}           # the command adds where its weights are (trained.ensure)
    if ":" in name or name.endswith(".py"):
        lm = load_factory(name)
        check_causal(lm, name)
        return {"kind": "factory", "name": name, "transformer": isinstance(lm, plain.Transformer)}
    config = load_config(name, known=(*plain.CONFIGS, trained.NAME, "file.py:factory"))
    src = {"kind": "config", "name": name, **folder_files(name)}
    check_config(src, config)
    return src


def folder_files(name: str) -> dict:
    """What a local transformers folder holds besides its config: weights (*.safetensors, pytorch_model*.bin, as
    save_pretrained writes them) and a tokenizer. A config-only folder (or a hub name) has neither: random weights."""
    folder = Path(name)
    if not folder.is_dir():
        return {}
    weights = [*folder.glob("*.safetensors"), *folder.glob("pytorch_model*.bin")]
    tokenizer = any((folder / f).exists() for f in ("tokenizer.json", "tokenizer.model", "vocab.json"))
    return {"saved_weights": bool(weights), "tokenizer": tokenizer}


def load_factory(target: str, seed: int = 0) -> torch.nn.Module:
    """file.py:factory -> the model it returns, loaded as every command loads it (tcperf.source); example inputs,
    if it gives any, are not needed."""
    return load_spec(target, fallback_inputs=(), seed=seed).model


# --- causal-LM checks -------------------------------------------------------------------------------------------
def check_causal(lm: torch.nn.Module, name: str) -> None:
    """A causal LM maps token ids (B, T) to logits (B, T, vocab), and a token never changes the logits of the
    positions before it; UserError saying which rule failed."""
    if isinstance(lm, plain.Transformer):
        return
    vocab = _vocab(lm)
    device = next(lm.parameters()).device
    ids = torch.randint(0, vocab, (1, 8), generator=torch.Generator().manual_seed(0)).to(device)
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1) % vocab
    training = lm.training
    try:
        with torch.no_grad():
            lm.eval()                       # no dropout: a factory's model comes in training mode
            a, b = logits_of(lm, ids), logits_of(lm, changed)
    except Exception as e:                 # noqa: BLE001 - the user's model
        raise UserError(f"{name}: the model rejects token ids (1, 8): {type(e).__name__}: {e}"[:300]) from None
    finally:
        lm.train(training)
    if not isinstance(a, torch.Tensor):
        raise UserError(f"{name} is not a causal LM: token ids (1, 8) give a {type(a).__name__}, not logits "
                        f"(1, 8, vocab) (an encoder without a language-model head?)")
    if a.dim() != 3 or a.shape[:2] != ids.shape:
        raise UserError(f"{name} is not a causal LM: token ids (1, 8) give {tuple(a.shape)}, not logits (1, 8, vocab)")
    if not torch.allclose(a[:, :-1].float(), b[:, :-1].float(), rtol=1e-3, atol=1e-4):
        raise UserError(f"{name} is not a causal LM: changing the last token changed the logits of earlier positions")


def check_config(src: dict, config) -> None:
    """A transformers config is a causal LM's when transformers has a causal-LM class for it and a model built
    from it passes check_causal: one layer and a small vocabulary (small_config), random weights, on the CPU: a
    second for a Llama config. A BERT config passes the first rule (BertLMHeadModel) and fails the second."""
    from transformers import AutoModelForCausalLM
    what = f"{src['name']} ({type(config).__name__})"
    if type(config) not in AutoModelForCausalLM._model_mapping:
        raise UserError(f"{what} is not a causal LM's config; give a decoder such as a Llama, GPT-2 or Qwen "
                        f"config, or a built-in: {', '.join(plain.CONFIGS)}")
    try:
        lm = build_hf(src, torch.device("cpu"), torch.float32, small=True)
    except Exception as e:                 # noqa: BLE001 - transformers refuses the config
        raise UserError(f"{what}: transformers cannot build a causal LM from it: {one_line(e)}") from None
    check_causal(lm, what)


def small_config(config, vocab: int = 256):
    """A copy of a transformers config cut to one layer and `vocab` tokens (token ids above it set to 0): the same
    model class, attention and masks, built in a second, for check_config."""
    small = copy.deepcopy(config)
    text = small.get_text_config()          # the config itself, or a multimodal config's text part
    text.num_hidden_layers, text.vocab_size = 1, vocab
    for key in ("pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "decoder_start_token_id"):
        value = getattr(text, key, None)
        if isinstance(value, int) and value >= vocab:
            setattr(text, key, 0)
        elif isinstance(value, list):
            setattr(text, key, [v for v in value if v < vocab] or [0])
    return small


def _vocab(lm) -> int:
    """The config's vocab_size, else the first embedding's rows (token ids below it are valid)."""
    vocab = getattr(getattr(lm, "config", None), "vocab_size", None)
    vocab = vocab or next((m.num_embeddings for m in lm.modules() if isinstance(m, torch.nn.Embedding)), None)
    if not vocab:
        raise UserError(f"{type(lm).__name__} is not a causal LM: it has no token embedding")
    return vocab


def logits_of(lm, ids: torch.Tensor) -> torch.Tensor:
    out = lm(ids) if not hasattr(lm, "config") else lm(input_ids=ids, use_cache=False)
    return out.logits if hasattr(out, "logits") else out


# --- building ---------------------------------------------------------------------------------------------------
def args_of(src: dict) -> plain.ModelArgs | None:
    """The plain model's shape for a source the plain loop can run (a built-in, a Llama config), else None."""
    if src["kind"] == "builtin":
        return plain.get(src["name"])
    if src["kind"] == "trained":
        return trained.SIZES[src["size"]].args
    if src["kind"] != "config":
        return None
    c = load_config(src["name"])
    if getattr(c, "model_type", None) != "llama":
        return None
    return plain.ModelArgs(src["name"], c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
                           c.num_key_value_heads or c.num_attention_heads, c.intermediate_size, c.vocab_size,
                           tied=bool(c.tie_word_embeddings), rope_base=_rope(c)[0], norm_eps=c.rms_norm_eps)


def _rope(c) -> tuple[float, str]:
    """(RoPE's base, its type) of a Llama config: transformers 5 keeps them in rope_parameters (rope_theta is None
    there), transformers 4 in rope_theta and rope_scaling."""
    params = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
    theta = getattr(c, "rope_theta", None) or params.get("rope_theta") or 1e4
    return float(theta), params.get("rope_type") or params.get("type") or "default"


# --- a folder's weights in tcperf's decoder (the plain loop) ----------------------------------------------------
def plain_mismatch(src: dict) -> str | None:
    """Why tcperf's decoder would not compute what transformers' LlamaForCausalLM computes with this folder's
    weights (its RoPE scaling, biases, activation), else None."""
    c = load_config(src["name"])
    rope = _rope(c)[1]
    why = [f"RoPE scaling {rope!r}" if rope != "default" else "",
           "attention biases" if getattr(c, "attention_bias", False) else "",
           "MLP biases" if getattr(c, "mlp_bias", False) else "",
           f"activation {c.hidden_act}" if c.hidden_act != "silu" else "",
           "a head size other than hidden / heads" if (getattr(c, "head_dim", None) or 0) not in
           (0, c.hidden_size // c.num_attention_heads) else ""]
    why = [w for w in why if w]
    return f"tcperf's decoder has no {', '.join(why)}" if why else None


def load_plain(src: dict, device, dtype: torch.dtype) -> plain.Transformer:
    """The folder's Llama weights in tcperf's decoder: q, k, v fused into wqkv and gate, up into w13; q and k rows
    permuted from transformers' RoPE layout (a head's first half rotated with its second) to the decoder's
    (neighbouring pairs), as gpt-fast's convert_hf_checkpoint does."""
    a = args_of(src)
    hf_state = _read_weights(Path(src["name"]))
    with torch.device("meta"):
        model = plain.Transformer(a)
    model.load_state_dict(plain_state(hf_state, a), assign=True, strict=True)
    if a.tied:
        model.output.weight = model.tok_embeddings.weight
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False)


def plain_state(hf: dict, a: plain.ModelArgs) -> dict:
    """transformers' LlamaForCausalLM state dict -> tcperf.generate.model.Transformer's."""
    hf = {k.removeprefix("model."): v for k, v in hf.items()}

    def rope_rows(w, heads):               # (heads * head_dim, dim): halves -> interleaved pairs
        return w.view(heads, 2, a.head_dim // 2, -1).transpose(1, 2).reshape(heads * a.head_dim, -1)
    out = {"tok_embeddings.weight": hf["embed_tokens.weight"], "norm.weight": hf["norm.weight"],
           "output.weight": hf.get("lm_head.weight", hf["embed_tokens.weight"])}
    for i in range(a.n_layer):
        p, q = f"layers.{i}.", f"layers.{i}.self_attn."
        out[p + "attention.wqkv.weight"] = torch.cat([rope_rows(hf[q + "q_proj.weight"], a.n_head),
                                                      rope_rows(hf[q + "k_proj.weight"], a.n_kv_head),
                                                      hf[q + "v_proj.weight"]])
        out[p + "attention.wo.weight"] = hf[q + "o_proj.weight"]
        out[p + "feed_forward.w13.weight"] = torch.cat([hf[p + "mlp.gate_proj.weight"], hf[p + "mlp.up_proj.weight"]])
        out[p + "feed_forward.w2.weight"] = hf[p + "mlp.down_proj.weight"]
        out[p + "attention_norm.weight"] = hf[p + "input_layernorm.weight"]
        out[p + "ffn_norm.weight"] = hf[p + "post_attention_layernorm.weight"]
    return out


def _read_weights(folder: Path) -> dict:
    """Every tensor of the folder's *.safetensors (else pytorch_model*.bin) files, on the CPU."""
    files = sorted(folder.glob("*.safetensors"))
    if files:
        from safetensors.torch import load_file
        return {k: v for f in files for k, v in load_file(str(f)).items()}
    return {k: v for f in sorted(folder.glob("pytorch_model*.bin"))
            for k, v in torch.load(f, map_location="cpu", weights_only=True).items()}


def llama_config(a: plain.ModelArgs):
    from transformers import LlamaConfig
    return LlamaConfig(hidden_size=a.dim, num_hidden_layers=a.n_layer, num_attention_heads=a.n_head,
                       num_key_value_heads=a.n_kv_head, intermediate_size=a.intermediate, vocab_size=a.vocab,
                       tie_word_embeddings=a.tied, rope_theta=a.rope_base, rms_norm_eps=a.norm_eps,
                       max_position_embeddings=131072, bos_token_id=0, eos_token_id=None, pad_token_id=0)


def build_hf(src: dict, device, dtype: torch.dtype, seed: int = 0, small: bool = False):
    """The source as a transformers (or factory) causal LM on `device` in `dtype`: random weights at `seed`, or a
    folder's own; small: a config's model cut to one layer and a small vocabulary (small_config, for check_config)."""
    torch.manual_seed(seed)
    if src["kind"] == "factory":
        lm = load_factory(src["name"], seed)
    else:
        from transformers import AutoModelForCausalLM
        config = llama_config(plain.get(src["name"])) if src["kind"] == "builtin" else load_config(src["name"])
        with torch.device(device), _quiet_transformers():
            if src.get("saved_weights") and not small:    # the folder's own weights: never a download
                lm = AutoModelForCausalLM.from_pretrained(src["name"], local_files_only=True, dtype=dtype)
            else:
                lm = AutoModelForCausalLM.from_config(small_config(config) if small else config)
    return lm.to(device=device, dtype=dtype).eval().requires_grad_(False)


@contextlib.contextmanager
def _quiet_transformers():
    """transformers' warnings while a model is built (BertLMHeadModel's "add is_decoder=True") kept from stderr,
    where a refusal is one line; its verbosity restored on exit."""
    from transformers.utils import logging as tf_logging
    level, bar = tf_logging.get_verbosity(), tf_logging.is_progress_bar_enabled()
    tf_logging.set_verbosity_error()
    tf_logging.disable_progress_bar()       # from_pretrained's "Loading weights" bar
    try:
        yield
    finally:
        tf_logging.set_verbosity(level)
        if bar:
            tf_logging.enable_progress_bar()


def dims_args(lm) -> plain.ModelArgs:
    """The shape numbers the byte accounting needs, from a transformers config."""
    c = lm.config
    heads = c.num_attention_heads
    return plain.ModelArgs("hf", c.hidden_size, c.num_hidden_layers, heads,
                           getattr(c, "num_key_value_heads", None) or heads, getattr(c, "intermediate_size", 0) or 0,
                           c.vocab_size)


# --- transformers' loop -----------------------------------------------------------------------------------------
class Stamps:
    """A generate() streamer that keeps the host time of each put(): the prompt first, then each new token."""

    def __init__(self, device: torch.device):
        self.device, self.times = device, []

    def put(self, value) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)   # sync point: generate has synced for this token already
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def hf_generate(lm, prompt: torch.Tensor, new_tokens: int, compile: bool | None, streamer=None) -> torch.Tensor:
    """transformers' greedy generate with a static cache (compiled by transformers on a GPU unless compile is
    False) -> the new tokens (B, new_tokens)."""
    kwargs = {"disable_compile": True} if compile is False else {}
    out = lm.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                      min_new_tokens=new_tokens, do_sample=False, cache_implementation="static", pad_token_id=0,
                      streamer=streamer, **kwargs)
    return out[:, prompt.shape[1]:]


def timed_generate(lm, prompt: torch.Tensor, new_tokens: int, compile: bool | None) -> tuple[float, list[float]]:
    """One hf generation: (time to first token ms, the inter-token gaps ms)."""
    stamps = Stamps(prompt.device)
    if prompt.is_cuda:
        torch.cuda.synchronize(prompt.device)     # sync point: start the clock on an idle GPU
    t0 = time.perf_counter()
    hf_generate(lm, prompt, new_tokens, compile, streamer=stamps)
    times = stamps.times[1:]                      # [0] is the prompt, put before the prefill
    return (times[0] - t0) * 1e3, [(b - a) * 1e3 for a, b in zip(times, times[1:])]


# --- the user's text, tokenised with the folder's tokenizer (--text) ------------------------------------------------
TEXT_ROWS, TEXT_TOKENS = 8, 512      # the cap on the tokens judged: 8 windows of 512 (4,096 tokens), seconds on a GPU
MIN_TEXT_TOKENS = 16


def text_tokens(folder: str, path: str) -> torch.Tensor:
    """The text at `path` tokenised by the folder's tokenizer, cut into at most TEXT_ROWS consecutive windows of
    TEXT_TOKENS (fewer and shorter for a short text, within the model's positions): (rows, T) int64. UserError when
    the file cannot be read, the tokenizer cannot be loaded, or the text is shorter than MIN_TEXT_TOKENS tokens."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read --text {path}: {one_line(e)}") from None
    from transformers import AutoTokenizer
    try:
        with _quiet_transformers():
            tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as e:                 # noqa: BLE001 - the folder's files
        raise UserError(f"--text: the tokenizer in {folder} does not load: {one_line(e)}") from None
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if len(ids) < MIN_TEXT_TOKENS:
        raise UserError(f"--text {path} is {len(ids)} tokens long; at least {MIN_TEXT_TOKENS} are needed")
    limit = getattr(load_config(folder), "max_position_embeddings", None) or TEXT_TOKENS
    seq = min(TEXT_TOKENS, limit, len(ids))
    rows = min(TEXT_ROWS, len(ids) // seq)
    return torch.tensor(ids[:rows * seq], dtype=torch.long).view(rows, seq)
