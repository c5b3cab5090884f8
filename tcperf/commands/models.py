"""`tcperf models`: the model ladder. How fast each model trains or infers under each recipe, climbing
tcperf.recipes.LADDER from fp32 to int8 (`--help` lists it; the training-only and inference-only rungs skipped in the
other mode), and what each rung costs in accuracy against fp32 strict. Every cell runs in a worker process (one per
recipe), is stored (run kind "models") and printed as a ladder table: throughput, speedup over the previous rung (or
the rung a search builds on) and over fp32, peak memory, MFU, compile time, accuracy.

    tcperf models resnet50 --mode train --batch 256
    tcperf models gpt2 --mode infer --recipes fp32,amp_bf16,compile --batch 8,16
    tcperf models lstm --batch auto                    # the largest batch that fits, throughput against batch
    tcperf models gpt2 --recipes compile,fp8 --sizes dim=4096,heads=32,layers=2 --batch 8   # fp8 on wider layers
    tcperf models all --recipes fp32,amp_bf16 --device cpu   # the small configurations on a CPU
    tcperf models resnet50,gpt2 --recipes compile --nproc 2  # and on 2 GPUs: DDP (FSDP2 too for GPT-2), scaling

On an H200 (hand-written loops, anchors.md): ResNet-50 training at batch 256 goes from 1,064 img/s (fp32) to
6,751 img/s (amp_bf16 + channels_last + torch.compile).
"""
from __future__ import annotations

from rich.table import Table

from .. import env as envmod
from .. import ladder, models, peaks, recipes
from ..distributed import overlap
from ..errors import UserError
from ..table import fmt_ms, status_cell
from .common import add_measuring, console, err_console, job_from, measure_into_store, positive_ints, print_stored


def add_parser(sub) -> None:
    p = sub.add_parser("models",
                       description="The model ladder. Whole-model steps are timed without L2 flushing and CUDA "
                                   "graphs are the cuda_graphs rung, so --no-flush-l2 and --graph change nothing "
                                   "here; --timeout (seconds a cell may take) defaults to 600 and --rep-ms to 1000.")
    p.add_argument("model", nargs="?", default="all",
                   help=f"{' | '.join(models.names())} | all, or a comma list (default: all)")
    p.add_argument("--mode", choices=("train", "infer"), default="train", help="train or infer (default: train)")
    p.add_argument("--recipes", default="ladder",
                   help=f"ladder (= {','.join(recipes.default_climb())}) or a comma list of recipes "
                        f"({', '.join(sorted(recipes.NAMED_ONLY))}: climbed only where named) (default: ladder)")
    p.add_argument("--batch", default=None, help="batch sizes, e.g. 32,64, or 'auto' (default: each model's own)")
    p.add_argument("--steps", type=int, default=ladder.DEFAULT_STEPS,
                   help=f"training steps the accuracy check compares after (default {ladder.DEFAULT_STEPS})")
    p.add_argument("--nproc", type=int, default=None,
                   help="also train each cell on N ranks (one a GPU; gloo processes on a CPU): total throughput, "
                        "scaling efficiency against one GPU, exposed communication (default: one GPU only)")
    p.add_argument("--parallel", default="ddp,fsdp2",
                   help="with --nproc: a comma list of ddp, ddp_bucket100, ddp_no_view, fsdp2, fsdp2_no_reshard "
                        "(FSDP2 on the transformer models only; default ddp,fsdp2); docs/many-gpus.md lists the "
                        "options each runs with; `tcperf advise FILE:factory --mode train --nproc N` times them all "
                        "on your model and picks one")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--small", action="store_true", help="the small configurations (the default on a CPU)")
    size.add_argument("--full", action="store_true", help="the full-size models (the default on a GPU)")
    p.add_argument("--sizes", default=None, metavar="KEY=N,...",
                   help="change the configuration's sizes, e.g. dim=2048,heads=16,layers=4 for a wider, shallower "
                        "GPT-2 (where fp8 starts to pay); the keys are the model's own")
    add_measuring(p)
    p.set_defaults(rep_ms=1000.0, timeout=600.0)


