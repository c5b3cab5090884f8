"""Hugging Face Llama (LlamaForCausalLM from a LlamaConfig, random weights, nothing downloaded): a decoder-only
transformer with RMSNorm, rotary embeddings, SwiGLU and SDPA attention; keyword inputs, a ModelOutput, and for
training the model's own next-token loss from `labels`. use_cache=False: a forward pass, no KV cache to return.

One code path, two sizes (the factory's name picks it):
    factory, factory_infer            CPU size: 2 layers, 32 wide, vocab 128, 2 x 16 tokens
    gpu_factory, gpu_factory_infer    GPU size: 12 layers, 768 wide, 12 heads, MLP 2048, vocab 32000 (134M
                                      params), 8 x 512 tokens

    tcperf advise tests/thirdparty/hf_llama.py:factory --mode train --device cpu
    tcperf advise tests/thirdparty/hf_llama.py:gpu_factory_infer
"""
import operator

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SIZES = {  # size -> (config, batch, tokens)
    "cpu": (dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                 intermediate_size=64, vocab_size=128, max_position_embeddings=64), 2, 16),
    "gpu": (dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=12,
                 intermediate_size=2048, vocab_size=32000, max_position_embeddings=2048), 8, 512),
}
model_loss = operator.attrgetter("loss")          # out.loss; unlike a lambda it pickles


def _make(size: str, train: bool) -> dict:
    config, batch, tokens = SIZES[size]
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**config, use_cache=False))
    input_ids = torch.randint(0, config["vocab_size"], (batch, tokens))          # (B, T)
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    if not train:
        return {"model": model, "inputs": inputs}
    return {"model": model, "inputs": {**inputs, "labels": input_ids}, "loss_fn": model_loss}


def factory():
    """CPU size, training: labels=input_ids, the loss is out.loss."""
    return _make("cpu", train=True)


def factory_infer():
    return _make("cpu", train=False)


def gpu_factory():
    return _make("gpu", train=True)


def gpu_factory_infer():
    return _make("gpu", train=False)
