"""The kernel lab: every kernel matches NumPy in the Triton interpreter (CPU), the Tensor Core matmul compiles to
wgmma (sm_90) / mma (sm_80) and the CUDA-core one to neither (no GPU needed), the `tcperf lab` command and its
bookkeeping; on a GPU, every kernel matches its reference on CUDA.

The interpreter is chosen when a kernel module is imported (TRITON_INTERPRET is read by @triton.jit), so the
interpreter checks run in a child process; this process imports the kernels compiled, for the PTX checks.
"""
import os

import pytest

import conftest
from tcperf import cli, lab
from tcperf.errors import UserError
from tcperf.lab import bench
from tcperf.records import Result
from tcperf.precision import get as get_precision
from tcperf.store import Store

# n for the interpreter checks: not multiples of the block sizes, so every mask is exercised
INTERPRETED_N = {"vector_add": (1000, 3000), "matrix_add": (40,), "sigmoid": (1000, 3000), "matmul_naive": (12,),
                 "matmul_tiled": (40,), "matmul_tc": (40,), "dense": (40,), "matmul_int8": (40,)}
CASES = [(name, prec, n) for name, entry in lab.KERNELS.items() for prec in entry.precisions
         for n in INTERPRETED_N[name]]


conftest.INTERPRETED["lab"] = ("import json, sys\nfrom tcperf.lab import bench\ncases = json.loads(sys.argv[1])\n"
                               "print(json.dumps({f'{k}|{p}|{n}': bench.check(k, p, n, 'cpu').error "
                               "for k, p, n in cases}))\n", CASES, 300)


@pytest.fixture(scope="module")
def interpreted_errors(interpreted_children):
    """{'kernel|precision|n': relative error} for every case, computed in one interpreter child process."""
    return conftest.interpreted(interpreted_children, "lab")


@pytest.mark.parametrize("name,prec,n", CASES, ids=[f"{k}-{p}-{n}" for k, p, n in CASES])
def test_kernel_matches_numpy_in_the_interpreter(interpreted_errors, name, prec, n):
    """bf16 is checked too: the kernels upcast bf16 tiles to fp32 in the interpreter only (UPCAST), because the
    interpreter keeps bf16 as raw 16-bit integers and multiplies those."""
    err = interpreted_errors[f"{name}|{prec}|{n}"]
    assert err <= get_precision(prec).tolerance, f"{name} {prec} n={n}: relative error {err:.3g}"


# --- what tl.dot compiles to, without a GPU ---------------------------------------------------------------------
def compile_ptx(kernel, pointers: dict, constexprs: dict, cc: int, num_warps: int) -> str:
    """PTX of `kernel` for compute capability cc (90: H100/H200, 80: A100); other arguments are i32 scalars.
    The same call works with triton 3.6 and 3.8."""
    import triton
    from triton.backends.compiler import GPUTarget
    signature = {a: "constexpr" if a in constexprs else pointers.get(a, "i32") for a in kernel.arg_names}
    src = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=constexprs)
    compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32), options={"num_warps": num_warps, "num_stages": 3})
    return compiled.asm["ptx"]


def _tc_kernel(dtype: str):
    from tcperf.kernels import matmul_tc
    tile = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, UPCAST=False)
    return matmul_tc.matmul_tc_kernel, {p: f"*{dtype}" for p in ("a_ptr", "b_ptr", "c_ptr")}, tile, 8


def _tiled_kernel():
    from tcperf.kernels import matmul_tiled
    tile = {k: v for k, v in matmul_tiled.CONFIG.items() if k.startswith("BLOCK")}
    return matmul_tiled.matmul_tiled_kernel, {p: "*fp32" for p in ("a_ptr", "b_ptr", "c_ptr")}, tile, 4


def _int8_kernel():
    from tcperf.kernels import matmul_int8
    tile = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, UPCAST=False)
    return matmul_int8.matmul_int8_kernel, {"a_ptr": "*i8", "b_ptr": "*i8", "c_ptr": "*i32"}, tile, 8


