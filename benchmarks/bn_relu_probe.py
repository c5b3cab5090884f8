"""Issue 35: one batch norm -> ReLU of ResNet-50 in training, forward and backward, compiled, two ways: Inductor's own
(nn.BatchNorm2d -> nn.ReLU) and tcperf's BatchNormRelu2d (the bn_relu rung, tcperf/kernels/batchnorm.py). Each is checked in
float32 against the plain layers eager (output, the input's and the parameters' gradients), then run in bf16
channels-last (fp32 parameters, as under autocast): timed with triton.testing.do_bench (wall), its kernels listed
and summed from torch.profiler (the figure the ways are compared on).

Why: in ResNet-50's whole-step graph (H200, 2026-11-27, edc4066) the bn_relu rung cut the kernels filed under
normalization from 17.5 to 12.2 ms a step, but its passes ending in a cast to bf16 (Inductor's `_to_copy_...`,
filed under copies) rose from 0.4 to 6.5 ms, and the step was 0.99x. Which kernels those are, and whether the fused
function's graph made Inductor keep a float32 intermediate, a whole-model profile does not say; one pair does.

First run (H100, 2026-11-27, f248eb1): do_bench's wall time was mostly launching (layer2: 0.80 ms a call, its
kernels 0.21 ms), which a whole-step CUDA graph removes, so the ways are compared on their kernels' time from the
profile; and every second profile in the process listed no kernels (Kineto's CUPTI torn down after each, as
kernels.detach_after_profiling asks: a matmul profiled five times so listed 2, 0, 2, 0, 2 kernels), so now all the
timing is done first and the profiles after it, CUPTI left attached.
layer1's parameter gradients differ from eager by 1.4e-4 both ways (a float32 sum over 0.8M values), hence 1e-3.

Bytes: the fewest passes over bf16 tensors of the activation's size, 8 (forward: the statistics read y, then y read
and the output written; backward: two sums read y and the incoming gradient, then both read again and the input's
gradient written), against the copy bandwidth measured in the same process.

    python3 benchmarks/bn_relu_probe.py --out out/bn_relu          # ResNet-50's pair shapes at batch 256
"""
from __future__ import annotations

import copy
import sys

import torch

import probes  # beside this script: what the probes share

SHAPES = {  # ResNet-50's batch norm -> ReLU pairs by stage: (channels, height = width) of the bottlenecks' bn1, bn2
    "layer1": (64, 56), "layer2": (128, 28), "layer3": (256, 14), "layer4": (512, 7)}
PASSES = 8
TOLERANCE = 1e-3          # float32, compiled against eager: a wrong fused function reads ~1 (as before as_dtype)


def ways(channels: int, seed: int = 0) -> dict:
    """name -> the pair as a module, the same batch norm in each (scales of both signs): 'inductor' the two layers,
    'tcperf' one BatchNormRelu2d."""
    from tcperf.kernels.batchnorm import BatchNormRelu2d
    bn = probes.signed_batch_norm(channels, seed)
    fused = copy.deepcopy(bn)
    fused.__class__ = BatchNormRelu2d
    return {"inductor": torch.nn.Sequential(copy.deepcopy(bn), torch.nn.ReLU()), "tcperf": fused}


def inputs(batch: int, channels: int, size: int, device, dtype=torch.bfloat16, seed: int = 0):
    """(y, the output's gradient): channels-last, y off-centre as a convolution's output is."""
    g = torch.Generator(device=device).manual_seed(seed)
    shape = (batch, channels, size, size)
    y = (torch.randn(shape, generator=g, device=device) * 2 + 0.5).to(dtype)
    grad = torch.randn(shape, generator=g, device=device).to(dtype)
    return [t.contiguous(memory_format=torch.channels_last) for t in (y, grad)]


def step(module, y: torch.Tensor, grad: torch.Tensor) -> dict:
    """Forward and backward once: the output and the gradients of the input, weight and bias."""
    for p in module.parameters():
        p.grad = None
    leaf = y.detach().requires_grad_(True)
    out = module(leaf)
    out.backward(grad)
    weight, bias = (module[0] if isinstance(module, torch.nn.Sequential) else module).parameters()
    return {"out": out.detach(), "dy": leaf.grad, "dw": weight.grad, "db": bias.grad}


