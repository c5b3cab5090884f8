"""The model ladder's recipes as data, and `prepare()`, which turns a model and a recipe into the step to time.

A recipe is one `Recipe` entry in RECIPES (adding one is one entry): a base precision (tcperf.precision) plus what it
turns on (channels_last, torch.compile, CUDA graphs, fp8 or int8 Linear layers, ...), the modes it applies to, what
the model must have for it to help (tcperf.engine decides that from the model) and the accuracy it must keep against
fp32 strict; its `about` says what it does. LADDER is the climb's order, each rung adding one thing to the one
before (the default climb: all of it but NAMED_ONLY):

    fp32 -> tf32 -> amp_fp16 -> amp_bf16 -> fp16, bf16 weights (inference) -> channels_last (convolutions)
         -> compile -> fused optimizer (training) -> a CUDA graph of the whole step (training)
         -> rungs past a hand loop, each one thing on top of the whole-step graph (training): autotune, chunked_ce,
            pool_kernel, bn_relu_pool, bn_relu (NAMED_ONLY), batch
         -> cuda_graphs (compile's mode="reduce-overhead") -> fp8 -> int8 (inference)

Below the fused rung the optimizer is the model's as given (the ladder's models: AdamW as users write it, foreach).

Any recipe takes more on top by name (`get`): "X+compile", "X+cuda_graphs", "X+step_graph" (training: the whole step,
optimizer included, in one CUDA graph), "X+autotune", "X+channels_last", "X+cudnn_benchmark"; "X@SHAPES" says how it
meets a workload's varying shapes ("bf16+compile@dynamic", "bf16+cuda_graphs@pad64"; without it, compile is static).
"compile" and "cuda_graphs" alone are amp_bf16's (with channels_last for convolutions).

    step = prepare(model, "compile", "train", (images,), "cuda", loss_fn=F.cross_entropy, targets=labels)
    loss = step()          # forward, loss, backward, optimizer step; the model is a deep copy

On an H200 (anchors.md) ResNet-50 training at batch 256 climbs from 1,064 img/s (fp32) to 6,751 (compile).
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import importlib
import importlib.util
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import precision, quant, workload
from .kernels import cross_entropy, fusions
from .errors import UserError, choices
from .tensorcore import gemm_hard_limit

MODES = ("train", "infer")
EXTRAS = ("compile", "cuda_graphs", "step_graph", "autotune")     # the tiers that can sit on top of a recipe
SETTINGS = ("channels_last", "cudnn_benchmark")                   # ... and the settings: "fp16+channels_last"
SHAPES = {   # how a recipe meets inputs whose shapes vary (tcperf.workload): torch.compile's `dynamic`, padding
    "static": "torch.compile(dynamic=False): each new shape compiles again, up to Dynamo's recompile limit",
    "dynamic": "torch.compile's automatic dynamic shapes (its default): static first, symbolic after a change",
    "marked": "symbolic from the start: torch._dynamo.maybe_mark_dynamic on the dimensions that vary",
    # padded and marked, as servers bucket batches (vLLM compiles once, symbolic, and captures a CUDA graph a batch
    # bucket): compiled static per bucket instead, BERT's stream on an H100 took 49-52 s and Llama's prefill 100 s
    # to warm up (2026-11-25), where the marked recipes took 22-31 s, and none of them was ever the fastest job
    "pad64": "the dimensions that vary padded to multiples of 64 (0; labels -100) and marked dynamic: one compile, "
             "a CUDA graph a bucket",
    "pad128": "the dimensions that vary padded to multiples of 128 and marked dynamic: one compile, a CUDA graph a "
              "bucket",
}


@dataclass(frozen=True)
class Recipe:
    name: str
    precision: str                      # a name in tcperf.precision.PRECISIONS: fp32 | tf32 | amp_fp16 | amp_bf16
    channels_last: bool = False         # NHWC weights and 4-D inputs (changes nothing in a model without convs)
    compile: bool = False               # torch.compile(dynamic=False); compile time is reported, never timed
    cuda_graphs: bool = False           # torch.compile(mode="reduce-overhead"): the step replays a CUDA graph
    step_graph: bool = False            # training: the whole step (optimizer included) captured in one CUDA graph
    fused: bool = False                 # training: the optimizer's fused kernel (fused=True), one launch a step
    autotune: bool = False              # torch.compile(options=AUTOTUNE): GEMM templates timed while compiling
    chunked_ce: bool = False            # training: lm_head + cross-entropy in chunks of the tokens, no whole logits
    fastest_batch: bool = False         # at the batch with the most items a second (tcperf.ladder), not the model's
    over: str | None = None             # the rung it adds its one thing to (speedup_prev's); None: the rung before
    fp8: bool = False                   # nn.Linear -> fp8 (torchao float8 training; torch._scaled_mm inference)
    int8: bool = False                  # nn.Linear -> int8 weights and activations through torch._int_mm
    weights: str | None = None          # inference: the model cast to this dtype ("bfloat16" | "float16")
    modes: tuple[str, ...] = MODES
    needs: str | None = None            # "conv2d" | "linear": what the model must have for the recipe to help
    tolerance: float = 0.1              # output rel. error (infer) / share of fp32's loss fall lost (train)
    transform: Callable | None = None   # function(model, mode) -> notes, applied to the copy (tcperf.kernels.fusions)
    shapes: str = "static"              # a key of SHAPES: how varying input shapes are met
    cudnn_benchmark: bool = False       # cuDNN times its algorithms at each new shape (off as shipped: each pays it)
    about: str = ""

    @property
    def compile_mode(self) -> str | None:
        """torch.compile's mode for this recipe; None when it does not compile or compiles with options instead
        (torch.compile takes one or the other)."""
        if not self.compile or self.compile_options:
            return None
        return "reduce-overhead" if self.cuda_graphs else "default"

    @property
    def compile_options(self) -> dict | None:
        """Inductor's options for this recipe (AUTOTUNE for autotune), None for a mode's defaults."""
        return dict(AUTOTUNE) if self.compile and self.autotune and not self.cuda_graphs else None

    @property
    def compile_kwargs(self) -> dict:
        """What torch.compile takes for this recipe: mode= or options=."""
        return {"options": self.compile_options} if self.compile_options else {"mode": self.compile_mode}

    @property
    def pad_to(self) -> int | None:
        """The multiple a padded recipe pads the varying dimensions to ("pad64" -> 64), else None."""
        return int(self.shapes[3:]) if self.shapes.startswith("pad") else None

    def skip_reason(self, mode: str, device) -> str | None:
        """None when this recipe runs in this mode on this device; else one line saying why not. Whether the model
        has what the recipe needs is tcperf.engine's question (it looks at the model)."""
        device = torch.device(device)
        if mode not in self.modes:
            return f"{self.name} applies to {' and '.join(self.modes)} only: {self.about}"
        why = precision.unsupported_reason(precision.get(self.precision), device)
        if why:
            return why
        return _feature_reason(self, mode, device)

    def describe(self, convs: bool | str | None = None) -> str:
        """What this rung really runs on a model with or without 2-D convolutions: 'amp_bf16 + channels_last +
        compile' (a model kind such as "cnn" is taken as convolutions)."""
        convs = convs in (None, True, "cnn")
        parts = [f"{self.precision} weights" if self.weights else self.precision]
        if self.channels_last and convs:
            parts.append("channels_last")
        parts += [name for name in ("compile", "fused", "cuda_graphs", "step_graph", "autotune", "chunked_ce",
                                    "fastest_batch", "fp8", "int8") if getattr(self, name)]
        if self.transform:
            parts.append(self.transform.__name__)
        if self.shapes != "static":
            parts.append(f"{self.shapes} shapes" if self.shapes in ("dynamic", "marked") else
                         f"padded to multiples of {self.pad_to}")
        return " + ".join(parts)

    @property
    def peak_precision(self) -> str:
        """The ceiling MFU is taken against: the precision of the model's matmuls."""
        if self.fp8 or self.int8:
            return "fp8" if self.fp8 else "int8"
        return {"amp_fp16": "fp16", "amp_bf16": "bf16"}.get(self.precision, self.precision)


