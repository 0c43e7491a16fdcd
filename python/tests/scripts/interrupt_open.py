"""Opens a loader whose cache takes seconds to fill, until SIGINT; prints thread counts.

usage: interrupt_open.py shm|ram SHM_DIR SAMPLES
  Pins itself to one CPU (the fill then takes about as long on any machine), prints
  "opening", opens gpufeed.Loader over SAMPLES synthetic samples of 64 KiB with cache=shm|ram
  (preloaded, in the constructor: background=False) and prints "opened" should the open
  ever end. On KeyboardInterrupt it prints "interrupted BASELINE AFTER" (the process's
  threads before the open and after the interrupt) and re-raises.
"""

import os
import signal
import sys

# As in interrupt.py: a process started in the background by a non-interactive shell inherits
# SIGINT ignored; this test is about what gpufeed does on KeyboardInterrupt.
signal.signal(signal.SIGINT, signal.default_int_handler)
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import gpufeed  # noqa: E402  (after the pinning: torch sizes its pools at import)


def threads():
    return len(os.listdir("/proc/self/task"))


tier, shm_dir, samples = sys.argv[1], sys.argv[2], int(sys.argv[3])
source = gpufeed.synthetic("x:float32[16384]", samples=samples)
baseline = threads()
print("opening", flush=True)
try:
    loader = gpufeed.Loader(source, batch_size=64, device="cpu",
                            cache=gpufeed.Cache(tier, preload=True, shm_dir=shm_dir,
                                                background=False))
except KeyboardInterrupt:
    print("interrupted", baseline, threads(), flush=True)
    raise
print("opened", flush=True)
