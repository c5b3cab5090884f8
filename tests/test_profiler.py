"""The Tensor Core kernel-name classifier, on real kernel names, and (on a GPU) on what the profiler records.

Names come from public torch.profiler / nsys / ncu output of sm80 and sm90 runs (cuBLAS, cuBLASLt nvjet, CUTLASS,
cuDNN, flash / memory-efficient / cuDNN attention, cuDNN RNN, PyTorch's own kernels), some cut short as profilers
print them. Add the names benchmarks/suites_gpu.py writes to kernels.txt on this project's H100/H200 to the two lists.
"""
import pytest
import torch

from tcperf.profiler import classify, is_tensor_core, profile_kernels, tensor_core_share

TENSOR_CORE = [
    # cuBLAS / cuBLASLt on Hopper: nvjet (h = fp16, t = bf16, s = fp32/tf32 in the type triple)
    "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT",
    "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_TNN",
    "nvjet_sm90_hss_320x128_64x3_1x2_h_bz_coopB_NNT",
    "nvjet_sm90_hss_64x8_64x16_1x1_h_bz_splitK_NNT",
    "nvjet_tst_128x8_64x12_2x1_v_bz_splitK_TNT",
    "nvjet_tst_128x96_64x7_4x1_v_bz_bias_TNT",
    "nvjet_sss_tf32_128x256_TNT",
    "nvjet_sm90_hsh_32x64_64x16_4x1_v_bz_TNN",
    # cuBLAS xmma on Hopper (warpgroup MMA) and Ampere (mma.sync tiles), TF32 / fp16 / int8 / fp64 (DMMA) / sparse
    "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize256x128x32",
    "sm90_xmma_gemm_f16f16_f16f32_f32_nt_n_tilesize256x128x64_cgasize1x2x1_stage4_gmmastage2_warpgroupsize2x1x1_hgmma64x128x16",
    "sm90_xmma_gemm_i8i32_i8i32_f32_tn_n_tilesize256x128x128_cgasize1x2x1_stage4_gmmastage2_warpgroupsize2x1x1_igmma64x128x32",
    "sm90_xmma_sparse_gemm_f16f16_f16f32_f32_nt_t_tilesize128x128x64_cgasize2x1x1_stage4_gmmastage2_warpgroupsize1x1x1_sptensor_hgmma64x128x32",
    "sm90_xmma_gemm_f64f64_f64f64_f64_nt_n_tilesize128x128x16_stage3_warpsize4x2x1_tensor16x8x16",
    "sm80_xmma_gemm_f16f16_f16f32_f32_nt_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16",
    "sm80_xmma_gemm_tf32tf32_tf32f32_f32_nt_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8",
    "sm80_xmma_gemm_i8i8_i8i32_f32_tn_n_tilesize256x128x64_stage4_warpsize4x2x1_tensor16x8x32",
    "sm80_xmma_sparse_gemm_f16f16_f16f32_f32_nt_n_tilesize128x128x64_stage3_warpsize2x2x1_sptensor16x8x32",
    "ampere_bf16_s1688gemm_bf16_128x128_ldg8_f2f_stages_32x1_nn",
    "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_32x3_nn",
    "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_64x3_nn",
    # CUTLASS 2 / 3
    "cutlass_80_tensorop_s16816gemm_f16_128x64",
    "cutlass_80_wmma_tensorop_s161616gemm_f16_32x32_64x2_nn_align2",
    "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_bf16_64x64_32x6_tn_align8>(cutlass_80_tensorop_s1688gemm_bf16_64x64_32x6_tn_align8::Params)",
    "cutlass3x_sm90_tensorop_s64x128x16gemm_bf16_bf16_f32_void_bf16_128x128x64_1x1x1_0_tnn_align8_warpspecialized_pingpong_epi_tma",
    "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x128x64_2x1x1_0_tnt_align8_warpspecialized_cooperative_epi_tma",
    "cutlass3x_sm100_tensorop_s256x256x16implicit_gemm_fprop_bf16",
    # cuDNN convolutions (implicit GEMM on Tensor Cores)
    "sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize256x64x32_stage3_warpsize4x1x1_g1_tensor16x8x16_execute_kernel__5x_cudnn",
    "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nh...",
    "sm80_xmma_wgrad_implicit_gemm_indexed_f16f16_f16f32_...",
    "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
    "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x128x32",
    "sm80_xmma_fprop_implicit_gemm_interleaved_i8i8_i8i32_f32_nchw_vect_c_32kcrs_vect_c_32_nchw_vect_c_32_tilesize64x96x64_stage3_warpsize2x2x1_g1_tensor16x8x32_t1r3s3",
    "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_s168...",
    # attention: flash (FA2 in PyTorch), memory-efficient (xformers CUTLASS; fp32 runs 3xTF32 on sm80+), cuDNN
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 12...",
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 128, 4, ...>>",
    "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel",
    "flash::FlashAttentionForwardSm100",
    "fmha_cutlassF_f16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t, cu",
    "fmha_cutlassF_bf16_aligned_64x128_rf_sm80",
    "fmha_cutlassB_bf16_aligned_128x128_k128_sm80",
    "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x",
    "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x",
    "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x128_4x1x1_kernel0_0",
    # cuDNN persistent RNN kernels say when they use HMMA
    "void RNN_blockPersist_fp_LSTM_HMMA",
    "void RNN_blockPersist_fp_RNN_HMMA",
]