# max-autotune-no-cudagraphs's two options (GEMM templates timed, Inductor's own kernels' launch parameters tuned by
# coordinate descent) with convolutions left to cuDNN: its Triton conv templates were still compiling ResNet-50's
# training step after 8 minutes on an H100 (2026-11-26), where coordinate descent alone took 292 s for 1.031x.
AUTOTUNE = {"max_autotune": True, "coordinate_descent_tuning": True, "max_autotune_conv_backends": "ATEN"}
_CL = "NHWC layout helps 2-D convolutions only"
_WEIGHTS = "inference only: a trained model served in 16 bits"
RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("fp32", "fp32", tolerance=1e-3, about="IEEE fp32: TF32 off for matmul, cuDNN conv and RNN"),
    Recipe("tf32", "tf32", tolerance=0.03, about="fp32 tensors, TF32 Tensor Core math"),
    Recipe("amp_fp16", "amp_fp16", about="autocast fp16, GradScaler for training"),
    Recipe("amp_bf16", "amp_bf16", about="autocast bf16"),
    Recipe("fp16", "fp16", weights="float16", modes=("infer",),
           about="weights and activations in fp16 (model.half()): " + _WEIGHTS),
    Recipe("bf16", "bf16", weights="bfloat16", modes=("infer",),
           about="weights and activations in bf16 (model.to(torch.bfloat16)): " + _WEIGHTS),
    Recipe("channels_last", "amp_bf16", channels_last=True, needs="conv2d", about=_CL),
    Recipe("compile", "amp_bf16", channels_last=True, compile=True,
           about="amp_bf16 (+ channels_last for convolutions) + torch.compile"),
    Recipe("cuda_graphs", "amp_bf16", channels_last=True, compile=True, cuda_graphs=True,
           about="compile with mode='reduce-overhead': the step replays CUDA graphs"),
    Recipe("fused", "amp_bf16", channels_last=True, compile=True, fused=True, modes=("train",),
           about="compile + the optimizer's fused kernel (fused=True: one launch updates every parameter)"),
    Recipe("step_graph", "amp_bf16", channels_last=True, compile=True, fused=True, step_graph=True,
           modes=("train",), about="compile + fused optimizer + the whole training step replayed as one CUDA graph"),
    Recipe("autotune", "amp_bf16", channels_last=True, compile=True, fused=True, step_graph=True, autotune=True,
           over="step_graph", modes=("train",),
           about="the whole-step graph compiled with max-autotune's options, convolutions left to cuDNN (Inductor "
                 "times GEMM templates and tunes its own kernels: a longer compile, which the row's "
                 "pays_after_steps weighs)"),
    Recipe("chunked_ce", "amp_bf16", channels_last=True, compile=True, fused=True, step_graph=True, chunked_ce=True,
           over="step_graph", modes=("train",),
           about="the whole-step graph with lm_head's cross-entropy in chunks of the tokens "
                 "(tcperf.kernels.cross_entropy): the (tokens, vocabulary) logits never whole"),
    Recipe("pool_kernel", "amp_bf16", channels_last=True, compile=True, fused=True, step_graph=True,
           over="step_graph", modes=("train",), needs="conv2d", transform=fusions.pool_kernel,
           about="the whole-step graph with every 3x3 stride-2 max-pool (ResNet's stem) on tcperf's Triton kernels "
                 "(tcperf.kernels.maxpool): Inductor's backward of it ran at 14% of the copy bandwidth on an H200"),
    Recipe("bn_relu_pool", "amp_bf16", channels_last=True, compile=True, fused=True, step_graph=True,
           over="pool_kernel", modes=("train",), needs="conv2d", transform=fusions.bn_relu_pool,
           about="pool_kernel with each batch norm -> ReLU -> such a pool computed as one (tcperf.kernels.maxpool: "
                 "the pool on the batch norm's input, the normalization on the pooled quarter, the input's gradient in "
                 "one pass): what Inductor had fused around its own pooling, kept"),
    Recipe("bn_relu", "amp_bf16", channels_last=True, compile=True, fused=True, step_graph=True,
           over="bn_relu_pool", modes=("train",), needs="conv2d", transform=fusions.bn_relu,
           about="bn_relu_pool (where the model has its chain) with every other batch norm whose only user is a ReLU "
                 "computed as one, ReLU's mask recomputed from the batch norm's input in the backward "
                 "(tcperf.kernels.batchnorm): its kernels read two tensors a pass, not three; climbed only where "
                 "named: ResNet-50 ran 0.96x bn_relu_pool on an H200"),
    Recipe("batch", "amp_bf16", channels_last=True, compile=True, fused=True, step_graph=True, fastest_batch=True,
           over="step_graph", modes=("train",),
           about="the best rung from the whole-step graph on (autotune aside: it would compile again at every "
                 "batch) at the batch with the most items a second, a larger one only where it is at least 1% faster "
                 "(searched by doubling from the model's own, then halving, then one midpoint), the fastest whose "
                 "training check passes"),
    Recipe("fp8", "amp_bf16", compile=True, fp8=True, needs="linear", tolerance=0.25,
           about="nn.Linear layers in fp8"),
    Recipe("int8", "amp_bf16", compile=True, int8=True, modes=("infer",), needs="linear", tolerance=0.25,
           about="nn.Linear layers in int8, inference only"),
)}

