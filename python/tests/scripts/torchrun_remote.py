"""One torchrun rank reading remote data: writes the sample indices of each of its batches."""
import os
import sys

import torch.distributed as dist

import gpufeed

uri, out = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
rank = dist.get_rank()
loader = gpufeed.Loader(uri, batch_size=16, device="cpu", shuffle=True, seed=1, workers=1)
with open(os.path.join(out, f"rank{rank}.txt"), "w") as f:
    for batch in loader:
        f.write(" ".join(str(int(i)) for i in batch.indices) + "\n")
dist.barrier()
dist.destroy_process_group()
