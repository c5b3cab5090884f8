"""The `tcperf` command: one module a subcommand in tcperf/commands/, each with `add_parser` and `main`.

Bad input (an unknown precision, suite or device, a malformed shape, a missing file) exits with status 2 and one
line naming the valid choices; no traceback reaches the user for a mistake of theirs. A command whose module cannot
be imported (a library missing) is still listed, and running it says why in one line (exit 2).
"""
from __future__ import annotations

import argparse
import importlib
import sys

from .errors import UserError

# name -> (module, its line in `tcperf --help`); the order is the order `tcperf --help` lists them. Only the
# command being run is imported (torch, SQLAlchemy and the rest load with it): `tcperf --help` stays fast.
COMMANDS = {
    "run": ("tcperf.commands.run", "the quick suite on this device (about a minute), stored and printed"),
    "env": ("tcperf.commands.env", "device, library versions and supported precisions"),
    "bench": ("tcperf.commands.bench", "measure a kernel suite (see `tcperf suites`) at the given precisions"),
    "suites": ("tcperf.commands.suites", "list the kernel suites (names, rows, source)"),
    "ceilings": ("tcperf.commands.ceilings", "measure this device's real GEMM ceiling per precision and its bandwidth"),
    "lint": ("tcperf.commands.lint", "Tensor Core verdict for one shape (gemm M N K | conv N C H W K R S)"),
    "models": ("tcperf.commands.models", "the model ladder: throughput, memory and accuracy of each recipe"),
    "generate": ("tcperf.commands.generate", "LLM prefill and decode at every precision against the bandwidth limit"),
    "advise": ("tcperf.commands.advise", "which precision setup to use for your model, measured (speed and accuracy)"),
    "comm": ("tcperf.commands.comm", "collective bandwidth (NCCL / gloo): time, algbw, busbw per size"),
    "train-to-target": ("tcperf.commands.train_to_target",
                        "time to accuracy per precision recipe (DAWNBench's measure)"),
    "lab": ("tcperf.commands.lab",
            "Triton kernels from a vector add to a Tensor Core matmul, against NumPy and cuBLAS"),
    "show": ("tcperf.commands.show", "print a stored run as a table (default: the latest)"),
    "runs": ("tcperf.commands.runs", "list stored runs"),
    "export": ("tcperf.commands.export", "write a run's results as JSON or CSV"),
    "report": ("tcperf.commands.report", "an HTML report with charts from stored runs (default: the latest)"),
    "compare": ("tcperf.commands.compare", "compare two stored runs case by case (a regression gate for CI)"),
    "push": ("tcperf.commands.push", "copy stored runs to another store (a shared PostgreSQL database)"),
    "db": ("tcperf.commands.db", "the results store's schema: upgrade it, or show where it is"),
}


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit 2), not a usage block. A command whose module failed to
    import gets a Parser told why (`unavailable`): it takes any arguments, and running it says why."""

    def __init__(self, *args, unavailable: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.unavailable = unavailable

    def error(self, message: str):
        command = self.prog.partition(" ")[2]          # 'tcperf lint' -> 'lint'; main() adds 'tcperf: '
        raise UserError(f"{command}: {message}" if command else message)

    def parse_known_args(self, args=None, namespace=None):
        if self.unavailable is None:
            return super().parse_known_args(args, namespace)
        return argparse.Namespace(func=self.refuse), []

    def refuse(self, args):
        raise UserError(f"{self.prog.partition(' ')[2]} is unavailable: {self.unavailable}")


def build_parser(only: str | None = None) -> Parser:
    """The parser with every command listed; the arguments of `only` (the command being run) or, with None, of
    every command (tests check each one's arguments that way)."""
    parser = Parser(prog="tcperf", description="Measure and harvest NVIDIA Tensor Core speed for PyTorch.")
    from .version import __version__
    parser.add_argument("--version", action="version", version=f"tcperf {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, (module, help_text) in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_text)     # in the listing; its arguments are not needed
            continue
        try:
            mod = importlib.import_module(module)
        except ImportError as e:      # a missing library or a broken install: listed, and the others still work
            sub.add_parser(name, help="unavailable: run it to see why", unavailable=f"importing {module} failed: {e}")
            continue
        mod.add_parser(_Listed(sub, help_text, getattr(mod, "main", None)))
    return parser


class _Listed:
    """The subparsers as a command module sees them: add_parser lists it (its line in COMMANDS), main() its func."""

    def __init__(self, sub, help_text: str, main=None):
        self.sub, self.help_text, self.main = sub, help_text, main

    def add_parser(self, name: str, **kwargs):
        p = self.sub.add_parser(name, help=self.help_text, **kwargs)
        if self.main is not None:
            p.set_defaults(func=self.main)
        return p


def _command_in(argv: list[str]) -> str:
    """The command argv runs ('' when none: the listing, --help or --version)."""
    first = next((a for a in argv if not a.startswith("-")), "")
    return first if first in COMMANDS else ""


def main(argv: list[str] | None = None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else argv
        parser = build_parser(only=_command_in(argv))
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        return args.func(args) or 0
    except UserError as e:
        print(f"tcperf: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tcperf: interrupted; every finished case is stored", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