def parse_batches(text: str | None) -> list | None:
    """None (each model's default) | 'auto' | '32,64' -> [32, 64]; UserError for anything else."""
    if text is None:
        return None
    return ["auto"] if text.strip() == "auto" else positive_ints(text, "--batch", "32,64, or auto")


def main(args) -> int:
    names = models.parse_list(args.model)
    recipe_names = recipes.parse_list(args.recipes)
    batches = parse_batches(args.batch)
    if args.steps < 1:
        raise UserError(f"bad --steps {args.steps}; give a positive number of training steps")
    device = envmod.parse_device(args.device)
    nproc = _nproc(args, batches, device)
    config = "small" if args.small or (device.type == "cpu" and not args.full) else "full"
    if args.sizes:
        config = f"{config}:{args.sizes}"
        for name in names:
            models.config(models.get(name), config)        # a key the model does not have: one line, exit 2
    if config == "small" and not args.small:
        err_console.print("No CUDA GPU: measuring the small model configurations on the CPU (--full to override).")
    cases = ladder.cells(names, args.mode, recipe_names, batches, config=config, steps=args.steps)
    runner = ladder.climb
    if nproc:
        from ..distributed import parallel
        cases, runner = parallel.cells(cases, nproc, parallel.parse(args.parallel)), parallel.climb
    ceilings = peaks.measured(args.db, device)      # for MFU; without them the datasheet is used
    run_id, results, store = measure_into_store("models", cases, args, job_from(args, ceilings=ceilings or None),
                                                label="model ladder", runner=runner)
    return print_stored(args, store, run_id, lambda: print_ladder(store.results(run_id), console))


def _nproc(args, batches, device) -> int | None:
    """--nproc checked (None without it): the cells on N ranks go beside each one-GPU cell."""
    if args.nproc is None:
        return None
    from ..distributed import launch, parallel
    if launch.under_torchrun():
        raise UserError("tcperf models --nproc starts its own ranks on this host; run it without torchrun")
    if args.mode != "train":
        raise UserError("--nproc measures data-parallel training; give --mode train")
    if batches == ["auto"]:
        raise UserError("--nproc needs fixed batch sizes, not --batch auto")
    parallel.parse(args.parallel)
    return launch.check_nproc(args.nproc, device)


# --- the table --------------------------------------------------------------------------------------------------
def _x(v) -> str:
    return f"{v:.2f}x" if v else ""


def accuracy_cell(r: dict) -> str:
    acc = (r.get("metrics") or {}).get("accuracy") or {}
    if not acc:
        return ""
    if acc.get("nonfinite"):
        return "[red]NaN/inf[/]"
    if "rel_error" in acc:
        top1 = f" · top1 {acc['top1_agree']:.0%}" if acc.get("top1_agree") is not None else ""
        return f"err {acc['rel_error']:.1e}{top1}"
    skipped = f" · GradScaler skipped {acc['skipped_steps']}" if acc.get("skipped_steps") else ""
    losses = f"loss {acc['loss']:.4g} (fp32 {acc['loss_fp32']:.4g})"
    if acc.get("allowed") is None:
        return losses + skipped
    if acc.get("rule") == "fall":
        return (f"{losses} · fell {acc['kept']:.0%} of fp32's {acc['fall_fp32']:.2g}, needs "
                f"{1 - acc['allowed']:.0%} (fp32 spread {acc['fall_spread']:.2g}){skipped}")
    return (f"{losses} · gap {acc['gap']:.2g}, allowed {acc['allowed']:.2g} (fp32 noise {acc['noise']:.2g}; its "
            f"loss fall within it){skipped}")


