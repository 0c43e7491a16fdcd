#!/usr/bin/python3
"""Runs gpufeed's benchmarks and writes docs/benchmarks.md.

    /usr/bin/python3 bench/run_all.py [--build build] [--runs 3] [--only ID,...] [--list]
                                      [--out docs/benchmarks.md]

Each benchmark is a program in bench/ (or `gpufeed bench`) that measures gpufeed and a peer
(or a ceiling) in the same run and prints the figures; this script runs each one `--runs`
times, takes the figures it names from the output, and writes one table row per figure:
the median, the spread (lowest to highest) and the command that printed it, under a header
naming the machine (CPU, cores, memory, GPU or none), the date and the load average before
and after. Rerunning it replaces the file: the page holds the figures as they stand now.

Data sets are made once before the timed runs (`prepare`), so their cost is not in any
figure. Benchmarks whose prerequisites are missing (a PostgreSQL server, a GPU) are listed
as not run, with the reason.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable  # the interpreter that runs this script (the docs use /usr/bin/python3)
DEMO_NPY = "~/.cache/gpufeed/demo-mel"
DEMO_H5 = "~/.cache/gpufeed/demo-mel.h5"


def json_key(key):
    """The figure `key` of the JSON document the command printed (whole output or a line)."""
    def extract(stdout):
        doc = parse_json(stdout)
        value = doc
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return float(value) if value is not None else None
    return extract


def regex(pattern):
    compiled = re.compile(pattern, re.M)

    def extract(stdout):
        match = compiled.search(stdout)
        return float(match.group(1).replace(",", "")) if match else None
    return extract


def parse_json(stdout):
    try:
        return json.loads(stdout)
    except ValueError:
        pass
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return {}


def file_eval(bench_id, device, segments, stacking=False):
    """A run of bench/file_level_eval.py: 7,913 files of `segments` (lo, hi) rows each, on
    `device`; gpufeed / 16 files stacked by hand too where `stacking`."""
    lo, hi = segments
    gpu = device == "cuda"
    figures = [("gpufeed / per-file loop", regex(r"gpufeed / per-file loop: ([0-9.]+)x"))]
    if stacking:
        figures.append(("gpufeed / 16 files stacked by hand",
                        regex(r"gpufeed / stacking: ([0-9.]+)x")))
    figures += [("gpufeed / model only (the same forward passes over rows in memory)",
                 regex(r"^gpufeed / model only: ([0-9.]+)")),
                ("batch fill", regex(r"fill ([0-9.]+) \(target")),
                ("batch fill / the fill of the fewest batches that hold the rows",
                 regex(r"fill / best possible fill ([0-9.]+)")),
                ("one-time: gpufeed's first open and read of the file, s",
                 regex(r"^one-time: gpufeed's first open and read of the file: ([0-9.]+) s"))]
    bench = {
        "id": bench_id,
        "what": (f"{'GPU: ' if gpu else ''}whole-file evaluation{'' if gpu else ' on the CPU'}, "
                 f"7,913 files x {lo}..{hi} segments, small CNN{' on cuda' if gpu else ''}: "
                 "gpufeed packed batches + GroupReducer vs a per-file h5py loop"),
        "command": ("PYTHONPATH={build}/python {py} bench/file_level_eval.py --device " + device
                    + ("" if segments == (8, 64) else f" --segments {lo}-{hi}")),
        "figures": figures,
    }
    if gpu:
        bench.update(gpu=True, torch_cuda=True)
    return bench


# Each benchmark: what it measures, the command (placeholders: {gpufeed}, {build}, {py}),
# the commands that make its data once, and the figures taken from its output.
BENCHMARKS = [
    {
        "id": "numpy-stream",
        "what": "NumPy demo set (100,000 x float32[1,64,32] + int64, 820 MB, page cache "
                "warm), 2 workers, batch 8192, full shuffle, host batches",
        "command": "{gpufeed} bench " + DEMO_NPY + " -w 2 -b 8192 -e 3 --json",
        "prepare": ["{gpufeed} demo --format npy --no-baseline --seconds 0 --epochs 1"],
        "figures": [
            ("samples/s", json_key("samples_per_s")),
            ("ratio to memcpy of the same bytes (same threads, same run)",
             json_key("ratio_to_ceiling")),
            ("ratio to the same shuffled rows read without the loader",
             json_key("ratio_to_same_work")),
            ("epochs after the first: ratio to the same work",
             json_key("later_ratio_to_same_work")),
            ("one-time: time to the first batch, s", json_key("time_to_first_batch_s")),
        ],
    },
    {
        "id": "numpy-stepped",
        "what": "the same set with a simulated 10 ms GPU step per batch, 30 epochs",
        "command": "{gpufeed} bench " + DEMO_NPY + " -w 2 -b 8192 -e 30 --step-ms 10 --json",
        "prepare": ["{gpufeed} demo --format npy --no-baseline --seconds 0 --epochs 1"],
        "figures": [
            ("simulated GPU busy share, epochs after the first",
             json_key("later_gpu_busy_fraction")),
            ("simulated GPU busy share, from the first batch", json_key("gpu_busy_fraction")),
            ("simulated GPU busy share, whole run", json_key("gpu_busy_fraction_with_startup")),
            ("one-time: the first epoch, s (fresh batch memory, first touch)",
             json_key("first_epoch_s")),
        ],
    },
    {
        "id": "demo-remedies",
        "what": "`gpufeed demo` as a new user runs it (the h5py-layout HDF5 file, the Python "
                "Loader's defaults: the loader takes the doctor's safe remedies), 15 s with a "
                "simulated 10 ms GPU step at batch 8192",
        "command": "{gpufeed} demo --no-baseline --json",
        "figures": [
            ("simulated GPU busy share, the run's last 5 s", json_key("gpu_busy_fraction_final")),
            ("simulated GPU busy share, from the first batch", json_key("gpu_busy_fraction")),
            ("remedies applied (a RAM copy built in the background)",
             lambda out: float(len(parse_json(out).get("stats", {}).get("actions", [])))),
        ],
    },
    {
        "id": "cache-cold-start",
        "what": "Loader(demo HDF5 file, cache=\"shm\") on a cold cache (fresh shm folder) vs "
                "the same loader without a cache, same run",
        "command": "PYTHONPATH={build}/python {py} bench/cache_cold_start.py --json",
        "prepare": ["{gpufeed} demo --no-baseline --seconds 0 --epochs 1"],
        "figures": [
            ("constructor, s", json_key("constructor_s")),
            ("constructor to the first batch, s", json_key("first_batch_s")),
            ("first batch: cold shm / uncached", json_key("first_batch_vs_uncached")),
            ("constructor to the complete shm copy (built in the background), s",
             json_key("copy_complete_s")),
        ],
    },
    {
        "id": "rechunk-gain",
        "what": "the demo's HDF5 file, no cache, 2 workers, batch 8192: after `gpufeed rechunk` "
                "(whole-sample chunks) vs h5py's chunks=True layout",
        "command": "{py} bench/rechunk_gain.py --gpufeed {gpufeed}",
        "prepare": ["{gpufeed} demo --no-baseline --seconds 0 --epochs 1"],
        "figures": [
            ("rechunked / original, samples/s", regex(r"^rechunked / original: ([0-9.]+)x")),
            ("h5py's chunks=True layout, samples/s",
             regex(r"^h5py chunks=True layout:\s+([0-9,.]+)")),
            ("after rechunk, samples/s", regex(r"^after gpufeed rechunk:\s+([0-9,.]+)")),
        ],
    },
    {
        "id": "hdf5-vs-dataloader",
        "what": "HDF5 file of synthetic mel segments (100,000 x float32[1,64,32], chunks of "
                "256): gpufeed vs a DataLoader over per-sample h5py reads, 2 workers each",
        "command": "{py} bench/hdf5_vs_dataloader.py --gpufeed {gpufeed} --json",
        "figures": [
            ("uncompressed: gpufeed / DataLoader", json_key("plain_vs_dataloader")),
            ("uncompressed: ratio to memcpy", json_key("plain_ratio_to_ceiling")),
            ("gzip, block shuffle: gpufeed / DataLoader", json_key("gzip_block_vs_dataloader")),
            ("gzip, full shuffle: gpufeed / DataLoader", json_key("gzip_full_vs_dataloader")),
        ],
    },
    {
        "id": "token-packing",
        "what": "Megatron indexed corpus (450,000 documents, log-normal lengths, median 400: "
                "204 M int32 tokens) packed into rows of 4096: gpufeed vs a DataLoader over "
                "np.memmap with a padding collate_fn, 2 workers each",
        "command": "{py} bench/token_packing.py --gpufeed {gpufeed}",
        "figures": [
            ("DataLoader, M tokens/s", regex(r"^DataLoader .*: ([0-9.]+) M tokens/s")),
            ("[8, 4096] in order: gpufeed / DataLoader",
             regex(r"^gpufeed / DataLoader, in order: ([0-9.]+)x")),
            ("[8, 4096] in order: gpufeed, M tokens/s",
             regex(r"^gpufeed packed \[8, 4096\] in order: ([0-9.]+) M tokens/s")),
            ("[8, 4096] shuffled: gpufeed, M tokens/s",
             regex(r"^gpufeed packed \[8, 4096\] shuffled: ([0-9.]+) M tokens/s")),
            ("[8, 4096] shuffled: gpufeed / DataLoader",
             regex(r"^gpufeed / DataLoader, shuffled: ([0-9.]+)x")),
            ("[8, 4096] shuffled: time per batch, us",
             regex(r"^gpufeed packed \[8, 4096\] shuffled: .*; ([0-9]+) us per batch")),
            ("[64, 4096] tokens only: tokens / memcpy of the tokens",
             regex(r"^gpufeed packed \[64, 4096\], tokens only.*tokens ratio ([0-9.]+)")),
            ("[64, 4096] with ids: tokens / memcpy of the tokens",
             regex(r"^gpufeed packed \[64, 4096\], with position.*tokens ratio ([0-9.]+)")),
            ("fill of padded rows", regex(r"^fill: padded rows ([0-9.]+)")),
            ("fill of whole documents packed", regex(r"split=False\) ([0-9.]+)")),
        ],
    },
    {
        "id": "hdf5-vlen",
        "what": "HDF5 int32 variable-length sequences as h5py writes them (50,000, gzip, "
                "log-normal lengths, median 200), padded batches of 64, shuffled: gpufeed vs "
                "a DataLoader over per-sample h5py reads, 2 workers each",
        "command": "{py} bench/hdf5_vlen.py",
        "figures": [
            ("DataLoader + h5py, M tokens/s",
             regex(r"^DataLoader \+ h5py .*: ([0-9.]+) M tokens/s")),
            ("gpufeed, M tokens/s", regex(r"^gpufeed padded .*: ([0-9.]+) M tokens/s")),
            ("gpufeed / DataLoader", regex(r"^gpufeed / DataLoader: ([0-9.]+)x")),
        ],
    },
    {
        "id": "shm-vs-ram",
        "what": "the shared-memory cache vs the RAM cache, same set (synthetic 800 MB, 8 KiB "
                "rows), same run, epochs after the first alternating, batch 8192, 2 workers",
        "command": "{build}/bench/bench_cache_shm_vs_ram --mb 800 --epochs 5",
        "figures": [
            ("shm / RAM, building process",
             regex(r"^later epochs \(median\):.*shm / RAM = ([0-9.]+)")),
            ("shm / RAM, a new process", regex(r"^new process, .*shm / RAM = ([0-9.]+)")),
        ],
    },
    {
        "id": "ram-cache-epoch",
        "what": "RAM-cached epoch vs memcpy of the same bytes into as many batch buffers "
                "(synthetic 512 MB, batch 8192, 2 threads)",
        "command": "{build}/bench/bench_cache_ram_epoch --mb 512 --epochs 3",
        "figures": [("RAM-cached epoch / memcpy", regex(r"/ memcpy ceiling = ([0-9.]+)"))],
    },
    {
        "id": "gpu-h2d",
        "gpu": True,
        "what": "GPU: host-to-device copies, the loader's path vs a plain pinned copy "
                "(16 MiB batches, 4 workers)",
        "command": "{build}/bench/bench_h2d_copy",
        "figures": [
            ("plain pinned copy, GB/s", regex(r"^plain pinned copy:\s+([0-9.]+) GB/s")),
            ("loader path, GB/s", regex(r"^loader path:\s+([0-9.]+) GB/s")),
            ("host gather alone (4 threads into pinned memory), GB/s",
             regex(r"^host gather:\s+([0-9.]+) GB/s")),
            ("loader / plain", regex(r"^ratio loader/plain:\s+([0-9.]+)")),
            ("loader / the lower of plain copy and host gather",
             regex(r"^ratio loader/ceiling:\s+([0-9.]+)")),
        ],
    },
    {
        "id": "gpu-device-cache",
        "gpu": True,
        "what": "GPU: the device cache tier (200,000 x 1 KiB rows in VRAM, gather kernel) vs "
                "streaming through pinned staging, batch 8192",
        "command": "{build}/bench/bench_cache_device_gather",
        "figures": [
            ("gather kernel, GB/s", regex(r"^gather kernel:\s+([0-9.]+) GB/s")),
            ("loader over the device tier, GB/s", regex(r"^loader, device tier:\s+([0-9.]+)")),
            ("device tier / streaming", regex(r"^ratio device tier / streaming:\s+([0-9.]+)")),
            ("one-time: upload, s", regex(r"^upload:\s+([0-9.]+) s")),
        ],
    },
    {
        "id": "gpu-numpy-stepped",
        "gpu": True,
        "what": "GPU: the NumPy demo set to cuda, 2 workers, batch 8192, 10 ms simulated step, "
                "10 epochs",
        "command": "{gpufeed} bench " + DEMO_NPY + " --device cuda -w 2 -b 8192 -e 10 "
                   "--step-ms 10 --json",
        "prepare": ["{gpufeed} demo --format npy --no-baseline --seconds 0 --epochs 1"],
        "figures": [
            ("samples/s", json_key("samples_per_s")),
            ("simulated GPU busy share, epochs after the first", json_key("gpu_busy_fraction")),
        ],
    },
    file_eval("gpu-file-eval", "cuda", (8, 64)),
    file_eval("gpu-file-eval-small", "cuda", (1, 24)),
    file_eval("file-eval", "cpu", (8, 64), stacking=True),
    file_eval("file-eval-small", "cpu", (1, 24)),
    {
        "id": "remote-vs-boto3",
        "remote": True,
        "what": "s3rver behind the fault proxy with 20 ms added per request; an HDF5 set of "
                "synthetic mel segments (100,000 x float32[1,64,32] + int64, chunks of 256) "
                "and 3,000 JPEGs; 2 workers on each side; the ceiling is curl sending the same "
                "requests at the same concurrency",
        "command": "PYTHONPATH={build}/python {py} bench/remote_vs_boto3.py --json",
        "figures": [
            ("HDF5, full shuffle: gpufeed / boto3 DataLoader", json_key("hdf5_gpufeed_vs_boto3")),
            ("HDF5, full shuffle: gpufeed / ceiling", json_key("hdf5_gpufeed_vs_ceiling")),
            ("HDF5, full shuffle: gpufeed samples/s", json_key("hdf5_gpufeed_samples_per_s")),
            ("HDF5: boto3 DataLoader samples/s", json_key("hdf5_boto3_samples_per_s")),
            ("HDF5, full shuffle: gpufeed requests per epoch",
             json_key("hdf5_gpufeed_requests_per_epoch")),
            ("HDF5: boto3 DataLoader requests per epoch",
             json_key("hdf5_boto3_requests_per_epoch")),
            ("HDF5, block shuffle: gpufeed / boto3 DataLoader",
             json_key("hdf5_block_gpufeed_vs_boto3")),
            ("HDF5, block shuffle: gpufeed / ceiling", json_key("hdf5_block_gpufeed_vs_ceiling")),
            ("HDF5, block shuffle: gpufeed requests per epoch",
             json_key("hdf5_block_gpufeed_requests_per_epoch")),
            ("HDF5, block shuffle: gpufeed's mean requests in flight",
             json_key("hdf5_block_mean_in_flight")),
            ("HDF5, block shuffle: curl's replay, mean requests in flight",
             json_key("hdf5_block_replay_mean_in_flight")),
            ("HDF5, block shuffle, chunk cache a third of the set, second epoch: gpufeed / "
             "ceiling", json_key("hdf5_block_steady_gpufeed_vs_ceiling")),
            ("HDF5, block shuffle, chunk cache a third of the set, second epoch: samples/s",
             json_key("hdf5_block_steady_gpufeed_samples_per_s")),
            ("HDF5, block shuffle, chunk cache a third of the set, second epoch: requests",
             json_key("hdf5_block_steady_gpufeed_requests_per_epoch")),
            ("images: gpufeed / boto3 DataLoader + PIL", json_key("images_gpufeed_vs_boto3")),
            ("images: gpufeed / ceiling", json_key("images_gpufeed_vs_ceiling")),
            ("cache=\"disk\", the same loader's epochs after the fill / local file (median "
             "of 7 epochs each)", json_key("disk_same_loader_vs_local")),
            ("cache=\"disk\", a loader opened over the filled cache / local file (median of "
             "7 epochs each)", json_key("disk_next_vs_local")),
            ("one-time: the first epoch after the fill / the local file's first",
             json_key("disk_first_same_loader_vs_local")),
            ("one-time: a reopened loader's first epoch / the local file's first",
             json_key("disk_first_next_vs_local")),
            ("one-time: the first epoch filling cache=\"disk\", s", json_key("disk_fill_s")),
        ],
    },
    {
        "id": "python-overhead",
        "what": "Python cost per batch between Next() calls (empty loop, 2 and 8 fields)",
        "command": "PYTHONPATH={build}/python {py} bench/python_overhead.py",
        "figures": [
            ("2 fields, microseconds", regex(r"^2 fields\s+\S+\s+\S+\s+([0-9.]+)")),
            ("8 fields, microseconds", regex(r"^8 fields\s+\S+\s+\S+\s+([0-9.]+)")),
        ],
    },
    {
        "id": "tabular-stack",
        "what": "a table of 35 real columns (200,000 rows), batch 256, 2 workers: the stacked "
                "field x: float32[B, 35] vs 35 fields torch.stack'ed by the loop",
        "command": "PYTHONPATH={build}/python {py} bench/tabular_stack.py",
        "figures": [
            ("SQLite: stacked / 35 fields", regex(r"^sqlite\s+stacked / 35 fields: ([0-9.]+)x")),
            ("SQLite: stacked, samples/s", regex(r"^sqlite\s+stacked x: float32\[B, 35\]\s+([0-9,]+)")),
            ("PostgreSQL: stacked / 35 fields",
             regex(r"^postgresql\s+stacked / 35 fields: ([0-9.]+)x")),
        ],
    },
    {
        "id": "huge-rows",
        "what": "rows of 1 GiB under an 8 GB address-space limit (ulimit -v), batch 1, each "
                "case in a fresh process: unwritten (fill-value) int8 rows and written int32 "
                "rows; and a 14 GB batch refused",
        "command": "PYTHONPATH={build}/python {py} bench/huge_rows.py",
        "prepare": ["PYTHONPATH={build}/python {py} bench/huge_rows.py --prepare-only"],
        "figures": [
            ("fill value: open, s", json_key("fill.open_s")),
            ("fill value: first batch, s", json_key("fill.first_batch_s")),
            ("fill value: the user's copy of the batch succeeded (1 = yes)",
             json_key("fill.copy_ok")),
            ("fill value: first batch / h5py reading the same row",
             json_key("fill.first_batch_ratio_to_h5py")),
            ("written rows: open, s", json_key("rows.open_s")),
            ("written rows: first batch, s", json_key("rows.first_batch_s")),
            ("written rows: the user's copy succeeded (1 = yes)", json_key("rows.copy_ok")),
            ("written rows: first batch / h5py reading the same row",
             json_key("rows.first_batch_ratio_to_h5py")),
            ("batch_size=13 (a 14 GB batch): refused when the loader is made (1 = yes)",
             json_key("refuse.refused")),
            ("batch_size=13: the refusal came after, s", json_key("refuse.refused_s")),
        ],
    },
]


def machine():
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    gpu = "none"
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            gpu = ", ".join(out.stdout.split("\n")).strip(", ")
    return (f"{cpu}, {os.cpu_count()} cores, {mem_gib:.0f} GiB RAM, GPU: {gpu}, "
            f"{platform.system()} {platform.release()}")


def expand(command, args):
    return os.path.expanduser(command.format(gpufeed=args.gpufeed, build=args.build, py=PY))


def run(command, timeout):
    result = subprocess.run(command, shell=True, cwd=ROOT, capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"exit {result.returncode}: {result.stderr.strip()[-400:]}")
    return result.stdout


def fmt(value):
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def torch_cuda():
    probe = subprocess.run([PY, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True)
    return probe.stdout.strip() == "True"


def gpu_missing(args):
    """Why the GPU benchmarks cannot run here; empty when a CUDA driver loads."""
    probe = subprocess.run([args.gpufeed, "bench", "--synthetic", "x:float32[4]", "--samples",
                            "64", "-b", "64", "-e", "1", "--device", "cuda"],
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        return "no GPU: " + (probe.stderr.strip().splitlines() or ["the probe failed"])[-1]
    return ""


def measure(bench, args, prepared):
    for step in bench.get("prepare", []):
        command = expand(step, args)
        if command not in prepared:
            print(f"  prepare: {command}", flush=True)
            run(command, args.timeout)
            prepared.add(command)
    values = {label: [] for label, _ in bench["figures"]}
    command = expand(bench["command"], args)
    for i in range(args.runs):
        print(f"  run {i + 1}/{args.runs}: {command}", flush=True)
        stdout = run(command, args.timeout)
        if args.logs:
            os.makedirs(args.logs, exist_ok=True)
            with open(os.path.join(args.logs, f"{bench['id']}-{i + 1}.txt"), "w") as f:
                f.write(f"$ {command}\n{stdout}")
        for label, extract in bench["figures"]:
            value = extract(stdout)
            if value is not None:
                values[label].append(value)
    return values


SECTIONS = {
    "host": "## On the host (no GPU needed)",
    "remote": "## Object storage (an S3 API server on this machine, behind a fault proxy)",
    "gpu": "## On a GPU (`scripts/gpu-check` runs these)",
}
INTRO = """# Benchmarks

