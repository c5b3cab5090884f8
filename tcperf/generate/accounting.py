"""What a decode step must read and compute, and where the roofline says decoding turns compute-bound.

A decode step of batch B at context c (tokens in the cache, the new one included) must read
    every weight once           sum of the stored bytes of each Linear (quantized: values + scales + zeros),
                                the norms, and B rows of the embedding
    the KV cache of each row    2 (K and V) x layers x kv heads x head_dim x c x B x bytes a KV element
and it computes (FLOPs, a multiply-add = 2)
    2 x (Linear weights) x B    the projections, the MLP and the output layer
    4 x layers x heads x head_dim x c x B    attention: Q K^T and P V, each 2 x head_dim a key
Over a generation of N tokens after a prompt of P, the N - 1 decode steps see c = P + 1 .. P + N - 1: the mean
context is P + N / 2. Prefill of B x P tokens computes 2 x weights x B x P (the output layer at the last position
only) plus causal attention, 4 x layers x heads x head_dim x B x P (P + 1) / 2 (each position attends to itself and
those before it).

The roofline: a step takes at least max(bytes / bandwidth, FLOPs / peak). With W the weight bytes, k the KV bytes
and f the FLOPs of one row, bytes = W + B k and FLOPs = B f, so the two limits cross at
    B* = W / (f x bandwidth / peak - k)            (no crossing when the KV cache alone keeps it memory-bound)
For Llama-3.2-1B in bf16 on an H200 (744 TFLOPS, 4.25 TB/s measured) at context 80: B* is about 215.
"""
from __future__ import annotations

import torch
import torch.nn as nn


def tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def weight_bytes(model: nn.Module, batch: int) -> int:
    """Bytes of weights a decode step of `batch` rows reads: every parameter and buffer once but the embedding
    table (B rows of it; a tied output layer reads the whole table as its weight) and the KV cache, mask and RoPE
    tables (counted apart, or not read whole)."""
    embedding = _embedding(model)
    skip = {id(t) for m in model.modules() for t in _cache_tensors(m)}
    total, seen = 0, set()
    for name, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        if id(t) in skip or t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        total += tensor_bytes(t)
    if embedding is not None and not _tied(model, embedding):
        total -= tensor_bytes(embedding.weight)
    if embedding is not None:
        total += batch * embedding.weight.shape[1] * embedding.weight.element_size()
    return total


def _embedding(model: nn.Module):
    get = getattr(model, "get_input_embeddings", None)
    return get() if get is not None else getattr(model, "tok_embeddings", None)


def _tied(model: nn.Module, embedding: nn.Module) -> bool:
    """Whether an output layer still holds the embedding's weight (read whole each step)."""
    return any(m is not embedding and getattr(m, "weight", None) is embedding.weight for m in model.modules())


def _cache_tensors(m: nn.Module) -> list[torch.Tensor]:
    names = ("k_cache", "v_cache", "causal_mask", "freqs_cis")
    return [t for n in names if isinstance(t := getattr(m, n, None), torch.Tensor)]


def linear_weights(model: nn.Module) -> int:
    """Multiply-adds per token of every Linear-like layer (out x in; tcperf.quant's layers carry the
    same in_features / out_features): the output layer counts, the embedding gather does not."""
    sizes = [(getattr(m, "in_features", None), getattr(m, "out_features", None)) for m in model.modules()]
    return sum(k * n for k, n in sizes if isinstance(k, int) and isinstance(n, int))


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, element_bytes: int) -> int:
    """K and V of one token in every layer."""
    return 2 * layers * kv_heads * head_dim * element_bytes


def mean_context(prompt: int, output: int) -> float:
    """Mean tokens in the cache over the output - 1 decode steps (contexts prompt + 1 .. prompt + output - 1)."""
    return prompt + output / 2 if output > 1 else prompt + 1


def decode_step(dims: dict, batch: int, context: float) -> dict:
    """Bytes and FLOPs of one decode step. dims: weight_bytes (at this batch), linear_weights, layers, heads,
    kv_heads, head_dim, kv_element_bytes."""
    kv = kv_bytes_per_token(dims["layers"], dims["kv_heads"], dims["head_dim"], dims["kv_element_bytes"])
    kv_read = kv * context * batch
    flops = batch * (2 * dims["linear_weights"] + 4 * dims["layers"] * dims["heads"] * dims["head_dim"] * context)
    return {"weight_bytes": dims["weight_bytes"], "kv_bytes": kv_read, "bytes": dims["weight_bytes"] + kv_read,
            "flops": flops}


