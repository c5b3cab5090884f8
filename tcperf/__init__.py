"""tcperf: measure and harvest NVIDIA Tensor Core speed for PyTorch deep learning."""
from .version import __version__  # noqa: F401


def advise(model, example_inputs, *, loss_fn=None, metric_fn=None, mode="infer", tolerance=None, device=None,
           **more):
    """Which precision setup to use for this model, how much faster it is and what it costs: see
    tcperf.advisor.api.advise (imported on first use, so `import tcperf` stays light)."""
    from .advisor import advise as _advise
    return _advise(model, example_inputs, loss_fn=loss_fn, metric_fn=metric_fn, mode=mode, tolerance=tolerance,
                   device=device, **more)
