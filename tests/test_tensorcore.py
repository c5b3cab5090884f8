"""The Tensor Core verdict on a table of shapes (aligned, misaligned, int8 M <= 16, fp8 K % 16 != 0, NCHW, waves),
the words `tcperf lint` prints, and on a GPU the padding fix measured for the 8191^3 bf16 GEMM."""
import pytest
import torch

from tcperf import tensorcore as tc
from tcperf.ops.conv import geometry

GEMM = [  # m, n, k, precision -> aligned, hard limit (a substring) or None, misaligned dims
    (8192, 8192, 8192, "bf16", True, None, []),
    (8191, 8191, 8191, "bf16", False, None, ["m", "n", "k"]),
    (8192, 8192, 8191, "fp16", False, None, ["k"]),
    (4096, 4096, 4096, "tf32", True, None, []),
    (4095, 4097, 4093, "tf32", False, None, ["m", "n", "k"]),
    (4096, 4096, 4092, "tf32", True, None, []),            # tf32 needs multiples of 4 only
    (8191, 8191, 8191, "fp32", True, None, []),            # no Tensor Cores, so no alignment rule
    (8191, 8192, 8192, "fp64", False, None, ["m"]),         # fp64: multiples of 2
    (16, 4096, 4096, "int8", True, "M > 16", []),
    (17, 4096, 4096, "int8", False, None, ["m"]),
    (32, 4096, 4100, "int8", False, "multiples of 8", ["k"]),
    (4096, 4096, 4104, "fp8", False, "multiples of 16", ["k"]),
    (4096, 4104, 4096, "fp8", False, "multiples of 16", ["n"]),
    (4096, 4096, 4096, "fp8", True, None, []),
]


@pytest.mark.parametrize("m,n,k,prec,aligned,limit,bad", GEMM)
def test_gemm_verdict_table(m, n, k, prec, aligned, limit, bad):
    v = tc.gemm_verdict(m, n, k, prec, sm_count=132)
    assert v["aligned"] is aligned
    assert [s.split("=")[0] for s in v["misaligned"]] == bad
    assert (v["hard_limit"] is None) if limit is None else (limit in v["hard_limit"])
    assert v["tensor_cores"] is (prec != "fp32")


def test_gemm_fix_names_the_padded_sizes():
    assert tc.gemm_verdict(8191, 8191, 8191, "bf16")["fix"] == "pad m 8191->8192, n 8191->8192, k 8191->8192"
    assert tc.gemm_verdict(8192, 8192, 8192, "bf16")["fix"] is None


def conv(**kw):
    shape = {"N": 64, "C": 64, "H": 56, "W": 56, "K": 64, "R": 3, "S": 3, "pad": 1, "layout": "NHWC", **kw}
    return geometry(shape)


@pytest.mark.parametrize("shape,prec,aligned,words,fix", [
    (conv(), "fp16", True, [], None),
    (conv(layout="NCHW"), "fp16", True, ["NCHW"], "use NHWC (channels_last)"),
    (conv(C=3, layout="NCHW"), "fp16", False, ["C=3", "image input", "NCHW"], "pad C 3->8; use NHWC (channels_last)"),
    (conv(C=6, K=30), "tf32", False, ["C=6", "K=30"], "pad C 6->8, K 30->32"),
    (conv(C=6), "bf16", False, ["C=6"], "pad C 6->8"),
    (conv(C=3, layout="NCHW"), "fp32", True, [], None),      # no Tensor Cores: neither channels nor layout matter
])
def test_conv_verdict_table(shape, prec, aligned, words, fix):
    v = tc.conv_verdict(shape, prec)
    assert v["aligned"] is aligned and v["fix"] == fix
    text = " ".join(v["issues"])
    assert all(w in text for w in words), text
    assert v["tensor_cores"] is (prec != "fp32")


def test_conv_implicit_gemm_dims_per_pass():
    g = conv(stride=2)                                      # 56 -> 28
    assert tc.conv_gemm_dims(g) == {"m": 64 * 28 * 28, "n": 64, "k": 64 * 9}
    assert tc.conv_gemm_dims({**g, "pass": "bwd_data"}) == {"m": 64 * 56 * 56, "n": 64, "k": 64 * 9}
    assert tc.conv_gemm_dims({**g, "pass": "bwd_weight"}) == {"m": 64, "n": 64 * 9, "k": 64 * 28 * 28}


@pytest.mark.parametrize("m,n,sm,waves,flagged", [
    (128 * 12, 128 * 11, 132, 1, False),        # 132 tiles: one full wave
    (128 * 12, 128 * 12, 132, 2, True),         # 144 tiles: the second wave 9 % busy
    (128 * 33, 128 * 32, 132, 8, False),        # many waves: the tail matters little
])
def test_wave_quantization(m, n, sm, waves, flagged):
    v = tc.gemm_verdict(m, n, 4096, "bf16", sm_count=sm)
    assert v["waves"] == waves
    assert any("last wave" in i for i in v["issues"]) is flagged