@pytest.fixture
def compiled_mode():
    if lab.interpreting():
        pytest.skip("TRITON_INTERPRET is set in this process: the kernels are interpreted, not compiled")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_tensor_core_matmul_is_wgmma_on_hopper_and_mma_on_ampere(compiled_mode, dtype):
    kernel, pointers, tile, warps = _tc_kernel(dtype)
    hopper = compile_ptx(kernel, pointers, tile, 90, warps)
    ampere = compile_ptx(kernel, pointers, tile, 80, warps)
    assert "wgmma.mma_async" in hopper
    assert "mma.sync" in ampere and "wgmma" not in ampere


def test_int8_matmul_uses_integer_tensor_cores(compiled_mode):
    kernel, pointers, tile, warps = _int8_kernel()
    hopper = compile_ptx(kernel, pointers, tile, 90, warps)
    assert any("wgmma" in line and ".s8" in line for line in hopper.splitlines())


@pytest.mark.parametrize("cc", [90, 80])
def test_cuda_core_matmul_uses_no_tensor_core_instruction(compiled_mode, cc):
    kernel, pointers, tile, warps = _tiled_kernel()
    ptx = compile_ptx(kernel, pointers, tile, cc, warps)
    assert "mma" not in ptx                      # neither mma.sync nor wgmma
    assert "fma.rn.f32" in ptx                   # the dot product is plain fp32 fused multiply-adds


# --- the registry, the counts, the command --------------------------------------------------------------------
@pytest.mark.parametrize("name", lab.names())
def test_every_kernel_module_offers_the_lab_interface(compiled_mode, name):
    mod = lab.load(name)
    for attr in ("make_inputs", "triton_fn", "torch_fn", "numpy_fn", "flops", "bytes_moved"):
        assert callable(getattr(mod, attr)), f"{name} lacks {attr}"
    assert mod.__doc__ and "tcperf lab" in mod.__doc__


@pytest.mark.parametrize("name,n,itemsize,flops,nbytes", [
    ("vector_add", 10, 4, 10, 120), ("matrix_add", 3, 4, 9, 108), ("sigmoid", 10, 4, 40, 80),
    ("matmul_naive", 3, 4, 54, 108), ("matmul_tc", 4, 2, 128, 96), ("dense", 2, 2, 36, 28),
    ("matmul_int8", 2, 1, 16, 24)])
def test_flop_and_byte_counts(compiled_mode, name, n, itemsize, flops, nbytes):
    mod = lab.load(name)
    assert mod.flops(n) == flops
    assert mod.bytes_moved(n, itemsize) == nbytes


def test_sizes_parse_and_bad_ones_are_one_line_errors():
    assert bench.parse_sizes("1e3, 1024,2.5e4") == [1000, 1024, 25000]
    assert bench.parse_sizes(None) is None
    for bad in ("abc", "0", "1.5", "-3", "1e3,,2", "inf", "nan"):
        with pytest.raises(UserError, match="--sizes"):
            bench.parse_sizes(bad)
    with pytest.raises(UserError, match="matmul_tc"):
        bench.parse_kernels("vector_add,matmul_tx")


@pytest.mark.parametrize("argv,needle", [(["--kernels", "nope"], "unknown kernel 'nope'"),
                                         (["--sizes", "big"], "bad size 'big'")])
