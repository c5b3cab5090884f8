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


def test_a_mean_that_dwarfs_the_spread_costs_no_accuracy():
    """Inputs of mean 1,000 and spread 1: the output and the input's gradient as near float64's as ATen's float32
    batch norm (the fused arithmetic centres before it scales)."""
    chain, mine = _pair()
    exact = copy.deepcopy(chain).double()
    y = torch.randn(3, 6, 9, 10) + 1000.0
    g = torch.randn(3, 6, 9, 10)
    runs = []
    for model, dtype in ((exact, torch.double), (chain, torch.float), (mine, torch.float)):
        x = y.to(dtype).requires_grad_()
        out = model(x)
        out.backward(g.to(dtype))
        runs.append((out, x.grad))
    for i in (0, 1):
        assert rel(runs[2][i], runs[0][i]) <= 2 * rel(runs[1][i], runs[0][i]) + 1e-6


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
    called again (after the residual add); the model computes what it did, output and gradients, each as near the
    float64 model's as the unfused float32 model's (whose stem gradient, through layer4's batch norms of 8 pixels a
    channel, is 7e-3 off float64 on this CPU)."""
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
    exact = copy.deepcopy(ref).double()
    x = torch.randn(2, 3, 64, 64)
    outs = [model(x.to(dtype)) for model, dtype in ((exact, torch.double), (ref, torch.float), (mine, torch.float))]
    for out in outs:
        out.sum().backward()
    assert rel(outs[2], outs[0]) <= 2 * rel(outs[1], outs[0]) + 1e-6
    grads = [model.conv1.weight.grad for model in (exact, ref, mine)]
    assert rel(grads[2], grads[0]) <= 2 * rel(grads[1], grads[0]) + 1e-5


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
