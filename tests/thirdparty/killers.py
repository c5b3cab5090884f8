"""Models that behave under fp32 and take the process down under autocast: `factory_crash` exits the process
(os._exit(3), no exception, no traceback) and `factory_hang` sleeps for an hour. The advisor must survive both:
the autocast recipe ends as an error (crash) or a timeout (hang), fp32 is still measured and stored.

    tcperf advise tests/thirdparty/killers.py:factory_crash --device cpu --timeout 30 --recipes fp32,amp_bf16
    tcperf advise tests/thirdparty/killers.py:factory_hang --device cpu --timeout 30 --recipes fp32,amp_bf16
"""
import os
import time

import torch
import torch.nn as nn


def autocast_on() -> bool:
    """Autocast enabled for any device. torch.is_autocast_enabled() with no argument reports CUDA only; newer
    torch takes a device type, older torch has is_autocast_cpu_enabled() instead."""
    try:
        return any(torch.is_autocast_enabled(device) for device in ("cpu", "cuda"))
    except TypeError:                                     # torch < 2.4: no device argument
        cpu = getattr(torch, "is_autocast_cpu_enabled", lambda: False)
        return torch.is_autocast_enabled() or cpu()


class Killer(nn.Module):
    def __init__(self, how: str):
        super().__init__()
        self.how = how            # "crash" | "hang"
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        if autocast_on():
            if self.how == "crash":
                os._exit(3)
            time.sleep(3600)
        return self.fc2(torch.relu(self.fc1(x)))


def _make(how: str):
    torch.manual_seed(0)
    return Killer(how), torch.randn(4, 16)


def factory_crash():
    return _make("crash")


def factory_hang():
    return _make("hang")


# --- models that fail before any recipe starts: the probe must end these within --timeout, one line, exit 2 ---
class Always(nn.Module):
    """Hangs or dies in every forward, fp32 included: the advisor's first check meets it."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how            # "hang" | "segfault"
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        if self.how == "segfault":
            import ctypes
            ctypes.string_at(0)   # reads address 0: SIGSEGV, as a broken extension would
        time.sleep(3600)
        return self.fc(x)


def factory_never_returns():
    time.sleep(3600)


def factory_forward_hangs():
    return Always("hang"), torch.randn(4, 16)


def factory_forward_segfaults():
    return Always("segfault"), torch.randn(4, 16)
