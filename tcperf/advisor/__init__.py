"""The advisor: for a user's own model, which precision setup to use, how much faster it is, and what it costs.

    import tcperf
    advice = tcperf.advise(model, example_inputs, mode="infer")     # tcperf.advisor.result.Advice
    print(advice); advice.to_json(); advice.save()

    tcperf advise path/to/file.py:factory [--mode infer|train] [--tolerance X] [--json]

Modules: lint (shapes against the Tensor Core rules), probe (the first look at the model), trials (the recipes on the
model), search (the grid), runoff (the leaders re-timed), sensitive (the modules a low precision breaks), verdict
(the choice), snippets (code to paste), result (the Advice object: report, JSON, store), api (the five steps).
The model itself is loaded by tcperf.source, and the Tensor Core share measured by tcperf.profiler.profile.
"""
from .api import advise, run
from .result import Advice

__all__ = ["advise", "run", "Advice"]
