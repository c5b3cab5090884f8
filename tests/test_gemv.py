"""tcperf.kernels.gemv's Triton weight-only kernels: right in the Triton interpreter on small awkward shapes (M = 1 and 3, N
and K not multiples of the block), right inside the quantized layers (tcperf.quant.check_layers, which also catches
a kernel reading the wrong scales), traceable by torch.compile(fullgraph=True); `tcperf generate --kernel`; the
side-by-side benchmark's bookkeeping. On a GPU: compiled with CUDA graphs, and against tinygemm.

The interpreter is chosen when tcperf.kernels.gemv is imported (TRITON_INTERPRET is read by @triton.jit), so the
interpreter checks run in one child process; this process imports the kernels compiled, for the tracing checks.
"""
import re
import sys
from pathlib import Path

import pytest
import torch

import conftest
from tcperf import quant as core_quant
from tcperf.cli import main
from tcperf.generate import quant

# (M, N, K) and the int4 group: blocks in the interpreter are 16 columns and 32 of K; M = 1 is the GEMV path, 3 and
# 17 the tl.dot path (16 and 32 rows a program); group 32 is a step inside one group, 16 a step over two
SHAPES = [(1, 40, 96, 32), (3, 40, 96, 32), (1, 33, 80, 16), (3, 33, 80, 16), (17, 24, 64, 32)]
CHILD = r"""
import json, sys, torch
from tcperf import quant
from tcperf.kernels import gemv

def rel(got, want):
    return float((got.double() - want.double()).norm() / want.double().norm())

def kernels(m, n, k, group):
    gen = torch.Generator().manual_seed(m * n + k)
    x = torch.randn(m, k, generator=gen).bfloat16()
    w = torch.randn(n, k, generator=gen)
    q8, s8 = quant.int8_quantize(w)
    s8 = s8.bfloat16()
    q4, s4, z4 = quant.int4_quantize(w, group)
    int8 = rel(torch.ops.tcperf.int8_weight_mm(x, q8, s8), x.float() @ (q8.float() * s8.float()[:, None]).T)
    want4 = x.float() @ quant.int4_dequantize(q4, s4, z4, group).T
    int4 = rel(torch.ops.tcperf.int4_weight_mm(x, quant.nibbles(q4), s4, z4, group), want4)
    split = rel(gemv.int4_mm(x, quant.nibbles(q4), s4, z4, group, split=2), want4)   # two shares of K, summed
    return {"int8": int8, "int4": int4, "int4 split": split}

def model():
    torch.manual_seed(0)
    lins = [torch.nn.Linear(k, n, bias=False).bfloat16() for k, n in ((96, 40), (64, 33))]
    return torch.nn.ModuleList([quant.Int8WeightOnlyLinear(lins[0], "triton"),
                                quant.Int4WeightOnlyLinear(lins[0], 32, "triton"),
                                quant.Int8WeightOnlyLinear(lins[1], "triton"),
                                quant.Int4WeightOnlyLinear(lins[1], 16, "triton")])

def wrong_scales():
    # the kernels handed what a buggy kernel would read: the int8 scales reversed, the int4 group doubled (each
    # weight takes the scale and zero of another group), while dequantized() reads the layer's own
    m = model()
    m[0].forward = lambda x, l=m[0]: torch.ops.tcperf.int8_weight_mm(x, l.w8, l.scales.flip(0))
    m[3].forward = lambda x, l=m[3]: torch.ops.tcperf.int4_weight_mm(x, l.q4, l.scales, l.zeros, 2 * l.group)
    return m

shapes = json.loads(sys.argv[1])
print(json.dumps({"kernels": {"|".join(map(str, s)): kernels(*s) for s in shapes},
                  "check": quant.check_layers(model()), "wrong": quant.check_layers(wrong_scales())}))
"""


conftest.INTERPRETED["gemv"] = (CHILD, SHAPES, 120)


@pytest.fixture(scope="module")
def interpreted(interpreted_children):
    return conftest.interpreted(interpreted_children, "gemv")


@pytest.mark.parametrize("kernel", ["int8", "int4", "int4 split"])
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_kernel_matches_dequantized_weights_in_the_interpreter(interpreted, kernel, shape):
    """Only the bf16 rounding of the output is left (2^-9 relative at most a value)."""
    err = interpreted["kernels"]["|".join(map(str, shape))][kernel]
    assert err < 5e-3, f"{kernel} M,N,K,group={shape}: relative error {err:.3g}"


