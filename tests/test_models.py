"""The built-in models: each trains and infers at its small configuration under fp32 and bf16 on the CPU, the
DCGAN step gives each net only its own gradient, the LSTM's FLOP formula matches a counted unrolled LSTM, and the
fp8/int8 Linear layers of the ladder stay close to nn.Linear."""
import pytest
import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from tcperf import models, quant, recipes
from tcperf.errors import UserError


def _small(name, batch=2, seed=0):
    mod = models.get(name)
    cfg = mod.CONFIGS["small"]
    torch.manual_seed(seed)
    model = mod.build(cfg)
    inputs, targets = mod.make_batch(cfg, batch, "cpu", torch.Generator().manual_seed(seed + 1))
    return mod, cfg, model, inputs, targets


@pytest.mark.parametrize("name", models.names())
def test_module_shape(name):
    mod = models.get(name)
    assert mod.KIND in ("cnn", "transformer", "rnn")     # how the ladder describes its rungs
    assert mod.UNIT in ("img/s", "tokens/s", "samples/s")
    assert set(mod.CONFIGS) >= {"full", "small"}
    for cfg in mod.CONFIGS.values():
        assert cfg["batch"] >= 1 and mod.items_per_batch(cfg, cfg["batch"]) >= cfg["batch"]


@pytest.mark.parametrize("recipe", ["fp32", "amp_bf16"])
@pytest.mark.parametrize("name", models.names())
def test_train_and_infer_small(name, recipe):
    mod, cfg, model, inputs, targets = _small(name)
    train = recipes.prepare(model, recipe, "train", inputs, "cpu", loss_fn=mod.loss_fn, targets=targets,
                            optimizer=lambda p: models.make_optimizer(mod, p))
    before = [p.detach().clone() for p in train.model.parameters()]
    losses = [train().item() for _ in range(3)]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert any(not torch.equal(b, p) for b, p in zip(before, train.model.parameters()))   # the optimizer stepped
    assert all(torch.equal(p, q) for p, q in zip(model.state_dict().values(), _small(name)[2].state_dict().values()))
    out = recipes.prepare(model, recipe, "infer", inputs, "cpu")()
    assert out.shape[0] == 2 and torch.isfinite(out.float()).all()
    assert not out.requires_grad


def test_plain_train_step_and_infer():
    mod, cfg, model, inputs, targets = _small("gpt2")
    opt = models.make_optimizer(mod, model.parameters())
    first = models.train_step(mod, model, inputs, targets, opt).item()
    for _ in range(5):
        last = models.train_step(mod, model, inputs, targets, opt).item()
    assert last < first                                 # it learns the fixed batch
    assert models.infer(model.eval(), inputs).shape == (2, cfg["seq"], cfg["vocab"])


def test_dcgan_each_net_gets_only_its_own_gradient():
    mod, cfg, model, (z, real), _ = _small("dcgan")
    d_real, d_fake, d_gen = model(z, real)
    bce = nn.functional.binary_cross_entropy_with_logits
    bce(d_gen, torch.ones_like(d_gen)).backward()        # G's loss: D's weights get nothing
    assert all(p.grad is None for p in model.discriminator.parameters())
    assert all(p.grad is not None for p in model.generator.parameters())
    model.zero_grad(set_to_none=True)
    (bce(d_real, torch.ones_like(d_real)) + bce(d_fake, torch.zeros_like(d_fake))).backward()   # D's loss
    assert all(p.grad is None for p in model.generator.parameters())
    assert all(p.grad is not None for p in model.discriminator.parameters())
    assert model.eval()(z, real).shape == (2, 3, 64, 64)


def test_lstm_flop_formula_matches_counted_cells():
    mod = models.get("lstm")
    cfg = {"layers": 2, "emb": 8, "hidden": 16, "seq": 5, "vocab": 24, "batch": 3}
    cells = [nn.LSTMCell(8, 16), nn.LSTMCell(16, 16)]
    decoder = nn.Linear(16, 24)
    x = torch.randn(3, 8)
    with FlopCounterMode(display=False) as counter:
        for _ in range(cfg["seq"]):                       # the unrolled network nn.LSTM computes
            h = x
            for cell in cells:
                h, _ = cell(h)
            decoder(h)
    assert mod.flops(cfg, 3, "infer") == counter.get_total_flops()
    assert mod.flops(cfg, 3, "train") == 3 * counter.get_total_flops()


def test_registry_rejects_unknown_model():
    with pytest.raises(UserError, match="choose from: resnet50"):
        models.get("vgg")
    assert models.parse_list("all") == models.names()
    assert models.parse_list("gpt2,lstm") == ["gpt2", "lstm"]


def _linear(k, n, seed=0):
    torch.manual_seed(seed)
    layer = nn.Linear(k, n)
    return layer, torch.randn(64, k)


@torch.no_grad()
def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def test_int8_linear_close_to_linear():
    layer, x = _linear(64, 32)
    assert _rel(quant.Int8Linear(layer)(x), layer(x)) < 0.02
    assert _rel(quant.Int8Linear(layer)(x[:4]), layer(x[:4])) < 0.02      # M <= 16: the fallback path


def test_int8_linear_hands_int_mm_a_column_major_weight():
    """cuBLASLt's int8 kernels take B column-major; a row-major B runs a WMMA kernel 7x slower on Hopper."""
    layer, _ = _linear(64, 32)
    b = quant.Int8Linear(layer).w8.t()                  # the operand forward passes to torch._int_mm
    assert b.shape == (64, 32) and b.stride() == (1, 64)


def test_fp8_linear_close_to_linear():
    layer, x = _linear(64, 32)
    try:
        y = quant.Fp8Linear(layer)(x)
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"torch._scaled_mm does not run on this CPU build: {e}")
    assert y.dtype == torch.bfloat16 and _rel(y, layer(x)) < 0.1


def test_swap_linears_keeps_misaligned_layers_and_says_so():
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 30))      # 30 breaks fp8's N % 16
    notes = recipes.quantize_linears(model, quant.Int8Linear, "fp8")
    assert isinstance(model[0], quant.Int8Linear) and type(model[2]) is nn.Linear
    assert "1 Linear layers converted" in notes[0] and "2 32->30" in notes[0]
    with pytest.raises(recipes.NotApplicable, match="no nn.Linear"):
        recipes.quantize_linears(nn.Sequential(nn.Linear(30, 30)), quant.Int8Linear, "fp8")


def test_int8_layers_stand_in_for_linear_where_model_code_reads_weight():
    """transformers' T5 reads wo.weight.dtype in its feed-forward: the swapped layers answer (shape, bf16), eager
    and under torch.compile (the advisor's int8 + compile recipe)."""
    pytest.importorskip("transformers")
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).parent / "thirdparty" / "hf_t5.py"
    spec = importlib.util.spec_from_file_location("hf_t5_for_int8", path)
    hf_t5 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hf_t5)
    made = hf_t5.factory_infer()
    model = made["model"].eval()
    with torch.no_grad():
        want = model(**made["inputs"]).logits
        recipes.quantize_linears(model, quant.Int8Linear, "int8")
        wo = model.encoder.block[0].layer[1].DenseReluDense.wo
        assert isinstance(wo, quant.Int8Linear) and wo.weight.shape == (32, 64)
        assert wo.weight.dtype == torch.bfloat16 and wo.weight.untyped_storage().nbytes() == 2
        got = model(**made["inputs"]).logits
        compiled = torch.compile(model)(**made["inputs"]).logits     # Dynamo traces the stand-in made when read
    assert _rel(got, want) < 0.1 and _rel(compiled, got) < 0.02
