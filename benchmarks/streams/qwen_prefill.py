"""The prefill of a Qwen2-0.5B-like decoder on single prompts of varying length (Hugging Face Qwen2Model from a
Qwen2Config, random weights, nothing downloaded): 896 wide, 24 layers, grouped-query attention (14 query heads over
2 key-value heads), biased q/k/v projections, SwiGLU MLP 4864 wide, RMSNorm, rotary embeddings (theta 1e6),
vocabulary 151,936; 494M parameters, 136M of them the embedding. use_cache=False. One prompt a step (batch 1), its
length drawn from 64..4096 tokens: short prompts leave the GPU waiting on the host's launches, long ones are
GEMM- and attention-bound.

Qwen2Model, not Qwen2ForCausalLM: the output is last_hidden_state (1, L, 896); a server reads the vocabulary head at
the last position only. Attention is causal, so right-padding (input_ids 0, attention_mask 0) leaves the hidden
states at the real positions as they were, and they are cut back to them.

    tcperf advise benchmarks/streams/qwen_prefill.py:factory --steps 10000   # GPU: batch 1, 64..4096 tokens
    tcperf advise benchmarks/streams/qwen_prefill.py:tiny --device cpu       # the same code at CPU size
"""
import functools

import torch
from transformers import Qwen2Config, Qwen2Model

SIZES = {  # size -> (config, batch, (shortest, longest) length)
    "full": (dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                  intermediate_size=4864, vocab_size=151936, max_position_embeddings=32768, rope_theta=1e6,
                  rms_norm_eps=1e-6, tie_word_embeddings=True), 1, (64, 4096)),
    "tiny": (dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=64, vocab_size=128, max_position_embeddings=256), 1, (8, 64)),
}


def batch_at(step: int, batch: int, lengths: tuple[int, int], vocab: int) -> dict:
    """Step `step`'s prompts: a length L in lengths (both ends included), token ids in [1, vocab) (0 pads)."""
    g = torch.Generator().manual_seed(step)
    length = int(torch.randint(lengths[0], lengths[1] + 1, (), generator=g))
    input_ids = torch.randint(1, vocab, (batch, length), generator=g)                 # (B, L)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}


def _make(size: str) -> dict:
    config, batch, lengths = SIZES[size]
    torch.manual_seed(0)
    cfg = Qwen2Config(**config, use_cache=False)
    model = Qwen2Model(cfg).eval()
    workload = functools.partial(batch_at, batch=batch, lengths=lengths, vocab=cfg.vocab_size)  # pickles
    return {"model": model, "inputs": workload(0), "workload": workload}


def factory():
    """Qwen2-0.5B-like prefill, batch 1, 64..4096 tokens."""
    return _make("full")


def tiny():
    """The same code at CPU size: 2 layers, 32 wide, 4 heads over 2 KV heads, vocab 128, batch 1, 8..64 tokens."""
    return _make("tiny")