def test_triton_layers_pass_the_kernel_check(interpreted):
    check = interpreted["check"]
    assert check["passed"] and check["layers"] == 4, check


def test_the_kernel_check_catches_a_kernel_reading_wrong_scales(interpreted):
    wrong = interpreted["wrong"]
    assert not wrong["passed"] and wrong["rel_error"] > 10 * core_quant.KERNEL_TOLERANCE, wrong


# --- layers and tracing (compiled mode: no kernel runs on the CPU) ---------------------------------------------
def _lin(k: int = 64, n: int = 48) -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(k, n, bias=False).bfloat16()


def test_triton_int4_layer_keeps_only_the_plain_layout():
    """No tinygemm copy on the device and no host copy: `plain` is the buffers the kernel reads."""
    layer = core_quant.Int4WeightOnlyLinear(_lin(), 32, kernel="triton")
    assert sorted(n for n, _ in layer.named_buffers()) == ["q4", "scales", "zeros"]
    assert layer.plain[0] is layer.q4 and not hasattr(layer, "host_plain")
    assert layer.q4.shape == (48, 32) and layer.q4.dtype == torch.uint8 and layer.scales.shape == (48, 2)
    tiny = core_quant.Int4WeightOnlyLinear(_lin(), 32)
    assert torch.equal(tiny.dequantized(), layer.dequantized())       # one quantization, two layouts


def test_unknown_layer_kernel_is_refused():
    with pytest.raises(ValueError, match="choose from: inductor, triton"):
        core_quant.Int8WeightOnlyLinear(_lin(), kernel="cublas")
    with pytest.raises(ValueError, match="choose from: tinygemm, triton"):
        core_quant.Int4WeightOnlyLinear(_lin(), 32, kernel="inductor")


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("bits", [8, 4])
def test_triton_layers_trace_into_one_graph(bits, dynamic):
    """torch.compile(fullgraph=True) traces through the op into the Triton launch (what Inductor compiles), also
    with a symbolic batch (generate's plain loop compiles a dynamic-batch step from its second batch size)."""
    from torch._dynamo.backends.common import aot_autograd
    from tcperf.kernels import gemv
    if gemv.INTERPRETING:
        pytest.skip("TRITON_INTERPRET is set in this process")
    layer = (core_quant.Int8WeightOnlyLinear(_lin(), kernel="triton") if bits == 8
             else core_quant.Int4WeightOnlyLinear(_lin(), 32, kernel="triton"))
    graphs = []

    def capture(gm, inputs):
        graphs.append(gm)
        raise RuntimeError("traced, not run")      # the kernel cannot run on a CPU

    torch._dynamo.reset()
    with pytest.raises(Exception, match="traced, not run"):
        torch.compile(layer, fullgraph=True, dynamic=dynamic, backend=aot_autograd(fw_compiler=capture))(
            torch.randn(3, 64).bfloat16())
    launches = [n for n in graphs[0].graph.nodes if "triton_kernel_wrapper" in str(n.target)]
    assert len(launches) == 1 and launches[0].kwargs["kwargs"]["BLOCK_M"] == 16, graphs[0].graph


def test_fake_tensors_give_the_output_shape():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from tcperf.kernels import gemv
    if gemv.INTERPRETING:
        pytest.skip("TRITON_INTERPRET is set in this process")
    with FakeTensorMode():
        y = torch.ops.tcperf.int4_weight_mm(torch.empty(5, 64, dtype=torch.bfloat16),
                                            torch.empty(48, 32, dtype=torch.uint8),
                                            torch.empty(48, 2, dtype=torch.bfloat16),
                                            torch.empty(48, 2, dtype=torch.bfloat16), 32)
    assert y.shape == (5, 48) and y.dtype == torch.bfloat16


def _ptx(fn, config, cc: int, **constexprs) -> str:
    """fn compiled to PTX for compute capability cc at one configuration, without a GPU, its integer arguments and
    pointers specialised as a launch specialises them (multiples of 16, 16-byte aligned)."""
    import triton
    from triton.backends.compiler import GPUTarget
    pointers = {"x_ptr": "*bf16", "w_ptr": "*i8", "q_ptr": "*i32", "s_ptr": "*bf16", "z_ptr": "*bf16",
                "y_ptr": "*bf16"}
    constexprs = {k: v for k, v in {**config.kwargs, **constexprs}.items() if k in fn.arg_names}
    signature = {a: "constexpr" if a in constexprs else pointers.get(a, "i32") for a in fn.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if a not in constexprs}
    src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", cc, 32), options={"num_warps": config.num_warps}).asm["ptx"]