LADDER: list[str] = ["fp32", "tf32", "amp_fp16", "amp_bf16", "fp16", "bf16", "channels_last", "compile", "fused",
                     "step_graph", "autotune", "chunked_ce", "pool_kernel", "bn_relu_pool", "bn_relu", "batch",
                     "cuda_graphs", "fp8", "int8"]
# rungs climbed only where named: slower than the rung below on their own model (bn_relu: ResNet-50, H200, 2026-11-27)
NAMED_ONLY: frozenset[str] = frozenset({"bn_relu"})


def get(name: str | Recipe) -> Recipe:
    """A recipe by name; "X+compile" / "X+cuda_graphs" put those on top of recipe X; 'package.module:ATTR' names a
    Recipe defined elsewhere (tests, extensions)."""
    if isinstance(name, Recipe):
        return name
    if ":" in name:
        module, attr = name.split(":", 1)
        return getattr(importlib.import_module(module), attr)
    if "@" in name:
        return _shaped(*name.rsplit("@", 1), name)
    base, plus, extra = name.rpartition("+")
    if plus and extra in EXTRAS + SETTINGS:
        return _on_top(get(base), extra, name)
    if name not in RECIPES:
        raise choices("recipe", name, ["ladder", *RECIPES, *(f"RECIPE+{e}" for e in EXTRAS + SETTINGS)])
    return RECIPES[name]


