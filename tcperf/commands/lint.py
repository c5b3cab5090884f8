"""`tcperf lint`: the Tensor Core verdict for one shape, without running anything.

    tcperf lint gemm 8191 8191 8191 --precision bf16
    tcperf lint conv 64 3 224 224 64 7 7 --pad 3 --stride 2 --layout NCHW --precision fp16
    tcperf lint gemm 16 4096 4096 --precision int8 --json

Says which dimensions miss the 16-byte alignment, which hard limit the kernel refuses (int8 M <= 16, fp8 K or N
not a multiple of 16), the layout, the tile/wave quantization against the SM count (this GPU's, or --sm-count),
and the fix. `tcperf bench` measures the fix; lint only reads the rules (tcperf/tensorcore.py).
"""
from __future__ import annotations

from .. import ops
from ..errors import UserError, choices
from ..precision import get
from ..tensorcore import describe
from .common import add_json, console, print_json

DIMS = {"gemm": ("m", "n", "k"), "conv": ("N", "C", "H", "W", "K", "R", "S")}


def add_parser(sub) -> None:
    p = sub.add_parser("lint")
    p.add_argument("op", help="gemm | conv")
    p.add_argument("dims", nargs="*", type=int, help="gemm: M N K; conv: N C H W K R S")
    p.add_argument("--precision", default="bf16", help="precision to judge (default bf16)")
    p.add_argument("--pad", type=int, default=0, help="conv: padding (default 0)")
    p.add_argument("--stride", type=int, default=1, help="conv: stride (default 1)")
    p.add_argument("--layout", default="NCHW", help="conv: NCHW | NHWC (default NCHW, PyTorch's default)")
    p.add_argument("--pass", dest="conv_pass", default="fwd", help="conv: fwd | bwd_data | bwd_weight")
    p.add_argument("--transpose", default="NN", help="gemm: a_t b_t as two letters, e.g. NT (default NN)")
    p.add_argument("--sm-count", type=int, default=None, help="SMs for wave quantization (default: this GPU's)")
    add_json(p)


def shape_from(args) -> dict:
    if args.op not in DIMS:
        raise choices("lint operation", args.op, DIMS)
    names = DIMS[args.op]
    if len(args.dims) != len(names):
        raise UserError(f"lint {args.op} needs {len(names)} sizes ({' '.join(names)}), got {len(args.dims)}")
    if min(args.dims) < 1:
        raise UserError(f"sizes must be >= 1 (got {' '.join(map(str, args.dims))})")
    shape = dict(zip(names, args.dims))
    if args.op == "gemm":
        t = args.transpose.upper()
        if len(t) != 2 or set(t) - {"N", "T"}:
            raise UserError(f"--transpose must be two of N/T such as NN or NT (got {args.transpose!r})")
        return {**shape, "a_t": t[0], "b_t": t[1]}
    return {**shape, "pad": args.pad, "stride": args.stride, "layout": args.layout.upper(), "pass": args.conv_pass}


def sm_count(given: int | None) -> int | None:
    if given is not None:
        if given < 1:
            raise UserError(f"--sm-count must be >= 1 (got {given})")
        return given
    import torch
    return torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else None


def main(args) -> int:
    shape = shape_from(args)
    op, prec = ops.get(args.op), get(args.precision)
    if prec.name not in op.precisions:
        raise UserError(f"{op.name} has no {prec.name} variant; choose from: {', '.join(op.precisions)}")
    op.flops(shape)                               # validates the shape (a conv whose filter does not fit, ...)
    sms = sm_count(args.sm_count)
    verdict = op.verdict(shape, prec, sms)
    if args.json:
        print_json({"op": op.name, "shape": shape, "precision": prec.name, "sm_count": sms, "verdict": verdict})
        return 0
    console.print(f"[bold]{op.name} {op.label(shape)} · {prec.name}[/]"
                  + (f" · {sms} SMs" if sms else " · no GPU: waves not judged (give --sm-count)"))
    for line in describe(verdict):
        console.print(f"  {line}", highlight=False)
    return 0