def _loop_bodies(ptx: str) -> list[str]:
    """The PTX between each label and a later branch back to it: the loops' bodies."""
    import re
    bodies = []
    for branch in re.finditer(r"bra(?:\.uni)?\s+(\$L__\w+);", ptx):
        start = ptx.find(branch.group(1) + ":")
        if 0 <= start < branch.start():
            bodies.append(ptx[start:branch.start()])
    return bodies


@pytest.mark.parametrize("cc", [90, 80])
def test_kernels_compile_for_hopper_and_ampere(cc):
    """Every configuration compiles to PTX without a GPU. The int8 GEMV (one row) reads the weights in 16-byte
    loads, widens them without the int-to-float conversion and sums its rows after the loop, not a shuffle tree a
    step; the int4 kernel and int8 above one row are
    Tensor Core MMAs, int4's weights dequantised two a packed bf16x2 instruction (lop3, fma.rn.bf16x2), not by
    the int-to-float conversion (cvt.rn.f32.s*/u*: a quarter of the FMA rate)."""
    import re
    converts = re.compile(r"cvt\.rn\.f32\.[su]")
    from tcperf.kernels import gemv
    if gemv.INTERPRETING:
        pytest.skip("TRITON_INTERPRET is set in this process")
    for config in gemv.GEMV_CONFIGS:
        ptx = _ptx(gemv.int8_gemv_kernel, config, cc)
        assert "mma" not in ptx and "ld.global.v4" in ptx, config.kwargs
        assert _loop_bodies(ptx) and not any("shfl" in body for body in _loop_bodies(ptx)), config.kwargs
        assert any("prmt.b32" in body for body in _loop_bodies(ptx)), config.kwargs
        assert not any(converts.search(body) for body in _loop_bodies(ptx)), config.kwargs
    for config in gemv.INT4_CONFIGS:
        ptx = _ptx(gemv.int4_kernel, config, cc, GROUP=128, BLOCK_M=16, SPLIT=4, UPCAST=False)
        loops = _loop_bodies(ptx)
        assert "mma" in ptx and loops, config.kwargs
        assert any("lop3.b32" in body and "fma.rn.bf16x2" in body for body in loops), config.kwargs
        assert not any(converts.search(body) for body in loops), config.kwargs
    assert "mma" in _ptx(gemv.int8_kernel, gemv.MM_CONFIGS[-1], cc, BLOCK_M=16, UPCAST=False)


def test_sass_loop_counts_instructions_a_byte_without_a_gpu(capsys):
    """scripts/sass_loop.py on the int4 kernel's widest configuration (sm_90 SASS through Triton's nvdisasm): its loop
    sits between the int8 GEMV's 4-6 instructions a weight byte and the first int4 GEMV's 19-25, on Tensor Cores."""
    from tcperf.kernels import gemv
    if gemv.INTERPRETING:
        pytest.skip("TRITON_INTERPRET is set in this process")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import sass_loop
    config = gemv.INT4_CONFIGS[-1]
    per_byte = sass_loop.report("int4_kernel", gemv.int4_kernel, config, config.kwargs["BLOCK_N"] * 64, 90,
                                GROUP=128, BLOCK_M=16, SPLIT=1, UPCAST=False)
    line = capsys.readouterr().out
    assert 4 < per_byte < 12 and re.search(r"Tensor Cores: H(G)?MMA \d+", line), line


def test_int4_splits_k_where_columns_alone_leave_multiprocessors_idle():
    """Llama-3.1-8B's layers (N, groups of 128) on 132 SMs: o and down 8 shares, qkv 4, gate+up and the output
    layer 1; a share keeps 4 groups (Llama-3.2-1B's o: 16 groups, 4 shares)."""
    from tcperf.kernels.gemv import split_k
    assert [split_k(n, g, 132) for n, g in ((4096, 32), (4096, 112), (6144, 32), (28672, 32), (128256, 32),
                                            (2048, 16))] == [8, 8, 4, 1, 1, 4]


def test_m_buckets():
    from tcperf.kernels import gemv
    assert [gemv.block_m(m) for m in (1, 2, 16, 17, 33, 64, 200)] == [1, 16, 16, 32, 64, 64, 64]