def on_top(base: str, extra: str) -> str:
    """The name of `extra` (an EXTRAS or SETTINGS) on top of recipe `base`: amp_bf16's own compile, CUDA graphs and
    whole-step graph are the ladder's "compile", "cuda_graphs" and "step_graph", and its channels_last the ladder's."""
    if base in ("amp_bf16", "channels_last", "compile") and extra in ("compile", "cuda_graphs", "step_graph"):
        return extra
    if base == "amp_bf16" and extra == "channels_last":
        return "channels_last"
    return f"{base}+{extra}"


def with_cudnn_benchmark(rec: Recipe) -> Recipe:
    """The recipe with cuDNN's autotuning on, as careful hand loops of a fixed shape run every rung (the ladder's and
    train-to-target's, benchmarks/hand_loops.py); the row keeps the recipe's name and description."""
    return rec if rec.cudnn_benchmark else dataclasses.replace(rec, cudnn_benchmark=True)


def _shaped(base_name: str, shapes: str, name: str) -> Recipe:
    """recipe@shapes: `base_name` meeting varying shapes as SHAPES[shapes] says."""
    if shapes not in SHAPES:
        raise choices("shapes (after @)", shapes, list(SHAPES))
    base = get(base_name)
    if shapes in ("dynamic", "marked") and not base.compile:
        raise UserError(f"recipe {name!r}: {shapes} shapes are torch.compile's; {base.name} is not compiled")
    if base.step_graph and shapes != "static":
        raise UserError(f"recipe {name!r}: a whole-step CUDA graph holds one input shape")
    return dataclasses.replace(base, name=name, shapes=shapes, about=f"{base.about}; {SHAPES[shapes]}")


def _on_top(base: Recipe, extra: str, name: str) -> Recipe:
    if extra == "autotune":
        return _autotuned(base, name)
    if extra in ("channels_last", "cudnn_benchmark"):
        return _setting(base, extra, name)
    if base.compile and extra == "compile":
        raise UserError(f"recipe {name!r}: {base.name} is compiled already")
    if base.cuda_graphs or base.step_graph:
        raise UserError(f"recipe {name!r}: {base.name} replays CUDA graphs already")
    graphs, whole = extra == "cuda_graphs", extra == "step_graph"
    about = {"compile": "", "cuda_graphs": " (mode='reduce-overhead')",
             "step_graph": " + the whole training step in one CUDA graph"}[extra]
    return dataclasses.replace(base, name=name, compile=True, cuda_graphs=graphs, step_graph=whole,
                               fused=base.fused or whole, modes=("train",) if whole else base.modes,
                               about=f"{base.name} + torch.compile{about}")


def _setting(base: Recipe, extra: str, name: str) -> Recipe:
    """"X+channels_last", "X+cudnn_benchmark": recipe X with that setting on."""
    if getattr(base, extra):
        raise UserError(f"recipe {name!r}: {base.name} has {extra} already")
    if base.compile and extra == "channels_last":
        raise UserError(f"recipe {name!r}: lay the model out channels_last before compiling it: "
                        f"{base.name.replace('+compile', '').replace('+cuda_graphs', '')}+channels_last+...")
    needs = "conv2d" if extra == "channels_last" else base.needs
    return dataclasses.replace(base, name=name, needs=needs, **{extra: True},
                               about=f"{base.about}; + {extra.replace('_', ' ')}")


