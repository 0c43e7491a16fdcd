"""Where an Optuna study's time goes: per trial, start-up before the first batch, waits for
data and GPU busy time, recorded on the trial; per study, a summary and a verdict.

In the objective::

    def objective(trial):
        loader = gpufeed.Loader("train.h5", batch_size=256, cache="shm", device="cuda")
        tracker = gpufeed.optuna.track(trial, loader)
        for epoch in range(epochs):
            for batch in tracker:          # the loader's epoch, its first batch timed
                ...
            trial.report(accuracy, epoch)  # the figures are recorded at each epoch's end
            if trial.should_prune():
                raise optuna.TrialPruned()

then ``gpufeed trials sqlite:///study.db`` (or ``gpufeed.optuna.summary(study)``) tells
where the study's time went.

Optuna (Debian's python3-optuna, 3.1) is imported only by summary() and the `trials`
command: gpufeed works without it.
"""

import datetime as _datetime
import json as _json
import math as _math
import sys as _sys
import time as _time

# User attributes track() records on a trial (all prefixed so they never clash with the
# user's own).
ATTR_FIRST_BATCH = "gpufeed_first_batch_s"  # objective start -> first batch
ATTR_DATA_WAIT = "gpufeed_data_wait_share"  # share of the loop's time spent waiting for data
ATTR_SAMPLES_PER_S = "gpufeed_samples_per_s"
ATTR_GPU_BUSY = "gpufeed_gpu_busy_share"  # by CUDA events, else NVML; absent when unknown
ATTR_GPU_BUSY_BY = "gpufeed_gpu_busy_by"  # "events" or "nvml"
ATTR_CACHE_TIER = "gpufeed_cache_tier"
ATTR_DEVICE_SHARE = "gpufeed_device_share"
ATTR_VERDICT = "gpufeed_verdict"  # the doctor's verdict ("input-bound", ...)
ATTR_DEVICE = "gpufeed_device"  # where the batches went: "cpu" or "cuda"

_STATES = ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")


def _timestamp(value):
    """Seconds since the epoch of a datetime Optuna stored (naive = local time)."""
    return value.timestamp() if value is not None else None


class Tracker:
    """What track() returns: iterate it for the loader's epoch (the first batch is timed
    from the objective's start), and record() writes the figures on the trial (done at the
    end of every epoch iterated through the tracker; call it yourself before raising
    TrialPruned mid-epoch)."""

    def __init__(self, trial, loader, monitor=None, started=None):
        self._trial = trial
        self._loader = loader
        self._monitor = monitor
        start = getattr(trial, "datetime_start", None)
        if started is not None:
            self._start = float(started)
        elif isinstance(start, _datetime.datetime):
            # Optuna stamps the trial when it creates it in the storage, just before it calls
            # the objective (its sampler and storage writes fall in between).
            self._start = _timestamp(start)
        else:
            self._start = _time.time()  # a trial without a start time (a FixedTrial)
        self._first_batch_at = None

    @property
    def first_batch_s(self):
        """Seconds from the objective's start to the first batch, or None before it."""
        if self._first_batch_at is None:
            return None
        return max(0.0, self._first_batch_at - self._start)

    def __iter__(self):
        for batch in self._loader:
            if self._first_batch_at is None:
                self._first_batch_at = _time.time()
            yield batch
        self.record()

    def figures(self):
        """The figures record() writes, as a dict of attribute name to value."""
        stats = self._loader.stats()
        attrs = {}
        if self._first_batch_at is None and stats.get("batches", 0) > 0:
            # Iterated without the tracker: the loader's own clock from its start to its
            # first batch, plus the time before track() was called is unknown; a lower bound.
            attrs[ATTR_FIRST_BATCH] = float(stats.get("first_batch_s") or 0.0)
        elif self._first_batch_at is not None:
            attrs[ATTR_FIRST_BATCH] = self.first_batch_s
        wait = stats.get("consumer_wait_fraction")
        if wait is not None and _math.isfinite(wait):
            attrs[ATTR_DATA_WAIT] = float(wait)
        wall = stats.get("wall_s") or 0.0
        if wall > 0:
            attrs[ATTR_SAMPLES_PER_S] = stats.get("samples", 0) / wall
        busy = stats.get("gpu_busy_fraction")
        if busy is not None:
            attrs[ATTR_GPU_BUSY], attrs[ATTR_GPU_BUSY_BY] = float(busy), "events"
        elif self._monitor is not None:
            metrics = self._monitor.summary().get("metrics", {})
            util = [m.get("mean") for name, m in metrics.items()
                    if name.startswith("gpu") and name.endswith("_utilization")
                    and not name.endswith("memory_utilization") and m.get("mean") is not None]
            if util:
                attrs[ATTR_GPU_BUSY], attrs[ATTR_GPU_BUSY_BY] = max(util) / 100.0, "nvml"
        device = getattr(self._loader, "device", None)
        if device is not None:
            attrs[ATTR_DEVICE] = str(getattr(device, "type", device))
        info = getattr(self._loader, "cache_info", None) or {}
        if info.get("tier"):
            attrs[ATTR_CACHE_TIER] = info["tier"]
        if info.get("device_share"):
            attrs[ATTR_DEVICE_SHARE] = info["device_share"]
        if stats.get("batches", 0) > 0:
            try:
                attrs[ATTR_VERDICT] = self._loader.diagnose(monitor=self._monitor)["verdict"]
            except Exception:  # the doctor needs batches in its window; figures stand alone
                pass
        return attrs

    def record(self):
        """Writes figures() on the trial as user attributes; returns them."""
        attrs = self.figures()
        for name, value in attrs.items():
            self._trial.set_user_attr(name, value)
        return attrs


