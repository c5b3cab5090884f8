"""One `tcperf generate` row: a model at a precision, decoded by one loop at one batch size, timed and accounted.

The task a worker runs (task(case, device, job)): the first case of a (model, precision, loop) in a worker builds
the model (random weights, trained ones, or a folder's own), checks its accuracy against bf16 and allocates the
static KV cache for the largest batch of the sweep; every case then times whole generations at its batch: the
prefill (time to first token) and each decode step (inter-token latency) with CUDA events around the loop's calls
(perf_counter on a CPU), a warm-up generation first (it holds torch.compile's time, compile_s, and whether the
compile cache beside the store served it). A batch that runs out of memory is recorded as "oom" and ends the sweep.

Two accuracy checks, each meaning one thing (docs/generate.md, "What a row holds"). The kernel check
(tcperf.quant.check_layers) holds every quantized layer against its own dequantised weights before anything is
timed: a failure is a bug, stored as "wrong" with "kernel bug", not timed, and the command exits 1. The model check
runs only on weights that mean something, with text to judge them on (`stdlib`'s held-out bytes, a local folder's
own weights on --text): perplexity against bf16's within the recipe's perplexity_limit, and top-1 agreement; a
recipe outside its limit is timed all the same and stored as "wrong".

On a GPU each plain-loop row also says where its decode step goes (metrics["parts"], tcperf.generate.parts).
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass

import torch

from .. import accuracy, compile_cache, engine, peaks
from .. import quant as core_quant
from ..errors import one_line
from ..records import Case, Job, Result
from ..timing import Measurement
from . import accounting, hf, loop, parts, quant, trained
from . import model as plain

NOT_JUDGED = "model accuracy: not judged on random weights"
MIN_REPEATS, MAX_REPEATS = 3, 50               # timed generations a batch
MEMORY_SHARE = 0.85                            # of the free memory the KV cache and activations may take
_SESSIONS: dict[tuple, "Session"] = {}
_COPY: dict = {}                               # the copy bandwidth this worker measured (_ceilings)


@dataclass(frozen=True)
class GenerateArgs:
    """What a row needs beyond its shape and precision: the model's source (hf.source's), the sweep's largest batch
    (its KV cache's size), compile (None: the loop's default) and (CPU tests) the batch above which memory runs out."""
    source: dict
    max_batch: int
    compile: bool | None = None
    oom_above: int | None = None


def case(src: dict, loop_name: str, recipe: str, batch: int, prompt: int, output: int, *, max_batch: int,
         compile: bool | None = None, seed: int = 0, oom_above: int | None = None, kernel: str = "default") -> Case:
    """A runner case: one row. oom_above simulates running out of memory above that batch (CPU tests). A kernel
    other than the default (quant.KERNELS) is part of the shape: rows on different kernels are different rows."""
    shape = {"model": src["name"], "batch": batch, "prompt": prompt, "output": output, "loop": loop_name}
    return Case("generate", shape if kernel == "default" else {**shape, "kernel": kernel}, recipe, task,
                suite="generate", seed=seed, args=GenerateArgs(src, max_batch, compile, oom_above))


def task(case: Case, device, job: Job) -> Result:
    """One row, in a worker: the session of its model, precision and loop (made at its first batch), timed."""
    r = quant.get(case.precision)
    row = _base(case, r)
    why = quant.unsupported(r, device) or loop_reason(case, r) or quant.kernel_reason(case.shape.get("kernel"), device)
    if why:
        return skipped_row(case, why)
    ceilings = _ceilings(job.ceilings or {}, device)      # before the session takes the GPU's memory
    session = _session(case, r, device)
    batch = case.shape["batch"]
    if session.stopped:
        return row.replace(status="skipped", message=session.stopped)
    if not session.kernel["passed"]:
        return row.replace(status="wrong", message=kernel_bug(session.kernel), error=session.kernel["rel_error"],
                           metrics={**row.metrics, "kernel": session.kernel})
    if batch > session.max_batch:
        session.stopped = f"batch {batch} ran out of memory: the sweep ends there"
        return row.replace(status="oom", message=session.no_room(batch))
    try:
        oom_above = case.args.oom_above
        if oom_above is not None and batch > oom_above:
            raise torch.OutOfMemoryError(f"simulated out of memory: batch {batch} > {oom_above}")
        timed = session.time(batch, dataclasses.asdict(job.timing), job.compile_cache)
    except torch.OutOfMemoryError:
        session.stopped = f"batch {batch} ran out of memory: the sweep ends there"
        raise                                   # the worker records it as "oom"
    row = figures(row, session, batch, timed, ceilings, device)
    if device.type == "cuda" and isinstance(session, PlainSession):
        row.metrics["parts"] = session.parts(batch, row.median_ms, row.metrics)
    return row


def _ceilings(stored: dict, device) -> dict:
    """The ceilings `tcperf ceilings` stored; without a copy bandwidth among them, on a GPU, one copy timed now, once
    a worker (tcperf.peaks.measure_now), so that every row's byte limit is this GPU's and not its datasheet's."""
    if stored.get("bandwidth") or device.type != "cuda":
        return stored
    if "bandwidth" not in _COPY:
        _COPY.update(peaks.measure_now(device))
        torch.cuda.empty_cache()            # its 2 GiB back, before the KV cache is sized from the free memory
    return {**stored, **_COPY} if _COPY.get("bandwidth") else stored


