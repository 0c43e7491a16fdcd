"""Iterates a loader until SIGINT; prints the process's thread counts around it.

usage: interrupt.py close|exit
  close: catch KeyboardInterrupt, close the loader, print thread counts, re-raise
  exit:  let KeyboardInterrupt end the interpreter with the loader still open
"""

import os
import signal
import sys
import time

import gpufeed

# A process started in the background by a non-interactive shell (as CI runners do) inherits
# SIGINT ignored, and Python then installs no handler: Ctrl-C would never reach the loop.
# This test is about what gpufeed does on KeyboardInterrupt, so it asks for Python's handler.
signal.signal(signal.SIGINT, signal.default_int_handler)


def threads():
    return len(os.listdir("/proc/self/task"))


mode = sys.argv[1]
source = gpufeed.synthetic("mel:float32[1,32,32],label:int64[]", samples=100_000)
# Baseline after a first loader has come and gone: runtime helper threads that start with the
# first thread (a sanitizer's, say) are counted in it.
with gpufeed.Loader(source, batch_size=64, workers=1, device="cpu") as warmup:
    next(iter(warmup))
baseline = threads()
loader = gpufeed.Loader(source, batch_size=64, workers=3, device="cpu")
print("ready", baseline, flush=True)
try:
    while True:
        for batch in loader:
            time.sleep(0.0005)  # the training step
except KeyboardInterrupt:
    if mode == "close":
        during = threads()
        loader.close()
        print("interrupted", baseline, during, threads(), flush=True)
    raise
