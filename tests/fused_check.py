"""A fused batch-norm module held against the chain of nn layers it replaces, in training: the tests of
tcperf.kernels.batchnorm and tcperf.kernels.maxpool use it, the latter inside Triton's interpreter's child process too."""
import copy

import torch


def made(cls, chain_after: list, affine: bool = True, track: bool = True, channels: int = 6):
    """(the chain nn.BatchNorm2d -> *chain_after, the same batch norm made `cls`): scales of both signs."""
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(channels, affine=affine, track_running_stats=track)
    if affine:
        with torch.no_grad():
            bn.weight.copy_(torch.randn(channels))
            bn.bias.copy_(torch.randn(channels))
    mine = copy.deepcopy(bn)
    mine.__class__ = cls
    return torch.nn.Sequential(bn, *chain_after), mine


def compare(chain, mine, nhwc: bool) -> dict:
    """One training step of each on the same input and output gradient: relative errors of the output, the input's
    gradient and (where they exist) the weight's and bias's gradients and running statistics; whether the layouts
    agree; the batches the fused module counted."""
    y = torch.randn(3, mine.num_features, 9, 10) * 2 + 0.5
    y = y.contiguous(memory_format=torch.channels_last) if nhwc else y
    a, b = y.clone().requires_grad_(), y.clone().requires_grad_()
    want, got = chain(a), mine(b)
    g = torch.randn_like(want)
    want.backward(g)
    got.backward(g)
    bn = chain[0]
    r = {"out": rel(got, want), "dy": rel(b.grad, a.grad),
         "layout": got.stride() == want.stride() and b.grad.stride() == a.grad.stride()}
    if bn.affine:
        r.update(dw=rel(mine.weight.grad, bn.weight.grad), db=rel(mine.bias.grad, bn.bias.grad))
    if bn.track_running_stats:
        r.update(rm=rel(mine.running_mean, bn.running_mean), rv=rel(mine.running_var, bn.running_var),
                 batches=int(mine.num_batches_tracked))
    return r


def rel(got, want) -> float:
    return float((got.detach().double() - want.detach().double()).norm() / want.detach().double().norm())
