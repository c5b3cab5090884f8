"""Issue 35: ResNet-50's stem max-pool in training, three ways, forward and backward. In the whole-step graph on an
H200 (2026-11-27, c41fb7d) the largest memory-bound kernel of the step was Inductor's
`triton_poi_fused_add_max_pool2d_with_indices_max_pool2d_with_indices_backward`: 1.48 ms a step, where its bytes
(two incoming gradients read, the input's gradient written, 256 x 64 x 112 x 112 bf16 channels_last) take about
0.2 ms at copy bandwidth. Inductor lowers that backward as a gather over each input pixel's windows.

    inductor   torch.compile of nn.MaxPool2d(3, 2, 1): the ladder's path (Inductor's lowering, both ways)
    aten       the same module eager: ATen's max_pool2d_with_indices and its backward (NHWC kernels)
    slices     torch.compile of the same pooling written as the maximum of the 9 strided views of the padded input:
               no indices; the backward is where-masks and strided adds, which Inductor fuses as pointwise work
    tcperf     torch.compile of tcperf.kernels.maxpool.MaxPool3s2: tcperf's two Triton kernels (int8 window offsets kept by the
               forward, a backward that visits each input pixel once, channels read contiguously): the `pool_kernel`
               rung's pooling

The incoming gradient is the sum of two tensors, as in ResNet-50, where the stem's output feeds layer1's first block
and its downsample; the sum is one eager add inside every way's timed step (Inductor fuses it in the ladder's step,
so the ways here carry the same extra add, about 0.1 ms, and the ratios between them understate the gap). Each way
is checked against nn.MaxPool2d in float32 before it is timed: the outputs equal, and the input's gradient equal
where the input is positive (after the stem's ReLU many inputs are zero and tie; a tie's gradient lands on a zero
that the ReLU's backward discards, so only positive inputs carry it). Timed with
triton.testing.do_bench (median, L2 cleared), GB/s against the bytes each step must move (input read, output
written, two gradients read, input gradient written, once each) and the copy bandwidth timed in the same process.

    python3 benchmarks/maxpool_probe.py [--batch 256] [--out DIR]

On an H200 (2026-11-27, 4e3799d, batch 256): inductor 1.883 ms (600 GB/s, 14% of copy), aten 2.854 ms (0.66x),
slices refused by its check (float32 gradient rel. error 1.9e-4: among 205 M random float32 inputs some of a
window's largest tie, and torch.maximum splits their gradient where max-pool gives it to the first); tcperf's
kernels were written after that call (ties go to the first maximum, as ATen's). In a6968ae's call they ran the
pooling in 0.971 ms, 1.94x Inductor's.

Then the stem after its convolution, three ways compiled (stem_ways: Inductor's batch norm + ReLU + max-pool; the
same with the pool on tcperf's kernels; tcperf.kernels.maxpool.BatchNormReluPool2d, the three as one), each checked in float32
against the plain stem before it is timed in bf16: what the pool_kernel rung changes in the step.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

import probes  # beside this script: what the probes share

KERNEL, STRIDE, PAD = 3, 2, 1
CHANNELS, SIZE = 64, 112          # ResNet-50's stem: 64 channels at 112 x 112 before the pooling


class SlicedMaxPool2d(torch.nn.Module):
    """nn.MaxPool2d(3, 2, 1) as the maximum of the 9 strided views of the input padded with -inf."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        padded = F.pad(x, (PAD, PAD, PAD, PAD), value=float("-inf"))
        out_h = (x.shape[-2] + 2 * PAD - KERNEL) // STRIDE + 1
        out_w = (x.shape[-1] + 2 * PAD - KERNEL) // STRIDE + 1
        views = [padded[..., i:i + STRIDE * out_h:STRIDE, j:j + STRIDE * out_w:STRIDE]
                 for i in range(KERNEL) for j in range(KERNEL)]
        out = views[0]
        for view in views[1:]:
            out = torch.maximum(out, view)
        return out


def ways() -> dict:
    """name -> the pooling module that way (compiled where it says)."""
    pool = torch.nn.MaxPool2d(KERNEL, STRIDE, PAD)
    from tcperf.kernels.maxpool import MaxPool3s2
    return {"inductor": torch.compile(pool), "aten": pool, "slices": torch.compile(SlicedMaxPool2d()),
            "tcperf": torch.compile(MaxPool3s2())}


def inputs(batch: int, device, dtype=torch.bfloat16, seed: int = 0):
    """The stem's output after its ReLU (half of it zero), channels_last, and the two incoming gradients."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(batch, CHANNELS, SIZE, SIZE, generator=g, device=device).relu().to(dtype)
    x = x.contiguous(memory_format=torch.channels_last)
    out = (SIZE + 2 * PAD - KERNEL) // STRIDE + 1
    grads = [torch.randn(batch, CHANNELS, out, out, generator=g, device=device).to(dtype)
             .contiguous(memory_format=torch.channels_last) for _ in range(2)]
    return x, grads


def step(pool, x: torch.Tensor, grads: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward once: (output, the input's gradient)."""
    x = x.detach().requires_grad_(True)
    y = pool(x)
    y.backward(grads[0] + grads[1])
    return y.detach(), x.grad


