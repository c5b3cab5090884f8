"""Operations that misbehave on purpose, for the runner's tests. Workers import them as 'fake_ops:NAME'
(the tests folder is on the sys.path the parent passes to its workers)."""
import logging
import os
import time

import torch

from tcperf.ops.base import Op, Prepared, generator, randn
from tcperf.records import Result


class Scale(Op):
    """y = 2x: a correct little op; `bug` makes it wrong, crash, hang or run out of memory."""
    precisions = ("fp32", "bf16", "fp64", "tf32", "fp8")
    shape_keys = ("n",)

    def __init__(self, name, bug=None):
        self.name, self.bug = name, bug

    def flops(self, shape):
        return shape["n"]

    def bytes(self, shape, prec):
        return 2 * shape["n"] * prec.element_bytes

    def prepare(self, shape, prec, device, seed=0):
        x = randn((shape["n"],), prec.dtype, device, generator(device, seed))
        y = torch.empty_like(x)
        if self.bug == "crash":
            os._exit(3)                       # the process dies with no Python error
        if self.bug == "hang":
            logging.getLogger("tcperf.fake_ops").info("preparing n=%d, about to hang", shape["n"])
            time.sleep(3600)
        if self.bug == "oom":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB (simulated)")
        if self.bug == "wrong":
            return Prepared(run=lambda: torch.mul(x, 2.001, out=y), reference=lambda: 2 * x.double(), out=y)
        if self.bug == "unwritten":           # writes only half its output: poisoning must catch it
            def half():
                y[: len(y) // 2] = 2 * x[: len(y) // 2]
                return y
            return Prepared(run=half, reference=lambda: 2 * x.double(), out=y)
        if self.bug == "nan":
            return Prepared(run=lambda: y.fill_(float("nan")), reference=lambda: 2 * x.double(), out=y)
        return Prepared(run=lambda: torch.mul(x, 2, out=y), reference=lambda: 2 * x.double(), out=y)


GOOD = Scale("good")
WRONG = Scale("wrong", "wrong")
UNWRITTEN = Scale("unwritten", "unwritten")
NAN = Scale("nan", "nan")
CRASH = Scale("crash", "crash")
HANG = Scale("hang", "hang")
OOM = Scale("oom", "oom")


# --- an object a worker holds, for tcperf.runner.Worker and Spares ------------------------------------------------
PRELOADED: dict = {}


def preload(case):
    """What a worker loads while it waits: here, a note that it did."""
    PRELOADED[case.args] = os.getpid()


class Held:
    """One object kept alive in a worker: says whether its model was preloaded, and counts its calls."""

    def __init__(self, case, device):
        self.case, self.calls = case, 0

    def row(self):
        return Result("held", {}, "fp32", metrics={"preloaded": self.case.args in PRELOADED, "pid": os.getpid()})

    def count(self):
        self.calls += 1
        return self.row().replace(metrics={"calls": self.calls})

    def env(self, variable: str):
        return self.row().replace(metrics={"value": os.environ.get(variable)})

    def nap(self, seconds: float):
        import time
        time.sleep(seconds)
        return self.row()
