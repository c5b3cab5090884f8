"""A T5-small-like encoder-decoder on a stream where the source and the target lengths vary apart (Hugging Face
T5Model from a T5Config, random weights, nothing downloaded): 512 wide, 6 encoder and 6 decoder layers, 8 heads,
ReLU MLP 2048 wide, relative position buckets, vocabulary 32,128; 60M parameters. use_cache=False. In eval mode, on
batches of 8 whose source length is drawn from 32..512 and whose target length from 8..128 at every step, as one
teacher-forced pass of a summariser's or translator's scoring loop.

The inputs are {"input_ids": (8, S), "attention_mask": (8, S) ones, "decoder_input_ids": (8, T)}: two dimensions
vary, independently. The outputs are last_hidden_state (8, T, 512), which follows the target's length, and
encoder_last_hidden_state (8, S, 512), which follows the source's: a padded recipe must cut each back by its own
input, even where both were padded to the same bucket. Right-padding is exact here: the padded source keys are
masked, and the decoder's attention is causal.

    tcperf advise benchmarks/streams/t5.py:factory --steps 10000      # GPU: batch 8, source 32..512, target 8..128
    tcperf advise benchmarks/streams/t5.py:tiny --device cpu          # the same code at CPU size
"""
import functools

import torch
from transformers import T5Config, T5Model

SIZES = {  # size -> (config, batch, (shortest, longest) source, (shortest, longest) target)
    "full": (dict(d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=6, num_heads=8,
                  vocab_size=32128, dropout_rate=0.0), 8, (32, 512), (8, 128)),
    "tiny": (dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4, vocab_size=100,
                  relative_attention_num_buckets=8, dropout_rate=0.0), 2, (5, 40), (3, 12)),
}


def batch_at(step: int, batch: int, source: tuple[int, int], target: tuple[int, int], vocab: int) -> dict:
    """Step `step`'s batch: a source length S and a target length T, each drawn in its range (both ends included),
    token ids in [1, vocab) (0 is the pad id, and the decoder's start id)."""
    g = torch.Generator().manual_seed(step)
    s, t = (int(torch.randint(lo, hi + 1, (), generator=g)) for lo, hi in (source, target))
    input_ids = torch.randint(1, vocab, (batch, s), generator=g)                      # (B, S)
    decoder_input_ids = torch.randint(1, vocab, (batch, t), generator=g)              # (B, T)
    decoder_input_ids[:, 0] = 0                                                       # the start token
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
            "decoder_input_ids": decoder_input_ids}


def _make(size: str) -> dict:
    config, batch, source, target = SIZES[size]
    torch.manual_seed(0)
    cfg = T5Config(**config, use_cache=False)
    model = T5Model(cfg).eval()
    workload = functools.partial(batch_at, batch=batch, source=source, target=target, vocab=cfg.vocab_size)
    return {"model": model, "inputs": workload(0), "workload": workload}


def factory():
    """T5-small-like, batch 8, source 32..512, target 8..128 tokens."""
    return _make("full")


def tiny():
    """The same code at CPU size: 2 + 2 layers, 32 wide, vocab 100, batch 2, source 5..40, target 3..12."""
    return _make("tiny")