def prefill_flops(dims: dict, batch: int, prompt: int) -> float:
    """Prefill's FLOPs: every projection at every prompt position, the output layer at the last one only (only it
    picks the first token), and causal attention."""
    attention = 4 * dims["layers"] * dims["heads"] * dims["head_dim"] * prompt * (prompt + 1) / 2
    body = dims["linear_weights"] - dims["output_weights"]
    return batch * (2 * body * prompt + 2 * dims["output_weights"] + attention)


def per_row(dims: dict, context: float) -> tuple[float, float]:
    """(bytes, FLOPs) one more row of the batch adds to a decode step: its embedding row and KV cache, its math."""
    one = decode_step({**dims, "weight_bytes": dims["weight_bytes_1"]}, 1, context)
    return one["kv_bytes"] + dims["weight_bytes_1"] - dims["weight_bytes_0"], one["flops"]


def roofline_batch(dims: dict, context: float, peak_tflops: float, bandwidth_gbs: float) -> float | None:
    """B* where bytes(B) / bandwidth = FLOPs(B) / peak (see the module's doc); None when it never crosses."""
    row_bytes, row_flops = per_row(dims, context)
    denom = row_flops * bandwidth_gbs * 1e9 / (peak_tflops * 1e12) - row_bytes
    return dims["weight_bytes_0"] / denom if denom > 0 else None


def measured_batch(points: list[dict], dims: dict, context: float) -> dict | None:
    """Where the measured decode steps cross over: the memory line through the smallest batch (its achieved
    bandwidth, bytes growing with B) meets the compute line through the largest (its achieved FLOP rate).
    points: [{batch, bytes, flops, ms}] sorted by batch; dims and context as for roofline_batch."""
    if len(points) < 2:
        return None
    first, last = points[0], points[-1]
    bandwidth = first["bytes"] / first["ms"]             # bytes a ms
    rate = last["flops"] / last["ms"]                    # FLOPs a ms
    row_bytes, row_flops = per_row(dims, context)
    denom = row_flops * bandwidth / rate - row_bytes
    crossing = dims["weight_bytes_0"] / denom if denom > 0 else None
    memory_line_ms = last["bytes"] / bandwidth
    return {"batch": crossing, "achieved_gbps_small": bandwidth * 1e3 / 1e9, "achieved_tflops_large": rate * 1e3 / 1e12,
            "reached": last["ms"] > 1.5 * memory_line_ms,
            "note": None if last["ms"] > 1.5 * memory_line_ms else
            f"batch {last['batch']} still runs near the memory line ({last['ms'] / memory_line_ms:.2f}x it): "
            "the sweep may have ended before the crossing"}


def row_memory(args, prompt: int, output: int, kv_element_bytes: int) -> float:
    """Memory one more row of the batch takes: its KV cache of prompt + output positions, and prefill's
    activations (a few tensors of P x hidden and P x MLP in 16 bits, and the last position's logits in fp32)."""
    kv = kv_bytes_per_token(args.n_layer, args.n_kv_head, args.head_dim, kv_element_bytes)
    return kv * (prompt + output) + prompt * (8 * args.dim + 6 * args.intermediate) * 2 + 4 * args.vocab * 4


def parameters(args) -> int:
    """Parameters of a built-in model (the tied output layer once)."""
    a, kv = args, args.n_kv_head * args.head_dim
    block = a.dim * (a.dim + 2 * kv) + a.dim * a.dim + 3 * a.dim * a.intermediate + 2 * a.dim
    return a.vocab * a.dim * (1 if a.tied else 2) + a.n_layer * block + a.dim


def model_dims(model: nn.Module, args, kv_element_bytes: int) -> dict:
    """The numbers the formulas above need, read off a built (and quantized) model. args: n_layer, n_head,
    n_kv_head, head_dim."""
    return {"weight_bytes_0": weight_bytes(model, 0), "weight_bytes_1": weight_bytes(model, 1),
            "linear_weights": linear_weights(model), "output_weights": args.vocab * args.dim, "layers": args.n_layer,
            "heads": args.n_head, "kv_heads": args.n_kv_head, "head_dim": args.head_dim,
            "kv_element_bytes": kv_element_bytes}


def at_batch(dims: dict, batch: int) -> dict:
    """dims with weight_bytes for this batch (the embedding rows it reads)."""
    return {**dims, "weight_bytes": dims["weight_bytes_0"] + batch * (dims["weight_bytes_1"] - dims["weight_bytes_0"])}
