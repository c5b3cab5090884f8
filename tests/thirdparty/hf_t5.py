"""Hugging Face T5 (T5ForConditionalGeneration from a T5Config, random weights, nothing downloaded): an
encoder-decoder with relative position biases and cross-attention. Inference takes input_ids and
decoder_input_ids; training takes input_ids and labels (the model shifts them into the decoder's inputs) and its
loss is out.loss. dropout_rate=0 so that every recipe's training steps compare step for step with fp32's;
use_cache=False: a forward pass, no KV cache to return.

One code path, two sizes (the factory's name picks it):
    factory, factory_infer            CPU size: 1 + 1 layers, 32 wide, vocab 128, 2 x 16 tokens
    gpu_factory, gpu_factory_infer    GPU size: t5-small's shape (d_model 512, 6 + 6 layers, 8 heads, FF 2048,
                                      vocab 32128; 60M params), 16 x 256 tokens on both sides

    tcperf advise tests/thirdparty/hf_t5.py:factory --mode train --device cpu
    tcperf advise tests/thirdparty/hf_t5.py:gpu_factory_infer
"""
import operator

import torch
from transformers import T5Config, T5ForConditionalGeneration

SIZES = {  # size -> (config, batch, tokens)
    "cpu": (dict(d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=4, vocab_size=128),
            2, 16),
    "gpu": (dict(d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=6, num_heads=8,
                 vocab_size=32128), 16, 256),
}
model_loss = operator.attrgetter("loss")          # out.loss; unlike a lambda it pickles


def _make(size: str, train: bool) -> dict:
    config, batch, tokens = SIZES[size]
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config(**config, dropout_rate=0.0, use_cache=False, pad_token_id=0,
                                                      decoder_start_token_id=0))
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(1, config["vocab_size"], (batch, tokens), generator=g)     # (B, T) encoder side
    target_ids = torch.randint(1, config["vocab_size"], (batch, tokens), generator=g)    # (B, T) decoder side
    if train:
        return {"model": model, "inputs": {"input_ids": input_ids, "labels": target_ids}, "loss_fn": model_loss}
    return {"model": model, "inputs": {"input_ids": input_ids, "decoder_input_ids": target_ids}}


def factory():
    """CPU size, training: labels, the loss is out.loss."""
    return _make("cpu", train=True)


def factory_infer():
    return _make("cpu", train=False)


def gpu_factory():
    return _make("gpu", train=True)


def gpu_factory_infer():
    return _make("gpu", train=False)