def _autotuned(base: Recipe, name: str) -> Recipe:
    """"X+autotune": recipe X compiled with AUTOTUNE's options instead of the defaults, one thing on top of X (the
    ladder's speedup_prev is against X): "pool_kernel+autotune" tunes the step the pool kernels are in."""
    if not base.compile or base.cuda_graphs or base.autotune:
        why = ("is not compiled" if not base.compile else "replays compile's CUDA graphs (options and mode exclude "
               "each other)" if base.cuda_graphs else "is autotuned already")
        raise UserError(f"recipe {name!r}: {base.name} {why}")
    return dataclasses.replace(base, name=name, autotune=True, over=base.name,
                               about=f"{base.about}; compiled with max-autotune's options, convolutions left to cuDNN")


def default_climb() -> list[str]:
    """The default climb: LADDER's rungs but those NAMED_ONLY."""
    return [name for name in LADDER if name not in NAMED_ONLY]


def parse_list(text: str) -> list[str]:
    """'ladder' | 'amp_bf16,fp32' -> recipe names in climbing order (LADDER's, others after it, as given), so that
    each rung follows the one it builds on ('ladder': default_climb()); UserError naming the valid choices."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UserError(f"no recipe given; choose from: ladder, {', '.join(RECIPES)}")
    out = []
    for name in names:
        out += default_climb() if name == "ladder" else [get(name).name if ":" not in name else name]
    rank = {name: i for i, name in enumerate(LADDER)}
    return sorted(dict.fromkeys(out), key=lambda n: rank.get(n, len(LADDER)))


def _feature_reason(r: Recipe, mode: str, device: torch.device) -> str | None:
    if (r.cuda_graphs or r.step_graph) and device.type != "cuda":
        return "CUDA graphs need a CUDA GPU"
    if r.step_graph and precision.get(r.precision).autocast == torch.float16:
        return "GradScaler reads found_inf on the host every step: a whole-step CUDA graph cannot hold it"
    if r.fused and device.type != "cuda":
        return "the optimizers' fused kernels (fused=True) need a CUDA GPU: on a CPU this is the rung below again"
    if r.fp8:
        if device.type != "cuda":
            return "fp8 Tensor Core GEMMs need a CUDA GPU of compute capability >= 8.9"
        why = precision.unsupported_reason(precision.get("fp8"), device)
        if why:
            return why
        if mode == "train" and importlib.util.find_spec("torchao") is None:
            return "fp8 training goes through torchao's float8, which is not installed (pip install torchao)"
    if r.int8 and device.type != "cuda":
        return "int8 Tensor Core GEMMs (torch._int_mm) need a CUDA GPU"
    return None


class NotApplicable(Exception):
    """prepare() found nothing for the recipe to act on (e.g. no Linear layer fp8 can take): a skip, not a failure."""


# --- fp8 and int8 Linear layers (tcperf.quant's) ---------------------------------------------------------------
def linear_limit(layer: nn.Linear, kind: str) -> str | None:
    """tensorcore's hard limit for this layer's GEMM (M is the token count, unknown here: 17 passes _int_mm)."""
    return gemm_hard_limit(17, layer.out_features, layer.in_features, kind)


def quantize_linears(model: nn.Module, make: Callable[[nn.Linear], nn.Module], kind: str) -> list[str]:
    """tcperf.quant.swap_linears for every plain nn.Linear whose shape the `kind` ('fp8' | 'int8') GEMM takes;
    returns notes. Raises NotApplicable when no layer qualifies."""
    def shapes(kept: list) -> str:
        return ", ".join(f"{name} {lin.in_features}->{lin.out_features}" for name, lin in kept)

    def refuse(kept: list) -> NotApplicable:
        return NotApplicable(f"no nn.Linear layer meets {kind}'s shape rule (K, N multiples of "
                             f"{16 if kind == 'fp8' else 8}){': ' + shapes(kept) if kept else ''}")
    swapped, kept = quant.swap_linears(model, make, lambda lin: linear_limit(lin, kind) is None, refuse)
    note = f"{kind}: {swapped} Linear layers converted"
    return [note + (f"; kept in bf16 (shape rule): {shapes(kept)}" if kept else "")]


def _fp8_training(model: nn.Module) -> list[str]:
    """torchao float8 training (tensorwise scaling) for every Linear whose shape _scaled_mm takes."""
    from torchao.float8 import convert_to_float8_training
    taken, kept = [], []

    def eligible(module: nn.Module, fqn: str) -> bool:
        if not isinstance(module, nn.Linear):
            return True       # torchao asks about containers too
        ok = linear_limit(module, "fp8") is None
        (taken if ok else kept).append(fqn)
        return ok

    convert_to_float8_training(model, module_filter_fn=eligible)
    if not taken:
        raise NotApplicable("no nn.Linear layer meets fp8's shape rule (K, N multiples of 16)")
    return [f"fp8 (torchao float8): {len(taken)} Linear layers converted" +
            (f"; kept in bf16: {', '.join(kept)}" if kept else "")]


def _transform(model: nn.Module, recipe: Recipe, mode: str) -> list[str]:
    notes = []
    if recipe.fp8:
        notes += _fp8_training(model) if mode == "train" else quantize_linears(model, quant.Fp8Linear, "fp8")
    if recipe.int8:
        notes += quantize_linears(model, quant.Int8Linear, "int8")
    if recipe.transform:
        try:
            notes += recipe.transform(model, mode) or []
        except LookupError as e:            # the transform found nothing of its kind in this model
            raise NotApplicable(str(e)) from None
    return notes


# --- prepare: the step to time ----------------------------------------------------------------------------------
@dataclass
class Step:
    """A prepared step: call it to run one. `model` is the recipe's own copy (compiled wrapper if compiled)."""
    run: Callable[[], Any]
    model: nn.Module
    recipe: Recipe
    mode: str
    inputs: tuple
    optimizer: torch.optim.Optimizer | None = None
    scaler: Any = None                  # torch.amp.GradScaler for amp_fp16 training
    notes: list[str] = field(default_factory=list)
    call: Callable[[tuple], Any] | None = None   # the step on other inputs (a workload's); None: one shape only

    def __call__(self):
        return self.run()


