"""`tcperf env [--json]`: the device, its facts, the library versions, and which precisions it runs."""
from __future__ import annotations

from rich.table import Table

from .. import env as envmod
from .common import add_device, add_json, console, print_json


def add_parser(sub) -> None:
    p = sub.add_parser("env")
    add_device(p)
    add_json(p)


def main(args) -> int:
    device = envmod.parse_device(args.device)
    env = envmod.collect(device)
    if args.json:
        print_json(env)
        return 0
    t = Table(title=f"tcperf env · {device}", show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value")
    if "gpu" in env:
        for k, v in env["gpu"].items():
            t.add_row(k, str(v))
    else:
        t.add_row("device", "CPU (no CUDA GPU found)")
    for k, v in env["cpu"].items():
        t.add_row(f"cpu {k}", str(v))
    for k, v in env["libraries"].items():
        t.add_row(k, str(v))
    for name, why in env["precisions"].items():
        t.add_row(f"precision {name}", _support(name, why, device.type))
    console.print(t)
    return 0


def _support(name: str, why: str | None, device_type: str) -> str:
    """'yes', 'no: why', or on a CPU for what `tcperf run` leaves out there: yes, and which command measures it."""
    from .run import CPU_PRECISIONS
    if why is not None:
        return f"[dim]no: {why}[/]"
    if device_type == "cpu" and name not in CPU_PRECISIONS:
        return (f"[green]yes[/] [dim](tcperf run measures {', '.join(CPU_PRECISIONS)} on a CPU; "
                f"tcperf bench --precision {name} measures this one)[/]")
    return "[green]yes[/]"
