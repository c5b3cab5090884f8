"""GPT-2 small (124M) as a user's factory, for `tcperf advise --nproc N` (which way to train it on N GPUs):

    tcperf advise examples/gpt2_small.py:factory --mode train --nproc 4 --recipes amp_bf16
    tcperf advise examples/gpt2_small.py:tiny --mode train --nproc 2 --device cpu    # 2 layers, d=64: a CPU test

The model and its synthetic batch come from tcperf.models (the ladder's GPT-2: `tcperf models gpt2`), batch 16 x
1024 tokens a GPU; throughput is reported in sequences/s (the inputs' first dimension): x 1024 for tokens/s.
"""
from tcperf import models


def _made(config: str) -> dict:
    mod = models.get("gpt2")
    cfg = mod.CONFIGS[config]
    model = mod.build(cfg)
    inputs, targets = mod.make_batch(cfg, cfg["batch"], "cpu", None)      # (B, T) token ids, (B, T) next tokens
    return {"model": model, "inputs": inputs, "targets": targets, "loss_fn": mod.loss_fn}


def factory() -> dict:
    return _made("full")


def tiny() -> dict:
    return _made("small")