def prepare(model: nn.Module, recipe: str | Recipe, mode: str, example_inputs, device, loss_fn=None,
            optimizer=None, *, targets=None, wrap: Callable[[nn.Module], nn.Module] | None = None,
            varying: dict | None = None, tensor_names: list[str] | None = None) -> Step:
    """The step to time for `model` under `recipe`: for "infer" a no-grad forward returning the outputs; for
    "train" forward + loss_fn(outputs, targets) + backward + optimizer step, returning the loss (no host sync
    except GradScaler's own). The model is deep-copied, so recipes never contaminate each other.

    example_inputs: a tensor or a tuple of positional inputs (moved to `device`; NHWC under channels_last).
    optimizer: None (AdamW, lr 1e-3, fused on CUDA), a callable params -> optimizer, or an optimizer whose class
    and defaults are reused for the copy's parameters (a recipe with `fused` rebuilds it with fused=True).
    wrap: DDP or fully_shard around the copy before torch.compile and the optimizer see it. varying, tensor_names:
    a workload's varying dimensions and input names (tcperf.workload), for the recipes that pad or mark them;
    step.call(tensors) runs the step on other inputs. Raises NotApplicable when the recipe finds nothing to do."""
    recipe, device = get(recipe), torch.device(device)
    if mode not in MODES:
        raise choices("mode", mode, MODES)
    adapt = _adapter(recipe, device)
    inputs = adapt(example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,))
    targets = targets.to(device) if torch.is_tensor(targets) else targets
    m = copy.deepcopy(model).to(device).train(mode == "train")
    if recipe.weights:
        m = _cast_weights(m, getattr(torch, recipe.weights))
    if recipe.channels_last:
        m = m.to(memory_format=torch.channels_last)
    notes = _transform(m, recipe, mode) + (_chunk_loss(m, loss_fn, recipe.compile) if recipe.chunked_ce else [])
    if wrap is not None:
        m = wrap(m)
    runner = m
    prec = precision.get(recipe.precision)
    if recipe.compile:      # compiled at the first call, under precision.apply (which keeps AOT's cache off)
        runner = torch.compile(m, **recipe.compile_kwargs, dynamic=None if recipe.shapes != "static" else False)
    guard, why = _cpu_rnn_guard(m, prec, device)
    notes += [why] if why else []
    opt = scaler = None
    apply = functools.partial(precision.apply, device_type=device.type, benchmark_cudnn=recipe.cudnn_benchmark)
    if mode == "infer":
        core = _infer_call(runner, prec, apply, recipe.cuda_graphs, guard)
    else:
        opt = _optimizer(optimizer, m, device, capturable=recipe.step_graph, fused=recipe.fused)
        scaler = _grad_scaler(device) if prec.autocast == torch.float16 else None
        core = _train_call(runner, targets, loss_fn or _default_loss, opt, scaler, prec, apply, guard,
                           recipe.cuda_graphs)
    call = _shape_call(core, recipe, varying or {}, tensor_names or [])
    run = functools.partial(call, inputs)
    if recipe.step_graph:
        run, call = _whole_step_graph(run, m, opt, device), None     # the graph holds these inputs alone
    return Step(run, runner, recipe, mode, inputs, opt, scaler, notes,
                call=(lambda tensors: call(adapt(tensors))) if call else None)


