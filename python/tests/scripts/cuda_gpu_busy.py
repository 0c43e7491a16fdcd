"""Event-measured GPU busy share through the DLPack protocol, against the fake libcuda.so.1:
a consumer stream busy 10 ms per step (fake_cuda_stream_sleep stands in for its kernels),
batches taken with __dlpack__(stream=...). Run with GPUFEED_CUDA_LIBRARY set to the fake.

usage: cuda_gpu_busy.py FAKE_LIBCUDA   prints "ok" and the figures, or fails an assert
"""

import ctypes
import json
import sys

from gpufeed import _gpufeed

fake = ctypes.CDLL(sys.argv[1])  # the same library the engine dlopens


def check(result):
    assert result == 0, f"driver call failed: {result}"


ctx = ctypes.c_void_p()
check(fake.cuInit(0))
check(fake.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
check(fake.cuCtxSetCurrent(ctx))
stream = ctypes.c_void_p()
check(fake.cuStreamCreate(ctypes.byref(stream), 0))


def run(loader, steps, name_stream):
    for _ in range(steps):
        batch = loader.next()
        field = batch.field("x")
        capsule = field.__dlpack__(stream=stream.value if name_stream else -1)
        check(fake.fake_cuda_stream_sleep(stream, ctypes.c_int64(10_000)))  # the step's kernels
        check(fake.cuStreamSynchronize(stream))  # loss.item()
        del capsule, field, batch
    loader.next()  # ends the last step
    check(fake.cuStreamSynchronize(stream))
    return json.loads(loader.stats_json())


steps = 20
source = _gpufeed.synthetic("x:float32[64]", 64 * 8, 1)
loader = _gpufeed._Loader(source, _gpufeed._LoaderOptions(
    batch_size=8, shuffle=False, device="cuda:0", workers=2, prefetch=2))
stats = run(loader, steps, True)
assert stats["gpu_event_steps"] >= steps - 2, stats
assert stats["gpu_busy_fraction"] > 0.9, stats
report = json.loads(_gpufeed.diagnose(loader)[0])
assert report["gpu_measure"] == "events", report
assert report["gpu_busy_fraction"] > 0.9, report
assert report["verdict"] != "input-bound", report
loader.close()
del loader

# stream=-1 (the consumer synchronizes itself): no stream named, nothing measured.
quiet = _gpufeed._Loader(source, _gpufeed._LoaderOptions(
    batch_size=8, shuffle=False, device="cuda:0", workers=2, prefetch=2))
quiet_stats = run(quiet, 8, False)
assert quiet_stats["gpu_event_steps"] == 0 and quiet_stats["gpu_busy_fraction"] is None, quiet_stats
quiet.close()
del quiet

check(fake.cuStreamDestroy_v2(stream))
check(fake.cuDevicePrimaryCtxRelease_v2(0))
failures = [fake.fake_cuda_failure(i) for i in range(fake.fake_cuda_failures())]
assert not failures, failures
fake.fake_cuda_reset()
print("ok", stats["gpu_event_steps"], "steps, busy", round(stats["gpu_busy_fraction"], 3),
      "verdict", report and report["verdict"])