def loop_reason(case: Case, r: quant.GenRecipe) -> str | None:
    """Why this loop cannot run this model or recipe, else None."""
    loop_name, src = case.shape["loop"], case.args.source
    if loop_name == "plain" and src["kind"] == "config" and hf.args_of(src) is None:
        return "the plain loop runs Llama-shaped models (tcperf's own decoder); this config runs in the hf loop"
    if loop_name == "plain" and src["kind"] == "factory" and not src.get("transformer"):
        return ("the plain loop runs tcperf.generate.model.Transformer; this factory's model runs in the hf loop "
                "(--loop hf)")
    if loop_name == "hf" and src["kind"] == "factory" and src.get("transformer"):
        return ("the hf loop runs transformers' generate; this factory's model, a tcperf.generate.model.Transformer, "
                "runs in the plain loop (--loop plain)")
    if loop_name == "hf" and src["kind"] == "trained":
        return "the trained model is tcperf's own decoder: it runs in the plain loop (--loop plain)"
    if loop_name == "hf" and r.kv == "fp8":
        return "the hf loop keeps the KV cache in the model's dtype (transformers' StaticCache): no fp8 cache"
    return None


def skipped_row(case: Case, why: str) -> Result:
    """The row of a case that cannot run here, and why (the parent makes it without a worker: a case's `known` row)."""
    return _base(case, quant.get(case.precision)).replace(status="skipped", message=why)


def _base(case: Case, r: quant.GenRecipe) -> Result:
    s = case.shape
    return Result("generate", s, r.name, suite="generate", tolerance=core_quant.KERNEL_TOLERANCE,
                  metrics={"label": f"{s['model']} b={s['batch']} {s['prompt']}+{s['output']} {s['loop']}",
                           "loop": s["loop"], "recipe": r.about, "kv_cache": str(r.kv_dtype).split(".")[-1]})


def _session(case: Case, r: quant.GenRecipe, device) -> "Session":
    s = case.shape
    key = (s["model"], r.name, s["loop"], s["prompt"], s["output"], case.args.max_batch, s.get("kernel"))
    if key not in _SESSIONS:
        _SESSIONS.clear()                       # one model in memory at a time
        if device.type == "cuda":
            torch.cuda.empty_cache()
        _SESSIONS[key] = (PlainSession if s["loop"] == "plain" else HfSession)(case, r, device)
    return _SESSIONS[key]


# --- accuracy ---------------------------------------------------------------------------------------------------
def kernel_bug(k: dict) -> str:
    return (f"kernel bug: {k['layer']} is {k['rel_error']:.3g} off its own dequantised weights (tolerance "
            f"{k['tolerance']:g}): not timed")