def _chunk_loss(model: nn.Module, loss_fn, fused: bool) -> list[str]:
    """The model's lm_head deferred to the loss (tcperf.kernels.cross_entropy), which must be token_loss: a loss of the
    user's own may not be a plain cross-entropy. NotApplicable otherwise."""
    try:
        notes = cross_entropy.defer_head(model, fused)
    except LookupError as e:
        raise NotApplicable(str(e)) from None
    if loss_fn is not cross_entropy.token_loss:
        raise NotApplicable("the chunked cross-entropy replaces tcperf's token_loss (mean cross-entropy over the "
                            f"tokens); this model's loss is {getattr(loss_fn, '__name__', 'another')}")
    return notes


def _adapter(recipe: Recipe, device: torch.device):
    """Inputs as the recipe's model takes them: on the device, floating-point ones in the weights' dtype, 4-D
    ones channels-last."""
    dtype = getattr(torch, recipe.weights) if recipe.weights else None

    def adapt(tensors) -> tuple:
        out = tuple(x.to(device) for x in tensors)
        if dtype is not None:
            out = tuple(x.to(dtype) if x.is_floating_point() else x for x in out)
        if recipe.channels_last:
            out = tuple(x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x for x in out)
        return out
    return adapt


def _shape_call(core, recipe: Recipe, varying: dict, tensor_names: list[str]):
    """core(tensors) meeting varying shapes as the recipe says: the varying dimensions marked dynamic ("marked"), or
    padded to buckets (outputs cut back to the real positions; marked too where compiled); else core itself."""
    if not varying:
        return core
    marked = _marked(core, varying) if recipe.compile and (recipe.shapes == "marked" or recipe.pad_to) else core
    if recipe.pad_to:
        def padded(tensors):
            tensors, sizes = workload.pad(tensors, varying, recipe.pad_to, tensor_names)
            return workload.unpad(marked(tensors), sizes)
        return padded
    return marked


def _marked(core, varying: dict):
    mark = getattr(torch._dynamo, "maybe_mark_dynamic", torch._dynamo.mark_dynamic)

    def marked(tensors):
        for i, dims in varying.items():
            for d in dims:
                mark(tensors[i], d)
        return core(tensors)
    return marked


def _cast_weights(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """The model in `dtype`, but for its fp32 islands (tcperf.islands.keep_fp32): they stay in float32 and hand
    their outputs back in `dtype`, as autocast recipes get them."""
    from .islands import Fp32Island
    model = model.to(dtype)
    for module in model.modules():
        if isinstance(module, Fp32Island):
            module.float().out_dtype = dtype
    return model


def _infer_call(model, prec, apply, graphs: bool, guard):
    """apply: precision.apply with the recipe's device and cuDNN setting."""
    mark = getattr(torch.compiler, "cudagraph_mark_step_begin", None) if graphs else None

    def call(inputs):
        if mark:
            mark()        # a new step: the previous replay's outputs may be overwritten
        with guard(), torch.no_grad(), apply(prec):
            return model(*inputs)
    return call


def _train_call(model, targets, loss_fn, opt, scaler, prec, apply, guard, graphs: bool):
    flags = dataclasses.replace(prec, autocast=None)   # TF32/cuDNN flags for forward and backward ...
    mark = getattr(torch.compiler, "cudagraph_mark_step_begin", None) if graphs else None

    def call(inputs):
        if mark:
            mark()        # a new step: the previous replay's outputs (the loss too) may be overwritten
        with guard(), apply(flags):
            opt.zero_grad(set_to_none=True)
            with apply(prec):                          # ... autocast for the forward and the loss only (AMP docs)
                loss = loss_fn(model(*inputs), targets)
            if scaler is None:
                loss.backward()
                opt.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(opt)                       # sync point: GradScaler reads found_inf on the host
                scaler.update()
        return loss.detach()
    return call


def _default_loss(outputs, targets):
    from .spec import tensors
    out = outputs if torch.is_tensor(outputs) else tensors(outputs)[0]
    if targets is not None and not targets.is_floating_point() and out.dim() >= 2:
        return F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), targets.reshape(-1))
    return out.float().pow(2).mean()