Written by `bench/run_all.py` (`/usr/bin/python3 bench/run_all.py`; `scripts/gpu-check` runs
its GPU part). Each run replaces the section it measured (with --only, the rows of the
benchmarks it ran, and a line saying when): the page holds the figures as they stand now.
Each figure is the median of the runs, with the lowest and highest in brackets; ratios
compare gpufeed with a peer or a ceiling measured in the same run, so they hold better than
absolute rates on a shared machine. One-time costs (first batch, uploads, cache builds) are
on lines of their own, never folded into a rate.
"""


def section_of(bench):
    if bench.get("gpu"):
        return "gpu"
    return "remote" if bench.get("remote") else "host"


def kept_sections(path):
    """The sections of the page at `path`, by name, as written there."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return {}
    found = re.findall(r"<!-- section:(\w+) -->\n(.*?)<!-- end:\1 -->\n", text, re.S)
    return {name: body for name, body in found}


def render_section(name, results, args, load_before, load_after, started):
    fake = "fake" in os.environ.get("GPUFEED_CUDA_LIBRARY", "")
    lines = [
        SECTIONS[name],
        "",
        f"- Runs per benchmark: {args.runs}"
        + (" (the fake CUDA driver of the test tree: a rehearsal, not GPU figures)" if fake
           else ""),
        f"- Machine: {machine()}",
        f"- Date: {started:%Y-%m-%d %H:%M} UTC",
        f"- Load average (1 min) before and after: {load_before:.2f}, {load_after:.2f}",
        "",
        "| benchmark | figure | median [spread] | command |",
        "| --- | --- | --- | --- |",
    ]
    for bench, values, error in results:
        lines += rows_of(bench, values, error)
    lines.append("")
    return "\n".join(lines)


