"""tcperf.kernels.maxpool: the 3 x 3 stride-2 max-pool's Triton kernels against ATen's max-pool, forward and backward, in
Triton's interpreter on the CPU (one child process: TRITON_INTERPRET is read when the kernels are imported); the
swap of a model's pools (torchvision's and timm's ResNets); the ladder's pool_kernel rung refusing a model without
one; the op's shapes and layouts under fake tensors (what torch.compile sees). On a GPU: bf16 channels-last against
ATen's CUDA kernels, and compiled."""
import pytest
import torch
import torch.nn.functional as F

import conftest
from tcperf import recipes
from tcperf.kernels import fusions
from tcperf.kernels import maxpool as pool

# (N, C, H, W): odd and even sizes, C not a power of two and C above one block of 64 channels, a 1 x 1 input
SHAPES = [(2, 5, 7, 9), (2, 64, 8, 8), (3, 70, 6, 5), (1, 3, 1, 1)]
CHILD = r"""
import json, sys, torch, torch.nn.functional as F
from fused_check import compare as compare_fused, made
from tcperf.kernels import maxpool as pool

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

def fused(nhwc, affine=True, track=True):
    # batch norm -> ReLU -> max-pool, float32, as nn.Modules and as BatchNormReluPool2d
    chain, mine = made(pool.BatchNormReluPool2d, [torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1)], affine, track)
    return compare_fused(chain, mine, nhwc)

out["fused"] = {f"{nhwc}|{affine}|{track}": fused(nhwc, affine, track)
                for nhwc, affine, track in ((True, True, True), (False, True, True), (True, False, True),
                                            (True, True, False))}
print(json.dumps(out))
"""


conftest.INTERPRETED["maxpool"] = (CHILD, SHAPES, 240)


@pytest.fixture(scope="module")
def interpreted(interpreted_children):
    return conftest.interpreted(interpreted_children, "maxpool")


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


@pytest.mark.parametrize("key", ["True|True|True", "False|True|True", "True|False|True", "True|True|False"],
                         ids=["channels_last", "contiguous", "no_affine", "no_running_stats"])
def test_batch_norm_relu_pool_is_the_three_in_the_interpreter(interpreted, key):
    """Training, float32, scales of both signs (a negative one pools the minimum): the output, the input's,
    weight's and bias's gradients and the running statistics as nn.BatchNorm2d -> nn.ReLU -> nn.MaxPool2d give
    them, to float32's rounding; the layouts as theirs."""
    r = interpreted["fused"][key]
    assert r.pop("layout") and r.pop("batches", 1) == 1
    assert all(err < 1e-5 for err in r.values()), r


def test_an_interpreted_kernel_is_launched_unwrapped(monkeypatch):
    """torch 2.11's wrap_triton refuses the function TRITON_INTERPRET=1 makes of a kernel (21 errors here on the GPU
    machine's torch, 2026-11-27): env.launchable hands it over as it is; compiled, it is wrap_triton's."""
    from torch.library import wrap_triton

    from tcperf import env
    from tcperf.kernels import maxpool as pool
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    kernel = object()
    assert env.launchable(kernel) is kernel
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    jitted = pool.KERNELS["forward"][0]
    assert type(env.launchable(jitted)) is type(wrap_triton(jitted))