def _optimizer(optimizer, model: nn.Module, device: torch.device, capturable: bool = False,
               fused: bool = False) -> torch.optim.Optimizer:
    """The step's optimizer, rebuilt for the copy's parameters with what the recipe asks of it: capturable (its
    step count on the GPU, so a CUDA graph can hold the step) and, on CUDA, fused (one kernel updates every
    parameter: AdamW, Adam, SGD ...). NotApplicable for a class without the switch asked for, but for fused in
    a whole-step graph (capturable), which takes the fused kernel where the class has one (NAdam, RAdam: not)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if optimizer is None:
        opt = torch.optim.AdamW(params, lr=1e-3, fused=device.type == "cuda")
    elif isinstance(optimizer, torch.optim.Optimizer):
        opt = _rebuilt(optimizer, params)
    else:
        opt = optimizer(params)
    wanted = {**({"capturable": True} if capturable else {}),
              **({"fused": True} if fused and device.type == "cuda" else {})}
    if capturable and "fused" not in opt.defaults:
        wanted.pop("fused", None)
    if all(opt.defaults.get(k) for k in wanted):
        return opt
    missing = [k for k in wanted if k not in opt.defaults]
    if missing:
        raise NotApplicable(f"{type(opt).__name__} has no {' and no '.join(f'{k}=True' for k in missing)}"
                            f"{': a whole-step CUDA graph cannot hold its step' if 'capturable' in missing else ''}")
    extra = {"foreach": None, "differentiable": False} if "fused" in wanted else {}
    return _rebuilt(opt, params, **extra, **wanted)


def _rebuilt(opt: torch.optim.Optimizer, params, **changes) -> torch.optim.Optimizer:
    """A new optimizer of opt's class and settings over `params`. Only the settings its constructor takes: AdamW's
    defaults hold `decoupled_weight_decay`, which AdamW() refuses (torch 2.13)."""
    takes = inspect.signature(type(opt).__init__).parameters
    return type(opt)(params, **{k: v for k, v in {**opt.defaults, **changes}.items() if k in takes})


def _whole_step_graph(run, model: nn.Module, opt, device: torch.device, warmup: int = 3):
    """The training step captured whole in one CUDA graph, as torch.cuda.graphs documents: warm-up steps on a
    side stream (torch.compile compiles there), the capture, then the weights, buffers and optimizer state put
    back in place as they were, so that the first replay is the model's first step (the accuracy check counts
    steps from the start). Returns the replay, which hands back the captured loss tensor."""
    saved = [t.detach().clone() for t in _state_tensors(model, opt)]
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(warmup):
            run()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = run()
    with torch.no_grad():
        state = _state_tensors(model, opt)
        for t, s in zip(state, saved + [None] * (len(state) - len(saved))):
            t.copy_(s) if s is not None else t.zero_()    # optimizer state made by the warm-up starts at zero

    def replay():
        graph.replay()
        return loss
    return replay


def _state_tensors(model: nn.Module, opt) -> list[torch.Tensor]:
    """Weights and buffers, then the optimizer's state tensors (moments, step counts), in a fixed order."""
    tensors = [*model.parameters(), *(b for b in model.buffers() if b is not None)]
    for p in (p for group in opt.param_groups for p in group["params"]):
        tensors += [v for _, v in sorted(opt.state.get(p, {}).items()) if torch.is_tensor(v)]
    return tensors


def _grad_scaler(device: torch.device):
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device.type)
    return torch.cuda.amp.GradScaler()


def _cpu_rnn_guard(model: nn.Module, prec, device: torch.device):
    """oneDNN has no bf16 LSTM on CPUs without AVX512-BF16 and fails; run RNN models there with oneDNN off."""
    bf16_cpu = getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()
    if (device.type == "cpu" and prec.autocast == torch.bfloat16 and not bf16_cpu
            and any(isinstance(m, nn.RNNBase) for m in model.modules())):
        return _onednn_off, "oneDNN off: it has no bf16 LSTM on this CPU"
    return contextlib.nullcontext, None


@contextlib.contextmanager
def _onednn_off():
    saved = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = saved
