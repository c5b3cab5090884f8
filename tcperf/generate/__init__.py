"""LLM inference at every precision (`tcperf generate`): prefill and decode against the memory-bandwidth limit.
docs/generate.md tells what it measures; docs/design.md what each module here does.
"""
