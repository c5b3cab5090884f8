"""The streams of benchmarks/workload_gpu.py (issue 57's set): every factory file's `tiny()` loads as `tcperf advise`
loads it (tcperf.source.load_spec) and runs one step on the CPU, model and loss; the registry says of each what the
model is (its mode, whether it has 2-D convolutions); and the plain loops' rules for padding hold on small models.
New streams are picked up from the registry (STREAMS)."""
import sys
from pathlib import Path

import pytest
import torch

from tcperf.source import load_spec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import plain_stream  # noqa: E402 - benchmarks/, the plain loop
import workload_gpu  # noqa: E402 - benchmarks/, the registry

STREAMS = sorted(workload_gpu.STREAMS)


@pytest.mark.parametrize("name", STREAMS)
def test_a_streams_tiny_factory_loads_as_tcperf_loads_it_and_runs_a_step(name):
    stream = workload_gpu.STREAMS[name]
    spec = load_spec(str(ROOT / stream.target("tiny")))
    assert spec.workload and len({tuple(tuple(t.shape) for t in (*a, *k.values()) if torch.is_tensor(t))
                                  for a, k in spec.workload}) > 1, "a stream of one shape is no workload"
    args, kwargs = spec.workload[1]
    model = spec.model.train(stream.mode == "train")
    if stream.mode == "train":
        loss = spec.loss_fn(model(*args, **kwargs))
        loss.backward()
        assert loss.dim() == 0 and torch.isfinite(loss)
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    else:
        assert spec.loss_fn is None
        with torch.no_grad():
            out = plain_stream.leaves(model(*args, **kwargs))
        assert out and all(torch.isfinite(t).all() for t in out)
    assert stream.conv == any(isinstance(m, torch.nn.Conv2d) for m in model.modules()), \
        "the registry's conv flag decides channels_last in the grid; the advisor reads the model's layers"


def test_the_set_holds_the_families_issue_57_names():
    own = [s for s in workload_gpu.STREAMS.values() if s.own]
    assert len(own) >= 8 and all(s.file.startswith("benchmarks/streams/") for s in own)
    assert {s.mode for s in own} == {"infer", "train"} and any(s.conv for s in own)
    files = {p.stem for p in (ROOT / "benchmarks" / "streams").glob("*.py")}
    assert files == {Path(s.file).stem for s in own}, "every stream file is registered, once"


def _stream(sizes, make):
    return [((make(n),), {}) for n in sizes]


def test_padding_is_refused_where_an_output_follows_no_input_and_allowed_where_each_follows_its_own():
    """A model that subsamples time by 4 (the GRU's front end) cannot have its padded outputs cut back: refused,
    with the sizes; a two-input model's outputs each follow their own input, even padded to the same bucket."""
    shorter = torch.nn.Conv1d(3, 4, 3, stride=4, padding=1)
    stream = [((torch.randn(2, 3, n),), {}) for n in (9, 17, 30)]
    varying = plain_stream.varying_dims(stream)
    refs = [[shorter(*x[0])] for x in stream]
    follows, why = plain_stream.follow_map(shorter, stream, refs, varying)
    assert follows == {} and "dimension 2 takes [3, 5, 8]" in why and "arg0 dim 2: [9, 17, 30]" in why

    class TwoLengths(torch.nn.Module):          # a T5-like pair: one output per input length
        def forward(self, src, tgt):
            return {"dec": tgt.float().unsqueeze(-1).repeat(1, 1, 2), "enc": src.float().unsqueeze(-1)}
    two = TwoLengths()
    stream = [((), {"src": torch.ones(2, s), "tgt": torch.ones(2, t)}) for s, t in ((20, 30), (50, 7), (9, 12))]
    varying = plain_stream.varying_dims(stream)
    refs = [plain_stream.leaves(two(**x[1])) for x in stream]
    follows, why = plain_stream.follow_map(two, stream, refs, varying)
    assert why is None and follows == {0: {1: ("tgt", 1)}, 1: {1: ("src", 1)}}
    loop = plain_stream.Loop(plain_stream.Hand(shapes="pad64"), two, "infer", None, varying, follows,
                             torch.device("cpu"))
    dec, enc = loop(stream[0])                  # both padded to 64, each cut back to its own length
    assert dec.shape == (2, 30, 2) and enc.shape == (2, 20, 1)


def test_padding_never_goes_past_the_longest_and_pads_labels_with_the_ignore_index():
    tensors = {"input_ids": torch.ones(2, 70, dtype=torch.long), "labels": torch.ones(2, 70, dtype=torch.long)}
    varying = {"input_ids": {1: 100}, "labels": {1: 100}}
    padded = plain_stream.pad_step(tensors, varying, 64)
    assert padded["input_ids"].shape == (2, 100) and padded["input_ids"][0, -1] == 0
    assert padded["labels"][0, -1] == -100 and plain_stream.bucket(5, 64, 100) == 64
