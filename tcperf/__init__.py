"""tcperf: measure and harvest NVIDIA Tensor Core speed for PyTorch deep learning."""
__version__ = "0.1.0"