def model_accuracy(logits: torch.Tensor, ref: torch.Tensor, tokens: torch.Tensor, limit: float,
                   about: str | None = None) -> dict:
    """A recipe's logits on held-out tokens (rows, T) against bf16's: both perplexities, the rise, top-1 agreement
    (tcperf.accuracy's), and the verdict against the recipe's perplexity limit. about: what the tokens are."""
    ppl, ppl_bf16 = trained.perplexity(logits, tokens), trained.perplexity(ref, tokens)
    acc = accuracy.compare_outputs([logits], [ref])
    rise = ppl / ppl_bf16 - 1
    return {"judged": True, "perplexity": ppl, "perplexity_bf16": ppl_bf16, "rise": rise, "limit": limit,
            "passed": rise <= limit, "top1_agree": acc.get("top1_agree"), "rel_error": acc["rel_error"],
            "text": about or f"{tokens.shape[0]} held-out windows of {tokens.shape[1]} bytes",
            "basis": quant.PERPLEXITY_BASIS}


def _prompts(rows: int, length: int, vocab: int, device, seed: int) -> torch.Tensor:
    """Random token ids (never the pad id 0), the same for every precision at the same seed."""
    return torch.randint(1, vocab, (rows, length), generator=torch.Generator().manual_seed(seed)).to(device)


