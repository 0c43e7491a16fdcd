"""Run by torchrun (2 processes, gloo, CPU): the distributed plumbing of gpufeed.

- one epoch over DATA_DIR per rank (rank and world size from torchrun's environment);
- report(all_ranks=True) on every rank;
- a remote listing shared by rank 0, through a fake of the two _gpufeed functions
  (list_remote, add_remote_manifest) that the remote part provides;
- resuming at world size 2 from a state saved by four simulated ranks.
Writes OUT_DIR/rank{R}.json.

usage: torchrun --nproc_per_node 2 torchrun_dist.py DATA_DIR OUT_DIR
"""

import datetime
import json
import os
import sys
import types

import torch.distributed as dist

import gpufeed
from gpufeed import _distributed, _gpufeed

data_dir, out_dir = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
rank = dist.get_rank()
out = {"rank": rank, "world": dist.get_world_size()}

# A fake remote part: rank 0 lists, the others must only be handed the list.
listed, registered = [], {}


def list_remote(uri):
    listed.append(uri)
    if "missing" in uri:
        raise _gpufeed.IoError(f"{uri}: 404 Not Found")
    return [(uri + "mel.npy", 4096, f'"etag-of-rank-{rank}"'), (uri + "label.npy", 812, '"e2"')]


_distributed._gpufeed = types.SimpleNamespace(
    list_remote=list_remote, Error=_gpufeed.Error, IoError=_gpufeed.IoError,
    add_remote_manifest=lambda uri, objects: registered.__setitem__(uri, objects))

loader = gpufeed.Loader(data_dir, batch_size=16, seed=5, device="cpu", workers=1)
out["batches"] = [[int(i) for i in batch.indices] for batch in loader]
report = loader.report(all_ranks=True)
out["report"] = {k: report[k] for k in ("ranks", "slowest", "ranks_text")}

out["shared"] = _distributed.manifest_for("s3://bucket/train/")
try:  # the Loader lists before it opens (which this build cannot, for s3://)
    gpufeed.Loader("s3://bucket/other/", batch_size=4, device="cpu")
except gpufeed.Error:
    pass
try:
    _distributed.manifest_for("s3://bucket/missing/")
    out["missing"] = "no error"
except gpufeed.Error as e:
    out["missing"] = f"{type(e).__name__}: {e}"
out["listed"], out["registered"] = listed, registered

# Four ranks (simulated here) took 3 batches each; rank 3's state resumes at this world size.
saved = gpufeed.Loader(data_dir, batch_size=8, seed=2, device="cpu", rank=3, world_size=4)
for _, _ in zip(range(3), saved):
    pass
resumed = gpufeed.Loader(data_dir, batch_size=8, seed=2, device="cpu", workers=1)
resumed.load_state_dict(saved.state_dict())
out["consumed"] = saved.state_dict()["global_consumed"]
out["resumed"] = [[int(i) for i in batch.indices] for batch in resumed]
whole = gpufeed.Loader(data_dir, batch_size=8, seed=2, device="cpu", rank=0, world_size=1)
out["order"] = [int(i) for batch in whole for i in batch.indices]

with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
    json.dump(out, f)
dist.barrier()
dist.destroy_process_group()