def check(module, reference, exact: list) -> str | None:
    """None when `module` (as it will be timed, compiled) agrees with `reference` (eager) in float32, else why."""
    got, want = step(module, *exact), step(reference, *exact)
    for what in want:
        err = float((got[what].double() - want[what].double()).norm() / want[what].double().norm())
        if not err < TOLERANCE:
            return f"float32 {what} rel. error {err:.3g} >= {TOLERANCE}"
    return None


def measure(batch: int, channels: int, size: int, device) -> tuple[dict, dict]:
    """The pair's report (each way checked, then timed: wall ms) and name -> the timed call, to profile."""
    import triton.testing
    y, grad = inputs(batch, channels, size, device)
    exact = inputs(batch, channels, size, device, torch.float32)
    nbytes = PASSES * y.numel() * y.element_size()
    rows, calls = {}, {}
    reference = ways(channels)["inductor"].to(device, memory_format=torch.channels_last)
    for name, module in ways(channels).items():
        compiled = torch.compile(module.to(device, memory_format=torch.channels_last))
        why = check(compiled, reference, exact)
        if why:
            rows[name] = {"status": "wrong", "message": why}
            continue
        calls[name] = lambda compiled=compiled: step(compiled, y, grad)
        ms = triton.testing.do_bench(calls[name], return_mode="median")
        rows[name] = {"status": "ok", "ms": ms}
    return {"shape": [batch, channels, size, size], "bytes": nbytes, "rows": rows}, calls


def add_kernels(report: dict, calls: dict, device, copy_gbs: float | None, n: int = 3) -> None:
    """Each timed way's kernels (a call's us each) and their sum, `kernel_ms`, with the GB/s it makes."""
    from tcperf import profiler as kernels
    for name, call in calls.items():
        listed = kernels.profile_kernels(call, device, calls=n)
        row = report["rows"][name]
        row["kernels"] = [{"name": k["name"], "us": k["time_us"] / n, "calls": k["calls"] / n,
                           "kind": kernels.kind(k["name"])} for k in listed]
        row["kernel_ms"] = sum(k["us"] for k in row["kernels"]) / 1e3 or None
        row["gbs"] = report["bytes"] / (row["kernel_ms"] * 1e-3) / 1e9 if row["kernel_ms"] else None
        row["copy_share"] = row["gbs"] / copy_gbs if row["gbs"] and copy_gbs else None


def report_lines(name: str, r: dict, base_ms: float | None) -> list[str]:
    if r["status"] != "ok":
        return [f"  {name:9s} {r['status']}: {r['message']}"]
    if not r.get("kernel_ms"):
        return [f"  {name:9s} {r['ms']:.3f} ms a call (wall); the profile listed no kernels"]
    share = f", {r['copy_share']:.0%} of copy" if r.get("copy_share") else ""
    lines = [f"  {name:9s} {r['kernel_ms']:.3f} ms of kernels forward + backward ({r['ms']:.3f} ms wall), "
             f"{r['gbs']:,.0f} GB/s at {PASSES} passes{share}"
             + (f", {base_ms / r['kernel_ms']:.2f}x inductor" if base_ms else "")]
    lines += [f"      {k['us']:8.1f} us  x{k['calls']:.0f}  {k['kind']:13s} {k['name'][:90]}" for k in r["kernels"]]
    return lines


def main() -> int:
    a = probes.start(__doc__, "bn_relu_probe.py")
    if a is None:
        return 2
    from tcperf import peaks
    device = torch.device("cuda")
    copy_gbs = peaks.measure_now(device).get("bandwidth")
    report = {"batch": a.batch, "copy_gbs": copy_gbs, "device": torch.cuda.get_device_name(device),
              "torch": torch.__version__, "stages": {}}
    print(f"copy bandwidth {copy_gbs:,.0f} GB/s" if copy_gbs else "copy bandwidth: not measured")
    calls = {}
    for stage, (channels, size) in SHAPES.items():              # every timing before any profile
        report["stages"][stage], calls[stage] = measure(a.batch, channels, size, device)
    for stage, r in report["stages"].items():
        add_kernels(r, calls[stage], device, copy_gbs)
        print(f"{stage}: {a.batch} x {r['shape'][1]} x {r['shape'][2]} x {r['shape'][3]}, "
              f"{r['bytes'] / 1e9:.2f} GB at {PASSES} passes")
        base = r["rows"]["inductor"].get("kernel_ms")
        for name, row in r["rows"].items():
            print("\n".join(report_lines(name, row, base)))
    probes.write(a, "bn_relu_probe.json", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
