"""tcperf.kernels.batchnorm: batch norm -> ReLU as one autograd function (ReLU's mask recomputed from the batch norm's
input) against nn.BatchNorm2d -> nn.ReLU, eager and compiled on the CPU; the fx search that fuses the pairs of
torchvision's and timm's ResNets; the bn_relu rung's transform (tcperf.kernels.fusions)."""
import copy

import pytest
import torch
import torch.nn as nn

from fused_check import compare, made, rel
from tcperf import recipes
from tcperf.kernels import batchnorm, fusions


def _pair(affine=True, track=True):
    return made(batchnorm.BatchNormRelu2d, [nn.ReLU()], affine, track)


@pytest.mark.parametrize("affine, track, nhwc", [(True, True, True), (True, True, False), (False, True, True),
                                                 (True, False, True)],
                         ids=["channels_last", "contiguous", "no_affine", "no_running_stats"])
def test_batch_norm_relu_is_the_two_in_training(affine, track, nhwc):
    """Output, the input's, weight's and bias's gradients and the running statistics as nn.BatchNorm2d -> nn.ReLU
    give them, to float32's rounding, in the same layout."""
    r = compare(*_pair(affine, track), nhwc)
    assert r.pop("layout") and r.pop("batches", 1) == 1
    assert r.pop("out") < 1e-6 and all(err < 1e-5 for err in r.values()), r


@pytest.mark.parametrize("shape, mean", [((3, 6, 9, 10), 1000.0), ((2, 512, 2, 2), 0.0)],
                         ids=["mean_1000", "resnet50_layer4"])
def test_the_fused_arithmetic_is_as_near_float64_as_atens(shape, mean):
    """The output and the input's gradient as near float64's as ATen's float32 batch norm -> ReLU: inputs of mean
    1,000 and spread 1 (the fused arithmetic centres before it scales), and ResNet-50's layer4 at 64 x 64, batch 2
    (8 pixels a channel, 512 channels). Measured on a 2-core x86 CPU (2026-11-29): 0.4-1.3x ATen's error over 5
    seeds each, output and gradient."""
    chain, mine = made(batchnorm.BatchNormRelu2d, [nn.ReLU()], channels=shape[1])
    exact = copy.deepcopy(chain).double()
    y = torch.randn(*shape) + mean
    g = torch.randn(*shape)
    runs = []
    for model, dtype in ((exact, torch.double), (chain, torch.float), (mine, torch.float)):
        x = y.to(dtype).clone().requires_grad_()
        out = model(x)
        out.backward(g.to(dtype))
        runs.append((out, x.grad))
    for i in (0, 1):
        assert rel(runs[2][i], runs[0][i]) <= 2 * rel(runs[1][i], runs[0][i])


def test_in_eval_the_running_statistics_are_used_unfused():
    ref, mine = _pair()
    ref.eval(), mine.eval()
    y = torch.randn(2, 6, 5, 5)
    assert torch.equal(mine(y), ref(y))


@pytest.mark.slow
def test_compiled_with_inductor_it_is_the_two():
    """torch.compile traces the autograd function into one graph (Inductor's CPU kernels here): a conv -> batch
    norm -> ReLU -> conv step against the same eager, unfused."""
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3))
    mine = copy.deepcopy(ref)
    mine[1].__class__ = batchnorm.BatchNormRelu2d
    mine[2] = nn.Identity()
    x = torch.randn(4, 3, 12, 12)
    torch._dynamo.reset()
    outs = [model(x) for model in (ref, torch.compile(mine, fullgraph=True))]
    for out in outs:
        out.square().sum().backward()
    assert rel(outs[1], outs[0]) < 1e-5
    for name in ("0.weight", "1.weight", "1.bias", "3.weight"):
        assert rel(mine.get_parameter(name).grad, ref.get_parameter(name).grad) < 1e-4, name


