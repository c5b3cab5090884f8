"""tcperf generate on a CPU: the byte and FLOP accounting on hand-checked numbers, the static KV cache against a
full forward, the int8 / int4 / fp8 layers' error bounds, the accuracy check, an out-of-memory batch ending the
sweep, bad input exiting 2, and the command end to end (plain and transformers' loops) on the tiny model."""
import json
import os

import pytest
import torch

from tcperf import cli
from tcperf import quant as core_quant
from tcperf.generate import accounting, loop, quant, sweep
from tcperf.generate import model as plain

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = plain.CONFIGS["tiny"]     # dim 128, 2 layers, 4 heads, 2 kv heads (head_dim 32), MLP 256, vocab 512, tied


def _tiny(dtype=torch.bfloat16, recipe=None, batch=2, seq=32):
    m = plain.build(TINY, "cpu", dtype)
    if recipe:
        quant.quantize(m, recipe)
    m.setup_caches(batch, seq, recipe.kv_dtype if recipe else None)
    return m


# --- accounting -------------------------------------------------------------------------------------------------
def test_weights_and_flops_hand_checked():
    m = _tiny()
    # a layer: wqkv 128 x (4 + 2 + 2) x 32 = 32768, wo 128 x 128 = 16384, w13 128 x 512 = 65536, w2 256 x 128 = 32768
    # -> 147456, two layers 294912, the output layer 512 x 128 = 65536: 360448 multiply-adds a token
    assert accounting.linear_weights(m) == 360448
    assert accounting.parameters(TINY) == sum(p.numel() for p in m.parameters()) == 361088
    # bf16: every parameter once (the tied embedding is the output layer's weight) = 722176 bytes, + a row each
    assert accounting.weight_bytes(m, 0) == 722176
    assert accounting.weight_bytes(m, 2) == 722176 + 2 * 128 * 2


def test_decode_step_and_prefill_hand_checked():
    dims = accounting.model_dims(_tiny(), TINY, 2)
    assert accounting.kv_bytes_per_token(2, 2, 32, 2) == 512         # K and V, 2 layers, 2 kv heads x 32, bf16
    step = accounting.decode_step(accounting.at_batch(dims, 2), 2, 10)
    assert step["kv_bytes"] == 512 * 10 * 2
    assert step["bytes"] == 722176 + 2 * 256 + 10240
    assert step["flops"] == 2 * (2 * 360448 + 4 * 2 * 4 * 32 * 10)   # projections + Q K^T and P V over 10 keys
    assert accounting.mean_context(8, 6) == 11                       # contexts 9..13 over 5 steps
    # prefill of 1 x 4: the body at 4 positions, the output layer at the last, causal attention over 4 * 5 / 2
    body = 360448 - 65536
    assert accounting.prefill_flops(dims, 1, 4) == 2 * body * 4 + 2 * 65536 + 4 * 2 * 4 * 32 * 4 * 5 / 2


def test_roofline_batch_hand_checked():
    dims = accounting.model_dims(_tiny(), TINY, 2)
    # 100 TFLOPS, 1000 GB/s: a FLOP costs 0.01 byte-times; a row reads 5120 (KV) + 256 (embedding) bytes and
    # computes 731136 FLOPs at context 10: B* = 722176 / (7311.36 - 5376)
    assert accounting.roofline_batch(dims, 10, 100.0, 1000.0) == pytest.approx(722176 / (7311.36 - 5376))
    assert accounting.roofline_batch(dims, 10, 1000.0, 1000.0) is None  # the KV cache alone keeps it memory-bound


def test_measured_batch_finds_the_knee_of_a_roofline():
    dims = accounting.model_dims(_tiny(), TINY, 2)
    bw, rate = 1e9 / 1e3, 1e10 / 1e3                                   # bytes and FLOPs a ms
    points = []
    for b in (1, 4, 16, 64, 256, 1024):
        s = accounting.decode_step(accounting.at_batch(dims, b), b, 10)
        points.append({"batch": b, "bytes": s["bytes"], "flops": s["flops"],
                       "ms": max(s["bytes"] / bw, s["flops"] / rate)})
    got = accounting.measured_batch(points, dims, 10)
    assert got["reached"]
    assert got["batch"] == pytest.approx(accounting.roofline_batch(dims, 10, 0.01, 1.0), rel=1e-6)


