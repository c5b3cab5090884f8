"""Ready-to-paste code for a recipe: plain PyTorch, PyTorch Lightning and HF Accelerate.

A recipe is described by a `Setup` (what was measured, flag for flag); each generator returns Python source that
uses the names a training or inference script already has: `model`, `x` (an input batch), and in training `y`,
`loss_fn`, `optimizer` and `train_loader`. The plain-PyTorch snippet runs as it is
(tests/test_advisor.py executes it on a small model).

    print(plain(Setup("amp_bf16", tf32=True, autocast="bfloat16"), mode="train"))
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from ..islands import Fp32Island, cast_floats, keep_fp32
from ..spec import map_tensors

_NO_STEP_GRAPH = ("# the whole-step CUDA graph measured has no switch here: this is the recipe without it (the "
                  "plain PyTorch snippet has the graph)")
_FUSED = ("# make the optimizer with fused=True where its class has it (AdamW, Adam, SGD): one kernel updates every "
          "parameter")
LIGHTNING_PRECISION = {None: "32-true", "float16": "16-mixed", "bfloat16": "bf16-mixed"}
LIGHTNING_TRUE = {"float16": "16-true", "bfloat16": "bf16-true"}     # weights cast, no autocast
ACCELERATE_PRECISION = {None: "no", "float16": "fp16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class Setup:
    name: str
    tf32: bool = False                  # TF32 for float32 matmuls and convolutions
    autocast: str | None = None         # 'float16' | 'bfloat16' | None
    channels_last: bool = False
    compile: str | None = None          # None | 'default' | 'reduce-overhead' (CUDA graphs)
    compile_options: tuple = ()         # Inductor's options instead of a mode: ((name, value), ...)
    fp8: bool = False                   # Linear layers in float8
    int8: bool = False                  # Linear layers in int8 (inference)
    keep_fp32: tuple = ()               # module names kept in float32 under autocast
    weights: str | None = None          # inference: the model cast to 'float16' | 'bfloat16'
    step_graph: bool = False            # training: the whole step captured in one CUDA graph and replayed
    cudnn_benchmark: bool = False       # cuDNN's autotuning on (measured so: the snippet sets what was measured)
    fused: bool = False                 # training: the optimizer made with fused=True
    shapes: str = "static"              # a workload's varying shapes met as tcperf.recipes.SHAPES says
    pad_to: int | None = None           # ... padded to multiples of this
    varying: tuple = ()                 # ((input name, ((dim, longest), ...)), ...): 'arg0' for positional inputs

    @property
    def scaler(self) -> bool:
        return self.autocast == "float16"


def _flags(s: Setup) -> list[str]:
    mm = "high" if s.tf32 else "highest"
    why = "TF32 Tensor Cores for float32 matmuls" if s.tf32 else "strict float32: no TF32"
    flags = [f'torch.set_float32_matmul_precision("{mm}")  # {why}',
             f"torch.backends.cudnn.allow_tf32 = {s.tf32}  # the same for convolutions"]
    if s.cudnn_benchmark:
        flags.append("torch.backends.cudnn.benchmark = True  # cuDNN times its algorithms at each new input shape")
    return flags


def _model_lines(s: Setup, mode: str, device_type: str, with_compile: bool = True) -> list[str]:
    lines = []
    if s.keep_fp32:
        names = ", ".join(f'"{n}"' for n in s.keep_fp32)
        lines.append(f'model = keep_fp32(model, [{names}], "{device_type}")  # these lose accuracy in '
                     f'{s.autocast or s.weights}')
    if s.weights:
        lines.append(f"model = model.to(torch.{s.weights})  # weights and activations in {s.weights}")
        if s.keep_fp32:
            lines += ["for module in model.modules():  # ... but for the modules kept in float32",
                      "    if isinstance(module, Fp32Island):",
                      f"        module.float().out_dtype = torch.{s.weights}"]
    if s.channels_last:
        lines.append("model = model.to(memory_format=torch.channels_last)")
    if s.fp8:
        lines += (["from torchao.float8 import convert_to_float8_training",
                   "convert_to_float8_training(model)  # Linear layers in float8 (needs torchao, sm89+)"]
                  if mode == "train" else
                  ["from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, quantize_",
                   "quantize_(model, Float8DynamicActivationFloat8WeightConfig())  # Linear layers in float8"])
    if s.int8:
        lines += ["from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_",
                  "quantize_(model, Int8DynamicActivationInt8WeightConfig())  # Linear layers in int8"]
    if s.compile and with_compile:
        arg = "" if s.compile == "default" else f', mode="{s.compile}"'
        arg = f", options={dict(s.compile_options)!r}" if s.compile_options else arg
        if s.varying and s.shapes == "static":
            arg += ", dynamic=False"
        note = {"dynamic": "  # automatic dynamic shapes (the default): symbolic after the first change",
                "marked": "  # symbolic in the dimensions marked below"}.get(s.shapes, "") if s.varying else ""
        note = "  # symbolic in the padded dimensions marked below" if s.varying and s.pad_to else note
        lines.append(f"model = torch.compile(model{arg}){note}")
    return lines


def _keyword(s: Setup) -> bool:
    """The workload's inputs are keyword arguments (x is their dict)."""
    return bool(s.varying) and not all(name.startswith("arg") for name, _ in s.varying)


