"""The prefill of a Llama-style decoder on a stream of prompts of varying length (Hugging Face LlamaModel from a
LlamaConfig, random weights, nothing downloaded): 768 wide, 12 layers, 12 heads, MLP 2048, vocab 32000, RMSNorm,
rotary embeddings, SwiGLU and SDPA attention, use_cache=False; batches of 4 prompts whose length is drawn uniformly
from 32..1024 at every step.

LlamaModel, not LlamaForCausalLM: the output is last_hidden_state (B, L, 768), the prefill's work through the
decoder layers. The vocabulary head would add a (B x L) x 768 x 32000 GEMM whose logits a server reads at the last
position only, and its 32000-wide output would dominate the compared tensor and the time at every length.

The factory returns a `workload` besides the example inputs: workload(step) -> that step's keyword inputs
{"input_ids": (4, L) int64 in [1, vocab), "attention_mask": (4, L) ones}, drawn from
torch.Generator().manual_seed(step), so a step's batch is the same in every process and every call. It is a
functools.partial of a module-level function, so it pickles to tcperf's workers; `tcperf advise --steps N` weighs
each recipe's one-time cost (compiles, graph captures) against N steps at its steady speed.

Padding: attention is causal, so a position reads only the positions before it, and right-padding a batch leaves
the hidden states at the real positions as they were; that is what lets a recipe pad lengths up to a few buckets.
Checked on the CPU in fp32: input_ids padded with 0 and attention_mask with 0 moved the hidden states at the real
positions by at most 5e-7 at the tiny size (each length padded by 1, to a multiple of 16 and to 64) and 3e-6 at
full size (relative 3e-7); attention_mask padded with 1 instead gives the same numbers, since the padded keys come
after every real query either way. Position ids come from the position in the sequence, not from the mask, so right-padding shifts none.
A 0 in the mask does change the kernel, not the result: eager transformers drops an all-ones mask and lets SDPA
apply causality itself (is_causal, flash attention on a GPU), but builds a mask tensor once a 0 is in it; under
torch.compile it builds the mask tensor either way (it may not read the mask's values while tracing).

    tcperf advise examples/llama_prefill.py:factory --steps 10000      # GPU: batch 4, lengths 32..1024
    tcperf advise examples/llama_prefill.py:tiny --device cpu          # the same code at a tiny size
"""
import functools

import torch
from transformers import LlamaConfig, LlamaModel

SIZES = {  # size -> (config, batch, (shortest, longest) length)
    "full": (dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=12,
                  intermediate_size=2048, vocab_size=32000, max_position_embeddings=2048), 4, (32, 1024)),
    "tiny": (dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                  intermediate_size=64, vocab_size=128, max_position_embeddings=128), 2, (8, 64)),
}


def batch_at(step: int, batch: int, lengths: tuple[int, int], vocab: int) -> dict:
    """Step `step`'s batch: a length L in lengths (both ends included), token ids in [1, vocab) (0 pads)."""
    g = torch.Generator().manual_seed(step)
    length = int(torch.randint(lengths[0], lengths[1] + 1, (), generator=g))
    input_ids = torch.randint(1, vocab, (batch, length), generator=g)                 # (B, L)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}


def _make(size: str) -> dict:
    config, batch, lengths = SIZES[size]
    torch.manual_seed(0)
    cfg = LlamaConfig(**config, use_cache=False)
    model = LlamaModel(cfg).eval()
    workload = functools.partial(batch_at, batch=batch, lengths=lengths, vocab=cfg.vocab_size)  # pickles
    return {"model": model, "inputs": workload(0), "workload": workload}


def factory():
    """Llama-style, 768 wide, 12 layers, batch 4, lengths 32..1024."""
    return _make("full")


def tiny():
    """The same code path at CPU size: 2 layers, 32 wide, vocab 128, batch 2, lengths 8..64."""
    return _make("tiny")
