"""The suites: DeepBench's tables load with the issue's row counts and map to valid cases, the modern suites hold
what they claim, and every case of every suite is a valid shape of a registered op at every precision."""
import csv
import filecmp
import os
from importlib import resources

import pytest

from tcperf import ops, suites
from tcperf.precision import get

ROW_COUNTS = {"deepbench-gemm-train": 160, "deepbench-gemm-infer": 88, "deepbench-conv-train": 94,
              "deepbench-conv-infer": 123, "deepbench-rnn-train": 53, "deepbench-rnn-infer": 72,
              "deepbench-sparse": 32}
CASES_PER_ROW = {"deepbench-gemm-train": 1, "deepbench-gemm-infer": 1, "deepbench-conv-train": 6,
                 "deepbench-conv-infer": 2, "deepbench-rnn-train": 2, "deepbench-rnn-infer": 1, "deepbench-sparse": 2}
SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "reference", "deepbench")


@pytest.mark.parametrize("name,rows", ROW_COUNTS.items())
def test_deepbench_row_counts(name, rows):
    assert suites.count(name) == rows
    assert len(suites.load(name, "cuda")) == rows * CASES_PER_ROW[name]
    assert suites.get(name).source == "DeepBench"


def test_the_commented_out_conv_row_is_dropped():
    kept = suites.rows(suites.get("deepbench-conv-infer"))
    with resources.files("tcperf.suites").joinpath("deepbench/conv_infer.csv").open() as f:
        every = list(csv.DictReader(f))
    assert len(every) == 124 and len(kept) == 123
    [dropped] = [r for r in every if r not in kept]
    assert dropped["application"] == "KWS" and "commented out" in dropped["note"]


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="no shared DeepBench reference beside this checkout")
@pytest.mark.parametrize("name", ["gemm_train", "gemm_infer", "conv_train", "conv_infer", "rnn_train", "rnn_infer",
                                  "sparse"])
def test_deepbench_files_are_copied_unchanged(name):
    ours = resources.files("tcperf.suites").joinpath(f"deepbench/{name}.csv")
    assert filecmp.cmp(str(ours), os.path.join(SHARED, f"{name}.csv"), shallow=False)


def test_conv_geometry_matches_deepbench_output_sizes():
    """DeepBench lists each convolution's output size: tcperf's P and Q must agree on every row."""
    from tcperf.ops.conv import geometry
    for name in ("deepbench-conv-train", "deepbench-conv-infer"):
        for row in suites.rows(suites.get(name)):
            g = geometry(suites.deepbench_conv(row)[0])
            assert (g["P"], g["Q"]) == (int(row["out_P"]), int(row["out_Q"])), row


def test_deepbench_mappings():
    train = suites.load("deepbench-conv-train", "cuda")
    assert {(c.shape["layout"], c.shape["pass"]) for c in train[:6]} == {
        (lay, p) for lay in ("NCHW", "NHWC") for p in ("fwd", "bwd_data", "bwd_weight")}
    rnn = suites.load("deepbench-rnn-train", "cuda")
    assert [c.shape["pass"] for c in rnn[:2]] == ["fwd", "bwd"] and rnn[0].shape["cell"] == "vanilla"
    sparse = suites.load("deepbench-sparse", "cuda")
    assert [c.shape["format"] for c in sparse[:2]] == ["2:4", "dense"]
    assert sparse[0].tags["density"] == "0.05"
    gemm = suites.load("deepbench-gemm-train", "cuda")
    assert gemm[0].shape == {"m": 1760, "n": 16, "k": 1760, "a_t": "N", "b_t": "N"}
    assert gemm[0].tags["application"] == "DeepSpeech"
    assert {c.shape["a_t"] + c.shape["b_t"] for c in gemm} == {"NN", "NT", "TN"}


def test_llm_suite_holds_gpt2_vocabularies_llama_projections_and_decode():
    cases = suites.load("llm", "cuda")
    apps = [c.tags["application"] for c in cases]
    shapes = [c.shape for c in cases]
    assert {50257, 50304} <= {s["n"] for s in shapes} | {s["m"] for s in shapes}
    assert any("Llama-3 8B" in a for a in apps) and any("Llama-3 70B" in a for a in apps)
    decode = {s["m"] for s, a in zip(shapes, apps) if "decode" in a}
    assert decode == {1, 2, 4, 8, 16, 32, 64, 128, 256}
    assert {(s["n"], s["k"]) for s, a in zip(shapes, apps) if "8B" in a} >= {(6144, 4096), (4096, 4096),
                                                                          (28672, 4096), (4096, 14336)}


def test_attention_suite_spans_sequences_head_dims_and_masks():
    shapes = [c.shape for c in suites.load("attention", "cuda")]
    assert {s["seq"] for s in shapes} == {512, 1024, 2048, 4096, 8192, 16384}
    assert {s["head_dim"] for s in shapes} == {64, 128}
    assert {s["causal"] for s in shapes} == {True, False} and {s["pass"] for s in shapes} == {"fwd", "bwd"}


def test_vit_and_resnet50_suites():
    vit = suites.load("vit", "cuda")
    assert {c.op for c in vit} == {"conv", "gemm", "attention"}
    assert any(c.op == "attention" and c.shape["seq"] == 197 for c in vit)
    resnet = suites.load("resnet50", "cuda")
    layers = {tuple(c.shape[k] for k in ("C", "K", "H", "R", "stride")) for c in resnet if c.op == "conv"}
    assert len(layers) == 23                                  # every distinct convolution of ResNet-50
    assert (3, 64, 224, 7, 2) in layers and (512, 512, 7, 3, 1) in layers
    assert {c.shape["layout"] for c in resnet if c.op == "conv"} == {"NCHW", "NHWC"}


@pytest.mark.parametrize("name", suites.names())
def test_every_case_is_a_valid_shape_of_a_registered_op(name):
    cases = suites.load(name, "cuda") + suites.load(name, "cpu")
    assert cases and suites.count(name) > 0
    for case in cases:
        op = ops.get(case.op)
        assert case.tags.get("application"), case
        assert op.flops(case.shape) >= 0 and op.label(case.shape)
        for p in op.precisions:
            assert isinstance(op.verdict(case.shape, get(p), 132), dict)
    for case in suites.with_precisions(cases, ["fp32", "tf32", "bf16", "fp16"]):
        assert case.precision in ops.get(case.op).precisions


def test_quick_suite_keeps_the_keys_the_run_command_relies_on():
    gpu = suites.load("quick", "cuda")
    conv = [c for c in gpu if c.op == "conv"]
    attention = [c for c in gpu if c.op == "attention"]
    assert {c.shape["layout"] for c in conv} == {"NCHW", "NHWC"}
    assert attention[0].shape == {"batch": 8, "heads": 16, "seq": 2048, "head_dim": 128, "causal": True,
                                     "pass": "fwd"}
    assert ops.get("conv").flops(conv[0].shape) == 2 * 64 * 64 * 56 * 56 * 64 * 9