def test_the_stems_of_torchvision_and_timm_resnets_are_fused_or_get_the_pool_kernel():
    """bn_relu_pool: the stem's batch norm, ReLU and pool become one BatchNormReluPool2d (the state dict's names
    kept); pool_kernel: the pool alone is swapped. On a CPU both compute what the model did, in training (batch
    statistics) and in eval."""
    import timm
    import torchvision
    for make, act in ((lambda: torchvision.models.resnet18(num_classes=10), "relu"),
                      (lambda: timm.create_model("resnet18", num_classes=10), "act1")):
        model, x = make(), torch.randn(2, 3, 64, 64)
        keys, want = list(model.state_dict()), model(x)
        notes = fusions.bn_relu_pool(model, "train")
        assert notes == ["batch norm + ReLU + max-pool 3x3/2 as one on tcperf's kernels: bn1"]
        assert type(model.bn1) is pool.BatchNormReluPool2d and list(model.state_dict()) == keys
        assert isinstance(model.maxpool, torch.nn.Identity) and isinstance(getattr(model, act), torch.nn.Identity)
        assert torch.allclose(model(x), want, atol=1e-5)
        model = make()
        want = model(x)
        assert fusions.pool_kernel(model, "train") == ["max-pool 3x3/2 on tcperf's kernels: maxpool"]
        assert isinstance(model.maxpool, pool.MaxPool3s2) and torch.equal(model(x), want)
        plain = make()
        plain.load_state_dict(model.state_dict())          # the same weights and running statistics
        assert torch.equal(model.eval()(x), plain.eval()(x))


class _Stem(torch.nn.Module):
    """conv -> bn -> relu -> pool, then `tail` ('shared': the ReLU module called again; 'reuse': the ReLU's
    output used twice; 'functional': F.relu instead of the module)."""

    def __init__(self, tail: str):
        super().__init__()
        self.tail = tail
        self.conv, self.bn, self.bn2 = torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4)
        self.relu, self.pool = torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1)

    def forward(self, x):
        y = self.bn(self.conv(x))
        y = F.relu(y) if self.tail == "functional" else self.relu(y)
        out = self.pool(y)
        if self.tail == "shared":
            return self.relu(self.bn2(out))
        return out + y.mean() if self.tail == "reuse" else out


@pytest.mark.parametrize("tail, found", [("plain", [("bn", "relu", "pool")]), ("functional", [("bn", None, "pool")]),
                                         ("shared", []), ("reuse", [])])
def test_only_a_chain_whose_links_are_used_once_is_fused(tail, found):
    assert pool.chains(_Stem(tail)) == found


def test_a_model_without_a_chain_is_refused_by_the_fused_rung_and_keeps_its_layers():
    class Branchy(_Stem):
        def forward(self, x):
            y = self.pool(self.relu(self.bn(self.conv(x))))
            return y if float(y.sum()) > 0 else -y            # control flow on a value: fx cannot trace it
    for model in (Branchy("plain"), _Stem("shared")):
        with pytest.raises(LookupError, match="no batch norm -> ReLU -> nn.MaxPool2d"):
            fusions.bn_relu_pool(model)
        assert type(model.bn) is torch.nn.BatchNorm2d and type(model.pool) is torch.nn.MaxPool2d
    x = torch.randn(2, 3, 9, 9)
    with pytest.raises(recipes.NotApplicable, match="no batch norm -> ReLU"):
        recipes.prepare(_Stem("shared"), "bn_relu_pool", "train", (x,), "cpu", loss_fn=lambda out, t: out.mean())


def test_the_fused_rung_swaps_the_pools_its_chains_do_not_hold():
    class Two(_Stem):
        def __init__(self):
            super().__init__("plain")
            self.pool2 = torch.nn.MaxPool2d(3, 2, 1)

        def forward(self, x):
            return self.pool2(super().forward(x))
    model = Two()
    assert fusions.bn_relu_pool(model) == ["batch norm + ReLU + max-pool 3x3/2 as one on tcperf's kernels: bn",
                                          "max-pool 3x3/2 on tcperf's kernels: pool2"]
    assert isinstance(model.pool2, pool.MaxPool3s2) and isinstance(model.pool, torch.nn.Identity)


def test_other_pools_are_left_alone_and_a_model_without_one_is_refused():
    keep = [torch.nn.MaxPool2d(2), torch.nn.MaxPool2d(3, 2, 1, ceil_mode=True), torch.nn.MaxPool2d(3, 1, 1),
            torch.nn.MaxPool2d(3, 2, 1, return_indices=True)]
    model = torch.nn.Sequential(*keep)
    with pytest.raises(LookupError, match="no nn.MaxPool2d"):
        fusions.pool_kernel(model)
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