def ladder_table(rows: list[dict], title: str) -> Table:
    t = Table(title=title)
    for col, justify in (("rung", "left"), ("status", "left"), ("throughput", "right"),
                         ("step ms (median ± IQR)", "right"), ("vs prev", "right"), ("vs fp32", "right"),
                         ("peak GiB", "right"), ("MFU", "right"), ("compile s", "right"), ("accuracy", "left"),
                         ("note", "left")):
        t.add_column(col, justify=justify, overflow="fold")
    for r in rows:
        m = r.get("metrics") or {}
        pays = [f"pays its longer compile after {m['pays_after_steps']:,.0f} steps"] if m.get("pays_after_steps") \
            else []
        note = r.get("message") or "; ".join([*(r.get("warnings") or []), *pays, *(m.get("notes") or [])])
        t.add_row(r["precision"], status_cell(r["status"]),
                  f"{m['throughput']:,.0f} {m.get('unit', '')}" if m.get("throughput") else "",
                  fmt_ms(r),
                  _x(m.get("speedup_prev")) + (f" ({m['prev']})" if m.get("prev") and _over(r) else ""),
                  _x(m.get("speedup_fp32")),
                  f"{m['peak_mem_gib']:.1f}" if m.get("peak_mem_gib") else "",
                  f"{m['mfu']:.0%}" if m.get("mfu") else "",
                  f"{m['compile_s']:.1f}" if m.get("compile_s") is not None else "", accuracy_cell(r), note)
    return t


def _over(r: dict) -> bool:
    """Does the row's recipe build on a rung other than the one before (its vs-prev names that rung)?"""
    return getattr(recipes.RECIPES.get(r["precision"]), "over", None) is not None


def print_ladder(results: list[dict], out) -> None:
    """One table per model, mode and batch, rungs in the order they ran, with what each rung runs; then
    throughput against batch for --batch auto."""
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault(ladder.group_key(r["shape"]), []).append(r)
    for (model, sizes, mode, batch, nproc, par), rows in groups.items():
        basis = next(((r["metrics"].get("mfu_basis") or {}).get("source") for r in rows
                      if (r.get("metrics") or {}).get("mfu_basis")), None)
        title = f"{model}{f' ({sizes})' if sizes else ''} · {mode} · batch {batch}" + \
            (f" a GPU · {nproc} ranks · {par}" if nproc else "") + (f" · MFU against the {basis}" if basis else "")
        out.print(ladder_table(rows, title))
        runs = [f"{r['precision']} = {r['metrics']['recipe']}" for r in rows
                if r["status"] != "skipped" and (r.get("metrics") or {}).get("recipe") not in (None, r["precision"])]
        if runs:
            out.print("  " + "; ".join(runs))
        for r in rows:
            curve = (r.get("metrics") or {}).get("batch_curve")
            if curve:
                points = ", ".join(f"{p['batch']}: {p['throughput']:,.0f}" if p.get("throughput")
                                   else f"{p['batch']}: {p['status']}" for p in curve)
                found = "largest batch that fits" if r["shape"].get("batch") == "auto" else "searched batch"
                out.print(f"  {r['precision']}: {found} {r['metrics'].get('batch')}, fastest per item at "
                          f"batch {r['metrics'].get('fastest_batch')}; {r['metrics'].get('unit', '')} by batch: "
                          f"{points}" + "".join(f"; batch {p['batch']}: {p['note']}" for p in curve if p.get("note")))
        if nproc:
            out.print(scaling_lines(rows))


def scaling_lines(rows: list[dict]) -> str:
    """Under an N-rank table: each recipe's scaling against one GPU and its exposed communication."""
    lines = []
    for r in rows:
        m = r.get("metrics") or {}
        eff, share = m.get("scaling_efficiency"), m.get("exposed_comm_share")
        if eff is None and share is None:
            continue
        parts = [f"{m['speedup_1gpu']:.2f}x one GPU, scaling efficiency {eff:.2f}" if eff is not None else
                 "no one-GPU row to compare with"]
        if share is not None:
            parts.append(f"exposed communication {share:.1%} of a step ({m.get('exposed_basis')})")
            if m.get("gpu_busy") is not None:
                parts.append(f"GPU busy {m['gpu_busy']:.0%} of a step (the rest waits on the host)")
        elif m.get("exposed_note"):
            parts.append(f"exposed communication {m['exposed_note']}")
        if m.get("parallel_options"):
            parts.append(", ".join(f"{k}={v}" for k, v in m["parallel_options"].items()))
        lines.append(f"  {r['precision']}: " + "; ".join(parts))
        if m.get("breakdown"):
            lines.append(f"    where a step goes: {overlap.breakdown_line(m['breakdown'])}; the cause: {m['cause']}")
    return "\n".join(lines)