NOT_TENSOR_CORE = [
    # fp32 SIMT GEMMs (cuBLAS keeps an sm80 FFMA kernel for strict fp32 even on H100)
    "ampere_sgemm_128x64_nn",
    "ampere_sgemm_32x32_sliced1x4_tn",
    "ampere_sgemm_128x128_nt",
    "sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4",
    "sm80_xmma_gemm_f32f32_..._ffma",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_...",
    "void magma_sgemmEx_kernel<float, float, float, true,...",
    "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 4, 4, true, cublasGemvTensorStridedBatched<float const>, "
    "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> >(cublasGemmSmallNParams<"
    "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, "
    "cublasGemvTensorStridedBatched<float>, float>)",
    "void internal::gemvx::kernel<int, int, float, float, float, float, false, true, true, false, 7, false, "
    "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>"
    ", cublasGemvTensorStridedBatched<float>, float> >(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float "
    "const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>)",
    "cublasLt::splitKreduce_kernel<32, 16, int, float, ...>",
    # fp32 cuDNN convolutions and the layout transposes around NCHW Tensor Core convolutions
    "void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int, float "
    "const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, float, int, float const*,"
    " float const*, bool, int, int)",
    "void cudnn::detail::implicit_convolve_sgemm<float, float, 128, 6, 7, 3, 3, 5, 1, true, false, true>(int, int, "
    "int, float const*, int, float*, float*, kernel_conv_params, int, float, float, int, float*, float*, int, int)",
    "implicit_convolveNd_sgemm",
    "volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1",
    "volta_scudnn_128x64_relu_interior_nn_v1",
    "void cudnn::engines_precompiled::nchwToNhwcKernel<__half, __half, float, (bool)0, (bool)1, (cudnnKernelDataType_t)0>",
    "nhwcToNchwKernel",
    "void cudnn::batchnorm_bwtr_nhwc_semiPersist<__half, ...",
    # attention helpers: the dot(dO, O) prologue and the dQ conversion of the flash backward
    "void flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, fal...",
    "void pytorch_flash::flash_bwd_convert_dq_kernel<pytorch_flash::Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, "
    "2, false, false, cutlass::bfloat16_t> >(pytorch_flash::Flash_bwd_params)",
    # cuDNN RNN kernels without HMMA, and the stepwise cell kernel
    "void RNN_blockPersist_fp_LSTM<float, float, float, 1...",
    "RNN_blockPersist_fp_GRU",
    "RNN_blockPersist_bp_GRU",
    "elemWiseRNNcell",
    # PyTorch's own kernels
    "void at::native::vectorized_elementwise_kernel<(int)4, at::native::AUnaryFunctor<float, float, float, "
    "at::native::binary_internal::MulFunctor<float>>, std::array<char *, (unsigned…",
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_...",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_cop...",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
    "float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
    "unsigned int, float, 4>)",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous "
    "namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
    "vectorized_layer_norm_kernel<float>",
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>",
]

@pytest.mark.parametrize("name", TENSOR_CORE)
def test_tensor_core_kernels(name):
    assert is_tensor_core(name), classify(name)


@pytest.mark.parametrize("name", NOT_TENSOR_CORE)
def test_cuda_core_kernels(name):
    assert not is_tensor_core(name), classify(name)


def test_classify_says_why():
    assert classify("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT") == (True, "nvjet")
    assert classify("sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize128x128x8") == (False, "xmma types f32f32_f32f32")
    assert classify("sm90_xmma_gemm_e4m3e4m3_bf16f32_f32_tn_n_tilesize128x128x128")[0]
    assert classify("some_triton_kernel_0") == (False, "no Tensor Core marker")


def test_tensor_core_share_weights_by_time():
    kernels = [{"name": "a", "time_us": 30.0, "tensor_core": True}, {"name": "b", "time_us": 10.0, "tensor_core": False}]
    assert tensor_core_share(kernels) == 0.75
    assert tensor_core_share([]) is None