def track(trial, loader, monitor=None, started=None):
    """Records on an Optuna `trial`, as user attributes, where its time went with `loader`:
    seconds from the objective's start to the first batch, the share of the loop's time
    spent waiting for data, samples/s, the GPU's busy share (CUDA events; else the mean GPU
    utilization of a running gpufeed.Monitor given as `monitor`), the cache tier (and how a
    device copy is shared), where the batches went (cpu or cuda) and the doctor's verdict. The objective's start is `started`
    (time.time() taken on entering the objective) when given, else the trial's
    datetime_start, stamped by Optuna just before it calls the objective (so its sampler's
    and storage's time count as start-up). Returns a Tracker: iterate it instead
    of the loader to time the first batch exactly; figures are written at the end of each
    epoch iterated through it, and by Tracker.record()."""
    return Tracker(trial, loader, monitor, started)


# --- the study's summary ------------------------------------------------------------------


def _duration(trial, now):
    start = trial.datetime_start
    if start is None:
        return None
    end = trial.datetime_complete
    if end is None:
        if trial.state.name != "RUNNING":
            return None
        end = now
    return max(0.0, (end - start).total_seconds())


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _state_figures(trials, now):
    durations = [_duration(t, now) for t in trials]
    known = [d for d in durations if d is not None]
    out = {
        "count": len(trials),
        "mean_duration_s": _mean(known),
        "total_duration_s": sum(known),
    }
    # Duration-weighted share before the first batch, over trials that recorded it.
    first, spent = 0.0, 0.0
    tracked = 0
    for t, d in zip(trials, durations):
        fb = t.user_attrs.get(ATTR_FIRST_BATCH)
        if fb is None or d is None or d <= 0:
            continue
        tracked += 1
        first += min(float(fb), d)
        spent += d
    out["tracked"] = tracked
    out["first_batch_share"] = first / spent if spent > 0 else None
    out["mean_first_batch_s"] = _mean([t.user_attrs.get(ATTR_FIRST_BATCH) for t in trials])
    out["mean_data_wait_share"] = _mean([t.user_attrs.get(ATTR_DATA_WAIT) for t in trials])
    out["mean_gpu_busy_share"] = _mean([t.user_attrs.get(ATTR_GPU_BUSY) for t in trials])
    out["mean_samples_per_s"] = _mean([t.user_attrs.get(ATTR_SAMPLES_PER_S) for t in trials])
    tiers = sorted({t.user_attrs[ATTR_CACHE_TIER] for t in trials
                    if ATTR_CACHE_TIER in t.user_attrs})
    out["cache_tiers"] = tiers
    out["devices"] = sorted({str(t.user_attrs[ATTR_DEVICE]) for t in trials
                             if ATTR_DEVICE in t.user_attrs})
    verdicts = {}
    for t in trials:
        if t.user_attrs.get(ATTR_VERDICT):
            name = str(t.user_attrs[ATTR_VERDICT])
            verdicts[name] = verdicts.get(name, 0) + 1
    out["doctor_verdicts"] = verdicts
    return out


