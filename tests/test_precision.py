import pytest
import torch

from tcperf import precision
from tcperf.errors import UserError


def test_apply_sets_and_restores_tf32():
    precision.set_tf32(False)
    before = precision.save_flags()
    with precision.apply("tf32", "cpu"):
        assert precision.tf32_enabled()
    assert precision.save_flags() == before
    assert not precision.tf32_enabled()


def test_apply_restores_after_exception():
    before = precision.save_flags()
    with pytest.raises(ZeroDivisionError):
        with precision.apply("tf32", "cpu"):
            assert precision.tf32_enabled()
            1 / 0
    assert precision.save_flags() == before


def test_strict_fp32_turns_tf32_off_for_matmul_and_cudnn():
    with precision.apply("tf32", "cpu"):
        with precision.apply("fp32", "cpu"):
            assert not precision.tf32_enabled()
            flags = precision.save_flags()
            for key, value in flags.items():
                if key != "cudnn.benchmark":
                    assert value in ("ieee", "highest", False), (key, value)
        assert precision.tf32_enabled()


def test_cudnn_autotuning_is_off_inside_unless_asked_for_and_restored_after():
    """Issue 57: the advisor's fp32 probe of a detector's 59 image sizes took 140 s on an H100 with autotuning on,
    where a plain loop (off, as PyTorch ships) passes them in 4 s."""
    before = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = True
        with precision.apply("fp32", "cpu"):
            assert torch.backends.cudnn.benchmark is False
        with precision.apply("amp_bf16", "cpu", benchmark_cudnn=True):
            assert torch.backends.cudnn.benchmark is True
        torch.backends.cudnn.benchmark = False
        with precision.apply("bf16", "cpu", benchmark_cudnn=True):
            assert torch.backends.cudnn.benchmark is True
        assert torch.backends.cudnn.benchmark is False
    finally:
        torch.backends.cudnn.benchmark = before


def test_amp_recipe_enters_and_leaves_autocast():
    with precision.apply("amp_bf16", "cpu"):
        assert torch.is_autocast_enabled("cpu")
        y = torch.nn.functional.linear(torch.randn(4, 8), torch.randn(8, 8))
        assert y.dtype == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")


def test_unknown_precision_names_the_choices():
    with pytest.raises(UserError, match="fp7.*choose from: fp64, fp32"):
        precision.get("fp7")


@pytest.mark.parametrize("name", ["tf32", "fp8", "amp_fp16"])
def test_gpu_only_precisions_say_why_on_cpu(name):
    assert "CUDA GPU" in precision.unsupported_reason(precision.get(name), "cpu")


def test_cpu_precisions_run_on_cpu():
    for name in ("fp64", "fp32", "bf16"):
        assert precision.unsupported_reason(precision.get(name), "cpu") is None


@pytest.mark.parametrize("name,align", [("fp16", 8), ("bf16", 8), ("tf32", 4), ("fp32", 4), ("int8", 16),
                                        ("fp8", 16), ("fp64", 2)])
def test_alignment_is_sixteen_bytes(name, align):
    assert precision.get(name).align == align


@pytest.mark.gpu
def test_fp8_support_follows_compute_capability(cuda):
    cc = torch.cuda.get_device_capability()
    reason = precision.unsupported_reason(precision.get("fp8"), cuda)
    assert (reason is None) == (cc >= (8, 9))
