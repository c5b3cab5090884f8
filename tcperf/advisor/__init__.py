"""The advisor: for a user's own model, which precision setup to use, how much faster it is, and what it costs.

    import tcperf
    advice = tcperf.advise(model, example_inputs, mode="infer")     # tcperf.advisor.result.Advice
    print(advice); advice.to_json(); advice.save()

    tcperf advise path/to/file.py:factory [--mode infer|train] [--tolerance X] [--json]
"""
from .api import advise, run
from .result import Advice

__all__ = ["advise", "run", "Advice"]