def _used_gpu(overall):
    """Whether the trials put batches on a GPU, as they recorded it: their device, or a GPU
    busy share (measured only where there was a GPU)."""
    return (any(d != "cpu" for d in overall.get("devices", []))
            or overall["mean_gpu_busy_share"] is not None)


def _starvation(overall):
    """(trials the doctor found cpu-starved, trials it gave a verdict for)."""
    verdicts = overall.get("doctor_verdicts", {})
    return verdicts.get("cpu-starved", 0), sum(verdicts.values())


def _verdict(states, overall, total_trials):
    if total_trials == 0:
        return "the study has no trials yet"
    pruned = states.get("PRUNED", {})
    pruned_note = ""
    if overall["total_duration_s"] > 0 and pruned.get("count"):
        pruned_note = (f"; pruned trials took "
                       f"{100 * pruned['total_duration_s'] / overall['total_duration_s']:.0f} % "
                       f"of the study's trial time")
    if overall["tracked"] == 0:
        return ("no gpufeed figures on these trials (call gpufeed.optuna.track(trial, loader) "
                "in the objective to see start-up, data waits and GPU busy time)" + pruned_note)
    share = overall["first_batch_share"] or 0.0
    wait = overall["mean_data_wait_share"]
    busy = overall["mean_gpu_busy_share"]
    tiers = overall["cache_tiers"]
    starved, judged = _starvation(overall)
    figures = [f"start-up {100 * share:.0f} %"]
    if wait is not None:
        figures.append(f"data wait {100 * wait:.0f} %")
    if busy is not None:
        figures.append(f"GPU busy {100 * busy:.0f} %")
    if starved and 2 * starved >= judged:
        # The doctor saw the loaders' threads runnable without a CPU: the cores are taken,
        # which slows every stage of a trial, its start-up included.
        return (f"the doctor found {starved} of {judged} trials cpu-starved: their loader "
                f"threads were runnable but had no CPU while the loop waited for data, so "
                f"other work takes the cores (trials run in parallel, other processes); run "
                f"fewer trials at once or give each loader fewer workers ("
                + ", ".join(figures) + ")" + pruned_note)
    starved_note = (f"; the doctor found {starved} of {judged} trials cpu-starved"
                    if starved else "")
    notes = starved_note + pruned_note
    if share >= 0.10:
        if tiers and all(t in ("shm", "device") for t in tiers):
            setup = "model, CUDA context"
            if not _used_gpu(overall):
                setup = "the model and what else it builds before iterating the loader"
                if overall.get("devices") == ["cpu"]:
                    setup += "; the batches stayed on the CPU"
            return (f"start-up takes {100 * share:.0f} % of trial time although the trials "
                    f"already map a shared cache ({', '.join(tiers)}): the time before the "
                    f"first batch is in the objective's own set-up ({setup})" + notes)
        return (f"start-up takes {100 * share:.0f} % of trial time: use cache='shm' so every "
                f"trial maps one copy of the data (cache='device' shares one GPU copy too), and "
                f"keep the loader's set-up out of the per-trial path" + notes)
    if wait is not None and wait >= 0.20:
        return (f"trials wait for data {100 * wait:.0f} % of their loop time: call "
                f"loader.report() (the doctor) in one trial's objective for the stage to fix"
                + notes)
    if busy is not None and busy < 0.80:
        return (f"the GPU is busy only {100 * busy:.0f} % of trial time while data waits are "
                f"{100 * (wait or 0):.0f} %: the gap is in the training step (small batches, "
                f"host work, synchronization), not the input" + notes)
    return "data is not what slows this study (" + ", ".join(figures) + ")" + notes


def summary(study):
    """Per trial state (COMPLETE, PRUNED, FAIL, RUNNING, WAITING present in the study):
    count, mean duration, the share of trial time before the first batch, mean data wait
    share and GPU busy share (the last three from track()'s attributes, None where no trial
    recorded them), and a verdict for the study. Works on any Optuna study: without
    gpufeed attributes the counts and durations remain."""
    trials = study.get_trials(deepcopy=False)
    now = _datetime.datetime.now()
    by_state = {}
    for t in trials:
        by_state.setdefault(t.state.name, []).append(t)
    order = [s for s in _STATES if s in by_state] + sorted(s for s in by_state if s not in _STATES)
    states = {name: _state_figures(by_state[name], now) for name in order}
    overall = _state_figures(trials, now)
    return {
        "study": study.study_name,
        "trials": len(trials),
        "states": states,
        "overall": overall,
        "verdict": _verdict(states, overall, len(trials)),
    }


