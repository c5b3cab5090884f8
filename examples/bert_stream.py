"""Hugging Face BERT-base serving a stream of variable-length batches (random weights, nothing downloaded):
BertForSequenceClassification(BertConfig(num_labels=2)), 110M params, in eval mode, on batches of 32 sequences
whose length is drawn uniformly from 16..512 at every step, as a data loader that buckets requests by length gives
them (every row of a batch has the batch's length; the attention mask is all ones).

The factory returns a `workload` besides the example inputs: workload(step) -> that step's keyword inputs
{"input_ids": (32, L) int64 in [1, vocab), "attention_mask": (32, L) ones}, drawn from
torch.Generator().manual_seed(step), so a step's batch is the same in every process and every call. It is a
functools.partial of a module-level function, so it pickles to tcperf's workers. With it, `tcperf advise --steps N`
weighs each recipe's one-time cost (compiles, graph captures: one per new shape for a static compile) against N
steps at its steady speed. On an H100 by hand (issue 32): bf16 eager 5.7 ms a batch; torch.compile's automatic
dynamic shapes 65 s first pass, then 14.5 ms; compile(dynamic=False) 146 s first pass, then 7.9 ms. Part of eager's
lead: eager transformers drops an all-ones mask and SDPA may run flash attention, while under torch.compile it
builds the mask tensor (it may not read the mask's values while tracing), and SDPA with a mask cannot use flash.

Padding: BERT attends both ways, so a padded position changes nothing at a real position only because the mask
hides it. Right-padding the sequence dimension (input_ids with 0, the [PAD] id, and attention_mask with 0) leaves
the logits unchanged (positions are absolute, the pooler reads position 0), which is what lets a recipe pad lengths
up to a few buckets. Checked on the CPU in fp32: the logits moved by at most 2e-9 at the tiny size (each length
padded by 1, to a multiple of 16 and to 64) and 2e-7 at full size (relative 7e-7); padded with mask 1 instead, they
move by up to 0.5%.

    tcperf advise examples/bert_stream.py:factory --steps 10000      # GPU: batch 32, lengths 16..512
    tcperf advise examples/bert_stream.py:tiny --device cpu          # the same code at a tiny size
"""
import functools

import torch
from transformers import BertConfig, BertForSequenceClassification

SIZES = {  # size -> (config, batch, (shortest, longest) length)
    "full": (dict(num_labels=2), 32, (16, 512)),           # BertConfig()'s defaults: BERT-base
    "tiny": (dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                  max_position_embeddings=64, num_labels=2), 4, (5, 40)),
}


def batch_at(step: int, batch: int, lengths: tuple[int, int], vocab: int) -> dict:
    """Step `step`'s batch: a length L in lengths (both ends included), token ids in [1, vocab) (0 is [PAD])."""
    g = torch.Generator().manual_seed(step)
    length = int(torch.randint(lengths[0], lengths[1] + 1, (), generator=g))
    input_ids = torch.randint(1, vocab, (batch, length), generator=g)                 # (B, L)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}


def _make(size: str) -> dict:
    config, batch, lengths = SIZES[size]
    torch.manual_seed(0)
    cfg = BertConfig(**config)
    model = BertForSequenceClassification(cfg).eval()
    workload = functools.partial(batch_at, batch=batch, lengths=lengths, vocab=cfg.vocab_size)  # pickles
    return {"model": model, "inputs": workload(0), "workload": workload}


def factory():
    """BERT-base, batch 32, lengths 16..512."""
    return _make("full")


def tiny():
    """The same code path at CPU size: 2 layers, 32 wide, vocab 100, batch 4, lengths 5..40."""
    return _make("tiny")
