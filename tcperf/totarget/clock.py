"""What the clock counts: three named policies (CLOCKS), the figures of the communities that use them: `train`
(hlb-CIFAR10, airbench), `dawnbench` (DAWNBench's time to accuracy) and `mlperf` (MLPerf Training's time to train:
all after initialisation, which builds the model and reads the data into memory). A run records each part apart
(data preparation, warm-up steps with compilation, steady training steps, evaluations), so the time to target under
every policy comes from the same run, and compile time is always shown, never hidden in a total.

    CLOCKS["dawnbench"].elapsed(point, prep_s=3.1)       # seconds on that clock at a trace point
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import choices


@dataclass(frozen=True)
class Clock:
    name: str
    prep: bool           # data preparation on the clock
    warmup: bool         # the warm-up steps (torch.compile's compilation, cuDNN autotuning) on the clock
    evaluation: bool     # evaluations on the clock
    about: str

    def elapsed(self, point: dict, prep_s: float) -> float:
        """Seconds on this clock at a trace point (its cumulative train_s, warmup_s, eval_s)."""
        return (point["train_s"] + (point["warmup_s"] if self.warmup else 0.0)
                + (point["eval_s"] if self.evaluation else 0.0) + (prep_s if self.prep else 0.0))


CLOCKS = {c.name: c for c in (
    Clock("train", prep=False, warmup=False, evaluation=False,
          about="training steps only, after warm-up (compile shown apart); data prep and evaluation off "
                "(hlb-CIFAR10, airbench)"),
    Clock("dawnbench", prep=True, warmup=True, evaluation=False,
          about="data preparation and every training step, compile included; evaluation off (DAWNBench)"),
    Clock("mlperf", prep=False, warmup=True, evaluation=True,
          about="everything after initialisation: every step, compile and every evaluation (MLPerf Training)"),
)}
DEFAULT = "dawnbench"


def get(name: str) -> Clock:
    if name not in CLOCKS:
        raise choices("clock", name, CLOCKS)
    return CLOCKS[name]


def help_text() -> str:
    return "; ".join(f"{c.name}: {c.about}" for c in CLOCKS.values())