def test_lab_command_rejects_bad_input(capsys, argv, needle):
    assert cli.main(["lab", "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_default_sweeps_are_bounded():
    assert bench.default_sizes("vector_add", False) == [10**k for k in range(3, 9)]
    assert bench.default_sizes("matmul_tc", False)[-1] == 8192
    assert max(bench.default_sizes("matmul_naive", False)) <= 2048
    assert bench.default_sizes("matmul_naive", True) == [16]
    assert max(bench.default_sizes("matmul_tc", False, quick=True)) == 4096


def test_interpreter_switch_is_restored(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with bench.interpreter(True):
        assert os.environ["TRITON_INTERPRET"] == "1"
    assert os.environ["TRITON_INTERPRET"] == "0"
    with bench.interpreter(False):
        assert "TRITON_INTERPRET" not in os.environ
    assert os.environ["TRITON_INTERPRET"] == "0"


def _row(n, numpy_ms, kernel_ms, pageable_ms, pinned_ms):
    return Result("lab.vector_add", {"n": n}, "fp32", median_ms=kernel_ms,
                  metrics={"numpy_ms": numpy_ms, "e2e_pageable_ms": pageable_ms, "e2e_pinned_ms": pinned_ms})


def test_crossover_is_the_size_from_which_the_gpu_always_wins():
    rows = [_row(1, 1.0, 0.1, 5.0, 5.0), _row(2, 2.0, 0.1, 5.0, 1.5), _row(3, 3.0, 0.1, 5.0, 2.0),
            _row(4, 4.0, 0.1, 3.0, 3.0)]
    assert bench.crossover(rows, "median_ms") == 1
    assert bench.crossover(rows, "e2e_pinned_ms") == 2
    assert bench.crossover(rows, "e2e_pageable_ms") == 4
    assert bench.crossover(rows + [_row(5, 5.0, 0.1, 6.0, 6.0)], "e2e_pinned_ms") is None   # loses at the end
    (summary,) = bench.crossovers(list(reversed(rows)))
    assert summary.metrics["crossover"] == {"fp32 kernel only": 1, "fp32 incl. copies, pageable": 4,
                                            "fp32 incl. copies, pinned": 2}
    assert summary.shape == {"summary": "crossover"} and summary.metrics["sizes"] == [1, 2, 3, 4]


def test_lab_command_on_cpu_checks_in_the_interpreter_and_stores_a_lab_run(db_path, capsys):
    assert cli.main(["lab", "--device", "cpu", "--db", db_path, "--kernels", "vector_add", "--sizes", "1000,3000",
                     "--rep-ms", "5"]) == 0
    assert "TRITON_INTERPRET" not in os.environ or os.environ["TRITON_INTERPRET"] != "1"
    store = Store.open(db_path)
    run = store.run()
    rows = store.results(run["id"])
    assert run["kind"] == "lab" and run["status"] == "done"
    assert [(r["op"], r["shape"]["n"], r["status"]) for r in rows] == [("lab.vector_add", 1000, "ok"),
                                                                         ("lab.vector_add", 3000, "ok")]
    for r in rows:
        assert r["error"] <= 1e-6 and r["metrics"]["interpreted"] is True
        assert r["metrics"]["numpy_ms"] > 0 and r["metrics"]["torch_ms"] > 0 and r["median_ms"] > 0
    assert "interpreter" in capsys.readouterr().out


# --- on a GPU ---------------------------------------------------------------------------------------------------
GPU_N = {"vector": 100_003, "matrix": 200}      # not multiples of the blocks


@pytest.mark.gpu
@pytest.mark.parametrize("name,prec", [(k, p) for k, e in lab.KERNELS.items() for p in e.precisions])
def test_kernel_matches_reference_on_cuda(compiled_mode, cuda, name, prec):
    n = GPU_N[lab.get(name).kind]
    c = bench.check(name, prec, n, cuda)
    assert c.out.is_cuda
    assert c.error <= get_precision(prec).tolerance, f"{name} {prec}: relative error {c.error:.3g}"


@pytest.mark.gpu
def test_lab_command_on_gpu_stores_end_to_end_times_and_crossovers(compiled_mode, cuda, db_path):
    assert cli.main(["lab", "--db", db_path, "--kernels", "vector_add,matmul_tc", "--sizes", "512,1024",
                     "--rep-ms", "20"]) == 0
    store = Store.open(db_path)
    rows = store.results(store.run()["id"])
    measured = [r for r in rows if "summary" not in r["shape"]]
    assert len(measured) == 6 and all(r["status"] == "ok" for r in measured), [r["message"] for r in measured]
    for r in measured:
        m = r["metrics"]
        assert m["e2e_pageable_ms"] > 0 and m["e2e_pinned_ms"] > 0 and m["torch_ms"] > 0 and m["numpy_ms"] > 0
        assert r["tflops" if m["bound"] == "compute" else "gbps"] > 0
    summaries = [r for r in rows if r["shape"].get("summary") == "crossover"]
    assert {(r["op"], r["precision"]) for r in summaries} == {("lab.vector_add", "fp32"), ("lab.matmul_tc", "fp16"),
                                                             ("lab.matmul_tc", "bf16")}


def test_the_ptx_example_in_docs_lab_runs(compiled_mode):
    text = open(os.path.join(os.path.dirname(__file__), "..", "docs", "lab.md")).read()
    (block,) = [b.split("\n", 1)[1] for b in text.split("```")[1::2] if b.startswith("python") and "wgmma" in b]
    exec(compile(block, "docs/lab.md", "exec"), {})