def _percent(value):
    return "-" if value is None else f"{100 * value:.0f} %"


def _seconds(value):
    return "-" if value is None else f"{value:.2f} s"


def format_summary(result):
    """The table `gpufeed trials` prints for one summary() result."""
    lines = [f"study {result['study']}: {result['trials']} trials"]
    header = ("state", "count", "mean time", "to 1st batch", "data wait", "GPU busy")
    rows = [header]
    for name, f in list(result["states"].items()) + [("all", result["overall"])]:
        rows.append((name, str(f["count"]), _seconds(f["mean_duration_s"]),
                     _percent(f["first_batch_share"]), _percent(f["mean_data_wait_share"]),
                     _percent(f["mean_gpu_busy_share"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        lines.append("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                      for i, (c, w) in enumerate(zip(r, widths))))
    lines.append("verdict: " + result["verdict"])
    return "\n".join(lines)


# --- `gpufeed trials` ---------------------------------------------------------------------


class TrialsError(Exception):
    """A storage or study that cannot be read: the message says which and why."""


def _open_storage(url):
    import optuna  # the storage's own reader; imported only here

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if "://" not in url:
        raise TrialsError(f"{url!r} is not a storage URL (e.g. sqlite:///study.db, "
                          f"postgresql://user@host/db)")
    if url.startswith("sqlite:///"):
        import os

        path = url[len("sqlite:///"):]
        # SQLAlchemy would make an empty database where none exists: say so instead.
        path = path.split("?")[0]
        if path and path != ":memory:" and not os.path.isfile(path):
            raise TrialsError(f"no SQLite database at {path} (from {url})")
        if path and path != ":memory:":
            # Opening a database that is not Optuna's would have Optuna write into it: look
            # first, read-only.
            import sqlite3

            try:
                with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
                    tables = {row[0] for row in db.execute(
                        "select name from sqlite_master where type = 'table'")}
            except sqlite3.Error as e:
                raise TrialsError(f"{url} cannot be read as SQLite: {e}")
            if not {"studies", "trials", "version_info"} <= tables:
                raise TrialsError(f"{url} is not an Optuna storage (it has no studies, trials "
                                  f"and version_info tables)")
    try:
        return optuna.storages.RDBStorage(url, skip_table_creation=True,
                                          skip_compatibility_check=True)
    except Exception as e:  # SQLAlchemy's errors: a bad dialect, a refused connection
        raise TrialsError(f"cannot open the Optuna storage {url}: "
                          f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


def summarize_storage(url, study_name=None):
    """summary() of `study_name` in the storage at `url` (every study when None). Raises
    TrialsError for a storage that cannot be opened or read and a study it does not hold."""
    import optuna

    storage = _open_storage(url)
    try:
        names = [s.study_name for s in storage.get_all_studies()]
    except Exception as e:
        raise TrialsError(f"{url} is not an Optuna storage (or cannot be read): "
                          f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    if study_name is not None:
        if study_name not in names:
            there = ", ".join(names) if names else "none"
            raise TrialsError(f"no study named {study_name!r} in {url} (studies there: {there})")
        names = [study_name]
    if not names:
        raise TrialsError(f"{url} holds no study")
    return [summary(optuna.load_study(study_name=n, storage=storage)) for n in names]


def main(argv):
    """`gpufeed trials STORAGE_URL [--study NAME] [--json]`; returns the exit code."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="gpufeed trials",
        description="Where an Optuna study's time went: per trial state, counts, mean "
                    "duration, share before the first batch, data wait and GPU busy "
                    "(recorded by gpufeed.optuna.track), and a verdict.")
    parser.add_argument("storage", help="an Optuna storage URL (sqlite:///study.db, "
                                        "postgresql://...)")
    parser.add_argument("--study", help="the study's name (default: every study there)")
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    args = parser.parse_args(argv)
    try:
        results = summarize_storage(args.storage, args.study)
    except ImportError as e:
        print(f"gpufeed trials: needs Optuna (apt install python3-optuna): {e}",
              file=_sys.stderr)
        return 1
    except TrialsError as e:
        print(f"gpufeed trials: {e}", file=_sys.stderr)
        return 3 if str(e).startswith(("no SQLite", "no study")) else 2
    if args.json:
        print(_json.dumps(results if args.study is None else results[0], indent=1))
    else:
        print("\n\n".join(format_summary(r) for r in results))
    return 0
