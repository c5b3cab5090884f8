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

# name -> module; the order is the order `tcperf --help` lists them.
COMMANDS = {
    "run": "tcperf.commands.run",
    "env": "tcperf.commands.env",
    "bench": "tcperf.commands.bench",
    "suites": "tcperf.commands.suites",
    "ceilings": "tcperf.commands.ceilings",
    "lint": "tcperf.commands.lint",
    "models": "tcperf.commands.models",
    "generate": "tcperf.commands.generate",
    "advise": "tcperf.commands.advise",
    "comm": "tcperf.commands.comm",
    "train-to-target": "tcperf.commands.train_to_target",
    "lab": "tcperf.commands.lab",
    "show": "tcperf.commands.show",
    "runs": "tcperf.commands.runs",
    "export": "tcperf.commands.export",
    "report": "tcperf.commands.report",
    "compare": "tcperf.commands.compare",
    "push": "tcperf.commands.push",
    "db": "tcperf.commands.db",
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


def build_parser() -> Parser:
    parser = Parser(prog="tcperf", description="Measure and harvest NVIDIA Tensor Core speed for PyTorch.")
    from .version import __version__
    parser.add_argument("--version", action="version", version=f"tcperf {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, module in COMMANDS.items():
        try:
            mod = importlib.import_module(module)
        except ImportError as e:      # a missing library or a broken install: listed, and the others still work
            sub.add_parser(name, help="unavailable: run it to see why", unavailable=f"importing {module} failed: {e}")
            continue
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
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
