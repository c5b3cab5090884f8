"""The operations: FLOP formulas on hand-checked cases (and against torch.utils.flop_counter), every op on the CPU
at a small shape passing its float64 reference (and a wrong variant failing it), shape errors, hard limits, the
padded shapes, and on a GPU every op at a small shape (the cuDNN / flash / cuSPARSELt paths)."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from tcperf import ops
from tcperf.errors import UserError
from tcperf.ops.base import Prepared, check
from tcperf.precision import apply, get

# Small shapes every registered op must run on the CPU; a new op adds its own here (the registry test insists).
SMALL = {
    "gemm": [{"m": 64, "n": 48, "k": 40, "a_t": "N", "b_t": "T"}],
    "copy": [{"n": 4096}],
    "conv": [{"N": 2, "C": 8, "H": 10, "W": 10, "K": 16, "R": 3, "S": 3, "pad": 1, "stride": 1, "layout": "NCHW",
              "pass": "fwd"},
             {"N": 2, "C": 8, "H": 10, "W": 9, "K": 16, "R": 3, "S": 3, "pad": 1, "stride": 2, "layout": "NHWC",
              "pass": "bwd_data"},
             {"N": 2, "C": 3, "H": 11, "W": 9, "K": 16, "R": 5, "S": 3, "pad_h": 2, "pad_w": 0, "stride": 2,
              "layout": "NHWC", "pass": "bwd_weight"}],
    "rnn": [{"cell": "lstm", "hidden": 32, "batch": 4, "timesteps": 12, "pass": "fwd"},
            {"cell": "gru", "hidden": 32, "batch": 4, "timesteps": 12, "input": 16, "pass": "bwd"},
            {"cell": "vanilla", "hidden": 32, "batch": 4, "timesteps": 12, "pass": "bwd"}],
    "attention": [{"batch": 2, "heads": 2, "seq": 40, "head_dim": 16, "causal": True, "pass": "fwd"},
                  {"batch": 1, "heads": 3, "seq": 33, "head_dim": 8, "causal": False, "pass": "bwd"}],
    "sparse": [{"m": 64, "n": 8, "k": 64, "format": "dense"}],
}
CPU = torch.device("cpu")


def cpu_cases():
    for name in ops.names():
        op = ops.get(name)
        for shape in SMALL.get(name, []):
            for p in op.precisions:
                if get(p).cpu and p not in ("fp8",):
                    yield pytest.param(name, shape, p, id=f"{name}-{op.label(shape)}-{p}")


def test_every_registered_op_has_a_small_shape():
    assert set(ops.names()) <= set(SMALL), "add a small CPU shape for the new op to SMALL"
    assert {"conv", "rnn", "attention", "sparse"} <= set(ops.names())


@pytest.mark.parametrize("name,shape,prec", list(cpu_cases()))
def test_op_matches_its_float64_reference_on_cpu(name, shape, prec):
    op, p = ops.get(name), get(prec)
    assert op.unsupported(shape, p, CPU) is None
    with apply(p, "cpu"):
        prep = op.prepare(shape, p, CPU, seed=3)
        err = check(prep)
        assert err <= p.tolerance, f"{name} {prec}: relative error {err:.3g} > {p.tolerance}"
        wrong = Prepared(run=lambda: _perturb(prep.run()), reference=prep.reference, out=prep.out,
                         compare=prep.compare)
        assert check(wrong) > p.tolerance       # the gate catches a result 5 % off
    assert op.flops(shape) >= 0 and op.bytes(shape, p) > 0


def _perturb(out):
    if isinstance(out, (tuple, list)):
        return type(out)(_perturb(o) for o in out)
    return out * 1.05 if out.is_floating_point() else out + 3


# --- FLOP formulas -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,flops", [
    # one output pixel, a 3x3 filter over one channel: 9 multiply-adds
    ({"N": 1, "C": 1, "H": 3, "W": 3, "K": 1, "R": 3, "S": 3}, 18),
    # ResNet-50 conv2_x 3x3, 64->64, 56x56, N=64, pad 1: 2*64*64*56*56*64*9
    ({"N": 64, "C": 64, "H": 56, "W": 56, "K": 64, "R": 3, "S": 3, "pad": 1}, 14_797_504_512),
    # DeepBench's first conv (161x700, 5x20 filter, stride 2): P=79, Q=341 as DeepBench's out_P/out_Q say
    ({"N": 4, "C": 1, "H": 161, "W": 700, "K": 32, "R": 5, "S": 20, "stride": 2}, 2 * 4 * 32 * 79 * 341 * 100),
])
def test_conv_flops_hand_checked(shape, flops):
    for p in ("fwd", "bwd_data", "bwd_weight"):
        assert ops.get("conv").flops({**shape, "pass": p}) == flops


@pytest.mark.parametrize("conv_pass", ["fwd", "bwd_data", "bwd_weight"])
def test_conv_flops_match_torch_flop_counter(conv_pass):
    from tcperf.ops import conv
    shape = {"N": 2, "C": 3, "H": 11, "W": 9, "K": 5, "R": 3, "S": 2, "pad_h": 1, "pad_w": 0, "stride_h": 2,
             "stride_w": 1, "pass": conv_pass}
    g = conv.geometry(shape)
    x, w, dy = torch.randn(2, 3, 11, 9), torch.randn(5, 3, 3, 2), torch.randn(2, 5, g["P"], g["Q"])
    with FlopCounterMode(display=False) as counter:
        conv._CALLS[conv_pass](x, w, dy, stride=(2, 1), padding=(1, 0))
    assert counter.get_total_flops() == conv.OP.flops(shape)


@pytest.mark.parametrize("shape,flops", [
    # vanilla, hidden 2, input 3, one step, batch 1: W_ih (2x3) + W_hh (2x2) = 10 multiply-adds
    ({"cell": "vanilla", "hidden": 2, "input": 3, "batch": 1, "timesteps": 1}, 20),
    # anchors.md's LSTM: hidden 1024, batch 64, 100 steps: 2 * 4 gates * 1024 * 2048 * 64 * 100
    ({"cell": "lstm", "hidden": 1024, "batch": 64, "timesteps": 100}, 107_374_182_400),
    ({"cell": "gru", "hidden": 10, "batch": 2, "timesteps": 5, "input": 6}, 2 * 3 * 10 * 16 * 2 * 5),
])
def test_rnn_flops_hand_checked(shape, flops):
    rnn = ops.get("rnn")
    assert rnn.flops({**shape, "pass": "fwd"}) == flops
    assert rnn.flops({**shape, "pass": "bwd"}) == 2 * flops


def test_attention_flops_hand_checked():
    att = ops.get("attention")
    # seq 2, head_dim 1: QK^T is 2x2 outputs of 1 multiply-add, PV 2x1 outputs of 2: 8 multiply-adds
    tiny = {"batch": 1, "heads": 1, "seq": 2, "head_dim": 1, "causal": False}
    assert att.flops(tiny) == 16
    assert att.flops({**tiny, "causal": True}) == 8
    assert att.flops({**tiny, "pass": "bwd"}) == 32
    big = {"batch": 8, "heads": 16, "seq": 2048, "head_dim": 128, "causal": True}
    assert att.flops(big) == 4 * 8 * 16 * 2048**2 * 128 / 2


@pytest.mark.parametrize("attn_pass", ["fwd", "bwd"])
def test_attention_flops_match_torch_flop_counter(attn_pass):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, v = (torch.randn(2, 3, 64, 16, requires_grad=True) for _ in range(3))
    with sdpa_kernel(SDPBackend.MATH):          # decomposes into matmuls flop_counter sees on the CPU
        o = F.scaled_dot_product_attention(q, k, v)
        with FlopCounterMode(display=False) as counter:
            if attn_pass == "fwd":
                F.scaled_dot_product_attention(q, k, v)
            else:
                o.sum().backward()
    assert counter.get_total_flops() == ops.get("attention").flops(
        {"batch": 2, "heads": 3, "seq": 64, "head_dim": 16, "causal": False, "pass": attn_pass})


def test_sparse_counts_dense_equivalent_flops_and_fewer_bytes():
    sp = ops.get("sparse")
    shape = {"m": 7680, "n": 1500, "k": 2560}
    assert sp.flops({**shape, "format": "2:4"}) == sp.flops({**shape, "format": "dense"}) == 2 * 7680 * 1500 * 2560
    fp16 = get("fp16")
    saved = sp.bytes({**shape, "format": "dense"}, fp16) - sp.bytes({**shape, "format": "2:4"}, fp16)
    assert saved == 7680 * 2560 * 2 / 2 - 7680 * 2560 / 8     # half of A, less 2 bits of metadata per kept value


def test_conv_bytes_are_the_three_tensors():
    shape = {"N": 2, "C": 4, "H": 8, "W": 8, "K": 6, "R": 3, "S": 3, "pad": 1}
    assert ops.get("conv").bytes(shape, get("fp16")) == 2 * (2 * 4 * 64 + 6 * 4 * 9 + 2 * 6 * 64)


# --- limits, bad shapes, padding -----------------------------------------------------------------------------------
def test_sparse_2_4_needs_a_gpu_and_a_tiling_shape():
    sp, fp16 = ops.get("sparse"), get("fp16")
    assert "CUDA GPU" in sp.unsupported({"m": 64, "n": 8, "k": 64, "format": "2:4"}, fp16, CPU)
    assert "no fp32 variant" in sp.unsupported({"m": 64, "n": 8, "k": 64}, get("fp32"), CPU)
    verdict = sp.verdict({"m": 7860, "n": 2, "k": 2560, "format": "2:4"}, fp16, 132)   # DeepBench's M=7860
    assert verdict["hard_limit"] and "7860->" in verdict["hard_limit"]
    assert sp.verdict({"m": 7680, "n": 1500, "k": 2560, "format": "2:4"}, fp16, 132)["hard_limit"] is None


def test_prune_2_4_keeps_two_largest_of_every_four():
    from tcperf.ops.sparse import prune_2_4
    a = torch.tensor([[1.0, -4.0, 3.0, 0.5, 9.0, 8.0, -7.0, 6.0]])
    assert prune_2_4(a).tolist() == [[0.0, -4.0, 3.0, 0.0, 9.0, 8.0, 0.0, 0.0]]


@pytest.mark.parametrize("name,shape,words", [
    ("conv", {"N": 1, "C": 1, "H": 4, "W": 4, "K": 1, "R": 3, "S": 3, "layout": "NCWH"}, "unknown layout"),
    ("conv", {"N": 1, "C": 1, "H": 4, "W": 4, "K": 1, "R": 3, "S": 3, "pass": "bwd"}, "unknown conv pass"),
    ("conv", {"N": 1, "C": 1, "H": 2, "W": 2, "K": 1, "R": 3, "S": 3}, "not a valid convolution"),
    ("conv", {"N": 1, "C": 1, "H": 4, "W": 4}, "lacks K, R, S"),
    ("rnn", {"cell": "transformer", "hidden": 8, "batch": 1, "timesteps": 1}, "unknown RNN cell"),
    ("rnn", {"cell": "lstm", "hidden": 8, "batch": 1, "timesteps": 1, "pass": "both"}, "unknown RNN pass"),
    ("attention", {"batch": 1, "heads": 1, "seq": 4, "head_dim": 8, "pass": "fwd2"}, "unknown attention pass"),
    ("sparse", {"m": 64, "n": 8, "k": 64, "format": "1:4"}, "unknown sparse format"),
])
def test_bad_shapes_are_user_errors(name, shape, words):
    with pytest.raises(UserError, match=words):
        ops.get(name).flops(shape)


@pytest.mark.parametrize("name,shape,prec,expect", [
    ("conv", {"N": 8, "C": 3, "H": 32, "W": 32, "K": 30, "R": 3, "S": 3}, "fp16", {"C": 8, "K": 32}),
    ("conv", {"N": 8, "C": 6, "H": 32, "W": 32, "K": 64, "R": 3, "S": 3}, "tf32", {"C": 8, "K": 64}),
    ("conv", {"N": 8, "C": 3, "H": 32, "W": 32, "K": 30, "R": 3, "S": 3}, "fp32", None),
    ("conv", {"N": 8, "C": 64, "H": 32, "W": 32, "K": 64, "R": 3, "S": 3}, "bf16", None),
    ("rnn", {"cell": "lstm", "hidden": 1760, "batch": 3, "timesteps": 5}, "fp16",
     {"hidden": 1760, "batch": 8, "input": 1760}),
    ("attention", {"batch": 1, "heads": 1, "seq": 197, "head_dim": 100}, "bf16", {"head_dim": 104}),
    ("attention", {"batch": 1, "heads": 1, "seq": 197, "head_dim": 64}, "bf16", None),
])
def test_padded_shapes(name, shape, prec, expect):
    padded = ops.get(name).padded(shape, get(prec))
    if expect is None:
        assert padded is None
    else:
        assert {k: padded[k] for k in expect} == expect and {k: v for k, v in padded.items() if k not in expect} == \
            {k: v for k, v in shape.items() if k not in expect}


def test_attention_records_the_backend_it_ran():
    prep = ops.get("attention").prepare(SMALL["attention"][0], get("fp32"), CPU)
    assert prep.info["backend"] in ("flash", "efficient", "cudnn", "math")


def test_attention_reference_chunks_agree_with_one_pass(monkeypatch):
    from tcperf.ops import attention
    q, k, v = (torch.randn(2, 3, 16, 8, dtype=torch.float64) for _ in range(3))
    whole = attention.reference(q, k, v, True)
    monkeypatch.setattr(attention, "REFERENCE_BYTES", 16 * 16 * 8)     # one (batch, head) pair per chunk
    assert torch.allclose(attention.reference(q, k, v, True), whole)
    assert torch.allclose(whole, F.scaled_dot_product_attention(q, k, v, is_causal=True))


# --- on a GPU ------------------------------------------------------------------------------------------------------
GPU_CASES = [
    ("conv", {"N": 8, "C": 64, "H": 28, "W": 28, "K": 64, "R": 3, "S": 3, "pad": 1, "layout": "NHWC", "pass": p}, prec)
    for p in ("fwd", "bwd_data", "bwd_weight") for prec in ("fp32", "tf32", "fp16", "bf16")
] + [
    ("rnn", {"cell": c, "hidden": 256, "batch": 32, "timesteps": 20, "pass": p}, prec)
    for c in ("vanilla", "lstm", "gru") for p in ("fwd", "bwd") for prec in ("fp32", "fp16", "bf16")
] + [
    ("attention", {"batch": 2, "heads": 4, "seq": 512, "head_dim": d, "causal": causal, "pass": p}, prec)
    for d in (64, 128) for causal in (True, False) for p in ("fwd", "bwd") for prec in ("fp32", "fp16", "bf16")
] + [
    ("sparse", {"m": 1024, "n": n, "k": 1024, "format": f}, prec)
    for n in (8, 1, 1500) for f in ("2:4", "dense") for prec in ("fp16", "bf16")
]


@pytest.mark.gpu
@pytest.mark.parametrize("name,shape,prec", GPU_CASES)
def test_op_matches_its_reference_on_gpu(name, shape, prec, cuda):
    op, p = ops.get(name), get(prec)
    assert op.unsupported(shape, p, cuda) is None
    with apply(p, "cuda"):
        prep = op.prepare(shape, p, cuda, seed=1)
        err = check(prep)
    assert err <= p.tolerance, f"{name} {op.label(shape)} {prec}: relative error {err:.3g} ({prep.info})"
    if name == "attention":
        assert prep.info["backend"] in ("flash", "efficient", "cudnn", "math")
        if prec != "fp32":
            assert prep.info["backend"] != "math", "a fused kernel should run fp16/bf16 attention"