def test_attention_and_rnn_verdicts():
    v = tc.attention_verdict(64, 12, 197, 64, "bf16", 132)      # ViT-B/16: 197 tokens
    assert v["aligned"] and any("seq=197" in i for i in v["issues"])
    v = tc.attention_verdict(1, 1, 1024, 100, "fp16")
    assert not v["aligned"] and v["fix"] == "pad head_dim 100->104"
    assert any("3xTF32" in i for i in tc.attention_verdict(1, 1, 1024, 64, "fp32")["issues"])
    v = tc.rnn_verdict("lstm", 1760, 3, 1760, "fp16")
    assert [s.split("=")[0] for s in v["misaligned"]] == ["batch"] and v["fix"] == "pad batch 3->8"
    assert tc.rnn_verdict("lstm", 1760, 3, 1760, "fp32")["aligned"]


def test_sparse_verdict():
    v = tc.sparse_verdict(7860, 1, 2560, "fp16", "2:4", 16, 16)
    assert "7860->7872" in v["hard_limit"] and any("padded to 8" in i for i in v["issues"])
    assert tc.sparse_verdict(7680, 1500, 2560, "fp16", "2:4", 32, 64)["hard_limit"] is None
    assert tc.sparse_verdict(7860, 8, 2560, "fp16", "dense", 16, 16)["misaligned"] == ["m=7860 (not a multiple of 8)"]


def test_describe_says_the_limit_and_the_fix():
    lines = tc.describe(tc.gemm_verdict(8191, 8191, 8191, "bf16", 132))
    assert lines[0] == "Tensor Cores: eligible, but misaligned"
    assert lines[-1] == "fix: pad m 8191->8192, n 8191->8192, k 8191->8192"
    lines = tc.describe(tc.gemm_verdict(16, 4096, 4096, "int8"))
    assert any(line.startswith("hard limit: torch._int_mm needs M > 16") for line in lines)
    assert tc.describe(tc.gemm_verdict(100, 100, 100, "fp32"))[0].startswith("Tensor Cores: no")


@pytest.mark.parametrize("gain,words", [(5.1, "5.1x faster"), (1.0, "no gain"),
                                        (0.133, "7.5x slower: padding costs more than it saves")])
def test_padding_note(gain, words):
    note = tc.padding_note({"m": 8191, "n": 8191, "k": 8191}, {"shape": {"m": 8192, "n": 8192, "k": 8191},
                                                                "gain": gain})
    assert note == f"pad m 8191->8192, n 8191->8192: {words}"


@pytest.mark.gpu
def test_misaligned_bf16_gemm_is_flagged_with_a_measured_padding_gain(cuda):
    """The 8191^3 bf16 GEMM: the verdict says misaligned, and timing the padded 8192^3 shape beside it is faster."""
    from tcperf.ops.case import measure_case
    from tcperf.records import Case, Job, TimingConfig
    case = Case("gemm", {"m": 8191, "n": 8191, "k": 8191, "a_t": "N", "b_t": "N"}, "bf16")
    result = measure_case(case, cuda, Job(TimingConfig(rep_ms=50), pad=True, profile=True))
    assert result.status == "ok", result.message
    m = result.metrics
    assert m["verdict"]["misaligned"] and m["verdict"]["fix"].startswith("pad m 8191->8192")
    assert m["padded"]["shape"]["m"] == 8192 and m["padded"]["gain"] > 1, m["padded"]
    assert m["tensor_cores_used"] is True


def test_int8_with_row_major_b_is_flagged_and_column_major_is_not():
    from tcperf.tensorcore import INT8_ROW_MAJOR_B, gemm_verdict
    assert INT8_ROW_MAJOR_B in gemm_verdict(4096, 4096, 4096, "int8", 132, b_t="N")["issues"]
    assert INT8_ROW_MAJOR_B not in gemm_verdict(4096, 4096, 4096, "int8", 132, b_t="T")["issues"]
    assert INT8_ROW_MAJOR_B not in gemm_verdict(4096, 4096, 4096, "bf16", 132, b_t="N")["issues"]


@pytest.mark.parametrize("b_t", ["N", "T"])
def test_int8_gemm_honours_the_layout_and_is_exact(b_t):
    from tcperf.ops.base import check
    from tcperf.ops.gemm import OP
    from tcperf.precision import get
    prep = OP.prepare({"m": 32, "n": 24, "k": 40, "a_t": "N", "b_t": b_t}, get("int8"), torch.device("cpu"))
    assert check(prep) == 0.0


@pytest.mark.gpu
def test_int8_column_major_b_is_faster_on_gpu(cuda):
    """On an H200, torch._int_mm ran 128 TOPS with B row-major and 923 with B column-major (2026-11-22)."""
    from tcperf.ops.gemm import OP
    from tcperf.precision import get
    from tcperf.timing import time_fn
    ms = {}
    for b_t in ("N", "T"):
        prep = OP.prepare({"m": 4096, "n": 4096, "k": 4096, "a_t": "N", "b_t": b_t}, get("int8"), cuda)
        ms[b_t] = time_fn(prep.run, cuda).median_ms
    assert ms["T"] < ms["N"]
