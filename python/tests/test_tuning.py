"""Online parallelism, the autotuner's log, and the doctor's verdict from Python."""

import io
import time

import pytest

import gpufeed


def test_set_parallelism_and_autotune_options():
    source = gpufeed.synthetic("x:float32[64]", samples=4000)
    loader = gpufeed.Loader(source, batch_size=50, workers=2, prefetch=4, device="cpu",
                            autotune=False)
    assert (loader.workers, loader.prefetch) == (2, 4)
    loader.set_parallelism(1, 3)
    assert (loader.workers, loader.prefetch) == (1, 3)
    loader.set_parallelism(8, 8)  # without autotune, within the starting workers and prefetch
    assert (loader.workers, loader.prefetch) == (2, 4)
    assert sum(len(b["x"]) for b in loader) == 4000  # still every sample once

    tuned = gpufeed.Loader(source, batch_size=50, autotune=gpufeed.Autotune(max_workers=2),
                           device="cpu")
    for _ in range(2):
        for batch in tuned:
            pass
    del batch
    stats = tuned.stats()
    assert isinstance(stats["tuning_log"], list)
    assert 1 <= tuned.workers <= 2


def test_diagnose_reports_a_verdict_with_its_numbers():
    # Big samples from one worker and an empty loop: the loop waits for reads.
    source = gpufeed.synthetic("x:float32[65536]", samples=32 * 20)
    loader = gpufeed.Loader(source, batch_size=32, workers=1, prefetch=1, device="cpu")
    for batch in loader:
        pass
    del batch
    # One short epoch is too little to judge: the doctor says what it saw, not a verdict.
    early = loader.diagnose()
    assert early["verdict"] == "measuring", early["text"]
    assert "a verdict needs at least 16 batches and 1.0 s" in early["headline"]
    # A second of the loop's time is enough.
    started = time.monotonic()
    while time.monotonic() - started < 1.3:
        for batch in loader:
            pass
    del batch
    report = loader.diagnose()
    assert report["verdict"] == "input-bound", report["text"]
    assert report["text"] and report["headline"]
    out = io.StringIO()
    printed = loader.report(file=out)
    assert printed["verdict"] == "input-bound"
    assert out.getvalue().startswith(printed["text"]) and "input-bound" in out.getvalue()
    with gpufeed.Monitor(interval=0.1) as monitor:
        report = loader.diagnose(monitor=monitor)
    assert report["verdict"] in {"healthy", "input-bound", "copy-bound", "host-bound",
                                 "memory-pressure"}
