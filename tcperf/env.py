"""Device and library facts, which precisions this device runs (and why not the others), and whether the GPU is
quiet enough to measure. NVML (nvidia-ml-py, optional) gives clocks, power limit, other processes and throttling;
without it tcperf asks nvidia-smi, and without that it says 'unknown'. Both are asked about the CUDA device by its
UUID (nvml_handle), never by an index: theirs ignores CUDA_VISIBLE_DEVICES.

    tcperf env            # a table
    tcperf env --json     # the dict collect() returns, as stored with every run
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
import time

import torch

from .version import __version__
from .errors import UserError
from .precision import KERNEL_PRECISIONS, PRECISIONS, unsupported_reason


def triton_interpreting() -> bool:
    """True when Triton kernels run in its interpreter (TRITON_INTERPRET=1, CPU tensors) instead of being compiled."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def launchable(kernel):
    """A Triton kernel as a triton_op launches it: wrapped for torch.compile's tracing (torch.library.wrap_triton),
    or as it is in the interpreter, where it only runs eagerly on CPU tensors. torch 2.14's wrap_triton passes the
    interpreter's function through itself; torch 2.11's (the GPU machine's) refuses it."""
    from torch.library import wrap_triton
    return kernel if triton_interpreting() else wrap_triton(kernel)


def parse_device(text: str | None) -> torch.device:
    """'cpu' | 'cuda' | 'cuda:N' (None: the first CUDA GPU, else the CPU); UserError when unusable."""
    if text is None:
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise UserError(f"unknown device {text!r}; choose from: cpu, cuda, cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise UserError(f"unknown device {text!r}; choose from: cpu, cuda, cuda:N")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"device {text!r}: no CUDA GPU is visible (torch {torch.__version__})")
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise UserError(f"device {text!r}: only {torch.cuda.device_count()} CUDA GPU(s) visible")
        device = torch.device("cuda", index)
    return device


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _first_version(*dists: str) -> str | None:
    return next((v for v in map(_version, dists) if v), None)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def libraries() -> dict:
    """Versions of what a measurement ran with; triton's read from its package metadata rather than by importing
    it (0.2 s of the parent of every run on a 2-core CPU, for one string)."""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "tcperf": __version__, "python": sys.version.split()[0], "torch": torch.__version__,
        "cuda": torch.version.cuda, "cudnn": cudnn, "triton": _first_version("triton", "pytorch-triton"),
        "cublas": _first_version("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu12"),
        "torchvision": _version("torchvision"), "torchao": _version("torchao"), "numpy": _version("numpy"),
    }


