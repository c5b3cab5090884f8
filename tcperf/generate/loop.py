"""The decode loop a reader would write by hand, as gpt-fast's generate.py does: prefill the prompt into the static
KV cache, then one token at a time, greedy. Nothing here times or stores anything; tcperf.generate.sweep puts the
CUDA events around `prefill` and `decode_one_token`, and the command puts the store around that.

    model.setup_caches(max_batch=B, max_seq=P + N)
    step = compiled_step(model, device)                 # torch.compile with CUDA graphs on a GPU
    tokens = generate(model, prompt, N, step)           # (B, N) new tokens
"""
from __future__ import annotations

import torch


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """The next token of each row: (B, T, vocab) logits -> (B, 1) ids of the last position's argmax."""
    return logits[:, -1].argmax(dim=-1, keepdim=True)


@torch.no_grad()
def prefill(model, prompt: torch.Tensor) -> torch.Tensor:
    """Run the whole prompt (B, P) at positions 0..P-1, filling the cache; return the first new token (B, 1)."""
    input_pos = torch.arange(prompt.shape[1], device=prompt.device)
    return greedy(model(prompt, input_pos, last_only=True))


@torch.no_grad()
def decode_one_token(model, token: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
    """One step: token (B, 1) at position input_pos (1,) -> the next token (B, 1)."""
    return greedy(model(token, input_pos))


# mode="reduce-overhead" (CUDA graphs) plus gpt-fast's coordinate-descent tuning of Inductor's kernels: on an H200
# (2026-11-24) one int8 weight-only Linear at batch 1, 128256 x 2048, took 1.18 ms untuned, 0.074 ms tuned (bf16
# cuBLAS: 0.126 ms); the dequantising GEMV's default tiling read the int8 weight at 5% of the copy bandwidth.
GPU_OPTIONS = {"triton.cudagraphs": True, "coordinate_descent_tuning": True}


def compiled_step(model, device, compile: bool | None = None):
    """The decode step as the loop calls it: step(token, input_pos) -> next token. On a GPU: torch.compile with
    GPU_OPTIONS (compile=None or True), or the eager step captured in a CUDA graph (compile=False: no compile time, but
    int8 weight-only layers then widen their weights in a kernel of their own); on a CPU: eager unless compile=True."""
    device = torch.device(device)
    if compile or (compile is None and device.type == "cuda"):
        torch._dynamo.reset()     # a new model each precision: Dynamo's recompile limit would end a long sweep
        fn = torch.compile(decode_one_token, fullgraph=True, options=GPU_OPTIONS if device.type == "cuda" else None)
        return lambda token, pos: fn(model, token, pos).clone()   # the next replay overwrites the graph's output
    if device.type == "cuda":
        return CudaGraphStep(model)
    return lambda token, pos: decode_one_token(model, token, pos)


class CudaGraphStep:
    """The eager decode step captured in one CUDA graph per batch size; a call copies its inputs into the graph's
    static tensors and replays it."""

    def __init__(self, model):
        self.model, self.graphs = model, {}

    def _capture(self, token: torch.Tensor, input_pos: torch.Tensor):
        static_token, static_pos = token.clone(), input_pos.clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):                                  # warm up off the capture, as torch.cuda.graphs asks
                decode_one_token(self.model, static_token, static_pos)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = decode_one_token(self.model, static_token, static_pos)
        return graph, static_token, static_pos, out

    def __call__(self, token: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        b = token.shape[0]
        if b not in self.graphs:
            self.graphs[b] = self._capture(token, input_pos)
        graph, static_token, static_pos, out = self.graphs[b]
        static_token.copy_(token)
        static_pos.copy_(input_pos)
        graph.replay()
        return out.clone()


def generate(model, prompt: torch.Tensor, new_tokens: int, step=None) -> torch.Tensor:
    """Greedy decoding of `new_tokens` tokens after `prompt` (B, P) -> (B, new_tokens). The cache must hold
    P + new_tokens positions and B rows (model.setup_caches)."""
    step = step or (lambda token, pos: decode_one_token(model, token, pos))
    token = prefill(model, prompt)
    out = [token]
    pos = torch.tensor([prompt.shape[1]], device=prompt.device)
    for _ in range(new_tokens - 1):
        token = step(token, pos)
        out.append(token)
        pos += 1
    return torch.cat(out, dim=1)


@torch.no_grad()
def teacher_forced_logits(model, tokens: torch.Tensor) -> torch.Tensor:
    """Logits at every position of `tokens` (B, T) in one forward over a cache of T positions: what the model
    predicts at each place given the tokens before it (accuracy compares these across precisions)."""
    input_pos = torch.arange(tokens.shape[1], device=tokens.device)
    return model(tokens, input_pos).float()
