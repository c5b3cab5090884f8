"""Every GPU fact and warning is about the GPU that runs the work (issue 58): NVML and nvidia-smi number the host's
GPUs, CUDA numbers the visible ones, so tcperf.env looks the CUDA device up by its UUID. Here a host of four GPUs is
faked (pynvml, nvidia-smi and torch's device properties) with CUDA_VISIBLE_DEVICES=2,1: CUDA device 0 is the host's
GPU 2, and each fact must come from it."""
import sys
import types

import pytest

from tcperf import env
from tcperf.distributed import link

HOST = [  # the host's GPUs in NVML's / nvidia-smi's order: uuid, other processes, power limit (mW), throttle mask,
          # NVLinks
    ("GPU-aaaa", [101], 700_000, 0x0, 18), ("GPU-bbbb", [202, 203], 500_000, 0x4, 4),
    ("GPU-cccc", [303], 400_000, 0x40, 2), ("GPU-dddd", [404], 300_000, 0x0, 18)]
VISIBLE = [2, 1]                                       # CUDA_VISIBLE_DEVICES=2,1


def fake_pynvml() -> types.ModuleType:
    """NVML with the host above: a handle is the host's index; asking by index is refused (it would be the host's)."""
    nv = types.ModuleType("pynvml")
    by_uuid = {uuid.encode(): i for i, (uuid, *_) in enumerate(HOST)}
    nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM = 1, 2
    nv.nvmlInit = lambda: None
    nv.nvmlDeviceGetHandleByUUID = lambda uuid: by_uuid[uuid]
    nv.nvmlDeviceGetHandleByIndex = lambda i: pytest.fail("NVML asked by index: another card under "
                                                          "CUDA_VISIBLE_DEVICES")
    nv.nvmlSystemGetDriverVersion = lambda: "999.1"
    nv.nvmlDeviceGetMaxClockInfo = lambda h, clock: 1000 * h + clock
    nv.nvmlDeviceGetEnforcedPowerLimit = lambda h: HOST[h][2]
    nv.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=p) for p in HOST[h][1]]
    nv.nvmlDeviceGetCurrentClocksEventReasons = lambda h: HOST[h][3]
    nv.NVML_FEATURE_ENABLED = 1

    def nvlink_state(h, link):
        if link >= HOST[h][4]:
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")     # a link this GPU does not have
        return 1
    nv.nvmlDeviceGetNvLinkState = nvlink_state
    return nv


@pytest.fixture
def remapped(monkeypatch):
    """torch sees the host's GPUs 2 and 1 as CUDA devices 0 and 1; each reports its own UUID as CUDA does (no
    'GPU-' prefix)."""
    def properties(index):
        return types.SimpleNamespace(uuid=HOST[VISIBLE[index]][0].removeprefix("GPU-"))
    monkeypatch.setattr(env.torch.cuda, "get_device_properties", properties)


def test_nvml_reads_the_card_cuda_runs_on(remapped, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    assert env.other_gpu_processes(0) == [303] and env.other_gpu_processes(1) == [202, 203]
    facts = env.nvml_facts(0)
    assert facts["power_limit_w"] == 400 and facts["sm_clock_max_mhz"] == 2001 and facts["source"] == "nvml"
    assert env.throttle_reasons(0) == ["hw_thermal"] and env.throttle_reasons(1) == ["sw_power_cap"]
    assert link._nvml_cells(2)[0] == {(0, 1): "NV2"}                 # the host's GPUs 2 and 1, not 0 and 1 (NV4)


def test_nvidia_smi_is_asked_about_the_card_cuda_runs_on(remapped, monkeypatch):
    """Without NVML, nvidia-smi is asked with -i=<the UUID>, and topo -m's rows are read at its own indices."""
    monkeypatch.setitem(sys.modules, "pynvml", None)          # `import pynvml` fails
    topo = ("        GPU0\tGPU1\tGPU2\tGPU3\n" "GPU0\t X \tNV4\tSYS\tSYS\n" "GPU1\tNV4\t X \tPXB\tSYS\n"
            "GPU2\tSYS\tPXB\t X \tNV4\n" "GPU3\tSYS\tSYS\tNV4\t X \n")

    def run(cmd, **kwargs):
        uuid = next((a.removeprefix("-i=") for a in cmd if a.startswith("-i=")), None)
        host = next((i for i, (u, *_) in enumerate(HOST) if u == uuid), None)
        if "topo" in cmd:
            out = topo
        elif "--query-compute-apps=pid" in cmd:
            out = "\n".join(map(str, HOST[host][1]))
        elif "--query-gpu=index" in cmd:
            out = str(host)
        else:
            out = f"999.1, 1980, 2619, {HOST[host][2] / 1000}"
        return types.SimpleNamespace(returncode=0 if host is not None or "topo" in cmd else 6, stdout=out)
    monkeypatch.setattr(env.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(env.subprocess, "run", run)
    monkeypatch.setattr(link.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(link.subprocess, "run", run)
    assert env.other_gpu_processes(0) == [303]
    assert env.nvml_facts(0)["power_limit_w"] == 400 and env.throttle_reasons(0) is None
    assert link.describe(2)["detail"] == "GPU0-GPU1: PXB"          # the host's GPU2-GPU1, not GPU0-GPU1 (NV4)


def test_without_cuda_nothing_is_read_from_another_card(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    monkeypatch.setattr(env.torch.cuda, "get_device_properties", lambda i: (_ for _ in ()).throw(RuntimeError()))
    assert env.other_gpu_processes(0) is None and env.throttle_reasons(0) is None
