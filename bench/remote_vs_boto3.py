#!/usr/bin/python3
"""gpufeed reading an S3-API store vs a DataLoader over boto3, and the ceiling of the store.

Run with Debian's python (torch, h5py, boto3, PIL) and gpufeed on the path:

    PYTHONPATH=build/python /usr/bin/python3 bench/remote_vs_boto3.py [--latency-ms 20]
        [--seconds 15] [--samples 100000] [--images 3000] [--only disk]

The store is the test double (tests/remote/s3_server.py: s3rver on 127.0.0.1 behind the fault
proxy), with --latency-ms added to every request by the proxy, as a store across a network
would. Data sets are made once in ~/.cache/gpufeed-bench and uploaded to the store before any
timing (not in any figure):
  - an HDF5 set of synthetic mel segments: `mel` float32[1,64,32] (random values) + `label`
    int64 per sample, chunks of 256 samples, uncompressed;
  - --images JPEGs (256x256) in ImageFolder layout, 10 classes.
Then, in one run, with 2 workers on both sides:
  (a) the peer a user writes today: torch's DataLoader whose Dataset fetches each sample with
      boto3 `get_object(Range=...)` (its mel row and its label: the byte offsets come from the
      file's layout, read once with h5py), shuffled, batch 256;
  (b) gpufeed.Loader("s3://...") over the HDF5 set, batch 256, full shuffle and block shuffle;
  (c) the ceiling of each gpufeed run: the proxy records every GET it sent, and curl's own
      parallel transfers send them again (`curl --parallel --parallel-max C`, C = the most
      requests the proxy saw in flight during the run), signed the same way; gpufeed / ceiling
      is curl's time over gpufeed's (from open to close) for the same requests;
  (d) the images: gpufeed.images("s3://...") (decoded, resized to 224, in the workers) vs a
      DataLoader whose Dataset fetches each JPEG with boto3 and decodes it with PIL, and the
      ceiling of gpufeed's requests as in (c);
  (d') block shuffle with a chunk cache a third of the set's size (a set larger than the
      node's budget): the first epoch apart (one-time: the cache's memory first touched), the
      second epoch against the ceiling of its requests as in (c);
  (e) cache="disk": the HDF5 set's first epoch fills it (one-time, printed apart); then the same
      loader's later epochs and those of a loader opened over the filled cache, against a
      loader over the local file (page cache warm), batch 8192: each side's first epoch (the
      mapping's first touch) apart from the median of the next seven.
The proxy also integrates the requests in flight over time: each run prints its mean
concurrency beside curl's. Each timed side runs for --seconds after its first batch; the time
to the first batch (open, listing, worker start) is printed apart. Requests per epoch are
counted by the proxy and scaled from the samples read.
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
    """[(offsets of each sample's row, row bytes)] for mel and label, from the file's chunk
    layout."""
    with h5py.File(path, "r") as f:
        out = []
        for name in ("mel", "label"):
            ds = f[name]
            row = int(np.prod(ds.shape[1:], dtype=np.int64)) * ds.dtype.itemsize
            starts = np.empty(ds.id.get_num_chunks(), dtype=np.int64)
            for k in range(len(starts)):
                info = ds.id.get_chunk_info(k)
                starts[info.chunk_offset[0] // CHUNK] = info.byte_offset
            rows = np.arange(ds.shape[0])
            out.append((starts[rows // CHUNK] + (rows % CHUNK) * row, row))
    return out


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


def replay(server, requests, parallel):
    """Seconds curl's own parallel transfers take to send `requests` [(path, Range or None)]
    again, `parallel` at a time, signed the same way."""
    entries = []
    for path, rng in requests:
        entry = f'url = "{server.endpoint}{path}"\noutput = "/dev/null"\n'
        if rng:
            entry += f'range = "{rng.split("=", 1)[1]}"\n'
        entries.append(entry)
    with tempfile.NamedTemporaryFile("w", suffix=".curl", delete=False) as cfg:
        cfg.write("next\n".join(entries))
    cmd = ["curl", "-sS", "--no-progress-meter", "--fail", "--parallel", "--parallel-max", str(parallel),
           "--aws-sigv4", f"aws:amz:{server.region}:s3",
           "--user", f"{server.access_key}:{server.secret_key}",
           "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-K", cfg.name]
    try:
        start = time.perf_counter()
        subprocess.run(cmd, check=True, timeout=900, stdout=subprocess.DEVNULL)
        return time.perf_counter() - start
    finally:
        os.unlink(cfg.name)


def recorded(server, latency_ms, work):
    """(what work() returns, its seconds, the GETs it sent, the most requests in flight at once,
    the mean requests in flight over it) with the proxy recording from a reset."""
    server.reset_proxy()
    server.set_rules(latency_ms=latency_ms, record=True)
    start = time.perf_counter()
    out = work()
    wall = time.perf_counter() - start
    sent = server.recorded()
    counts = server.counts()
    server.set_rules(latency_ms=latency_ms)
    return out, wall, sent, counts["max_in_flight"], counts["in_flight_seconds"] / wall


def gpufeed_run(server, make_loader, seconds, latency_ms):
    """(time to the first batch, steady samples/s, samples read, the GETs it sent, the most
    requests it had in flight, its wall time from open to close, the mean requests in flight
    over it) of a loader made by make_loader(), the proxy recording."""
    def run():
        loader = make_loader()
        first, rate, count = timed(loader, seconds, lambda b: len(b["label"]))
        loader.close()  # every request it sent, from open to close
        return first, rate, count + loader_batch(loader)

    (first, rate, count), wall, sent, in_flight, mean_in_flight = recorded(
        server, latency_ms, run)
    return first, rate, count, sent, in_flight, wall, mean_in_flight


def steady_block_run(server, gpufeed, latency_ms, samples):
    """Block shuffle over a set three times the chunk cache (as a remote set larger than the
    node's RAM budget): the first epoch (one-time: the cache's memory first touched) apart,
    then the second epoch, the proxy recording. Returns what gpufeed_run returns (its time to
    the first batch 0: the epoch is timed whole)."""
    cache = gpufeed.Cache(chunk_cache=samples * 4 * int(np.prod(SHAPE)) // 3)
    loader = gpufeed.Loader(f"s3://{BUCKET}/seed.h5", fields=["mel", "label"], batch_size=BATCH,
                            workers=2, shuffle=gpufeed.BlockShuffle(), seed=0, device="cpu",
                            autotune=False, cache=cache)
    try:
        start = time.perf_counter()
        for _ in loader:
            pass
        print(f"hdf5, block shuffle, chunk cache a third of the set: first epoch "
              f"(one-time) {time.perf_counter() - start:.1f} s")
        count, wall, sent, in_flight, mean_in_flight = recorded(
            server, latency_ms, lambda: sum(len(b["label"]) for b in loader))
    finally:
        loader.close()
    return 0.0, count / wall, count, sent, in_flight, wall, mean_in_flight


def loader_batch(loader):
    return loader._batch_size


def peer_run(server, dataset, batch, seconds):
    """(steady samples/s, requests per sample) of a DataLoader with 2 workers."""
    before = proxy_requests(server)
    peer = DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=2)
    _, rate, count = timed(peer, seconds, lambda b: len(b[1]))
    return rate, (proxy_requests(server) - before) / (count + batch)


def report(server, results, name, what, run, items, peer):
    """Prints and keeps one gpufeed run against the peer and against curl replaying its requests
    at the concurrency it had (gpufeed / ceiling: the replay's time over gpufeed's, open to
    close, for the same requests)."""
    first, rate, count, sent, in_flight, wall, mean_in_flight = run
    before = server.counts()["in_flight_seconds"]
    replay_s = replay(server, sent, max(1, in_flight))
    replay_mean = (server.counts()["in_flight_seconds"] - before) / replay_s
    per_epoch = len(sent) / count * items
    results.update({f"{name}_gpufeed_samples_per_s": rate, f"{name}_first_batch_s": first,
                    f"{name}_gpufeed_requests_per_epoch": per_epoch,
                    f"{name}_in_flight": in_flight,
                    f"{name}_mean_in_flight": mean_in_flight,
                    f"{name}_replay_mean_in_flight": replay_mean,
                    f"{name}_gpufeed_vs_ceiling": replay_s / wall})
    if peer:
        results[f"{name}_gpufeed_vs_boto3"] = rate / peer
    print(f"{what}: gpufeed {rate:,.0f}/s (first batch {first:.2f} s, {per_epoch:,.0f} requests "
          f"per epoch, up to {in_flight} in flight, {mean_in_flight:.1f} on average); its "
          f"{len(sent):,} requests took {wall:.1f} s, curl's replay {replay_s:.1f} s "
          f"({replay_mean:.1f} in flight on average)")
    if peer:
        print(f"{name} gpufeed / boto3 DataLoader: {rate / peer:.1f}x")
    print(f"{name} gpufeed / ceiling: {replay_s / wall:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--latency-ms", type=float, default=20)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--images", type=int, default=3000)
    ap.add_argument("--data", default=os.path.expanduser("~/.cache/gpufeed-bench"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", choices=["disk"], default=None,
                    help="run only (e) the disk cache's epochs, each epoch's rate printed")
    args = ap.parse_args()

    os.makedirs(args.data, exist_ok=True)
    h5 = os.path.join(args.data, f"remote-seed-{args.samples}.h5")
    imgs = os.path.join(args.data, f"remote-images-{args.images}")
    build_hdf5(h5, args.samples)
    build_images(imgs, args.images)
    ranges = sample_ranges(h5)
    keys = []
    for cls in sorted(os.listdir(imgs)):
        if os.path.isdir(os.path.join(imgs, cls)):
            label = len({k[1] for k in keys})
            keys += [(f"images/{cls}/{n}", label)
                     for n in sorted(os.listdir(os.path.join(imgs, cls)))]
    results = {}
    with S3Server() as server:
        server.create_bucket(BUCKET)
        with open(h5, "rb") as f:
            server.put(BUCKET, "seed.h5", f.read())
        server.upload_tree(imgs, BUCKET, "images")
        os.environ.update(server.env())
        import gpufeed
        lat = args.latency_ms
        server.set_rules(latency_ms=lat)
        print(f"store: s3rver behind the fault proxy, {lat:g} ms added per request; "
              f"{args.samples:,} HDF5 samples, {args.images:,} JPEGs; 2 workers each side")

        if args.only == "disk":
            disk_epoch(server, gpufeed, h5, results)
            if args.json:
                print(json.dumps(results))
            return

        peer, per_sample = peer_run(server, Boto3Rows(server, "seed.h5", ranges), BATCH,
                                    args.seconds)
        results.update(hdf5_boto3_samples_per_s=peer,
                       hdf5_boto3_requests_per_epoch=per_sample * args.samples)
        print(f"hdf5 boto3 DataLoader: {peer:,.0f} samples/s, "
              f"{per_sample * args.samples:,.0f} requests per epoch")

        for name, what, shuffle in (("hdf5", "hdf5, full shuffle", True),
                                    ("hdf5_block", "hdf5, block shuffle",
                                     gpufeed.BlockShuffle())):
            run = gpufeed_run(
                server, lambda: gpufeed.Loader(
                    f"s3://{BUCKET}/seed.h5", fields=["mel", "label"], batch_size=BATCH,
                    workers=2, shuffle=shuffle, seed=0, device="cpu", autotune=False),
                args.seconds, lat)
            report(server, results, name, what, run, args.samples, peer)

        peer_i, _ = peer_run(server, Boto3Images(server, keys), 64, args.seconds)
        results["images_boto3_samples_per_s"] = peer_i
        print(f"images boto3 DataLoader + PIL: {peer_i:,.0f} images/s")
        run = gpufeed_run(
            server, lambda: gpufeed.Loader(
                gpufeed.images(f"s3://{BUCKET}/images/", size=224, crop="center"),
                batch_size=64, workers=2, shuffle=True, seed=0, device="cpu", autotune=False),
            args.seconds, lat)
        report(server, results, "images", "images", run, args.images, peer_i)

        report(server, results, "hdf5_block_steady",
               "hdf5, block shuffle, chunk cache a third of the set, second epoch",
               steady_block_run(server, gpufeed, lat, args.samples), args.samples, None)

        disk_epoch(server, gpufeed, h5, results)
    if args.json:
        print(json.dumps(results))


def epoch_rates(loader, epochs):
    """Samples/s of each of `epochs` whole epochs. An epoch of this set takes about a tenth of
    a second from the page cache, so one epoch alone is at the mercy of one scheduling stall:
    the steady state is the median of several."""
    rates = []
    for _ in range(epochs):
        start = time.perf_counter()
        count = sum(len(b["label"]) for b in loader)
        rates.append(count / (time.perf_counter() - start))
    return rates


STEADY_EPOCHS = 7


def disk_epoch(server, gpufeed, h5, results):
    """cache="disk": the first epoch fills it (one-time); then the same loader, a loader opened
    over the filled cache (the next job) and the local file, each first epoch (first touch of
    the mapping: one-time) apart from the median of the epochs after it."""
    cache_dir = tempfile.mkdtemp(prefix="gpufeed-bench-disk-")

    def make(path, **kw):
        return gpufeed.Loader(path, fields=["mel", "label"], batch_size=8192, workers=2,
                              shuffle=True, seed=0, device="cpu", autotune=False, **kw)

    def first_and_steady(loader, name):
        rates = epoch_rates(loader, 1 + STEADY_EPOCHS)
        loader.close()
        print(f"{name}: samples/s per epoch: {', '.join(f'{r:,.0f}' for r in rates)}")
        return rates[0], float(np.median(rates[1:]))
    try:
        disk = gpufeed.Cache("disk", disk_dir=cache_dir)
        loader = make(f"s3://{BUCKET}/seed.h5", cache=disk)
        start = time.perf_counter()
        for _ in loader:
            pass
        fill = time.perf_counter() - start
        before = proxy_requests(server)
        first_same, rate_same = first_and_steady(loader, "same loader")
        first_next, rate_next = first_and_steady(make(f"s3://{BUCKET}/seed.h5", cache=disk),
                                                 "next loader")
        requests_d = proxy_requests(server) - before
        first_l, rate_l = first_and_steady(make(h5), "local file")
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    results.update(disk_fill_s=fill, disk_same_loader_samples_per_s=rate_same,
                   disk_next_loader_samples_per_s=rate_next, local_samples_per_s=rate_l,
                   disk_same_loader_vs_local=rate_same / rate_l,
                   disk_next_vs_local=rate_next / rate_l,
                   disk_first_same_loader_vs_local=first_same / first_l,
                   disk_first_next_vs_local=first_next / first_l,
                   disk_requests_after_fill=requests_d)
    print(f"disk cache: the first epoch (fills it) {fill:.1f} s; then {requests_d} requests")
    print(f"first epoch after the fill or open (one-time: the mapping's first touch), samples/s: "
          f"same loader {first_same:,.0f}, a loader opened over the filled cache "
          f"{first_next:,.0f}, the local file {first_l:,.0f}")
    print(f"median of the {STEADY_EPOCHS} epochs after it: same loader {rate_same:,.0f}, next "
          f"loader {rate_next:,.0f}, the local file (page cache) {rate_l:,.0f} samples/s")
    print(f"disk cache, same loader / local file: {rate_same / rate_l:.2f}")
    print(f"disk cache, next loader / local file: {rate_next / rate_l:.2f}")


if __name__ == "__main__":
    main()
