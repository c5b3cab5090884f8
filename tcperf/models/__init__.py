"""The model registry: name -> module tcperf.models.NAME. Adding a model is one module and one name here; the tests
parametrize over `names()`, so a new model is tested at its small configuration automatically.

Every model module has the same small shape (synthetic data only, random initialisation, nothing downloaded):

    KIND        "cnn" | "transformer" | "rnn"     (which recipes apply: channels_last needs convolutions, ...)
    UNIT        "img/s" | "tokens/s" | "samples/s"
    CONFIGS     {"full": {...}, "small": {...}}  each with the default "batch"; small runs on a CPU in milliseconds
    OPTIMIZER   AdamW hyper-parameters (plain AdamW; the ladder's fused rung makes it fused)
    build(cfg) -> nn.Module                          random init at the caller's seed, on the default device
    make_batch(cfg, batch, device, gen) -> (inputs tuple, targets)
    loss_fn(outputs, targets) -> scalar loss
    items_per_batch(cfg, batch) -> int               images, tokens or samples one step processes
    flops(cfg, batch, mode) -> float | None          optional: a formula where FlopCounterMode sees nothing (cuDNN LSTM)

    mod = get("gpt2"); cfg = mod.CONFIGS["small"]
    model = mod.build(cfg); inputs, targets = mod.make_batch(cfg, 2, "cpu", torch.Generator().manual_seed(0))
    loss = train_step(mod, model, inputs, targets, make_optimizer(mod, model.parameters()))
"""
from __future__ import annotations

import importlib
from types import ModuleType

import torch

from ..errors import UserError, choices

NAMES = ("resnet50", "bert", "gpt2", "lstm", "dcgan")


def names() -> list[str]:
    return list(NAMES)


def get(name: str) -> ModuleType:
    if name not in NAMES:
        raise choices("model", name, [*NAMES, "all"])
    return importlib.import_module(f"{__name__}.{name}")


def parse_list(text: str) -> list[str]:
    """'all' | 'gpt2' | 'resnet50,lstm' -> model names; UserError naming the valid choices."""
    wanted = names() if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    for name in wanted:
        get(name)
    return wanted


def config(mod: ModuleType, name: str) -> dict:
    """A configuration by name, or a named one with some sizes changed: "full:dim=2048,heads=16,layers=4"."""
    base, _, changes = name.partition(":")
    if base not in mod.CONFIGS:
        raise choices("model configuration", base, mod.CONFIGS)
    return {**mod.CONFIGS[base], **parse_changes(changes, mod.CONFIGS[base], mod.__name__.rpartition(".")[2])}


def parse_changes(text: str, cfg: dict, model: str = "the model") -> dict:
    """'dim=2048,heads=16' -> {"dim": 2048, "heads": 16}: whole numbers for the configuration's own keys only."""
    out = {}
    for item in (part.strip() for part in text.split(",") if part.strip()):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in cfg or not value.strip().isdigit() or int(value) < 1:
            raise UserError(f"bad size change {item!r}; give KEY=N with N a positive whole number and KEY one "
                            f"of {model}'s: {', '.join(k for k, v in cfg.items() if isinstance(v, int))}")
        out[key.strip()] = int(value)
    return out


def make_optimizer(mod: ModuleType, params) -> torch.optim.Optimizer:
    """AdamW with the model's hyper-parameters, as users write it (PyTorch's default, foreach): the ladder's fused
    rung adds fused=True (tcperf.recipes)."""
    return torch.optim.AdamW(params, **mod.OPTIMIZER)


def train_step(mod: ModuleType, model, inputs, targets, optimizer) -> torch.Tensor:
    """A plain training step: forward, loss, backward, optimizer step. Returns the loss (no host sync)."""
    optimizer.zero_grad(set_to_none=True)
    loss = mod.loss_fn(model(*inputs), targets)
    loss.backward()
    optimizer.step()
    return loss


@torch.no_grad()
def infer(model, inputs):
    """A plain inference call: the forward pass without autograd."""
    return model(*inputs)
