"""A DeBERTa-v3-base-like encoder tagging tokens on a stream of variable-length batches (Hugging Face
DebertaV2ForTokenClassification from a DebertaV2Config, random weights, nothing downloaded): 768 wide, 12 layers,
disentangled attention over log-bucketed relative positions (256 buckets, content-to-position and
position-to-content), vocabulary 128,100, 9 labels a token (a named-entity tagger); 184M parameters, 98M of them the
embedding. In eval mode, on batches of 16 sequences whose length is drawn from 32..512 at every step.

The inputs are {"input_ids": (16, L), "attention_mask": (16, L) ones}; the output is logits (16, L, 9), one row a
token, so a right-padded batch (input_ids 0, the [PAD] id; attention_mask 0) is cut back to the real tokens, and the
mask keeps the padded keys from the real queries: relative positions are measured between real tokens alike.

    tcperf advise benchmarks/streams/deberta.py:factory --steps 10000      # GPU: batch 16, lengths 32..512
    tcperf advise benchmarks/streams/deberta.py:tiny --device cpu          # the same code at CPU size
"""
import functools

import torch
from transformers import DebertaV2Config, DebertaV2ForTokenClassification

V3 = dict(relative_attention=True, position_buckets=256, norm_rel_ebd="layer_norm", share_att_key=True,
          pos_att_type=["p2c", "c2p"], max_relative_positions=-1, position_biased_input=False, type_vocab_size=0,
          layer_norm_eps=1e-7)
SIZES = {  # size -> (config, batch, (shortest, longest) length)
    "full": (dict(V3, vocab_size=128100, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                  intermediate_size=3072, max_position_embeddings=512, num_labels=9), 16, (32, 512)),
    "tiny": (dict(V3, vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=64, position_buckets=16, num_labels=3), 2, (5, 40)),
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
    cfg = DebertaV2Config(**config)
    model = DebertaV2ForTokenClassification(cfg).eval()
    workload = functools.partial(batch_at, batch=batch, lengths=lengths, vocab=cfg.vocab_size)  # pickles
    return {"model": model, "inputs": workload(0), "workload": workload}


def factory():
    """DeBERTa-v3-base-like token tagger, batch 16, lengths 32..512."""
    return _make("full")


def tiny():
    """The same code at CPU size: 2 layers, 32 wide, vocab 100, batch 2, lengths 5..40."""
    return _make("tiny")