def precision_support(device: torch.device) -> dict[str, str | None]:
    """{precision: None if it runs here, else the reason it does not}."""
    return {name: unsupported_reason(PRECISIONS[name], device) for name in KERNEL_PRECISIONS}


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (`taskset`, a container's cpuset) where the platform
    tells, else the host's count, so that runs side by side on one host size their workers to their own cores."""
    try:
        return len(os.sched_getaffinity(0)) or os.cpu_count() or 1
    except (AttributeError, OSError):      # macOS and Windows have no sched_getaffinity
        return os.cpu_count() or 1


def other_cpu_processes(window_s: float = 0.25, least: float = 0.2) -> list[tuple[int, str, float]] | None:
    """(pid, name, cores used) of each process outside this one's tree that used `least` of a core or more over
    `window_s` (from /proc's tick counts), busiest first; None without /proc. The CPU's twin of
    other_gpu_processes: a core shared with another job slows and scatters every timing on it."""
    before, t0 = _cpu_ticks(), time.monotonic()
    if before is None:
        return None
    time.sleep(window_s)
    after, elapsed = _cpu_ticks() or {}, time.monotonic() - t0
    mine = _own_tree(after)
    hz = os.sysconf("SC_CLK_TCK")
    used = [(pid, name, (ticks - before.get(pid, (name, 0, 0))[1]) / hz / elapsed)
            for pid, (name, ticks, _) in after.items() if pid not in mine]
    return sorted((u for u in used if u[2] >= least), key=lambda u: -u[2])


def _cpu_ticks() -> dict[int, tuple[str, int, int]] | None:
    """pid -> (name, user + system ticks, parent pid) of every process /proc shows; None without /proc."""
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
        except OSError:                      # gone meanwhile, or hidden
            continue
        name, fields = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        out[pid] = (name, int(fields[11]) + int(fields[12]), int(fields[1]))     # utime + stime, ppid
    return out


def _own_tree(procs: dict) -> set[int]:
    """This process, its ancestors (the shell, pytest) and its descendants (our workers), by parent pid."""
    ours, pid = {os.getpid()}, os.getppid()
    while pid > 1 and pid not in ours:
        ours.add(pid)
        pid = procs.get(pid, ("", 0, 0))[2]
    grew = True
    while grew:
        kids = {pid for pid, (_, _, parent) in procs.items() if parent in ours and pid not in ours}
        ours |= kids
        grew = bool(kids)
    return ours


def collect(device: torch.device | str | None = None) -> dict:
    """The environment stored with every run."""
    device = parse_device(device) if not isinstance(device, torch.device) else device
    env = {"device": str(device), "libraries": libraries(), "platform": platform.platform(),
           "cpu": {"model": cpu_model(), "cores": usable_cores(), "host_cores": os.cpu_count(),
                   "torch_threads": torch.get_num_threads()},
           "precisions": precision_support(device)}
    if device.type == "cuda":
        env["gpu"] = gpu_facts(device)
    else:
        env["torch_build"] = {"cuda": torch.version.cuda, "mkldnn": torch.backends.mkldnn.is_available(),
                              "openmp": torch.backends.openmp.is_available()}
    return env


def gpu_facts(device: torch.device) -> dict:
    p = torch.cuda.get_device_properties(device)
    facts = {"name": p.name, "index": device.index or 0, "uuid": gpu_uuid(device.index or 0),
             "sm_count": p.multi_processor_count, "compute_capability": f"{p.major}.{p.minor}",
             "memory_gib": round(p.total_memory / 2**30, 1), "l2_mib": round(getattr(p, "L2_cache_size", 0) / 2**20, 1)}
    facts.update(nvml_facts(device.index or 0))
    return facts


# --- NVML, with nvidia-smi as the fallback ----------------------------------------------------------------------
def gpu_uuid(index: int) -> str | None:
    """'GPU-...', CUDA device `index`'s own UUID (torch's numbering, after CUDA_VISIBLE_DEVICES), the name NVML and
    nvidia-smi know it by. Their indices number every GPU of the host: under CUDA_VISIBLE_DEVICES=1 their 0 is
    another card (issue 58: the quiet-GPU check named GPU 0's processes). None where CUDA cannot say."""
    try:
        return f"GPU-{torch.cuda.get_device_properties(index).uuid}"
    except Exception:
        return None


def nvml_handle(index: int):
    """(pynvml, NVML's handle of CUDA device `index`), looked up by its UUID; the one way tcperf reaches NVML.
    (None, None) where NVML cannot say."""
    uuid = gpu_uuid(index)
    if uuid is None:
        return None, None
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByUUID(uuid.encode())   # bytes: every nvidia-ml-py takes them
    except Exception:   # no package, no driver, or a VM that hides NVML: all mean "ask nvidia-smi"
        return None, None


def _smi(args: list[str], index: int) -> str | None:
    """nvidia-smi's output for CUDA device `index` (-i takes its UUID), None where it cannot answer."""
    uuid = gpu_uuid(index)
    if uuid is None or not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", *args, f"-i={uuid}"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def smi_row(query: str, index: int) -> list[str] | None:
    """`nvidia-smi --query-gpu=query` for CUDA device `index`: its comma-separated values."""
    out = _smi([f"--query-gpu={query}", "--format=csv,noheader,nounits"], index)
    return [v.strip() for v in out.strip().split(",")] if out is not None else None


def nvml_facts(index: int) -> dict:
    nv, h = nvml_handle(index)
    if nv is not None:
        try:
            return {"driver": nv.nvmlSystemGetDriverVersion(),
                    "sm_clock_max_mhz": nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
                    "mem_clock_max_mhz": nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM),
                    "power_limit_w": nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000, "source": "nvml"}
        except Exception:
            pass
    row = smi_row("driver_version,clocks.max.sm,clocks.max.mem,power.limit", index)
    if row and len(row) == 4:
        return {"driver": row[0], "sm_clock_max_mhz": _num(row[1]), "mem_clock_max_mhz": _num(row[2]),
                "power_limit_w": _num(row[3]), "source": "nvidia-smi"}
    return {"driver": "unknown", "source": "none"}


def _num(text: str):
    try:
        return float(text)
    except ValueError:
        return None


def other_gpu_processes(index: int) -> list[int] | None:
    """PIDs of other processes using CUDA device `index` (None when it cannot be known)."""
    nv, h = nvml_handle(index)
    if nv is not None:
        try:
            procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
            return [p.pid for p in procs if p.pid != os.getpid()]
        except Exception:
            pass
    out = _smi(["--query-compute-apps=pid", "--format=csv,noheader"], index)
    if out is None:
        return None
    return [int(x) for x in out.split() if x.strip().isdigit() and int(x) != os.getpid()]


# the clocks held down by power, heat or a setting (idle and app-clock settings are not throttling here)
_THROTTLE_NAMES = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal",
                   0x80: "hw_power_brake"}


def throttle_reasons(index: int) -> list[str] | None:
    """CUDA device `index`'s active clock-throttle reasons right now (None when unknown)."""
    nv, h = nvml_handle(index)
    if nv is None:
        return None
    try:
        getter = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        mask = getter(h)
    except Exception:
        return None
    return [name for bit, name in _THROTTLE_NAMES.items() if mask & bit]
