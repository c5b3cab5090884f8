"""GPT-2 small trained on batches of varying length (Hugging Face GPT2LMHeadModel from a GPT2Config, random
weights, nothing downloaded; `--mode train`): 768 wide, 12 layers, 1024 positions, vocabulary 50,257, 124M
parameters (the head tied to the embedding), dropout off as nanoGPT pretrains (a step's loss is then a function of
the weights and the batch, which the accuracy check compares). Batches of 8 sequences whose length is drawn from
128..1024 at every step, as a loader that packs documents into length buckets gives them.

Each step's inputs are {"input_ids": (8, L), "attention_mask": (8, L) ones, "labels": (8, L) = input_ids}; loss_fn
reads the model's own next-token loss (outputs.loss). Right-padding (input_ids 0, attention_mask 0, labels -100,
the ignore index) leaves the loss as it was: attention is causal and padded labels count nothing.

    tcperf advise benchmarks/streams/gpt2_train.py:factory --mode train --steps 10000   # GPU: batch 8, 128..1024
    tcperf advise benchmarks/streams/gpt2_train.py:tiny --mode train --device cpu       # the same code at CPU size
"""
import functools

import torch
from transformers import GPT2Config, GPT2LMHeadModel

NO_DROPOUT = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
SIZES = {  # size -> (config, batch, (shortest, longest) length)
    "full": (dict(NO_DROPOUT), 8, (128, 1024)),                     # GPT2Config()'s defaults: GPT-2 small
    "tiny": (dict(NO_DROPOUT, vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=0,
                  eos_token_id=0), 2, (8, 48)),
}


def batch_at(step: int, batch: int, lengths: tuple[int, int], vocab: int) -> dict:
    """Step `step`'s batch: a length L in lengths (both ends included), token ids in [1, vocab), the labels the
    inputs themselves (the model shifts them)."""
    g = torch.Generator().manual_seed(step)
    length = int(torch.randint(lengths[0], lengths[1] + 1, (), generator=g))
    input_ids = torch.randint(1, vocab, (batch, length), generator=g)                 # (B, L)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": input_ids.clone()}


def loss_fn(outputs):
    """The next-token cross-entropy the model computed from its labels."""
    return outputs.loss


def _make(size: str) -> dict:
    config, batch, lengths = SIZES[size]
    torch.manual_seed(0)
    cfg = GPT2Config(**config)
    model = GPT2LMHeadModel(cfg).train()
    workload = functools.partial(batch_at, batch=batch, lengths=lengths, vocab=cfg.vocab_size)  # pickles
    return {"model": model, "inputs": workload(0), "workload": workload, "loss_fn": loss_fn}


def factory():
    """GPT-2 small, trained on batch 8, lengths 128..1024."""
    return _make("full")


def tiny():
    """The same code at CPU size: 2 layers, 32 wide, vocab 128, batch 2, lengths 8..48."""
    return _make("tiny")