@pytest.mark.gpu
@pytest.mark.parametrize("prec,tc", [("fp32", False), ("bf16", True), ("fp16", True), ("tf32", True)])
def test_profiled_gemm_kernels_are_classified(prec, tc, cuda):
    """A strict-fp32 GEMM never touches a Tensor Core; bf16/fp16/tf32 do, by the names the profiler records."""
    from tcperf.ops.gemm import OP
    from tcperf.precision import apply, get
    with apply(get(prec)):
        prep = OP.prepare({"m": 4096, "n": 4096, "k": 4096}, get(prec), cuda)
        kernels = profile_kernels(prep.run, cuda)
    names = [k["name"] for k in kernels]
    share = tensor_core_share(kernels)
    assert kernels, "the profiler saw no kernel"
    assert (share > 0.5) is tc, f"{prec}: Tensor Core share {share} from {names}"


# --- kernel names profiled on an H200 (torch 2.11, cuBLAS 13.1, cuDNN 9.19; benchmarks/suites_gpu.py, 2026-11-22) ---
def _recorded():
    """(name, ops/precisions it was seen under) from tests/data/kernels_h200.tsv."""
    from pathlib import Path
    rows = Path(__file__).with_name("data").joinpath("kernels_h200.tsv").read_text().splitlines()
    return [(cols[3], cols[2].split(",")) for cols in (r.split("\t") for r in rows) if len(cols) >= 4]


RECORDED = _recorded()


def test_recorded_strict_fp32_kernels_are_not_tensor_core():
    fp32_only = [n for n, seen in RECORDED if all(s.endswith("/fp32") for s in seen) and "fmha" not in n]
    assert len(fp32_only) > 30
    assert not [n for n in fp32_only if is_tensor_core(n)]


def test_recorded_low_precision_gemm_kernels_are_tensor_core():
    main = [n for n, seen in RECORDED
            if any(s in ("gemm/fp16", "gemm/bf16", "gemm/tf32", "gemm/fp8") for s in seen)
            and ("nvjet" in n or "xmma_gemm" in n or "tensorop" in n)]
    assert len(main) > 100
    assert not [n for n in main if not is_tensor_core(n)]


def test_recorded_helper_kernels_are_not_tensor_core():
    helpers = [n for n, _ in RECORDED if "splitKreduce" in n or "nchwToNhwc" in n or "nhwcToNchw" in n]
    assert helpers and not [n for n in helpers if is_tensor_core(n)]


def test_cupti_is_let_go_after_a_profile_unless_the_process_said_otherwise(monkeypatch):
    """A profile left CUPTI attached and slowed every later launch: BERT's eager step 5.9 ms after one profile, 5.3
    with TEARDOWN_CUPTI=1 (an H100, 2026-11-26); Inductor's own 0 (where it captures CUDA graphs) is kept."""
    import os

    from tcperf import profiler as kernels
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    kernels.detach_after_profiling()
    assert os.environ["TEARDOWN_CUPTI"] == "1"
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")
    kernels.detach_after_profiling()
    assert os.environ["TEARDOWN_CUPTI"] == "0"


# Kernel names from profiles of ResNet-50, GPT-2 and Llama decode steps (H100/H200, torch 2.11, docs/results/raw/)
# and the kind each belongs to. Inductor's names list what they fused: a pointwise kernel after a convolution says
# "convolution" and is not one.
KINDS_SEEN = {
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT": "matmul",
    "sm90_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x64x64": "matmul",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>": "matmul",
    "void splitKreduce_kernel<32, 16, int, float>": "matmul",
    "gemv2T_kernel_val<int, int, __nv_bfloat16>": "matmul",
    "triton_red_fused__to_copy_mm_t_view_8": "matmul",              # Inductor's one-row int8 GEMV
    "triton_red_fused__to_copy_add_mean_mm_mul_pow_rsqrt_0": "matmul",  # bf16 decode: the RMS norm fused into a GEMV
    "triton_tem_fused_mm_0": "matmul",
    "int8_kernel": "matmul",
    "void at::native::tinygemm_m16n8k16_chunk_kernel<...>": "matmul",
    "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0":
        "attention",
    "triton_poi_fused_add_max_pool2d_with_indices_max_pool2d_with_indices_backward_63": "pooling",
    "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float": "normalization",
    "triton_red_fused__native_batch_norm_legit_functional_convolution_backward_threshold_backward_12":
        "normalization",
    "triton_red_fused_add_mean_mul_pow_rsqrt_2": "normalization",   # an RMS norm as Inductor fuses it
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16": "normalization",
    "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<8, c10::BFloat16, float": "softmax/loss",
    "triton_red_fused__softmax__to_copy_clamp_exp_logsumexp_neg_prepare_softmax_online_scatter_add_sub_0":
        "softmax/loss",
    "void at::native::multi_tensor_apply_kernel<TensorListMetadata<4>, FusedAdamMathFunctor": "optimizer",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)":
        "copies",
    "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda(at::Tensor": "copies",
    "void at::native::indexing_backward_kernel<c10::BFloat16>": "copies",
    "Memcpy DtoD (Device -> Device)": "copies",
    "triton_poi_fused_convolution_relu_3": "elementwise",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >": "elementwise",
    "triton_per_fused_argmax_4": "reductions",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps": "reductions",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL": "communication",
    "some_kernel_nobody_named": "other",
}