# --- sessions: one model, one recipe, one loop, in one worker -----------------------------------------------------
class Session:
    """What every batch of a sweep shares: the model (quantized), its accuracy, its byte accounting."""
    stopped: str | None = None
    own_weights = False                         # build() read the folder's weights (not random ones)
    cache_status = "off"                        # the compile cache: hit, miss, off (tcperf.compile_cache)

    def __init__(self, case: Case, r: quant.GenRecipe, device):
        s = case.shape
        self.r, self.device, self.seed, self.compile = r, torch.device(device), case.seed, case.args.compile
        self.prompt, self.output, self.src, self.loop_name = s["prompt"], s["output"], case.args.source, s["loop"]
        self.shape = s                          # the first case's: every batch of the session shares the rest
        self.notes: list[str] = []
        self.build()                            # self.model (bf16 or the recipe's activation dtype), self.args
        ref = self.reference() if self.judged else None     # bf16's logits, before the model is quantized
        self.notes += quant.quantize(self.model, self.r, s.get("kernel"))
        self.kernel = core_quant.check_layers(self.model)
        self.accuracy = self.check(ref) if self.judged else {"judged": False, "note": self.not_judged()}
        del ref
        if self.judged and self.device.type == "cuda":
            torch.cuda.empty_cache()    # the logits' GiBs (rows x T x vocab, in float64 to compare) back before the
                                        # KV cache is sized from the free memory
        self.dims = accounting.model_dims(self.model, self.args, torch.empty((), dtype=self.r.kv_dtype).element_size())
        self.max_batch = self.fitting_batch(case.args.max_batch)

    @property
    def judged(self) -> bool:
        """Whether the weights are trained (model accuracy means something on them) and there is text to judge
        them on: tcperf's trained model and its held-out bytes, or a folder's own weights and --text."""
        return self.src["kind"] == "trained" or bool(self.own_weights and self.src.get("text"))

    def not_judged(self) -> str:
        if self.own_weights:
            return "model accuracy: not judged (give --text FILE to judge this folder's weights on your text)"
        return NOT_JUDGED

    def eval_tokens(self) -> tuple[torch.Tensor, str]:
        """The tokens accuracy is judged on (rows, T), and what they are."""
        if self.src["kind"] == "trained":
            return trained.held_out(self.src["size"]), ""
        tokens = hf.text_tokens(self.src["name"], self.src["text"])
        return tokens, (f"{tokens.shape[0]} window(s) of {tokens.shape[1]} tokens of {self.src['text']} (at most "
                        f"{hf.TEXT_ROWS} x {hf.TEXT_TOKENS})")

    def reference(self) -> tuple[torch.Tensor, torch.Tensor, str]:
        """The text (rows, T), bf16's logits on it, and what the text is; before the model is quantized."""
        tokens, about = self.eval_tokens()
        tokens = tokens.to(self.device)
        bf16 = self.model if self.r.act == torch.bfloat16 else self.load(torch.bfloat16)
        return tokens, self.logits(bf16, tokens, torch.bfloat16), about

    def check(self, ref) -> dict:
        tokens, ref_logits, about = ref
        return model_accuracy(self.logits(self.model, tokens, self.r.kv_dtype), ref_logits, tokens,
                              self.r.perplexity_limit, about or None)

    def row_bytes(self) -> float:
        return accounting.row_memory(self.args, self.prompt, self.output, self.dims["kv_element_bytes"])

    def fitting_batch(self, wanted: int) -> int:
        """The largest batch <= wanted whose cache and activations fit in MEMORY_SHARE of the free memory."""
        if self.device.type != "cuda":
            return wanted
        self.free_bytes = torch.cuda.mem_get_info(self.device)[0]
        return max(0, min(wanted, int(self.free_bytes * MEMORY_SHARE / self.row_bytes())))

    def no_room(self, batch: int) -> str:
        return (f"not tried: batch {batch} needs ~{batch * self.row_bytes() / 2**30:.1f} GiB for its KV cache and "
                f"activations, {getattr(self, 'free_bytes', 0) / 2**30:.1f} GiB free after the weights: the sweep "
                "ends there")

    def time(self, batch: int, timing: dict, cache_folder: str | None = None) -> dict:
        """A warm-up generation (compiles, captures; torch.compile's products loaded from and saved to a file in
        cache_folder, tcperf.compile_cache), then whole generations until the time budget is spent."""
        prompt = _prompts(batch, self.prompt, self.args.vocab, self.device, self.seed + 7)
        cache = compile_cache.CompileCache(cache_folder, self.cache_key(batch),
                                           f"generate-{self.r.name}-{self.loop_name}-b{batch}")
        cache.load()
        t0 = time.perf_counter()
        self.generation(prompt)
        compile_s = time.perf_counter() - t0
        status = cache.save()
        # a batch whose warm-up compiled nothing reuses the session's compiled step: the status of that compile
        self.cache_status = status if status != "off" else self.cache_status
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        ttfts, gaps, start = [], [], time.perf_counter()
        budget_s = timing.get("rep_ms", 1000.0) * 1e-3
        while len(ttfts) < MIN_REPEATS or (time.perf_counter() - start < budget_s and len(ttfts) < MAX_REPEATS):
            ttft, itl = self.generation(prompt)
            ttfts.append(ttft)
            gaps += itl
        peak = torch.cuda.max_memory_allocated(self.device) / 2**30 if self.device.type == "cuda" else None
        return {"ttft": Measurement(ttfts), "itl": Measurement(gaps), "compile_s": compile_s, "peak_mem_gib": peak,
                "generations": len(ttfts), "compile_cache": self.cache_status}

    def cache_key(self, batch: int) -> dict:
        """What picks the compile cache's file (Inductor's own keys then decide whether each entry fits: a wrong
        pick costs a compile, never a wrong kernel)."""
        case = {k: v for k, v in self.shape.items() if k != "batch"}    # model, lengths, loop (and any kernel)
        return compile_cache.key_of(device=self.device, case=case, dims=repr(self.args), precision=self.r.name,
                                    batch=batch, max_batch=self.max_batch, compile=self.compile)


