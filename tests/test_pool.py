"""tcperf.pool: the 3 x 3 stride-2 max-pool's Triton kernels against ATen's max-pool, forward and backward, in
Triton's interpreter on the CPU (one child process: TRITON_INTERPRET is read when the kernels are imported); the
swap of a model's pools (torchvision's and timm's ResNets); the ladder's pool_kernel rung refusing a model without
one; the op's shapes and layouts under fake tensors (what torch.compile sees). On a GPU: bf16 channels-last against
ATen's CUDA kernels, and compiled."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tcperf import pool, recipes

# (N, C, H, W): odd and even sizes, C not a power of two and C above one block of 64 channels, a 1 x 1 input
SHAPES = [(2, 5, 7, 9), (2, 64, 8, 8), (3, 70, 6, 5), (1, 3, 1, 1)]
CHILD = r"""
import json, sys, torch, torch.nn.functional as F
from tcperf import pool

def compare(x, grad):
    ours, ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    y, want = pool.MaxPool3s2()(ours), F.max_pool2d(ref, 3, 2, 1)
    y.backward(grad)
    want.backward(grad)
    return {"equal": torch.equal(y, want), "same_layout": y.stride() == want.stride(),
            "grad_err": float((ours.grad.double() - ref.grad.double()).abs().max()),
            "grad_layout": ours.grad.stride() == ref.grad.stride()}

out = {}
torch.manual_seed(0)
for shape in json.loads(sys.argv[1]):
    for nhwc in (True, False):
        x = torch.randn(shape)
        x = x.contiguous(memory_format=torch.channels_last) if nhwc else x
        grad = torch.randn(F.max_pool2d(x, 3, 2, 1).shape)
        out[f"{shape}|{nhwc}|float32"] = compare(x, grad)
        out[f"{shape}|{nhwc}|bfloat16"] = compare(x.bfloat16(), grad.bfloat16())
ties = torch.randint(0, 3, (2, 4, 9, 9)).float()           # a window's largest inputs tie: the first one wins
out["ties"] = compare(ties, torch.randn(2, 4, 5, 5))
nan = torch.randn(1, 2, 5, 5)
nan[0, 0, 1, 1] = float("nan")
out["nan"] = torch.equal(pool.MaxPool3s2()(nan).isnan(), F.max_pool2d(nan, 3, 2, 1).isnan())
out["minus_inf_offsets"] = pool.max_pool_3s2(torch.full((1, 1, 5, 5), float("-inf")))[1].flatten().tolist()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def interpreted():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(SHAPES)], env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("nhwc", [True, False], ids=["channels_last", "contiguous"])
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_kernels_are_max_pool_in_the_interpreter(interpreted, shape, nhwc, dtype):
    """The output exactly and in ATen's layout; the gradient up to the order of at most four additions (fp32
    sums here, rounded once to bf16, where ATen's CPU kernel adds in bf16: one bf16 step of 2 at most)."""
    r = interpreted[f"{list(shape)}|{nhwc}|{dtype}"]
    assert r["equal"] and r["same_layout"] and r["grad_layout"]
    assert r["grad_err"] <= (1e-6 if dtype == "float32" else 2 ** -5 * 2)


def test_ties_nan_and_all_minus_inf_as_aten(interpreted):
    """Tied maxima: the gradient goes to the first in the window, as ATen's (a split would differ by far more
    than rounding); a NaN wins its windows; a window of -inf points at its first pixel inside the input."""
    assert interpreted["ties"]["equal"] and interpreted["ties"]["grad_err"] < 1e-6
    assert interpreted["nan"]
    # 3 x 3 outputs of a 5 x 5 input: the top row's and left column's windows start on the padding
    assert interpreted["minus_inf_offsets"] == [4, 3, 3, 1, 0, 0, 1, 0, 0]


def test_the_stem_pools_of_torchvision_and_timm_resnets_are_swapped():
    import timm
    import torchvision
    for model in (torchvision.models.resnet18(num_classes=10), timm.create_model("resnet18", num_classes=10)):
        model.eval()
        x = torch.randn(2, 3, 64, 64)
        want = model(x)
        notes = pool.use_pool_kernel(model)
        assert isinstance(model.maxpool, pool.MaxPool3s2) and notes == [
            "max-pool 3x3/2 on tcperf's kernels: maxpool"]
        assert torch.equal(model(x), want)            # on a CPU the module is F.max_pool2d


def test_other_pools_are_left_alone_and_a_model_without_one_is_refused():
    keep = [torch.nn.MaxPool2d(2), torch.nn.MaxPool2d(3, 2, 1, ceil_mode=True), torch.nn.MaxPool2d(3, 1, 1),
            torch.nn.MaxPool2d(3, 2, 1, return_indices=True)]
    model = torch.nn.Sequential(*keep)
    with pytest.raises(LookupError, match="no nn.MaxPool2d"):
        pool.use_pool_kernel(model)
    assert list(model) == keep
    assert pool.is_stem_pool(torch.nn.MaxPool2d((3, 3), (2, 2), (1, 1)))


def test_the_rung_is_not_applicable_to_a_model_without_the_pool():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(), torch.nn.Linear(288, 2))
    x = torch.randn(2, 3, 8, 8)
    with pytest.raises(recipes.NotApplicable, match="no nn.MaxPool2d"):
        recipes.prepare(model, "pool_kernel", "train", (x,), "cpu", loss_fn=F.cross_entropy,
                        targets=torch.tensor([0, 1]))


@pytest.mark.parametrize("nhwc", [True, False], ids=["channels_last", "contiguous"])
def test_fake_tensors_carry_the_real_shapes_and_layouts(nhwc):
    from torch._subclasses.fake_tensor import FakeTensorMode
    if pool.INTERPRETING:
        pytest.skip("TRITON_INTERPRET is set in this process")
    with FakeTensorMode():
        x = torch.empty(2, 64, 113, 112)
        x = x.contiguous(memory_format=torch.channels_last) if nhwc else x
        y, offsets = torch.ops.tcperf.max_pool_3s2(x)
        dx = torch.ops.tcperf.max_pool_3s2_backward(y, offsets, 113, 112)
    layout = torch.channels_last if nhwc else torch.contiguous_format
    assert y.shape == offsets.shape == (2, 64, 57, 56) and offsets.dtype == torch.int8
    assert dx.shape == x.shape and all(t.is_contiguous(memory_format=layout) for t in (y, offsets, dx))


@pytest.mark.gpu
def test_gpu_kernels_against_aten_eager_and_compiled(cuda):
    """bf16 channels-last, ResNet-50's stem at batch 8: the output exactly, the gradient within one bf16 step;
    then compiled in one graph with the add of two incoming gradients (as in ResNet-50), the same again."""
    torch.manual_seed(0)
    x = torch.randn(8, 64, 112, 112, device=cuda).relu().bfloat16().contiguous(memory_format=torch.channels_last)
    grads = [torch.randn(8, 64, 56, 56, device=cuda, dtype=torch.bfloat16) for _ in range(2)]

    def step(f):
        leaf = x.detach().requires_grad_()
        y = f(leaf)
        y.backward(grads[0] + grads[1])
        return y, leaf.grad

    want_y, want_g = step(lambda t: F.max_pool2d(t, 3, 2, 1))
    for f in (pool.MaxPool3s2(), torch.compile(pool.MaxPool3s2(), fullgraph=True)):
        y, g = step(f)
        assert torch.equal(y, want_y) and y.is_contiguous(memory_format=torch.channels_last)
        assert (g.float() - want_g.float()).abs().max() <= 2 ** -6 * want_g.float().abs().max()
