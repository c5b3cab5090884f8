"""LLM inference at every precision (`tcperf generate`): prefill and decode against the memory-bandwidth limit.

    model.py       a Llama-style decoder written plainly, with a static KV cache (gpt-fast's way)
    quant.py       the precisions as data, on tcperf.quant's int8 / int4 weight-only and fp8 Linear layers
    loop.py        the decode loop a reader would write by hand (no timing inside)
    hf.py          the models besides the built-ins, and transformers' generate (the hf loop)
    accounting.py  the bytes and FLOPs of prefill and of a decode step; the roofline's crossing batch
    sweep.py       one row: the task a worker runs, a model at a precision swept over batches, timed and filled in
"""