def rows_of(bench, values, error):
    """The table rows of one benchmark's results."""
    command = bench["command"].format(gpufeed="build/src/cli/gpufeed", build="build", py=PY)
    if error:
        return [f"| {bench['what']} | not run | {error} | `{command}` |"]
    rows = []
    for label, figures in values.items():
        if not figures:
            cell = "not printed"
        else:
            cell = (f"{fmt(statistics.median(figures))} "
                    f"[{fmt(min(figures))} – {fmt(max(figures))}]")
        rows.append(f"| {bench['what']} | {label} | {cell} | `{command}` |")
    return rows


def merged_section(name, kept, results, args, load_before, load_after, started):
    """The section `name` as written before (`kept`), with the rows of the benchmarks run now
    replaced (or added, in the script's order) and a line saying when they ran."""
    lines = kept.rstrip("\n").split("\n")
    head = [line for line in lines if not line.startswith("| ") or line.startswith("| ---")
            or line.startswith("| benchmark |")]
    table_at = next((i for i, line in enumerate(head) if line.startswith("| benchmark |")),
                    len(head))
    old_rows = [line for line in lines if line.startswith("| ") and not line.startswith("| ---")
                and not line.startswith("| benchmark |")]
    measured = {r[0]["id"]: r for r in results}
    rows = []
    for bench in BENCHMARKS:
        if section_of(bench) != name:
            continue
        if bench["id"] in measured:
            rows += rows_of(*measured[bench["id"]])
        else:
            rows += [line for line in old_rows if line.startswith(f"| {bench['what']} |")]
    note = (f"- Measured again on {started:%Y-%m-%d %H:%M} UTC (load average before and after "
            f"{load_before:.2f}, {load_after:.2f}; {args.runs} runs): "
            f"{', '.join(sorted(measured))}")
    # An earlier "measured again" line stays while a benchmark it names was not run now.
    bullets = [line for line in head[:table_at] if line.startswith("- ") and not (
        line.startswith("- Measured again") and
        set(line.rsplit("): ", 1)[-1].split(", ")) <= set(measured))]
    header = [SECTIONS[name], ""] + bullets + [note, ""]
    return "\n".join(header + head[table_at:table_at + 2] + rows + [""])


