"""The one exception a user's mistake raises.

Commands raise `UserError("...")`; `tcperf.cli.main` prints its message as one line on stderr and exits 2.
Everything else that escapes is a bug in tcperf and keeps its traceback.
"""
import math
from pathlib import Path


class UserError(Exception):
    """Bad input from the user: printed as one line, exit status 2, no traceback."""


def choices(kind: str, given: str, valid) -> UserError:
    """`unknown precision 'fp7'; choose from: fp64, fp32, ...`"""
    return UserError(f"unknown {kind} {given!r}; choose from: {', '.join(valid)}")


def one_line(e: BaseException) -> str:
    """An exception as one short line: `ValueError: the first line of its message`."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__


def finite_positive(value) -> bool:
    """A real number above zero, neither inf nor NaN: what every time, budget, tolerance and factor must be (a
    timeout of inf overflows the clock, a rep budget of NaN times nothing)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def os_reason(e: OSError) -> str:
    """Why a file or its folder could not be made, in the user's terms: a path that is a folder or a file where the
    other is needed, else the system's words ('Permission denied', 'Read-only file system')."""
    if isinstance(e, IsADirectoryError):
        return "that is a folder, not a file"
    if isinstance(e, (FileExistsError, NotADirectoryError)) and e.filename:    # mkdir, open: a file in the way
        path = Path(e.filename)
        while not path.exists() and path != path.parent:
            path = path.parent
        if path.exists() and not path.is_dir():
            return f"{path} is a file, not a folder"
    return e.strerror or str(e)
