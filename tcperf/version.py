"""tcperf's version, in a module of its own so that code below the package's public face can read it."""
__version__ = "0.1.0"
