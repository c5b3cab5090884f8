"""What a Triton kernel's hot loop costs, read without a GPU: tcperf.kernels.gemv's kernels compiled for sm_90 (or --cc), their
SASS disassembled by the nvdisasm that Triton bundles, and the longest loop's instructions counted, by opcode and
per weight byte a thread moves. A memory-bound kernel at 3 TB/s on an H100 (132 SMs, ~1.98 GHz) moves ~11.5 bytes
a clock an SM; an SM issues 4 warp instructions a clock, 128 thread instructions, so a loop past ~11 instructions a
byte is issue-bound before it is memory-bound (tcperf's int8 GEMV: 4.2-5.4, 87-96% of the copy bandwidth on wide
layers; the first int4 GEMV: 19-25, 36-57%; the Tensor Core int4 kernel: 6.6-10.2, a third, held by its tl.dot
path, not its instructions: benchmarks/int4_probe.py).

    python3 scripts/sass_loop.py                 # tcperf.kernels.gemv's int8 GEMV and int4 kernel, every configuration
    python3 scripts/sass_loop.py --cc 80         # for an A100
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget

POINTERS = {"x_ptr": "*bf16", "w_ptr": "*i8", "q_ptr": "*i32", "s_ptr": "*bf16", "z_ptr": "*bf16", "y_ptr": "*bf16"}


def compiled(fn, config: triton.Config, cc: int, **constexprs):
    """fn compiled for compute capability cc at one configuration (integer arguments and pointers specialised as a
    launch specialises them: multiples of 16)."""
    constexprs = {k: v for k, v in {**config.kwargs, **constexprs}.items() if k in fn.arg_names}
    signature = {a: "constexpr" if a in constexprs else POINTERS.get(a, "i32") for a in fn.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if a not in constexprs}
    src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", cc, 32),
                          options={"num_warps": config.num_warps, "num_stages": config.num_stages})


def sass(kernel) -> str:
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        return subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True, check=True).stdout


def longest_loop(text: str) -> list[str]:
    """The instructions between a label and the longest branch back to it."""
    bodies, open_ = [], {}
    for line in text.splitlines():
        label = re.match(r"\s*(\.L_x_\d+):", line)
        if label:
            open_[label.group(1)] = []
            continue
        if re.search(r"/\*[0-9a-f]{4,}\*/", line):
            for body in open_.values():
                body.append(line)
            back = re.search(r"BRA\s+`\((\.L_x_\d+)\)", line)
            if back and back.group(1) in open_:
                bodies.append(list(open_[back.group(1)]))
    return max(bodies, key=len) if bodies else []


def opcodes(body: list[str]) -> collections.Counter:
    ops = collections.Counter()
    for line in body:
        m = re.search(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if m:
            ops[m.group(1)] += 1
    return ops


TENSOR_CORE = ("HGMMA", "HMMA")    # Hopper's warpgroup MMA (wgmma); the warp MMA (mma.sync) of Ampere, also on Hopper


def loop_opcodes(fn, config: triton.Config, cc: int, **constexprs) -> collections.Counter:
    return opcodes(longest_loop(sass(compiled(fn, config, cc, **constexprs))))


def report(name: str, fn, config: triton.Config, bytes_a_step: int, cc: int, **constexprs) -> float:
    """One line: the loop's instructions, thread instructions per weight byte, the commonest opcodes and, always,
    its Tensor Core instructions (the int4 kernel's 16 HGMMA fall out of the commonest eight under Triton 3.6)."""
    ops = loop_opcodes(fn, config, cc, **constexprs)
    n = sum(ops.values())
    per_byte = n * config.num_warps * 32 / bytes_a_step
    top = ", ".join(f"{op} {k}" for op, k in ops.most_common(8))
    tensor_core = ", ".join(f"{op} {ops[op]}" for op in TENSOR_CORE if ops[op]) or "none"
    print(f"{name} {config.kwargs} warps={config.num_warps} stages={config.num_stages}: {n} SASS in the loop, "
          f"{per_byte:.2f} a byte ({top}; Tensor Cores: {tensor_core})")
    return per_byte


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cc", type=int, default=90, help="compute capability (default 90: Hopper)")
    args = ap.parse_args()
    from tcperf.kernels import gemv
    if gemv.INTERPRETING:
        print("TRITON_INTERPRET is set: the kernels are interpreted, not compiled", file=sys.stderr)
        return 2
    for c in gemv.GEMV_CONFIGS:
        report("int8_gemv_kernel", gemv.int8_gemv_kernel, c, c.kwargs["BLOCK_N"] * c.kwargs["BLOCK_K"], args.cc)
    for c in gemv.INT4_CONFIGS:
        report("int4_kernel M<=16", gemv.int4_kernel, c, c.kwargs["BLOCK_N"] * 64, args.cc, GROUP=128, BLOCK_M=16,
               SPLIT=1, UPCAST=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
