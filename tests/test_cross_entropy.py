"""tcperf.kernels.cross_entropy: the chunked linear cross-entropy equals F.cross_entropy on the whole logits (loss and
gradients, float64, ignored positions, a bias, chunks that do not divide the tokens), and the ladder's chunked_ce
rung trains GPT-2 as the plain head does, skipping models without an lm_head or with a loss of their own."""
import dataclasses

import pytest
import torch
import torch.nn.functional as F

from tcperf import models, recipes
from tcperf.kernels import cross_entropy


@pytest.mark.parametrize("bias, chunks", [(False, 1), (False, 5), (True, 8)])
def test_chunked_loss_and_gradients_equal_the_whole_logits(bias, chunks):
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(37, 16, dtype=torch.float64, generator=gen, requires_grad=True)      # (N, d)
    w = torch.randn(300, 16, dtype=torch.float64, generator=gen, requires_grad=True)     # (V, d)
    b = torch.randn(300, dtype=torch.float64, generator=gen, requires_grad=True) if bias else None
    t = torch.randint(0, 300, (37,), generator=gen)
    t[[3, 10]] = cross_entropy.IGNORE
    params = [h, w] + ([b] if bias else [])
    mine = cross_entropy.linear_cross_entropy(h, w, b, t, chunks)
    ref = F.cross_entropy(F.linear(h, w, b), t)
    assert mine.item() == pytest.approx(ref.item(), rel=1e-12)
    for got, want in zip(torch.autograd.grad(mine * 2.5, params), torch.autograd.grad(ref * 2.5, params)):
        assert torch.allclose(got, want, rtol=1e-10, atol=1e-14)


def test_under_bf16_autocast_the_loss_is_the_plain_heads():
    gen = torch.Generator().manual_seed(1)
    h, w = torch.randn(64, 32, generator=gen), torch.randn(512, 32, generator=gen)
    t = torch.randint(0, 512, (64,), generator=gen)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mine, ref = cross_entropy.linear_cross_entropy(h, w, None, t), F.cross_entropy(F.linear(h, w), t)
    assert mine.dtype == ref.dtype == torch.float32 and mine.item() == pytest.approx(ref.item(), rel=1e-6)


def _gpt2_losses(recipe, steps: int = 3) -> list[float]:
    mod = models.get("gpt2")
    cfg = mod.CONFIGS["small"]
    torch.manual_seed(0)
    model = mod.build(cfg)
    inputs, targets = mod.make_batch(cfg, 2, "cpu", torch.Generator().manual_seed(1))
    step = recipes.prepare(model, recipe, "train", inputs, "cpu", loss_fn=mod.loss_fn, targets=targets,
                           optimizer=lambda p: models.make_optimizer(mod, p))
    return [float(step()) for _ in range(steps)], step


def test_the_rung_trains_gpt2_as_the_plain_head_does():
    chunked = dataclasses.replace(recipes.RECIPES["fp32"], name="fp32_chunked", chunked_ce=True)
    plain, _ = _gpt2_losses("fp32")
    mine, step = _gpt2_losses(chunked)
    assert mine == pytest.approx(plain, rel=1e-5)
    assert any("chunked cross-entropy" in n for n in step.notes)
    step.model.eval()                                    # eval: the plain head, whole logits
    assert step.model(*step.inputs).shape[-1] == models.get("gpt2").CONFIGS["small"]["vocab"]


def test_the_rung_skips_a_model_without_lm_head_or_with_its_own_loss():
    chunked = dataclasses.replace(recipes.RECIPES["fp32"], name="fp32_chunked", chunked_ce=True)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 8))
    with pytest.raises(recipes.NotApplicable, match="no nn.Linear lm_head"):
        recipes.prepare(mlp, chunked, "train", torch.randn(4, 8), "cpu", targets=torch.zeros(4, dtype=torch.long))
    mod = models.get("gpt2")
    cfg = mod.CONFIGS["small"]
    inputs, targets = mod.make_batch(cfg, 2, "cpu", torch.Generator().manual_seed(1))
    smoothed = lambda out, y: F.cross_entropy(out.flatten(0, 1), y.flatten(), label_smoothing=0.1)  # noqa: E731
    with pytest.raises(recipes.NotApplicable, match="replaces tcperf's token_loss"):
        recipes.prepare(mod.build(cfg), chunked, "train", inputs, "cpu", loss_fn=smoothed, targets=targets)


def test_the_rung_compiles():
    """torch.compile traces the chunked autograd.Function (on a GPU the rung also captures it in a CUDA graph)."""
    compiled = dataclasses.replace(recipes.RECIPES["fp32"], name="fp32_chunked_compiled", chunked_ce=True,
                                   compile=True)
    plain, _ = _gpt2_losses("fp32", steps=2)
    mine, _ = _gpt2_losses(compiled, steps=2)
    assert mine == pytest.approx(plain, rel=1e-4)


@pytest.mark.gpu
def test_on_a_gpu_the_compiled_chunks_and_the_fp32_sum_in_the_epilogue_equal_the_plain_head():
    """bf16 autocast on CUDA, each chunk compiled, grad_w summed by addmm's out_dtype: the loss and the gradients
    within bf16 rounding of F.cross_entropy on the whole logits."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    gen = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(4096, 256, device="cuda", generator=gen, requires_grad=True)
    w = (torch.randn(5003, 256, device="cuda", generator=gen) * 0.05).requires_grad_()
    t = torch.randint(0, 5003, (4096,), device="cuda", generator=gen)
    t[::97] = cross_entropy.IGNORE
    total = torch.randn(5003, 256, device="cuda")
    a = torch.randn(5003, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
    summed = cross_entropy._add_product(total, a, b)
    assert summed.dtype == torch.float32
    torch.testing.assert_close(summed, total + a.float() @ b.float(), rtol=2e-3, atol=2e-2)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        mine = cross_entropy.linear_cross_entropy(h, w, None, t, chunks=4, fused=True)
        ref = F.cross_entropy(F.linear(h, w), t)
    assert mine.item() == pytest.approx(ref.item(), rel=2e-3)
    got, want = torch.autograd.grad(mine, [h, w]), torch.autograd.grad(ref, [h, w])
    for g, r in zip(got, want):
        assert (g - r).norm() / r.norm() < 2e-2
