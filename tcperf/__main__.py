"""`python -m tcperf`: the same entry point as the `tcperf` command."""
import sys

from .cli import main

sys.exit(main())