def check(pool, exact: tuple, timed: tuple, tol: float = 1e-5) -> str | None:
    """None when `pool` agrees with nn.MaxPool2d, else why: on `exact`, float32 inputs (x, grads), the output and the
    input's gradient where x > 0; on `timed`, the inputs it is timed on (bf16), the output exactly. Where a window's
    largest inputs tie, torch.maximum splits the gradient between them and max-pool gives it to one: both are
    gradients of the maximum, so the gradient is held to the reference in float32, where positive random inputs do
    not tie (bf16's 8 bits of mantissa do)."""
    reference = torch.nn.MaxPool2d(KERNEL, STRIDE, PAD)
    (ref_y, ref_g), (y, g) = step(reference, *exact), step(pool, *exact)
    keep = exact[0] > 0
    for what, got, ref in (("output", y, ref_y), ("gradient", g * keep, ref_g * keep)):
        err = (got - ref).norm() / ref.norm()
        if not torch.isfinite(err) or err > tol:
            return f"float32 {what} rel. error {float(err):.3g} > {tol}"
    if not torch.equal(step(pool, *timed)[0], reference(timed[0])):
        return f"{timed[0].dtype} output differs from max-pool's"
    return None


def moved_bytes(x: torch.Tensor, grads: list[torch.Tensor]) -> int:
    """Input read, output written, two gradients read, input gradient written: once each."""
    out = grads[0].numel() * grads[0].element_size()
    return 2 * x.numel() * x.element_size() + 3 * out


def measure(batch: int) -> dict:
    import triton.testing
    from tcperf import peaks
    device = torch.device("cuda")
    x, grads = inputs(batch, device)
    exact = inputs(batch, device, torch.float32)
    copy_gbs = peaks.measure_now(device).get("bandwidth")
    rows = {}
    for name, pool in ways().items():
        why = check(pool, exact, (x, grads))
        if why:
            rows[name] = {"status": "wrong", "message": why}
            continue
        ms = triton.testing.do_bench(lambda: step(pool, x, grads), return_mode="median")
        gbs = moved_bytes(x, grads) / (ms * 1e-3) / 1e9
        rows[name] = {"status": "ok", "ms": ms, "gbs": gbs, "copy_share": gbs / copy_gbs if copy_gbs else None}
    return {"batch": batch, "copy_gbs": copy_gbs, "bytes": moved_bytes(x, grads), "rows": rows,
            "device": torch.cuda.get_device_name(device), "torch": torch.__version__}


def stem_ways(seed: int = 0) -> dict:
    """name -> ResNet's stem after its convolution (batch norm of random scales of both signs, ReLU, max-pool), in
    training, compiled: Inductor's alone; with the pool on tcperf's kernels (a6968ae's pool_kernel); and as one
    BatchNormReluPool2d (the pool on the batch norm's input, tcperf.kernels.maxpool). The same batch norm in each."""
    import copy
    from tcperf.kernels.maxpool import BatchNormReluPool2d, MaxPool3s2
    bn = probes.signed_batch_norm(CHANNELS, seed)
    fused = copy.deepcopy(bn)
    fused.__class__ = BatchNormReluPool2d
    relu, pool = torch.nn.ReLU(), torch.nn.MaxPool2d(KERNEL, STRIDE, PAD)
    return {"inductor": torch.nn.Sequential(copy.deepcopy(bn), relu, pool),
            "pool kernel": torch.nn.Sequential(copy.deepcopy(bn), relu, MaxPool3s2()), "fused": fused}


def measure_stem(batch: int) -> dict:
    """Each of stem_ways() compiled, checked against the plain stem eager in float32 (output and the input's
    gradient, rel. error < 1e-4), then timed forward + backward in bf16 (fp32 batch-norm parameters, as under
    autocast) with triton.testing.do_bench: {name: {status, ms | message}}."""
    import triton.testing
    device = torch.device("cuda")
    x, grads = inputs(batch, device)
    exact = inputs(batch, device, torch.float32)
    reference = stem_ways()["inductor"].to(device)
    (ref_y, ref_g) = step(reference, *exact)
    rows = {}
    for name, module in stem_ways().items():
        compiled = torch.compile(module.to(device).to(memory_format=torch.channels_last))
        y, g = step(compiled, *exact)
        err = max(float((y - ref_y).norm() / ref_y.norm()), float((g - ref_g).norm() / ref_g.norm()))
        if not err < 1e-4:
            rows[name] = {"status": "wrong", "message": f"float32 rel. error {err:.3g} >= 1e-4"}
            continue
        rows[name] = {"status": "ok", "ms": triton.testing.do_bench(lambda: step(compiled, x, grads),
                                                                   return_mode="median")}
    return rows


def main() -> int:
    a = probes.start(__doc__, "maxpool_probe.py")
    if a is None:
        return 2
    report = measure(a.batch)
    base = report["rows"]["inductor"].get("ms")
    for name, r in report["rows"].items():
        if r["status"] != "ok":
            print(f"{name:9s} {r['status']}: {r['message']}")
            continue
        share = f", {r['copy_share']:.0%} of copy" if r["copy_share"] else ""
        print(f"{name:9s} {r['ms']:.3f} ms forward + backward, {r['gbs']:,.0f} GB/s{share}"
              + (f", {base / r['ms']:.2f}x inductor" if base else ""))
    report["stem"] = measure_stem(a.batch)
    base = report["stem"]["inductor"].get("ms")
    for name, r in report["stem"].items():
        print(f"stem, {name:11s} " + (f"{r['ms']:.3f} ms forward + backward" + (f", {base / r['ms']:.2f}x inductor"
                                      if base else "") if r["status"] == "ok" else f"{r['status']}: {r['message']}"))
    probes.write(a, "maxpool_probe.json", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
