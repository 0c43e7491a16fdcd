"""Reads rows of `row_mib` MiB under an address-space limit of what the interpreter maps now
plus `room_mib`: prints the open and first-batch seconds, and either the batch's copy or the
refusal, as JSON on the last line.

    huge_rows.py FILE ROOM_MIB BATCH_SIZE
"""

import json
import resource
import sys
import time

import gpufeed


def vm_size():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize")


path, room_mib, batch_size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
limit = vm_size() + room_mib * 2**20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
out = {"limit": limit}
t = time.monotonic()
try:
    loader = gpufeed.Loader(path, batch_size=batch_size, device="cpu", shuffle=False)
    out["open_s"] = time.monotonic() - t
    t = time.monotonic()
    batch = next(iter(loader))
    out["first_batch_s"] = time.monotonic() - t
    copy = batch["x"].numpy().copy()  # the user's own copy of one batch
    out["copy_shape"] = list(copy.shape)
    out["copy_sum"] = int(copy[:, ::4096].astype("int64").sum())
except gpufeed.Error as e:
    out["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