def render(results, args, load_before, load_after, started):
    sections = kept_sections(args.out)
    for name in SECTIONS:
        mine = [r for r in results if section_of(r[0]) == name]
        if not mine:
            continue
        if args.only and name in sections:
            sections[name] = merged_section(name, sections[name], mine, args, load_before,
                                            load_after, started)
        else:
            sections[name] = render_section(name, mine, args, load_before, load_after, started)
    parts = [INTRO]
    for name, title in SECTIONS.items():
        body = sections.get(name, f"{title}\n\nNot measured: no run of this section is recorded.\n")
        parts.append(f"<!-- section:{name} -->\n{body}<!-- end:{name} -->\n")
    parts.append("Without a GPU the batches stay in host memory and the GPU step is simulated "
                 "(`--step-ms`): nothing in the host section ran on a GPU.\n")
    return "\n".join(parts)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--gpufeed", default=None, help="the gpufeed binary (default: BUILD/src/cli/gpufeed)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--only", default="", help="comma-separated benchmark ids")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per command")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    p.add_argument("--logs", default=None,
                   help="a folder to keep each run's full output in (ID-RUN.txt)")
    args = p.parse_args()
    if args.runs < 1:
        p.error("--runs must be at least 1")
    args.gpufeed = args.gpufeed or os.path.join(args.build, "src", "cli", "gpufeed")
    if args.list:
        for bench in BENCHMARKS:
            print(f"{bench['id']:22} {bench['what']}")
        return 0
    chosen = [b for b in BENCHMARKS if not args.only or b["id"] in args.only.split(",")]
    unknown = set(filter(None, args.only.split(","))) - {b["id"] for b in BENCHMARKS}
    if unknown:
        p.error(f"unknown benchmark ids: {', '.join(sorted(unknown))} (see --list)")
    if not os.access(args.gpufeed, os.X_OK):
        p.error(f"{args.gpufeed} is not built: run `make build` first")
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = os.getloadavg()[0]
    results, prepared = [], set()
    no_gpu = gpu_missing(args) if any(b.get("gpu") for b in chosen) else ""
    fake = "fake" in os.environ.get("GPUFEED_CUDA_LIBRARY", "")
    for bench in chosen:
        print(f"{bench['id']}: {bench['what']}", flush=True)
        if bench.get("gpu") and no_gpu:
            results.append((bench, {}, no_gpu[:200].replace("|", "/")))
            continue
        if bench.get("torch_cuda") and not torch_cuda():
            results.append((bench, {}, "torch here has no CUDA"))
            continue
        if bench.get("gpu") and fake:
            bench = dict(bench, what=bench["what"] + " (FAKE DRIVER: not a GPU figure)")
        try:
            results.append((bench, measure(bench, args, prepared), None))
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"  not run: {e}", file=sys.stderr)
            results.append((bench, {}, str(e).replace("|", "/").replace("\n", " ")[:200]))
    page = render(results, args, load_before, os.getloadavg()[0], started)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(page)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