@pytest.mark.gpu
def test_gpu_fused_stem_compiled_against_the_three_eager(cuda):
    """ResNet's stem (conv 7x7/2, batch norm with scales of both signs, ReLU, max-pool) at batch 8, bf16 autocast,
    channels-last, one training step: the fused stem compiled in one graph against the plain stem eager; the
    output, the convolution's and the batch norm's gradients and the running statistics to bf16's rounding."""
    import copy
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 7, 2, 3, bias=False), torch.nn.BatchNorm2d(64),
                              torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1))
    with torch.no_grad():
        ref[1].weight.copy_(torch.randn(64))
        ref[1].bias.copy_(torch.randn(64))
    ref = ref.to(cuda, memory_format=torch.channels_last)
    mine = copy.deepcopy(ref)
    assert fusions.bn_relu_pool(mine) == ["batch norm + ReLU + max-pool 3x3/2 as one on tcperf's kernels: 1"]
    x = torch.randn(8, 3, 224, 224, device=cuda).contiguous(memory_format=torch.channels_last)
    outs = []
    for model in (ref, torch.compile(mine, fullgraph=True)):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
        out.float().square().sum().backward()
        outs.append(out)

    def rel(a, b):
        return float((a.double() - b.double()).norm() / b.double().norm())
    assert rel(outs[1], outs[0]) < 1e-2 and outs[1].is_contiguous(memory_format=torch.channels_last)
    for name in ("0.weight", "1.weight", "1.bias"):
        got, want = mine.get_parameter(name).grad, ref.get_parameter(name).grad
        assert rel(got, want) < 3e-2, name
    assert rel(mine[1].running_var, ref[1].running_var) < 1e-3 and int(mine[1].num_batches_tracked) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("rung", ["pool_kernel", "bn_relu_pool", "bn_relu"])
def test_gpu_compiled_gradient_computed_inside_the_graph_is_eagers(cuda, rung):
    """float32 channels-last, batch 8: batch norm (scales of both signs) -> ReLU -> max-pool -> a loss of two
    branches, all compiled in one graph, so the pool's incoming gradient is a buffer Inductor makes (as in ResNet-50,
    where layer1's two branches add theirs): the input's gradient against the plain layers eager to 1e-4. Before
    batchnorm.as_dtype both fused rungs failed it in torch 2.11 (H200, 2026-11-27: rel. error 1.0, the gradient
    zero) and pool_kernel passed."""
    import copy
    torch.manual_seed(0)
    bn, relu = torch.nn.BatchNorm2d(64), torch.nn.ReLU()
    with torch.no_grad():
        bn.weight.copy_(torch.randn(64))
        bn.bias.copy_(torch.randn(64))
    if rung == "bn_relu":       # the pair inside a block (the rung rewrites blocks), a pool it leaves alone
        ref = torch.nn.Sequential(torch.nn.Sequential(bn, relu), torch.nn.MaxPool2d(2))
    else:
        ref = torch.nn.Sequential(bn, relu, torch.nn.MaxPool2d(3, 2, 1))
    ref = ref.to(cuda, memory_format=torch.channels_last)
    mine = copy.deepcopy(ref)
    assert getattr(fusions, rung)(mine)
    x = torch.randn(8, 64, 112, 112, device=cuda).contiguous(memory_format=torch.channels_last)
    w = torch.randn(2, 8, 64, 56, 56, device=cuda)

    def loss(model, leaf):
        out = model(leaf)
        return (out * w[0]).sum() + (out.square() * w[1]).sum()

    grads = []
    for model, run in ((ref, loss), (mine, torch.compile(loss, fullgraph=True))):
        leaf = x.detach().requires_grad_()
        run(model, leaf).backward()
        grads.append(leaf.grad)
    assert float((grads[1] - grads[0]).norm() / grads[0].norm()) < 1e-4
