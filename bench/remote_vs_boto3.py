#!/usr/bin/python3
"""gpufeed reading an S3-API store vs a DataLoader over boto3, and the ceiling of the store.

Run with Debian's python (torch, h5py, boto3, PIL) and gpufeed on the path:

    PYTHONPATH=build/python /usr/bin/python3 bench/remote_vs_boto3.py [--latency-ms 20]
        [--seconds 15] [--samples 100000] [--images 3000]

The store is the test double (tests/remote/s3_server.py: s3rver on 127.0.0.1 behind the fault
proxy), with --latency-ms added to every request by the proxy, as a store across a network
would. Data sets are made once in ~/.cache/gpufeed-bench and uploaded to the store before any
timing (not in any figure):
  - the seed-like HDF5 set: `mel` float32[1,64,32] + `label` int64 per sample, chunks of 256
    samples, uncompressed;
  - --images JPEGs (256x256) in ImageFolder layout, 10 classes.
Then, in one run, with 2 workers on both sides:
  (a) gpufeed.Loader("s3://...") over the HDF5 set, full shuffle, batch 256;
  (b) the peer a user writes today: torch's DataLoader whose Dataset fetches each sample with
      boto3 `get_object(Range=...)` (its mel row and its label: the byte offsets come from the
      file's layout, read once with h5py), shuffled, batch 256;
  (c) the ceiling: the byte ranges (a) fetched, fetched again by curl's own parallel transfers
      (`curl --parallel --parallel-max C`, C = the most requests (a) had in flight), signed
      the same way;
  (d) the images: gpufeed.images("s3://...") vs a DataLoader whose Dataset fetches each JPEG with
      boto3 and decodes it with PIL (resize to 224), and the ceiling of whole-object GETs;
  (e) cache="disk": the HDF5 set's second epoch, served from the node-local disk cache, vs
      the same loader over the local file.
Each side runs for --seconds (at least a few batches) after its first batch; the time to the
first batch (open, listing, worker start) is printed apart. Requests per epoch are counted by
the proxy and scaled from the samples read.
"""
import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "remote"))
from s3_server import S3Server  # noqa: E402

SHAPE = (1, 64, 32)
CHUNK = 256
BATCH = 256
BUCKET = "bench"


def build_hdf5(path, samples):
    if os.path.exists(path):
        return
    rng = np.random.default_rng(0)
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        mel = f.create_dataset("mel", shape=(samples,) + SHAPE, dtype="f4",
                               chunks=(CHUNK,) + SHAPE)
        label = f.create_dataset("label", shape=(samples,), dtype="i8", chunks=(CHUNK,))
        for start in range(0, samples, CHUNK * 64):
            end = min(samples, start + CHUNK * 64)
            mel[start:end] = rng.standard_normal((end - start,) + SHAPE).astype("f4")
            label[start:end] = np.arange(start, end) % 1000
    os.replace(tmp, path)


def build_images(folder, count):
    if os.path.exists(os.path.join(folder, ".complete")):
        return
    from PIL import Image
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:256, 0:256]
    for i in range(count):
        cls = os.path.join(folder, f"class{i % 10}")
        os.makedirs(cls, exist_ok=True)
        phase = rng.random(3) * 6.28
        rgb = np.stack([127 + 100 * np.sin(xx / (9 + c) + yy / (13 + 2 * c) + phase[c])
                        for c in range(3)], axis=-1)
        rgb += rng.normal(0, 8, rgb.shape)
        Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(
            os.path.join(cls, f"{i:05d}.jpg"), quality=90)
    open(os.path.join(folder, ".complete"), "w").close()


