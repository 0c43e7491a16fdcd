"""The GIL is released while the loop waits for a batch: other Python threads run."""

import threading
import time

import gpufeed


def test_other_threads_run_while_the_loader_waits():
    # Slow batches (32 MiB of synthetic data each, one worker), so next() waits.
    source = gpufeed.synthetic("x:float32[262144]", samples=32 * 10)
    loader = gpufeed.Loader(source, batch_size=32, workers=1, prefetch=1, shuffle=False,
                            device="cpu")
    counter = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            counter[0] += 1

    thread = threading.Thread(target=spin)
    thread.start()
    waited, progress = 0.0, 0
    try:
        impl, handle = loader._impl, None
        for _ in range(10):
            handle = None  # give the buffer back before asking for the next
            before = counter[0]
            start = time.perf_counter()
            handle = impl.next()  # C++: waits for the worker
            waited += time.perf_counter() - start
            progress += counter[0] - before
            assert handle is not None
    finally:
        stop.set()
        thread.join()
    assert waited > 0.05, f"next() waited only {waited:.3f}s: the test needs slower batches"
    # Holding the GIL in next() would freeze the spinning thread for the whole wait.
    assert progress / waited > 100_000, (progress, waited)
