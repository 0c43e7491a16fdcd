#!/usr/bin/python3
"""An Optuna study whose trials each train a small model on the synthetic mel HDF5 set, run with
a new torch DataLoader per trial (the usual set-up) and with gpufeed's shared-memory cache.

Run with Debian's python (torch, h5py, numpy, python3-optuna), from the repository root with
the build tree's package on the path:

    PYTHONPATH=python:build/python /usr/bin/python3 bench/hpo_trials.py [--samples 100000]

Builds once, in a cache folder (default ~/.cache/gpufeed-bench), N x float32[1,64,32] `mel`
+ int64 `label` (chunks of 256, uncompressed; hdf5_vs_dataloader.build_file). Then, per
set-up, an Optuna study in a fresh SQLite storage, 12 trials run by 2 worker processes
(each `study.optimize` over the shared storage, stopped at 12 trials in all), each trial 2
epochs of a small model (mean over time + linear layer, on CUDA when present) with a learning
rate drawn by Optuna and the median pruner after the first epoch:
  (a) DataLoader over a per-sample h5py Dataset: 4 workers, persistent_workers=True,
      prefetch_factor=3, shuffled, a new loader per trial;
  (b) gpufeed.Loader(cache="shm"): the first trial builds the cache in /dev/shm, every
      later trial (in either process) maps the same copy; (c) cache="device" on a GPU.
Prints, per trial, seconds from the objective's start to the first batch; the study's wall
time; the peak memory of the set-up against the data set's size: the summed PSS
(/proc/PID/smaps) of the two worker processes and their children (DataLoader workers) plus
the gpufeed cache files in /dev/shm they opened (counted once; what of them is mapped is
taken out of the PSS), with the split at the peak (the copy in /dev/shm; the processes'
PSS apart from it, its anonymous part, and the idle baseline of two processes that only
imported torch, h5py, optuna and gpufeed); then `gpufeed trials` on the storage.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

SHAPE = (1, 64, 32)
TRIALS = 12
PROCESSES = 2
EPOCHS = 2
BATCH = 256


def descendants(pid):
    """`pid` and every process under it (from /proc/*/stat)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
            ppid = int(text[text.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def pss_bytes(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def is_shm_cache(path):
    """A gpufeed shared-memory cache file (not its lock, not the user's secret)."""
    name = os.path.basename(path)
    return ("/gpufeed-user-" in path or "/gpufeed-group-" in path) and \
        name.startswith("gpufeed-") and len(name) == 24


def pss_split(pid):
    """(PSS, PSS of mapped gpufeed shm cache files, Pss_Anon, shm cache files open) of one
    process. The cache is read with pread (nothing mapped) since format 4, so the second is
    0 unless something maps it; the cache files the process holds open are found in fd/."""
    total = mapped = anon = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    total = int(line.split()[1]) * 1024
                elif line.startswith("Pss_Anon:"):
                    anon = int(line.split()[1]) * 1024
        with open(f"/proc/{pid}/smaps") as f:
            in_cache = False
            for line in f:
                first = line.split(maxsplit=1)[0]
                if "-" in first and not first.endswith(":"):  # a mapping's header line
                    parts = line.split()
                    in_cache = len(parts) >= 6 and is_shm_cache(parts[5])
                elif in_cache and line.startswith("Pss:"):
                    mapped += int(line.split()[1]) * 1024
    except OSError:
        pass
    open_caches = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if is_shm_cache(target):
                open_caches.add(target)
    except OSError:
        pass
    return total, mapped, anon, open_caches


class PssSampler(threading.Thread):
    """The peak over time of the memory the set-up holds: the summed PSS of `pids` and their
    descendants, plus the gpufeed shm cache files they opened (a tmpfs file is memory whether
    or not a process maps it; it is counted once, and what of it is mapped is taken out of
    the PSS so nothing counts twice). The split at the peak is kept."""

    def __init__(self, pids):
        super().__init__(daemon=True)
        self.pids, self.stop = pids, threading.Event()
        self.caches = set()
        self.peak = {"total": 0, "pss": 0, "pss_mapped_cache": 0, "pss_anon": 0,
                     "cache_files": 0}

    def run(self):
        while not self.stop.wait(0.5):
            pss = mapped = anon = 0
            for root in self.pids:
                for p in descendants(root):
                    t, m, a, opened = pss_split(p)
                    pss, mapped, anon = pss + t, mapped + m, anon + a
                    self.caches |= opened
            files = 0
            for path in self.caches:
                try:
                    files += os.stat(path).st_size
                except OSError:
                    pass
            total = pss - mapped + files
            if total > self.peak["total"]:
                self.peak = {"total": total, "pss": pss, "pss_mapped_cache": mapped,
                             "pss_anon": anon, "cache_files": files}


# --- one worker process ---------------------------------------------------------------------


def worker(setup, path, storage, study_name, samples):
    import h5py
    import optuna
    import torch
    from optuna.study import MaxTrialsCallback
    from torch.utils.data import DataLoader, Dataset

    import gpufeed
    import gpufeed.optuna as gopt

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    class H5SampleDataset(Dataset):
        def __init__(self):
            self.file = None

        def __len__(self):
            return samples

        def __getitem__(self, i):
            if self.file is None:  # opened in the worker: h5py handles do not survive fork
                self.file = h5py.File(path, "r")
            return torch.from_numpy(self.file["mel"][i]), int(self.file["label"][i])

    def objective(trial):
        start = time.time()  # the objective's start, for both set-ups alike
        lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
        model = torch.nn.Linear(SHAPE[2], 1000).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        first = None
        if setup == "dataloader":
            loader = DataLoader(H5SampleDataset(), batch_size=BATCH, shuffle=True, num_workers=4,
                                persistent_workers=True, prefetch_factor=3)
            epochs_of = lambda: loader  # noqa: E731
        else:
            loader = gpufeed.Loader(path, fields=["mel", "label"], batch_size=BATCH,
                                    shuffle=True, cache=setup, device=device, autotune=False)
            tracker = gopt.track(trial, loader, started=start)
            epochs_of = lambda: tracker  # noqa: E731
        loss = None
        for epoch in range(EPOCHS):
            for batch in epochs_of():
                if first is None:
                    first = time.time() - start
                mel, label = (batch if setup == "dataloader"
                              else (batch["mel"], batch["label"]))
                mel, label = mel.to(device, non_blocking=True), label.to(device)
                logits = model(mel.mean(dim=(1, 2)))
                loss = torch.nn.functional.cross_entropy(logits, label % 1000)
                opt.zero_grad()
                loss.backward()
                opt.step()
            trial.report(float(loss), epoch)
            if trial.should_prune():
                trial.set_user_attr(gopt.ATTR_FIRST_BATCH, first)
                raise optuna.TrialPruned()
        # The DataLoader has no tracker: its first-batch time is recorded the same way.
        trial.set_user_attr(gopt.ATTR_FIRST_BATCH, first)
        del loader
        return float(loss)

    study = optuna.load_study(study_name=study_name, storage=storage,
                              pruner=optuna.pruners.MedianPruner(n_startup_trials=2))
    study.optimize(objective, callbacks=[MaxTrialsCallback(TRIALS, states=None)])


# --- the driver -----------------------------------------------------------------------------


def idle_baseline():
    """The summed PSS of PROCESSES idle workers: Python with torch, h5py, optuna and gpufeed
    imported, no data touched; what every set-up pays before its data."""
    code = ("import sys, torch, h5py, optuna, gpufeed, gpufeed.optuna; "
            "print('ready', flush=True); sys.stdin.read()")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for _ in range(PROCESSES)]
    for p in procs:
        p.stdout.readline()
    total = sum(pss_bytes(p.pid) for p in procs)
    for p in procs:
        p.stdin.close()
        p.wait()
    return total


def run_setup(setup, path, samples, workdir):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # A generous lock timeout: two processes write the one SQLite file on a busy machine.
    storage = f"sqlite:///{workdir}/{setup}.db?timeout=60"
    study_name = f"hpo-{setup}"
    optuna.create_study(study_name=study_name, storage=storage, direction="minimize")
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", setup, "--path", path,
                               "--storage", storage, "--study", study_name,
                               "--samples", str(samples)])
             for _ in range(PROCESSES)]
    sampler = PssSampler([p.pid for p in procs])
    sampler.start()
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - start
    sampler.stop.set()
    sampler.join()
    if any(codes):
        raise SystemExit(f"{setup}: a worker failed ({codes})")
    study = optuna.load_study(study_name=study_name, storage=storage)
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.datetime_start)
    return storage, study_name, trials, wall, sampler.peak


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/gpufeed-bench"))
    parser.add_argument("--setups", default=None,
                        help="comma-separated: dataloader,shm[,device] (default: device only "
                             "with a GPU)")
    parser.add_argument("--worker")
    parser.add_argument("--path")
    parser.add_argument("--storage")
    parser.add_argument("--study")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.path, args.storage, args.study, args.samples)
        return

    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from hdf5_vs_dataloader import build_file

    os.makedirs(args.cache_dir, exist_ok=True)
    path = os.path.join(args.cache_dir, f"hpo_{args.samples}.h5")
    build_file(path, args.samples)
    data_bytes = args.samples * (4 * SHAPE[0] * SHAPE[1] * SHAPE[2] + 8)
    setups = (args.setups.split(",") if args.setups
              else ["dataloader", "shm"] + (["device"] if torch.cuda.is_available() else []))
    print(f"data set: {args.samples} x float32{list(SHAPE)} + int64 label = "
          f"{data_bytes / 1e9:.2f} GB ({path}); {TRIALS} trials, {PROCESSES} worker processes, "
          f"{EPOCHS} epochs each, batch {BATCH}, device "
          f"{'cuda' if torch.cuda.is_available() else 'cpu'}; {os.cpu_count()} CPUs")
    baseline = idle_baseline()
    print(f"idle baseline: {PROCESSES} processes with torch, h5py, optuna and gpufeed imported "
          f"and no data: summed PSS {baseline / 1e9:.2f} GB")
    with tempfile.TemporaryDirectory(prefix="gpufeed-hpo-") as workdir:
        storages = {}
        for setup in setups:
            storage, name, trials, wall, peak = run_setup(setup, path, args.samples, workdir)
            storages[setup] = (storage, name)
            firsts = [t.user_attrs.get("gpufeed_first_batch_s") for t in trials]
            total = peak["total"]
            rest = peak["pss"] - peak["pss_mapped_cache"]
            gb = lambda n: f"{n / 1e9:.2f} GB"  # noqa: E731
            print(f"\n{setup}: study wall time {wall:.1f} s; peak memory of the set-up "
                  f"{gb(total)} = {total / data_bytes:.2f}x the data set; above the idle "
                  f"baseline {gb(total - baseline)} = {(total - baseline) / data_bytes:.2f}x")
            print(f"  at the peak: data-set copy in /dev/shm (gpufeed cache files, counted "
                  f"once) {gb(peak['cache_files'])} = {peak['cache_files'] / data_bytes:.2f}x; "
                  f"the {PROCESSES} processes (and children) apart from it: PSS {gb(rest)} "
                  f"(anonymous {gb(peak['pss_anon'])}; the idle baseline {gb(baseline)}; "
                  f"{gb(peak['pss_mapped_cache'])} of the cache mapped, counted in the copy)")
            print("  time from objective start to first batch, per trial (start order): " +
                  ", ".join("-" if f is None else f"{f:.3f} s" for f in firsts))
            later = [f for f in firsts[1:] if f is not None]
            if later:
                print(f"  trials after the first: max {max(later):.3f} s, "
                      f"mean {sum(later) / len(later):.3f} s")
            states = {}
            for t in trials:
                states[t.state.name] = states.get(t.state.name, 0) + 1
            print(f"  trial states: {json.dumps(states)}")
        for setup, (storage, name) in storages.items():
            print(f"\n$ gpufeed trials {storage} --study {name}", flush=True)
            subprocess.run([sys.executable, "-m", "gpufeed", "trials", storage, "--study", name],
                           check=True)


if __name__ == "__main__":
    main()