@pytest.mark.parametrize("make, pairs", [("resnet18", 8), ("resnet50", 32), ("timm_resnet18", 8)])
def test_the_blocks_of_resnets_are_fused_and_train_as_before(make, pairs):
    """Each block's batch norms followed by a ReLU alone (BasicBlock: bn1; Bottleneck: bn1, bn2): the block becomes a
    GraphModule of its trace with the ReLU removed, the state dict's names kept, the ReLU module kept where it is
    called again (after the residual add). In float64 the model computes what it did, output and every parameter's
    gradient to 1e-9 (measured: 1e-12 and below); in float32 its output is as near the float64 model's as the
    unfused float32 model's.

    Not compared in float32: the gradients. There a ReLU whose input lies within float32's accumulated error of zero
    takes either side, in ATen's batch norm as in the fused one, and one such pixel of layer4 (8 pixels a channel)
    moves the stem's gradient by percents: in float64, negating one pre-activation of 1.5e-5 in ResNet-50's
    layer4.2.bn2 (seed 1) moved conv1's gradient by 3.2e-2, and float32's own error there ranged 2.5e-3 to 4.1e-2
    with the seed and the thread count (2-core x86, 2026-11-29). The fused arithmetic's float32 error is held to
    ATen's one batch norm at a time (test_the_fused_arithmetic_is_as_near_float64_as_atens)."""
    import timm
    import torchvision
    build = {"resnet18": lambda: torchvision.models.resnet18(num_classes=10),
             "resnet50": lambda: torchvision.models.resnet50(num_classes=10),
             "timm_resnet18": lambda: timm.create_model("resnet18", num_classes=10)}[make]
    torch.manual_seed(0)
    ref = build()
    mine = copy.deepcopy(ref)
    fused = batchnorm.fuse_batch_norm_relu(mine)
    assert len(fused) == pairs and fused[0] == "layer1.0.bn1"
    assert list(mine.state_dict()) == list(ref.state_dict())
    assert isinstance(mine.layer1[0], torch.fx.GraphModule) and type(mine.layer1[0].bn1) is batchnorm.BatchNormRelu2d
    x = torch.randn(2, 3, 64, 64)
    exact, mine64 = copy.deepcopy(ref).double(), copy.deepcopy(mine).double()
    outs = [model(x.double()) for model in (exact, mine64)]
    for out in outs:
        out.sum().backward()
    assert rel(outs[1], outs[0]) < 1e-9
    for (name, want), got in zip(exact.named_parameters(), mine64.parameters()):
        assert (got.grad - want.grad).norm() <= 1e-9 * want.grad.norm(), name    # timm's zeros: 0 <= 0
    with torch.no_grad():
        assert rel(mine(x), outs[0]) <= 2 * rel(ref(x), outs[0]) + 1e-6


def test_the_bn_relu_rung_fuses_the_stem_and_the_blocks_and_refuses_a_model_without_a_pair():
    import torchvision
    model = torchvision.models.resnet18(num_classes=10)
    notes = fusions.bn_relu(model)
    assert notes[0] == "batch norm + ReLU + max-pool 3x3/2 as one on tcperf's kernels: bn1"
    assert notes[1].startswith("batch norm + ReLU as one, ReLU's mask from the batch norm's input: 8 pairs "
                               "(layer1.0.bn1, layer1.1.bn1, layer2.0.bn1, ...)")
    plain = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Sequential(nn.BatchNorm2d(4), nn.Tanh()))
    with pytest.raises(LookupError, match="no batch norm whose only user is a ReLU"):
        fusions.bn_relu(plain)
    with pytest.raises(recipes.NotApplicable, match="no batch norm whose only user is a ReLU"):
        recipes.prepare(plain, "bn_relu", "train", (torch.randn(2, 3, 8, 8),), "cpu",
                        loss_fn=lambda out, t: out.mean())


def test_a_batch_norm_used_twice_or_followed_by_more_than_a_relu_is_left_alone():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn, self.relu = nn.BatchNorm2d(4), nn.ReLU()

        def forward(self, x):
            y = self.bn(x)
            return self.relu(y) + y                  # the batch norm's output has two users
    shared = nn.BatchNorm2d(4)
    twice = nn.Sequential(nn.Sequential(shared, nn.ReLU()), nn.Sequential(shared, nn.ReLU()))  # held twice
    for model in (nn.Sequential(Block()), twice):
        assert batchnorm.fuse_batch_norm_relu(model) == []
