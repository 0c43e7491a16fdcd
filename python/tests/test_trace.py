"""The stage trace from Python: Loader(trace=...) writes it at close, loader.trace(path) on
request; the wait in next() is a torch.profiler range "gpufeed.next" when profiling is on."""
import json

import torch

import gpufeed


def _names(path):
    with open(path) as f:
        return [e["name"] for e in json.load(f)["traceEvents"]]


def test_trace_option_writes_at_close_and_trace_writes_on_request(tmp_path):
    end = tmp_path / "end.json"
    loader = gpufeed.Loader(gpufeed.synthetic("x:float32[4]", samples=100), batch_size=10,
                            workers=2, device="cpu", trace=str(end))
    assert sum(1 for _ in loader) == 10
    now = tmp_path / "now.json"
    loader.trace(now)
    names = _names(now)
    assert names.count("read") == 10
    assert names.count("wait in Next()") == 10
    assert "queue depth" in names
    assert not end.exists()
    loader.close()
    assert _names(end).count("read") == 10


def test_next_is_a_profiler_range_only_when_profiling(tmp_path):
    loader = gpufeed.Loader(gpufeed.synthetic("x:float32[4]", samples=40), batch_size=10,
                            device="cpu")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in loader:
            pass
    ranges = [e.name for e in prof.events() if e.name == "gpufeed.next"]
    assert len(ranges) == 5  # four batches and the call that ends the epoch
    # Off: the loop runs without the profiler (nothing to record, nothing raised).
    assert sum(1 for _ in loader) == 4