# --- the recipes and the command --------------------------------------------------------------------------------
def test_quantize_puts_the_weight_only_layers_on_the_kernel():
    for name, cls in (("int8wo", core_quant.Int8WeightOnlyLinear), ("int4wo-32", core_quant.Int4WeightOnlyLinear)):
        model = torch.nn.Sequential(_lin(64, 96), _lin(96, 64))
        quant.quantize(model, quant.get(name), kernel="triton")
        assert all(isinstance(m, cls) and m.kernel == "triton" for m in model)
    model = torch.nn.Sequential(_lin())
    quant.quantize(model, quant.get("int8wo"))
    assert model[0].kernel == "inductor"
    assert quant.kernel_for(quant.get("bf16"), "triton") == "default"
    assert quant.kernel_for(quant.get("int4wo-128+kvfp8"), "triton") == "triton"


def test_triton_kernel_on_a_cpu_is_a_reason_not_a_crash(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert "CUDA GPU" in quant.kernel_reason("triton", torch.device("cpu"))
    assert quant.kernel_reason("default", torch.device("cpu")) is None


def test_bad_kernel_exits_2_with_one_line(capsys):
    rc = main(["generate", "--kernel", "cutlass", "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("tcperf: ") and "default, triton" in err[0], (rc, err)


# --- the benchmark's bookkeeping ---------------------------------------------------------------------------------
def test_benchmark_finds_where_a_kernel_stops_beating_bf16():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import gemv_gpu
    us = {("bf16 cuBLAS", 1): 10, ("bf16 cuBLAS", 4): 10, ("bf16 cuBLAS", 16): 10,
          ("int4 triton", 1): 4, ("int4 triton", 4): 9, ("int4 triton", 16): 12}
    gemv_gpu.BLOCKS["m"] = 2                 # a step: 2 x qkv + 1 x output (3 x qkv's time): 5 x qkv's
    rows = [{"model": "m", "layer": layer, "batch": b, "kernel": kern, "bits": 16 if kern.startswith("bf16") else 4,
             "us": t * (3 if layer == "output" else 1), "status": "ok"} for (kern, b), t in us.items()
            for layer in ("qkv", "output")]
    gemv_gpu.add_ratios(rows)
    found = {c["kernel"]: c for c in gemv_gpu.crossings(rows)}
    assert found["int4 triton"]["stops_beating_bf16_at"] == 16
    assert found["int4 triton"]["ratio_by_batch"] == {1: 0.4, 4: 0.9, 16: 1.2}
    assert gemv_gpu.weight_bytes(4, 4096, 4096) == 4096 * 4096 // 2 + 4 * 4096 * 32
    line = gemv_gpu.shape_line({**rows[-1], "bw_share": 0.5})      # printed as each shape finishes
    assert line == "int4 triton b16 36.0 us 50% BW 1.20x bf16", line
    assert gemv_gpu.shape_line({"kernel": "int8 triton", "batch": 1, "status": "wrong"}) == "int8 triton b1 wrong"


def test_benchmark_checks_each_batch_before_timing_it(monkeypatch):
    """The benchmark's path on a CPU, tcperf.timing.time_fn stubbed (graph replays of 1..9 ms): a good kernel is
    timed, a call's time being a replay's over the calls in the graph; a wrong one is reported."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import gemv_gpu
    from tcperf.timing import Measurement
    asked = []

    def time_fn(fn, device, **how):
        asked.append(how)
        fn()                                   # the calls the graph would hold, run once
        return Measurement([float(ms) for ms in range(1, 10)])

    monkeypatch.setattr(gemv_gpu, "time_fn", time_fn)
    lin, gen = _lin(256, 96), torch.Generator().manual_seed(0)
    kernels = {k.name: k for k in gemv_gpu.KERNELS}
    rows = gemv_gpu.kernel_rows(kernels["int4 tinygemm"], lin, (1, 3), 2, gen)
    # a round of 2 copies in 5 ms: one round (2 calls) a graph; median 5 ms, IQR 3-7 ms, over 2 calls
    got = [(r["status"], r["us"], r["iqr_us"], r["calls"], r["replays"]) for r in rows]
    assert got == [("ok", 2500, 2000, 2, 9)] * 2
    assert rows[0]["samples"] == [500.0 * i for i in range(1, 10)] and rows[0]["error"] < 0.01
    assert all(how["graph"] and not how["flush_l2"] for how in asked)
    assert asked[1]["min_reps"] == asked[1]["max_reps"] == gemv_gpu.REPLAYS
    broken = gemv_gpu.Kernel("int4 wrong group", 4, lambda lin: core_quant.Int4WeightOnlyLinear(lin, 32))
    monkeypatch.setattr(core_quant, "pack_scales_and_zeros",
                        lambda s, z: torch.stack([s.roll(1, 1), z], dim=-1).transpose(0, 1).contiguous())
    assert [r["status"] for r in gemv_gpu.kernel_rows(broken, lin, (1,), 2, gen)] == ["wrong"]


@pytest.mark.parametrize("copies, call_ms, calls", [(4, 0.01, 200), (3, 0.01, 198), (64, 0.1, 64), (2, 0.5, 6)])
def test_benchmark_graph_holds_whole_rounds_of_about_graph_ms(monkeypatch, copies, call_ms, calls):
    """GRAPH_MS (3 ms) of calls, at most MAX_CALLS (200), in whole rounds over the copies, at least one round."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import gemv_gpu
    from tcperf.timing import Measurement
    monkeypatch.setattr(gemv_gpu, "time_fn", lambda fn, device, **how: Measurement([copies * call_ms]))
    assert gemv_gpu.graph_calls([lambda: None] * copies, torch.device("cpu")) == calls


# --- on a GPU ---------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 3, 16, 64])
def test_triton_against_tinygemm_on_cuda(cuda, m):
    lin = torch.nn.Linear(4096, 1000, bias=False, device=cuda, dtype=torch.bfloat16)
    x = torch.randn(m, 4096, device=cuda, dtype=torch.bfloat16)
    tiny, tri = core_quant.Int4WeightOnlyLinear(lin, 128), core_quant.Int4WeightOnlyLinear(lin, 128, kernel="triton")
    ref = tiny.reference(x)
    for layer in (tiny, tri, core_quant.Int8WeightOnlyLinear(lin, kernel="triton")):
        want = layer.reference(x)
        assert ((layer(x).float() - want).norm() / want.norm()) < core_quant.KERNEL_TOLERANCE
    assert ((tri(x).float() - ref).norm() / ref.norm()) < core_quant.KERNEL_TOLERANCE     # same weights as tinygemm


@pytest.mark.gpu
@pytest.mark.parametrize("bits, kernel", [(8, "triton"), (4, "triton"), (8, "inductor")])
def test_triton_layers_compiled_with_cuda_graphs(cuda, bits, kernel):
    """As tcperf.generate.loop compiles the decode step: fullgraph, CUDA graphs, coordinate-descent tuning (beside
    them Inductor's fused GEMV, the default int8 kernel, at the same batches)."""
    lin = torch.nn.Linear(2048, 768, bias=False, device=cuda, dtype=torch.bfloat16)
    layer = (core_quant.Int8WeightOnlyLinear(lin, kernel=kernel) if bits == 8
             else core_quant.Int4WeightOnlyLinear(lin, 128, kernel=kernel))
    torch._dynamo.reset()
    step = torch.compile(layer, fullgraph=True, options={"triton.cudagraphs": True,
                                                         "coordinate_descent_tuning": True})
    for m in (1, 4):
        x = torch.randn(m, 1, 2048, device=cuda, dtype=torch.bfloat16)
        for _ in range(3):                    # warm-up, record, replay
            got = step(x).float().clone()
        want = layer.reference(x)
        assert ((got - want).norm() / want.norm()) < core_quant.KERNEL_TOLERANCE


@pytest.mark.gpu
def test_compiled_decode_on_the_triton_kernels(cuda):
    from tcperf.generate import sweep
    from tcperf.records import Job, TimingConfig
    from tcperf.runner import run_case
    src = {"kind": "builtin", "name": "tiny"}
    rows = [run_case(sweep.case(src, "plain", name, b, 16, 8, max_batch=4, kernel="triton"), cuda,
                     Job(TimingConfig(rep_ms=20))) for name in ("int8wo", "int4wo-32") for b in (1, 2, 4)]
    assert [r.status for r in rows] == ["ok"] * 6, [r.message for r in rows]     # 2, 4: a dynamic batch
    assert all(r.metrics["kernel"]["passed"] for r in rows)


@pytest.mark.parametrize("args, words", [(["--models", "Llama-9B"], "unknown model 'Llama-9B'"),
                                         (["--batches", "1,x"], "--batches takes positive whole numbers"),
                                         (["--batches", "0"], "--batches takes positive whole numbers"),
                                         (["--kernels", "int5"], "no kernel's name holds any of ['int5']")])
def test_benchmark_bad_arguments_are_one_line_before_any_gpu(monkeypatch, capsys, args, words):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import gemv_gpu
    monkeypatch.setattr(sys, "argv", ["gemv_gpu.py", *args])
    assert gemv_gpu.main() == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
