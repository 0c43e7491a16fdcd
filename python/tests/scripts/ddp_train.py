"""Run by torchrun (2 processes, gloo): each rank's loader reads its shard of the data set;
DDP trains a few steps. Writes the rank's sample indices and final weights to OUT_DIR. Then
uneven shards (9 samples over 2 ranks) with an all_reduce per step: prints the sizes and sums.

usage: torchrun --nproc_per_node 2 ddp_train.py DATA_DIR OUT_DIR
"""

import datetime
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import gpufeed

data_dir, out_dir = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)

# No rank / world_size given: the loader reads torchrun's RANK / WORLD_SIZE.
loader = gpufeed.Loader(data_dir, batch_size=16, seed=5, device="cpu", workers=1)
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(40, 10)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
seen, losses = [], []
for epoch in range(2):
    loader.set_epoch(epoch)
    for batch in loader:
        if epoch == 0:
            seen.append(batch.indices.numpy().copy())
        loss = torch.nn.functional.cross_entropy(model(batch["mel"]), batch["label"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

# A data set whose length is no multiple of the world size, default drop_last=False: 9 samples,
# batch 4. Padded, both ranks run batches [4, 1] each epoch, so one all_reduce per step stays
# paired with the other rank's (unpadded, rank 0 would run 2 steps and rank 1 one: the job
# desynchronises, then hangs; the process group's timeout turns a hang into an error).
uneven = gpufeed.Loader(gpufeed.synthetic("x:float32[4]", samples=9), batch_size=4, seed=1,
                        device="cpu", workers=1)
sizes, sums = [], []
for epoch in range(2):
    uneven.set_epoch(epoch)
    for batch in uneven:
        sizes.append(len(batch["x"]))
        step = torch.tensor([float(len(batch["x"]))])
        dist.all_reduce(step)
        sums.append(int(step.item()))
    end = torch.tensor([-1.0])  # a rank with a step more would pair this with that step
    dist.all_reduce(end)
    sums.append(int(end.item()))
print(f"uneven rank {rank}: len {len(uneven)} sizes {sizes} sums {sums}", flush=True)
uneven.close()

weights = torch.cat([p.detach().flatten() for p in model.parameters()])
np.save(os.path.join(out_dir, f"indices{rank}.npy"), np.concatenate(seen))
np.save(os.path.join(out_dir, f"weights{rank}.npy"), weights.numpy())
print(f"rank {rank}/{world}: {len(losses)} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}",
      flush=True)
loader.close()
dist.destroy_process_group()