def _shape_lines(s: Setup) -> list[str]:
    """A workload of varying shapes: the helper that pads or marks each batch as measured (VARYING names the
    dimensions that varied in the workload tcperf was given)."""
    if not s.varying or not (s.pad_to or s.shapes == "marked"):
        return []
    varying = {name: dict(dims) for name, dims in s.varying}
    lines = [f"VARYING = {varying!r}  # input -> {{dimension that varies in your workload: its longest}}", "", ""]
    if s.shapes == "marked":
        return lines + ["def prepare_batch(batch):  # dict of the step's inputs",
                        "    for name, t in batch.items():",
                        "        for d in VARYING.get(name, {}):",
                        "            torch._dynamo.maybe_mark_dynamic(t, d)  # symbolic from the first compile",
                        "    return batch", "", ""]
    return lines + [f"def prepare_batch(batch, multiple={s.pad_to}):  # dict of the step's inputs",
                    '    """The varying dimensions padded at their end to a multiple: a CUDA graph a bucket, one compile '
                    'for all. Read the outputs at the real positions only (e.g. out[:, :length])."""',
                    "    out = {}",
                    "    for name, t in batch.items():",
                    "        for d, longest in VARYING.get(name, {}).items():",
                    "            extra = min(-t.shape[d] % multiple, longest - t.shape[d])  # never past the longest",
                    "            widths = [0, 0] * (t.dim() - 1 - d) + [0, max(extra, 0)]",
                    '            t = torch.nn.functional.pad(t, widths, value=-100 if name == "labels" else 0)',
                    *(["            torch._dynamo.maybe_mark_dynamic(t, d)  # one compile for every bucket"]
                      if s.compile else []),
                    "        out[name] = t",
                    "    return out", "", ""]


def _header(s: Setup, *imports: str) -> list[str]:
    head = ["import torch", *imports, ""]
    if s.keep_fp32:
        head = ["import copy", "import dataclasses", *head]
        head += [inspect.getsource(f).rstrip() + "\n\n" for f in (map_tensors, cast_floats, Fp32Island, keep_fp32)]
    return head


def _autocast(s: Setup, device_type: str) -> str:
    return f'torch.autocast("{device_type}", dtype=torch.{s.autocast})' if s.autocast else ""


def plain(s: Setup, mode: str = "infer", device_type: str = "cuda") -> str:
    """Plain PyTorch: flags, model changes, and the inference call or the training step."""
    lines = [f"# tcperf advise: {s.name}", *_header(s), *_flags(s), *_model_lines(s, mode, device_type),
             *_shape_lines(s)]
    if _shape_lines(s):
        lines.append("x = prepare_batch(x)  # x: the dict of the step's keyword inputs" if _keyword(s) else
                     'x = prepare_batch({"arg0": x})["arg0"]')
    if s.channels_last:
        lines.append("x = x.to(memory_format=torch.channels_last)")
    if s.weights:
        lines.append(f"x = {{k: v.to(torch.{s.weights}) if v.is_floating_point() else v for k, v in x.items()}}"
                     if _keyword(s) else f"x = x.to(torch.{s.weights})  # floating-point inputs in the model's dtype")
    ctx = _autocast(s, device_type)
    if mode == "infer":
        lines += ["model.eval()", f"with torch.no_grad(){', ' + ctx if ctx else ''}:",
                  f"    outputs = {'model(**x)' if _keyword(s) else 'model(x)'}"]
        return "\n".join(lines) + "\n"
    if s.fused:
        lines.append(_FUSED)
    if s.step_graph:
        return "\n".join(lines + _step_graph_lines(ctx)) + "\n"
    if s.scaler:
        lines.append(f'scaler = torch.amp.GradScaler("{device_type}")  # fp16: scale the loss so small '
                     f"gradients do not flush to zero")
    lines += ["", "", "def train_step(x, y):", "    optimizer.zero_grad(set_to_none=True)"]
    forward = "loss = loss_fn(model(**x))" if _keyword(s) else "loss = loss_fn(model(x), y)"
    lines += [f"    with {ctx}:", f"        {forward}"] if ctx else [f"    {forward}"]
    lines += (["    scaler.scale(loss).backward()", "    scaler.step(optimizer)", "    scaler.update()"]
              if s.scaler else ["    loss.backward()", "    optimizer.step()"])
    lines += ["    return loss", "", "", "loss = train_step(x, y)"]
    return "\n".join(lines) + "\n"