def test_quantized_weight_bytes():
    m = _tiny(recipe=quant.get("int8wo"))
    # int8 weights 360448 bytes + bf16 scales (2 x (256 + 128 + 512 + 128) + 512 outputs) x 2 + norms 640 x 2;
    # the output layer no longer shares the embedding, which is read a row a token
    assert accounting.weight_bytes(m, 0) == 360448 + 2560 * 2 + 1280


# --- the cache and the loop -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kv", ["act", "fp8"])
def test_kv_cache_decode_matches_full_forward(kv):
    recipe = quant.get("bf16" if kv == "act" else "bf16+kvfp8")
    m = plain.build(TINY, "cpu", torch.float32)
    m.setup_caches(2, 16, torch.float32 if kv == "act" else recipe.kv_dtype)
    tokens = torch.randint(1, TINY.vocab, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        steps = [m(tokens[:, :8], torch.arange(8))[:, -1]]
        for i in range(8, 12):
            steps.append(m(tokens[:, i:i + 1], torch.tensor([i]))[:, -1])
        m.setup_caches(2, 16)
        full = m(tokens, torch.arange(12))[:, 7:]
    err = (torch.stack(steps, 1) - full).norm() / full.norm()
    assert err < (1e-5 if kv == "act" else 0.1)


def test_generate_is_greedy_and_deterministic():
    m = _tiny()
    prompt = torch.randint(1, TINY.vocab, (2, 8), generator=torch.Generator().manual_seed(1))
    a = loop.generate(m, prompt, 6)
    b = loop.generate(m, prompt, 6)
    assert a.shape == (2, 6) and torch.equal(a, b)
    logits = loop.teacher_forced_logits(m, torch.cat([prompt, a], 1))
    assert torch.equal(logits[:, 7:-1].argmax(-1), a[:, :])            # each token is the argmax before it


# --- quantized layers -------------------------------------------------------------------------------------------
def test_int8_dequantization_error_bound():
    w = torch.randn(64, 128)
    q, scales = core_quant.int8_quantize(w)
    assert q.dtype == torch.int8
    assert ((q.float() * scales[:, None] - w).abs() <= scales[:, None] / 2 + 1e-6).all()


@pytest.mark.parametrize("group", [32, 128])
def test_int4_dequantization_error_bound(group):
    w = torch.randn(64, 256)
    q, scales, zeros = core_quant.int4_quantize(w, group)
    assert q.min() >= 0 and q.max() <= 15
    err = (core_quant.int4_dequantize(q, scales, zeros, group) - w).abs().reshape(-1, group)
    s, z = scales.float().reshape(-1, 1), zeros.float().reshape(-1, 1)
    assert (err <= s / 2 + (8 * s + z.abs()) * 2**-8 + 1e-6).all()    # half a step, and bf16's scale and zero


def test_int4_packed_kernel_on_cpu_matches_dequantized():
    lin = torch.nn.Linear(256, 64, bias=False).to(torch.bfloat16)
    layer = core_quant.Int4WeightOnlyLinear(lin, 32)
    q, scales, zeros = core_quant.int4_quantize(lin.weight.detach(), 32)
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    ref = x.float() @ core_quant.int4_dequantize(q, scales, zeros, 32).t()
    assert ((layer(x).float() - ref).norm() / ref.norm()) < 1e-2


@pytest.mark.parametrize("rowwise", [True, False])
def test_fp8_linear_close_to_bf16(rowwise):
    lin = torch.nn.Linear(128, 64, bias=False)
    x = torch.randn(5, 128)
    ref = lin(x)
    got = core_quant.Fp8Linear(lin, rowwise)(x).float()
    assert ((got - ref).norm() / ref.norm()) < 0.1


def test_precision_names():
    assert quant.get("int4wo-128+kvfp8").kv == "fp8"
    assert [r.name for r in quant.parse_list("bf16,int8wo", "bf16,fp8")] == \
        ["bf16", "int8wo", "bf16+kvfp8", "int8wo+kvfp8"]


def test_model_accuracy_judges_the_perplexity_rise():
    tokens = torch.randint(0, 50, (2, 6), generator=torch.Generator().manual_seed(0))
    ref = torch.randn(2, 6, 50)
    same = sweep.model_accuracy(ref.clone(), ref, tokens, 0.01)
    assert same["rise"] == 0 and same["top1_agree"] == 1 and same["passed"] and same["judged"]
    bad = sweep.model_accuracy(ref + 3 * torch.randn_like(ref), ref, tokens, 0.01)
    assert not bad["passed"] and bad["rise"] > 0.01 and bad["perplexity_bf16"] == same["perplexity"]


# --- the worker task: out of memory ends the sweep -------------------------------------------------------------
def test_out_of_memory_is_recorded_and_ends_the_sweep():
    from tcperf.records import Job, TimingConfig
    from tcperf.runner import run_case
    src = {"kind": "builtin", "name": "tiny"}
    job = Job(TimingConfig(rep_ms=1.0))
    rows = [run_case(sweep.case(src, "plain", "bf16", b, 4, 3, max_batch=4, oom_above=1), torch.device("cpu"), job)
            for b in (1, 2, 4)]
    assert [r.status for r in rows] == ["ok", "oom", "skipped"]
    assert "ends there" in rows[2].message
    m = rows[0].metrics
    assert m["itl_ms"]["n"] >= 2 * sweep.MIN_REPEATS and m["accuracy"] == {"judged": False,
                                                                             "note": sweep.NOT_JUDGED}
    assert rows[0].bytes == m["decode"]["weight_bytes"] + m["decode"]["kv_bytes"]


# --- bad input: one line, exit 2 --------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, says", [
    (["--precision", "fp7"], "unknown precision 'fp7'"),
    (["--kv", "int2"], "unknown --kv"),
    (["--batch", "0"], "bad --batch"),
    (["--loop", "vllm"], "unknown --loop"),
    (["--batch", str(10**9)], "does not fit"),
    (["./no/such/model"], "unknown model"),
    ([os.path.join(ROOT, "tests", "data", "not_causal_lm.py:factory")], "is not a causal LM"),
])
def test_bad_input_exits_2(argv, says, capsys, tmp_path):
    rc = cli.main(["generate", "--device", "cpu", "--db", str(tmp_path / "r.db"), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1


# --- end to end through the CLI ---------------------------------------------------------------------------------
def _generate(tmp_path, capsys, *argv) -> dict:
    """The command in this process (its cases run in worker processes all the same): a `python -m tcperf` of its
    own cost each test 5-7 s more on 2 cores, importing torch and the rest again. `python -m tcperf generate` itself
    is run by test_generate_text's table test."""
    capsys.readouterr()
    rc = cli.main(["generate", "--device", "cpu", "--db", str(tmp_path / "r.db"), "--json", "--plot-dir",
                   str(tmp_path), "--prompt", "8", "--output", "4", "--rep-ms", "1", *argv])
    out, err = capsys.readouterr()
    assert rc == 0, err[-2000:]
    return json.loads(out)


def test_cli_plain_loop_end_to_end(tmp_path, capsys):
    out = _generate(tmp_path, capsys, "tiny", "--loop", "plain", "--precision", "bf16,int4wo-32", "--kv", "bf16,fp8",
                    "--batch", "1,2,4")
    rows = [r for r in out["results"] if r["op"] == "generate"]
    assert {(r["precision"], r["shape"]["batch"]) for r in rows} == \
        {(p, b) for p in ("bf16", "int4wo-32", "bf16+kvfp8", "int4wo-32+kvfp8") for b in (1, 2, 4)}
    assert all(r["status"] in ("ok", "wrong") for r in rows)
    for r in rows:
        m = r["metrics"]
        assert m["ttft_ms"]["median"] > 0 and m["itl_ms"]["p99"] >= m["itl_ms"]["median"] > 0
        assert m["tokens_s_total"] == pytest.approx(r["shape"]["batch"] * m["tokens_s_user"])
        assert not m["accuracy"]["judged"] and m["kernel"]["passed"]
        assert m["kernel"]["layers"] == (0 if r["precision"].startswith("bf16") else 9)     # 4 a layer + output
        assert any("no copy bandwidth" in n for n in m["notes"])           # none measured off a GPU: said so
    crossing = [r for r in out["results"] if r["op"] == "generate.crossing"]
    assert len(crossing) == 4 and all(r["metrics"]["batches"] == [1, 2, 4] for r in crossing)
    assert out["plots"] == [str(tmp_path / "generate-tiny.png")] and os.path.getsize(out["plots"][0]) > 0


def test_cli_transformers_loop_end_to_end(tmp_path, capsys):
    out = _generate(tmp_path, capsys, "tiny", "--loop", "hf", "--precision", "bf16,int8wo", "--kv", "bf16,fp8",
                    "--batch", "1,2")
    rows = {(r["precision"], r["shape"]["batch"]): r for r in out["results"] if r["op"] == "generate"}
    assert rows[("bf16", 1)]["status"] == "ok" and rows[("int8wo", 2)]["status"] in ("ok", "wrong")
    assert rows[("int8wo", 1)]["metrics"]["kernel"]["passed"] and rows[("int8wo", 1)]["metrics"]["kernel"]["layers"]
    assert rows[("bf16+kvfp8", 1)]["status"] == "skipped" and ("bf16+kvfp8", 2) not in rows   # one row says why


# --- on a GPU: the real kernels ---------------------------------------------------------------------------------
@pytest.mark.gpu
def test_int4_packed_kernel_on_cuda_matches_dequantized(cuda):
    lin = torch.nn.Linear(1024, 256, bias=False, device=cuda, dtype=torch.bfloat16)
    for group in (32, 128):
        q, scales, zeros = core_quant.int4_quantize(lin.weight.detach(), group)
        x = torch.randn(4, 1024, device=cuda, dtype=torch.bfloat16)
        ref = x.float() @ core_quant.int4_dequantize(q, scales, zeros, group).t()
        got = core_quant.Int4WeightOnlyLinear(lin, group)(x).float()
        assert ((got - ref).norm() / ref.norm()) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["bf16", "int8wo", "int4wo-128", "fp8-row", "fp8-tensor", "bf16+kvfp8"])
def test_compiled_decode_on_cuda(cuda, name):
    r = quant.get(name)
    why = quant.unsupported(r, cuda)
    if why:
        pytest.skip(why)
    from tcperf.records import Job, TimingConfig
    from tcperf.runner import run_case
    src = {"kind": "builtin", "name": "tiny"}
    rows = [run_case(sweep.case(src, "plain", name, b, 16, 8, max_batch=4), cuda, Job(TimingConfig(rep_ms=20)))
            for b in (1, 4)]
    assert [r.status for r in rows] == ["ok", "ok"], [r.message for r in rows]
    assert rows[0].metrics["decode"]["gbps"] > 0
    parts = rows[0].metrics["parts"]                 # where the step goes: its kernels seen by the profiler
    assert parts.get("linear_ms", 0) > 0 and parts["kernel_ms"] <= 1.2 * parts["step_ms"], parts


def test_quantized_layers_keep_linears_face():
    """Model code reads `layer.weight.dtype` (transformers' T5 casts its input to it): every quantized layer has a
    bf16 stand-in of nn.Linear's shape, and it is not counted as bytes a decode step reads."""
    lin = torch.nn.Linear(256, 64, bias=False).to(torch.bfloat16)
    layers = [core_quant.Int8WeightOnlyLinear(lin), core_quant.Int4WeightOnlyLinear(lin, 32)]
    layers += [core_quant.Fp8Linear(lin, rowwise=True)] if core_quant.F8 is not None else []
    for layer in layers:
        assert layer.weight.shape == (64, 256) and layer.weight.dtype == torch.bfloat16
        assert (layer.in_features, layer.out_features) == (256, 64)
        assert all(t.numel() > 1 for t in layer.buffers())          # no one-element stand-in among the buffers


def test_a_decode_steps_kernels_fall_into_linear_attention_and_the_rest():
    from tcperf.generate import parts
    names = {"nvjet_hsh_128x64_64x8_2x1_v_bz_TNT": "linear", "gemv2T_kernel_val<int, int, __nv_bfloat16>": "linear",
             "triton_red_fused__to_copy_mm_mul_0": "linear", "int8_kernel": "linear",
             "void at::native::tinygemm_m16n8k16_chunk_kernel<...>": "linear",
             "flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128>>": "attention",
             "triton_red_fused__softmax_bmm_3": "attention", "triton_poi_fused_add_mul_rsqrt_2": "other",
             "triton_per_fused_argmax_4": "other", "void at::native::vectorized_elementwise_kernel<4>": "other"}
    assert {n: parts.part(n) for n in names} == names
    assert parts.part("triton_red_fused__to_copy_add_mean_mm_mul_pow_rsqrt_0") == "linear"   # bf16: norm + GEMV
    found = [{"name": n, "calls": 20, "time_us": 200.0} for n in names]       # 10 kernels x 20 us a step
    p = parts.parts_of(found, 10, step_ms=0.25, weight_bytes=0.3e9, bandwidth_gbs=3000)
    assert p["linear_ms"] == pytest.approx(0.1) and p["attention_ms"] == pytest.approx(0.04)
    assert p["other_ms"] == pytest.approx(0.06) and p["gaps_ms"] == pytest.approx(0.05)
    assert p["floor_ms"] == pytest.approx(0.1) and p["linear_bw_share"] == pytest.approx(1.0)
    assert p["top"][0]["launches"] == 2 and len(p["top"]) == parts.TOP
    assert p["top"][0]["launch"] == ""                                      # profiled without configurations
    found[0]["launch_configs"] = [{"grid": [3072, 1, 1], "block": [128, 1, 1], "registers": 40}]
    top = parts.parts_of(found, 10, step_ms=0.25, weight_bytes=0.3e9, bandwidth_gbs=3000)["top"]
    assert top[0]["launch"] == "grid 3072x1x1 block 128 regs 40"
    line = parts.sentence(p)
    assert line.startswith("step 0.25 ms = linear 0.1 (the weights at 100% of the copy bandwidth) + attention")


def _compiled_ops(fn, *args) -> list:
    """The ops of the graph Dynamo hands a backend when fn(*args) is compiled (the backend runs it as traced)."""
    seen = []

    def capture(gm, inputs):
        seen.extend(n.target for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(fn, backend=capture, fullgraph=True)(*args)
    return seen, out


def test_the_gemvs_read_inputs_realised_where_they_are_made():
    """Fused with the producer of its input, Inductor's one-row matmul recomputed it in every program: Llama-3.1-8B
    int8wo decoded at 180-223 tokens/s on an H100, 237-249 with the input copied apart. quant.apart() realises the
    input instead (no copy): the int8 layer's input and every linear input of the decode model go through it when
    compiled without autograd; eager, and with autograd (training), nothing is added."""
    import torch._inductor.inductor_prims  # noqa: F401  (registers the op)
    force = torch.ops.prims.inductor_force_stride_order.default
    lin = torch.nn.Linear(64, 32, bias=False).to(torch.bfloat16)
    layer = core_quant.Int8WeightOnlyLinear(lin)
    x = torch.randn(1, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        ops, out = _compiled_ops(lambda t: layer(torch.nn.functional.silu(t) * t), x)
        assert force in ops and ops.index(force) < next(i for i, o in enumerate(ops) if "linear" in str(o)), ops
        ref = torch.nn.functional.silu(x).mul(x).float() @ layer.dequantized().t()
        assert torch.allclose(out.float(), ref, rtol=0.02, atol=0.02)
        assert layer(x).data_ptr() != x.data_ptr()                # eager: runs as written
        model = plain.build(plain.CONFIGS["tiny"], "cpu", torch.float32)
        model.setup_caches(1, 16)
        tok, pos = torch.ones(1, 1, dtype=torch.long), torch.tensor([3])
        ops, _ = _compiled_ops(lambda t, p: model(t, p), tok, pos)
        per_layer = 4                                             # wqkv, wo (a no-op on SDPA's output), w13, w2
        assert ops.count(force) == per_layer * model.args.n_layer + 1, ops.count(force)   # + the output layer
    x.requires_grad_(True)
    ops, _ = _compiled_ops(lambda t: layer(t * 2), x)
    assert force not in ops


def test_the_headline_says_where_each_precisions_step_goes_and_leaves_out_a_failed_profile():
    from rich.console import Console
    from tcperf.commands.generate import print_headline
    from tcperf.generate import parts

    def row(precision, ms, profile):
        return {"op": "generate", "precision": precision, "status": "ok", "median_ms": ms,
                "samples": [ms * f for f in (0.99, 0.995, 1, 1.005, 1.01)],
                "shape": {"model": "llama-8b", "batch": 1, "loop": "plain", "prompt": 128, "output": 128},
                "metrics": {"tokens_s_user": 1e3 / ms, "decode": {"bytes": 7.5e9}, "roofline_batch": None,
                            "peak": {"bandwidth_gbs": 3000.0, "bandwidth_source": "copy bandwidth measured now"},
                            "parts": profile}}
    found = [{"name": "triton_red_fused__to_copy_mm_t_view_8", "calls": 320, "time_us": 34700.0}]
    good = parts.parts_of(found, 10, step_ms=4.01, weight_bytes=7.5e9, bandwidth_gbs=3000.0)
    out = Console(record=True, width=200)
    print_headline([row("bf16", 5.87, {"error": "RuntimeError: CUPTI"}), row("int8wo", 4.01, good)], out)
    text = out.export_text()
    assert "int8wo: 249 tokens/s (1.46x bf16)" in text and "Where the decode step goes" in text
    assert "int8wo: step 4.01 ms = linear 3.47 (the weights at 72% of the copy bandwidth)" in text
    assert "bf16: step" not in text                      # a profile that failed is not a line


def test_the_headline_states_a_ratio_to_bf16_only_where_it_survives_the_spread():
    """Issue 58: "0.70x bf16" was printed on a CPU from inter-token latencies of IQR/median 36-43% whose spreads
    overlapped; the headline holds its ratios to the test `tcperf run`'s pass (tcperf.compare.claim)."""
    from rich.console import Console
    from tcperf.commands.generate import print_headline

    def row(precision, samples):
        ms = sorted(samples)[len(samples) // 2]
        return {"op": "generate", "precision": precision, "status": "ok", "median_ms": ms, "samples": samples,
                "shape": {"model": "tiny", "batch": 1, "loop": "plain", "prompt": 16, "output": 16},
                "metrics": {"tokens_s_user": 1e3 / ms, "decode": {"bytes": 1e6}, "peak": {}}}
    noisy = [row("bf16", [2.0, 3.1, 2.4, 1.9, 2.8, 2.2, 3.0]), row("int8wo", [2.9, 3.8, 2.6, 3.5, 2.7, 4.0, 3.3])]
    tight = [row("bf16", [2.0, 2.02, 1.98, 2.01, 1.99]), row("int8wo", [2.9, 2.92, 2.88, 2.91, 2.89])]
    for rows, says in ((noisy, "int8wo: 303 tokens/s (vs bf16: n.s.)"), (tight, "int8wo: 345 tokens/s (0.69x bf16)")):
        out = Console(record=True, width=200)
        print_headline(rows, out)
        assert says in out.export_text()