class PlainSession(Session):
    """tcperf's Llama decoder (tcperf.generate.model) and the hand loop (tcperf.generate.loop)."""

    def build(self) -> None:
        if self.src["kind"] == "config" and self.src.get("saved_weights"):
            mismatch = hf.plain_mismatch(self.src)
            self.own_weights = mismatch is None
            if mismatch:
                self.notes.append(f"the plain loop runs random weights of this shape ({mismatch}): the folder's "
                                  f"weights, and their accuracy, are in the hf loop (--loop hf)")
        self.model = self.load(self.r.act)
        self.args = self.model.args

    def load(self, dtype: torch.dtype) -> plain.Transformer:
        """The model in `dtype`: trained weights, a folder's own, a factory's, or random ones at the seed."""
        if self.src["kind"] == "trained":
            return trained.load(self.src["weights"], self.device, dtype)
        if self.own_weights:
            return hf.load_plain(self.src, self.device, dtype)
        args = hf.args_of(self.src) if self.src["kind"] != "factory" else None
        if args is not None:
            return plain.build(args, self.device, dtype, self.seed)
        lm = hf.load_factory(self.src["name"])      # a tcperf Transformer: loop_reason skipped the others
        return lm.to(device=self.device, dtype=dtype).eval().requires_grad_(False)

    @staticmethod
    def logits(model, tokens: torch.Tensor, kv_dtype) -> torch.Tensor:
        model.setup_caches(tokens.shape[0], tokens.shape[1], kv_dtype)
        return loop.teacher_forced_logits(model, tokens)

    def fitting_batch(self, wanted: int) -> int:
        batch = super().fitting_batch(wanted)
        self.model.setup_caches(max(batch, 1), self.prompt + self.output, self.r.kv_dtype)
        self.step = loop.compiled_step(self.model, self.device, self.compile)
        return batch

    def parts(self, batch: int, step_ms: float, m: dict) -> dict:
        """Where the warm decode step's time goes (tcperf.generate.parts); a failure is said, not raised."""
        token = torch.ones(batch, 1, dtype=torch.long, device=self.device)
        pos = torch.tensor([self.prompt], device=self.device)
        try:
            return parts.profile_step(self.step, token, pos, self.device, step_ms, m["decode"]["weight_bytes"],
                                      m["peak"]["bandwidth_gbs"])
        except Exception as e:      # noqa: BLE001 - the row is measured; only its profile is missing
            return {"error": one_line(e)}

    def generation(self, prompt: torch.Tensor) -> tuple[float, list[float]]:
        """One prefill and output - 1 decode steps, a mark after each: (TTFT ms, the steps' ms)."""
        marks = Marks(self.device, self.output + 1)
        marks.mark()
        token = loop.prefill(self.model, prompt)
        marks.mark()
        pos = torch.tensor([prompt.shape[1]], device=self.device)
        for _ in range(self.output - 1):
            token = self.step(token, pos)
            pos += 1
            marks.mark()
        ms = marks.intervals()
        return ms[0], ms[1:]


class HfSession(Session):
    """A transformers causal LM (or a factory's) and transformers' generate with a static cache."""

    def build(self) -> None:
        self.own_weights = bool(self.src.get("saved_weights"))
        self.model = self.load(self.r.act)
        self.args = hf.dims_args(self.model)

    def load(self, dtype: torch.dtype):
        return hf.build_hf(self.src, self.device, dtype, self.seed)

    @staticmethod
    @torch.no_grad()
    def logits(model, tokens: torch.Tensor, kv_dtype=None) -> torch.Tensor:
        """Logits at every position of tokens (B, T) in one forward (the hf loop's KV cache is the model's dtype)."""
        return hf.logits_of(model, tokens).float()

    def generation(self, prompt: torch.Tensor) -> tuple[float, list[float]]:
        with torch.no_grad():
            return hf.timed_generate(self.model, prompt, self.output, self.compile)


class Marks:
    """Time marks along the loop: CUDA events recorded on the stream (created before the loop, so their creation
    is not timed), or perf_counter on a CPU; intervals() in ms."""

    def __init__(self, device: torch.device, n: int):
        self.cuda = device.type == "cuda"
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(n)] if self.cuda else []
        self.times: list[float] = []
        self.i = 0

    def mark(self) -> None:
        if self.cuda:
            self.events[self.i].record()
            self.i += 1
        else:
            self.times.append(time.perf_counter())

    def intervals(self) -> list[float]:
        if not self.cuda:
            return [(b - a) * 1e3 for a, b in zip(self.times, self.times[1:])]
        torch.cuda.synchronize()                # sync point: read the events once all have completed
        used = self.events[:self.i]
        return [a.elapsed_time(b) for a, b in zip(used, used[1:])]


# --- the row ----------------------------------------------------------------------------------------------------
def _percentiles(xs: list[float]) -> tuple[float, float]:
    if len(xs) < 2:
        return xs[0], xs[0]
    q = statistics.quantiles(xs, n=100, method="inclusive")
    return q[89], q[98]