def _step_graph_lines(ctx: str) -> list[str]:
    """The training step captured whole (forward, backward, optimizer) in one CUDA graph, as torch.cuda.graphs'
    whole-network example does it: warm-up steps on a side stream, the capture, then replays that read each batch
    from the captured input tensors. No GradScaler: it reads the host every step."""
    forward = ([f"with {ctx}:", "    {loss} = loss_fn(model(static_x), static_y)"] if ctx
               else ["{loss} = loss_fn(model(static_x), static_y)"])
    return [
        'assert optimizer.defaults.get("capturable", True), "make the optimizer with capturable=True: its step '
        'runs inside the CUDA graph"',
        "static_x, static_y = x.clone(), y.clone()  # the graph reads its batch from these",
        "side = torch.cuda.Stream()",
        "side.wait_stream(torch.cuda.current_stream())",
        "with torch.cuda.stream(side):  # warm-up steps (torch.compile compiles here; they train on this batch)",
        "    for _ in range(3):",
        "        optimizer.zero_grad(set_to_none=True)",
        *("        " + line.format(loss="loss") for line in forward),
        "        loss.backward()",
        "        optimizer.step()",
        "torch.cuda.current_stream().wait_stream(side)",
        "graph = torch.cuda.CUDAGraph()",
        "optimizer.zero_grad(set_to_none=True)",
        "with torch.cuda.graph(graph):  # recorded, not run: forward, backward and the optimizer step",
        *("    " + line.format(loss="static_loss") for line in forward),
        "    static_loss.backward()",
        "    optimizer.step()",
        "", "",
        "def train_step(x, y):",
        "    static_x.copy_(x)",
        "    static_y.copy_(y)",
        "    graph.replay()",
        "    return static_loss",
        "", "",
        "loss = train_step(x, y)"]


def lightning(s: Setup, mode: str = "infer") -> str:
    """PyTorch Lightning: `precision=` and the matmul precision its Tensor Core warning asks about."""
    lines = [f"# tcperf advise: {s.name}", *_header(s, "import lightning as L"),
             "# Lightning's Tensor Core warning asks for this: the setting tcperf measured",
             _flags(s)[0],
             *_model_lines(s, mode, "cuda"),
             f'trainer = L.Trainer(accelerator="gpu", devices=1, precision="{_lightning_precision(s)}")']
    if s.step_graph and mode == "train":
        lines.insert(-1, _NO_STEP_GRAPH)
    lines.append("trainer.fit(model, train_dataloaders=train_loader)" if mode == "train"
                 else "predictions = trainer.predict(model, dataloaders=loader)")
    return "\n".join(lines) + "\n"


def _lightning_precision(s: Setup) -> str:
    return LIGHTNING_TRUE[s.weights] if s.weights else LIGHTNING_PRECISION[s.autocast]


def accelerate(s: Setup, mode: str = "infer") -> str:
    """HF Accelerate: `mixed_precision=`, TF32 flags and `dynamo_backend` for torch.compile."""
    args = [f'mixed_precision="{ACCELERATE_PRECISION[s.autocast]}"']
    if s.compile:
        args.append('dynamo_backend="inductor"')
    lines = [f"# tcperf advise: {s.name}", *_header(s, "from accelerate import Accelerator"),
             *_flags(s), *_model_lines(s, mode, "cuda", with_compile=False),
             f"accelerator = Accelerator({', '.join(args)})"]
    if mode == "train":
        lines += [_NO_STEP_GRAPH] if s.step_graph else []
        lines += ["model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)",
                  "for x, y in train_loader:", "    optimizer.zero_grad()", "    loss = loss_fn(model(x), y)",
                  "    accelerator.backward(loss)", "    optimizer.step()"]
    else:
        lines += ["model = accelerator.prepare(model)", "model.eval()", "with torch.no_grad():",
                  "    outputs = model(x)"]
    return "\n".join(lines) + "\n"


def all_snippets(s: Setup, mode: str, device_type: str = "cuda") -> dict[str, str]:
    return {"pytorch": plain(s, mode, device_type), "lightning": lightning(s, mode), "accelerate": accelerate(s, mode)}