def test_each_kernel_falls_into_its_kind():
    from tcperf.profiler import KINDS, kind
    assert {name: kind(name) for name in KINDS_SEEN} == KINDS_SEEN
    assert set(KINDS_SEEN.values()) == set(KINDS)


def test_recorded_tensor_core_kernels_are_matmul_or_attention():
    from tcperf.profiler import kind
    tensor_core = [n for n, _ in RECORDED if is_tensor_core(n)]
    assert len(tensor_core) > 150
    assert not [n for n in tensor_core if kind(n) not in ("matmul", "attention")]


def test_a_profile_by_kind_adds_up_a_calls_time_and_reads_as_one_line():
    from tcperf.profiler import by_kind, kinds_line
    found = [{"name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "calls": 6, "time_us": 6000.0},
             {"name": "triton_poi_fused_convolution_relu_3", "calls": 3, "time_us": 1500.0},
             {"name": "void cudnn::bn_bw_1C11_kernel_new<float>", "calls": 3, "time_us": 2400.0},
             {"name": "triton_poi_fused_add_7", "calls": 3, "time_us": 600.0}]
    kinds = by_kind(found, calls=3)
    assert kinds == {"matmul": pytest.approx(2.0), "normalization": pytest.approx(0.8),
                     "elementwise": pytest.approx(0.7)}
    assert list(kinds) == ["matmul", "normalization", "elementwise"]          # the longest first
    assert kinds_line(kinds) == "matmul 2 ms (57%), normalization 0.8 (23%), elementwise 0.7 (20%)"


def test_each_kinds_longest_kernels_are_named_in_the_kinds_order():
    from tcperf.profiler import leaders
    found = [{"name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "calls": 6, "time_us": 6000.0},
             {"name": "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda", "calls": 3,
              "time_us": 2700.0},
             {"name": "triton_poi_fused__to_copy_9", "calls": 3, "time_us": 900.0},
             {"name": "triton_poi_fused__to_copy_4", "calls": 3, "time_us": 300.0},
             {"name": "triton_poi_fused_add_7", "calls": 3, "time_us": 600.0}]
    got = leaders(found, calls=3)
    assert list(got) == ["matmul", "copies", "elementwise"]                 # by_kind's order: 2, 1.3, 0.2 ms
    assert [k["name"] for k in got["copies"]] == [found[1]["name"], "triton_poi_fused__to_copy_9"]   # two a kind
    assert got["copies"][0]["ms"] == pytest.approx(0.9)


def test_launch_configurations_are_read_per_kernel_from_the_chrome_trace():
    """Each kernel's distinct grid/block/registers, by name, from the trace torch.profiler exports; other events
    (CPU ops, runtime calls) are not kernels."""
    from tcperf.profiler import launch_text, launch_configs_in

    def kernel(name, grid, block, regs):
        return {"cat": "kernel", "name": name, "args": {"grid": grid, "block": block, "registers per thread": regs,
                                                         "shared memory": 0}}
    trace = {"traceEvents": [kernel("triton_red_fused_mm_8", [16384, 1, 1], [64, 1, 1], 32),
                             kernel("triton_red_fused_mm_8", [16384, 1, 1], [64, 1, 1], 32),
                             kernel("triton_red_fused_mm_8", [8192, 1, 1], [128, 1, 1], 40),
                             kernel("nvjet_hsh_x", [66, 2, 1], [384, 1, 1], 168),
                             {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "args": {}},
                             {"cat": "cpu_op", "name": "aten::mm"}]}
    found = launch_configs_in(trace)
    assert set(found) == {"triton_red_fused_mm_8", "nvjet_hsh_x"}
    assert len(found["triton_red_fused_mm_8"]) == 2                           # the repeat counted once
    assert launch_text(found["triton_red_fused_mm_8"]) == "grid 16384x1x1 block 64 regs 32 +1"
    assert launch_text(found["nvjet_hsh_x"]) == "grid 66x2x1 block 384 regs 168"
    assert launch_text([]) == ""


def test_the_trace_export_is_read_back_on_a_cpu_profile():
    """_chrome_trace exports a finished profile and reads it back (here a CPU one: ops, no kernels)."""
    from torch.profiler import ProfilerActivity, profile

    from tcperf.profiler import _chrome_trace, launch_configs_in
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.ones(8) @ torch.ones(8)
    trace = _chrome_trace(prof)
    assert any("aten::" in str(ev.get("name")) for ev in trace["traceEvents"])
    assert launch_configs_in(trace) == {}