def figures(row: Result, s: Session, batch: int, t: dict, ceilings: dict, device) -> Result:
    """The row's numbers: latencies with their spread, tokens/s, bytes and achieved bandwidth, prefill TFLOPS and
    MFU, the roofline's crossing batch, accuracy."""
    itl, ttft = t["itl"], t["ttft"]
    p90, p99 = _percentiles(itl.samples_ms)
    context = accounting.mean_context(s.prompt, s.output)
    step = accounting.decode_step(accounting.at_batch(s.dims, batch), batch, context)
    gbps = step["bytes"] / (itl.median_ms * 1e-3) / 1e9
    prefill_flops = accounting.prefill_flops(s.dims, batch, s.prompt)
    peak, peak_source = engine.peak_tflops(s.r.peak, device, ceilings)
    bandwidth, bw_source = _bandwidth(ceilings, device)
    prefill_tflops = prefill_flops / (ttft.median_ms * 1e-3) / 1e12
    m = row.metrics
    m.update(
        ttft_ms={"median": ttft.median_ms, "iqr": ttft.iqr_ms, "n": ttft.n},
        itl_ms={"median": itl.median_ms, "p90": p90, "p99": p99, "iqr": itl.iqr_ms, "mean": itl.mean_ms, "n": itl.n},
        tokens_s_user=1e3 / itl.mean_ms, tokens_s_total=batch * 1e3 / itl.mean_ms,
        decode={**step, "context": context, "gbps": gbps, "tflops": step["flops"] / (itl.median_ms * 1e-3) / 1e12,
                "bw_share": gbps / ceilings["bandwidth"] if ceilings.get("bandwidth") else None},
        prefill={"ms": ttft.median_ms, "iqr": ttft.iqr_ms, "flops": prefill_flops, "tflops": prefill_tflops,
                 "mfu": prefill_tflops / peak if peak else None},
        peak={"precision": s.r.peak, "tflops": peak, "source": peak_source, "bandwidth_gbs": bandwidth,
              "bandwidth_source": bw_source},
        roofline_batch=accounting.roofline_batch(s.dims, context, peak, bandwidth) if peak and bandwidth else None,
        dims=s.dims, compile_s=t["compile_s"], compile_cache=t["compile_cache"], peak_mem_gib=t["peak_mem_gib"],
        generations=t["generations"], kernel=s.kernel, accuracy=s.accuracy, notes=list(s.notes), unit="tokens/s",
        throughput=batch * 1e3 / itl.mean_ms)
    if not ceilings.get("bandwidth"):
        m["notes"].append("no copy bandwidth (none stored, none measured here): no bandwidth share")
    row = row.replace(status="ok", samples=itl.samples_ms[:4000], median_ms=itl.median_ms, iqr_ms=itl.iqr_ms,
                      min_ms=itl.min_ms, mean_ms=itl.mean_ms, n=itl.n, flops=step["flops"], bytes=step["bytes"],
                      tflops=m["decode"]["tflops"], gbps=gbps, error=s.kernel["rel_error"])
    for name, meas in (("inter-token latency", itl), ("time to first token", ttft)):
        if meas.unstable:
            row.warnings.append(f"{name} unstable: IQR/median = {meas.spread:.0%}")
    a = s.accuracy
    if a["judged"] and not a["passed"]:
        row.status = "wrong"
        row.message = (f"perplexity {a['perplexity']:.4g} is {a['rise']:+.1%} over bf16's {a['perplexity_bf16']:.4g} "
                       f"(limit +{a['limit']:.0%})")
    return row


def _bandwidth(ceilings: dict, device) -> tuple[float | None, str | None]:
    if ceilings.get("bandwidth"):
        return float(ceilings["bandwidth"]), ("copy bandwidth " + ceilings["from"] if ceilings.get("from") else
                                              "measured copy bandwidth")
    if device.type != "cuda":
        return None, None
    value = peaks.datasheet(torch.cuda.get_device_name(device)).get("bandwidth_gbs")
    return (value, "datasheet bandwidth") if value else (None, None)