def sample_ranges(path):
    """([(offsets of each sample's row, row bytes)] for mel and label, [(offset, size)] of
    every chunk), from the file's chunk layout."""
    with h5py.File(path, "r") as f:
        out = []
        chunks = []
        for name in ("mel", "label"):
            ds = f[name]
            row = int(np.prod(ds.shape[1:], dtype=np.int64)) * ds.dtype.itemsize
            starts = np.empty(ds.id.get_num_chunks(), dtype=np.int64)
            for k in range(len(starts)):
                info = ds.id.get_chunk_info(k)
                starts[info.chunk_offset[0] // CHUNK] = info.byte_offset
                chunks.append((int(info.byte_offset), int(info.size)))
            rows = np.arange(ds.shape[0])
            out.append((starts[rows // CHUNK] + (rows % CHUNK) * row, row))
    return out, chunks


class Boto3Rows(Dataset):
    """What a user writes today: one ranged GET per field per sample."""

    def __init__(self, server, key, ranges):
        self.server, self.key, self.ranges = server, key, ranges
        self.client = None

    def __len__(self):
        return len(self.ranges[0][0])

    def _get(self, offset, size):
        if self.client is None:  # one client per worker process
            self.client = self.server.client(endpoint=self.server.endpoint)
        body = self.client.get_object(Bucket=BUCKET, Key=self.key,
                                      Range=f"bytes={offset}-{offset + size - 1}")["Body"]
        return body.read()

    def __getitem__(self, i):
        (mel_at, mel_bytes), (label_at, label_bytes) = self.ranges
        mel = np.frombuffer(self._get(int(mel_at[i]), mel_bytes), dtype="f4").reshape(SHAPE)
        label = np.frombuffer(self._get(int(label_at[i]), label_bytes), dtype="i8")[0]
        return torch.from_numpy(mel.copy()), int(label)


class Boto3Images(Dataset):
    def __init__(self, server, keys):
        self.server, self.keys, self.client = server, keys, None

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        from PIL import Image
        if self.client is None:
            self.client = self.server.client(endpoint=self.server.endpoint)
        data = self.client.get_object(Bucket=BUCKET, Key=self.keys[i][0])["Body"].read()
        img = Image.open(io.BytesIO(data)).convert("RGB").resize((224, 224))
        return torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1), self.keys[i][1]


def timed(batches, seconds, samples_of):
    """(time to the first batch, steady samples/s after it, samples after the first)."""
    start = time.perf_counter()
    it = iter(batches)
    next(it)
    first = time.perf_counter() - start
    t0 = time.perf_counter()
    count = 0
    for batch in it:
        count += samples_of(batch)
        if time.perf_counter() - t0 >= seconds:
            break
    return first, count / (time.perf_counter() - t0), count


def proxy_requests(server):
    return server.counts()["requests"]


def curl_ceiling(server, key, ranges, parallel, limit):
    """Plain parallel ranged GETs of `ranges` [(offset, size)] by curl: ranges/s."""
    ranges = ranges[:limit]
    url = f"{server.endpoint}/{BUCKET}/{key}"
    with tempfile.NamedTemporaryFile("w", suffix=".curl", delete=False) as cfg:
        cfg.write("next\n".join(f'url = "{url}"\nrange = "{offset}-{offset + size - 1}"\n'
                                 'output = "/dev/null"\n' for offset, size in ranges))
    cmd = ["curl", "-sS", "--fail", "--parallel", "--parallel-max", str(parallel),
           "--aws-sigv4", f"aws:amz:{server.region}:s3",
           "--user", f"{server.access_key}:{server.secret_key}",
           "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-K", cfg.name]
    try:
        start = time.perf_counter()
        subprocess.run(cmd, check=True, timeout=600)
        return len(ranges) / (time.perf_counter() - start)
    finally:
        os.unlink(cfg.name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--latency-ms", type=float, default=20)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--images", type=int, default=3000)
    ap.add_argument("--data", default=os.path.expanduser("~/.cache/gpufeed-bench"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    os.makedirs(args.data, exist_ok=True)
    h5 = os.path.join(args.data, f"remote-seed-{args.samples}.h5")
    imgs = os.path.join(args.data, f"remote-images-{args.images}")
    build_hdf5(h5, args.samples)
    build_images(imgs, args.images)
    ranges, chunks = sample_ranges(h5)
    results = {}
    with S3Server() as server:
        server.create_bucket(BUCKET)
        with open(h5, "rb") as f:
            server.put(BUCKET, "seed.h5", f.read())
        server.upload_tree(imgs, BUCKET, "images")
        os.environ.update(server.env())
        import gpufeed
        server.set_rules(latency_ms=args.latency_ms)
        print(f"store: s3rver behind the fault proxy, {args.latency_ms:g} ms added per request")

        # (a) gpufeed over the HDF5 set.
        before = proxy_requests(server)
        loader = gpufeed.Loader(f"s3://{BUCKET}/seed.h5", fields=["mel", "label"],
                                batch_size=BATCH, workers=2, shuffle=True, seed=0,
                                device="cpu")
        first, rate, count = timed(loader, args.seconds, lambda b: len(b["label"]))
        stats = gpufeed.remote_stats()
        requests = proxy_requests(server) - before
        loader.close()
        in_flight = max(1, int(stats["max_in_flight"]))
        results["hdf5_gpufeed_samples_per_s"] = rate
        results["hdf5_gpufeed_first_batch_s"] = first
        results["hdf5_gpufeed_requests_per_epoch"] = requests / (count + BATCH) * args.samples
        print(f"hdf5  gpufeed (2 workers):        {rate:12,.0f} samples/s   first batch "
              f"{first:.2f} s   {results['hdf5_gpufeed_requests_per_epoch']:,.0f} requests/epoch"
              f"   up to {in_flight} in flight")

        # (b) the boto3 DataLoader.
        before = proxy_requests(server)
        peer = DataLoader(Boto3Rows(server, "seed.h5", ranges), batch_size=BATCH, shuffle=True,
                          num_workers=2, persistent_workers=False)
        first, rate_b, count_b = timed(peer, args.seconds, lambda b: len(b[1]))
        requests_b = proxy_requests(server) - before
        results["hdf5_boto3_samples_per_s"] = rate_b
        results["hdf5_boto3_requests_per_epoch"] = requests_b / (count_b + BATCH) * args.samples
        print(f"hdf5  boto3 DataLoader (2):       {rate_b:12,.0f} samples/s   first batch "
              f"{first:.2f} s   {results['hdf5_boto3_requests_per_epoch']:,.0f} requests/epoch")

        # (c) the ceiling: the rows' ranges at gpufeed's concurrency.
        order = np.random.default_rng(1).permutation(args.samples)
        (mel_at, mel_bytes), (label_at, label_bytes) = ranges
        pairs = []
        for i in order[:max(2000, int(rate * 5))]:
            pairs += [(int(mel_at[i]), mel_bytes), (int(label_at[i]), label_bytes)]
        ceiling = curl_ceiling(server, "seed.h5", pairs, in_flight, len(pairs)) / 2
        results["hdf5_ceiling_samples_per_s"] = ceiling
        print(f"hdf5  ceiling (curl, {in_flight} parallel): {ceiling:12,.0f} samples/s")
        results["hdf5_gpufeed_vs_boto3"] = rate / rate_b
        results["hdf5_gpufeed_vs_ceiling"] = rate / ceiling
        print(f"hdf5  gpufeed / boto3 DataLoader: {rate / rate_b:.1f}x")
        print(f"hdf5  gpufeed / ceiling: {rate / ceiling:.2f}")

        # (a') block shuffle: whole chunks, one ranged GET per run of adjacent chunks.
        before = proxy_requests(server)
        loader = gpufeed.Loader(f"s3://{BUCKET}/seed.h5", fields=["mel", "label"],
                                batch_size=BATCH, workers=2, seed=0, device="cpu",
                                shuffle=gpufeed.BlockShuffle())
        start = time.perf_counter()
        it = iter(loader)
        next(it)
        first_blk = time.perf_counter() - start
        t0 = time.perf_counter()
        count_blk = sum(len(b["label"]) for b in it)
        rate_blk = count_blk / (time.perf_counter() - t0)
        requests_blk = proxy_requests(server) - before
        loader.close()
        ceiling_blk = args.samples / (len(chunks) / curl_ceiling(
            server, "seed.h5", chunks, in_flight, len(chunks)))
        results.update(hdf5_block_gpufeed_samples_per_s=rate_blk,
                       hdf5_block_gpufeed_requests_per_epoch=requests_blk,
                       hdf5_block_ceiling_samples_per_s=ceiling_blk,
                       hdf5_block_gpufeed_vs_boto3=rate_blk / rate_b,
                       hdf5_block_gpufeed_vs_ceiling=rate_blk / ceiling_blk)
        print(f"hdf5  gpufeed, block shuffle (2 workers): {rate_blk:12,.0f} samples/s   first "
              f"batch {first_blk:.2f} s   {requests_blk:,} requests/epoch")
        print(f"hdf5  ceiling, whole chunks (curl, {in_flight} parallel): "
              f"{ceiling_blk:12,.0f} samples/s")
        print(f"hdf5  block shuffle: gpufeed / boto3 DataLoader: {rate_blk / rate_b:.1f}x")
        print(f"hdf5  block shuffle: gpufeed / ceiling: {rate_blk / ceiling_blk:.2f}")

        # (d) images.
        keys = []
        for cls in sorted(os.listdir(imgs)):
            if os.path.isdir(os.path.join(imgs, cls)):
                label = len({k[1] for k in keys})
                keys += [(f"images/{cls}/{n}", label)
                         for n in sorted(os.listdir(os.path.join(imgs, cls)))]
        source = gpufeed.images(f"s3://{BUCKET}/images/", size=224, crop="center")
        loader = gpufeed.Loader(source, batch_size=64, workers=2, shuffle=True, seed=0,
                                device="cpu")
        first, rate_i, _ = timed(loader, args.seconds, lambda b: len(b["label"]))
        loader.close()
        in_flight_i = max(1, int(gpufeed.remote_stats()["max_in_flight"]))
        peer = DataLoader(Boto3Images(server, keys), batch_size=64, shuffle=True, num_workers=2)
        _, rate_ib, _ = timed(peer, args.seconds, lambda b: len(b[1]))
        sizes = [os.path.getsize(os.path.join(imgs, k[len("images/"):])) for k, _ in keys]
        whole = []
        for (k, _), size in zip(keys, sizes):
            whole.append((k, size))
        ceiling_i = image_ceiling(server, whole, in_flight_i)
        results.update(images_gpufeed_samples_per_s=rate_i, images_boto3_samples_per_s=rate_ib,
                       images_ceiling_samples_per_s=ceiling_i,
                       images_gpufeed_vs_boto3=rate_i / rate_ib,
                       images_gpufeed_vs_ceiling=rate_i / ceiling_i)
        print(f"images gpufeed (2 workers):       {rate_i:12,.0f} images/s   first batch "
              f"{first:.2f} s")
        print(f"images boto3 DataLoader + PIL:    {rate_ib:12,.0f} images/s")
        print(f"images ceiling (whole GETs, {in_flight_i} parallel): {ceiling_i:,.0f} images/s")
        print(f"images gpufeed / boto3 DataLoader: {rate_i / rate_ib:.1f}x")

        # (e) the node-local disk cache: epoch 1 fills it, epoch 2 is timed.
        cache_dir = tempfile.mkdtemp(prefix="gpufeed-bench-disk-")
        try:
            os.environ["GPUFEED_REMOTE_CACHE_DIR"] = cache_dir
            loader = gpufeed.Loader(f"s3://{BUCKET}/seed.h5", fields=["mel", "label"],
                                    batch_size=8192, workers=2, shuffle=True, seed=0,
                                    device="cpu", cache="disk")
            start = time.perf_counter()
            for _ in loader:
                pass
            fill = time.perf_counter() - start
            before = proxy_requests(server)
            _, rate_d, _ = timed(loader, 1e9, lambda b: len(b["label"]))
            requests_d = proxy_requests(server) - before
            loader.close()
            local = gpufeed.Loader(h5, fields=["mel", "label"], batch_size=8192, workers=2,
                                   shuffle=True, seed=0, device="cpu")
            for _ in local:
                pass
            _, rate_l, _ = timed(local, 1e9, lambda b: len(b["label"]))
            local.close()
        finally:
            shutil.rmtree(cache_dir, ignore_errors=True)
        results.update(disk_epoch2_samples_per_s=rate_d, local_samples_per_s=rate_l,
                       disk_vs_local=rate_d / rate_l, disk_fill_s=fill,
                       disk_epoch2_requests=requests_d)
        print(f"disk cache: first epoch (fills the cache) {fill:.1f} s; second epoch "
              f"{rate_d:,.0f} samples/s with {requests_d} requests; local file "
              f"{rate_l:,.0f} samples/s")
        print(f"disk cache epoch 2 / local file: {rate_d / rate_l:.2f}")
    if args.json:
        print(json.dumps(results))


def image_ceiling(server, objects, parallel):
    """Whole-object GETs of every image by curl's parallel transfers: objects/s."""
    with tempfile.NamedTemporaryFile("w", suffix=".curl", delete=False) as cfg:
        cfg.write("next\n".join(f'url = "{server.endpoint}/{BUCKET}/{key}"\n'
                                 'output = "/dev/null"\n' for key, _ in objects))
    cmd = ["curl", "-sS", "--fail", "--parallel", "--parallel-max", str(parallel),
           "--aws-sigv4", f"aws:amz:{server.region}:s3",
           "--user", f"{server.access_key}:{server.secret_key}",
           "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-K", cfg.name]
    try:
        start = time.perf_counter()
        subprocess.run(cmd, check=True, timeout=600)
        return len(objects) / (time.perf_counter() - start)
    finally:
        os.unlink(cfg.name)


if __name__ == "__main__":
    main()
