"""gpufeed.optuna: track() records a trial's figures; summary() and `gpufeed trials` read them
back from a real Optuna SQLite storage (complete, pruned and failed trials), and a storage
without gpufeed attributes still gets counts and durations. A bad URL, a missing database and
a missing study are clear errors."""

import datetime
import json
import os
import subprocess
import sys

import pytest

import gpufeed
import gpufeed.optuna as gopt

optuna = pytest.importorskip("optuna")
optuna.logging.set_verbosity(optuna.logging.WARNING)


def _objective(trial):
    """A real objective: a loader per trial, iterated through the tracker; trials 3 and 4
    are pruned after the first epoch, trial 5 fails."""
    loader = gpufeed.Loader(gpufeed.synthetic("x:float32[16],label:int64", 400), batch_size=100,
                            device="cpu", cache="ram")
    tracker = gopt.track(trial, loader)
    for epoch in range(2):
        for batch in tracker:
            assert batch["x"].shape[1] == 16
        trial.report(float(epoch), epoch)
        if trial.number in (3, 4):
            raise optuna.TrialPruned()
    if trial.number == 5:
        raise RuntimeError("this trial fails")
    return float(trial.number)


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    path = tmp_path_factory.mktemp("optuna") / "study.db"
    url = f"sqlite:///{path}"
    real = optuna.create_study(study_name="real", storage=url)
    real.optimize(_objective, n_trials=6, catch=(RuntimeError,))

    # Exact figures: trials with set start and end times and attributes.
    exact = optuna.create_study(study_name="exact", storage=url)
    t0 = datetime.datetime(2026, 1, 1, 12, 0, 0)
    S = optuna.trial.TrialState
    specs = [
        (S.COMPLETE, 10.0, {gopt.ATTR_FIRST_BATCH: 1.0, gopt.ATTR_DATA_WAIT: 0.1,
                            gopt.ATTR_GPU_BUSY: 0.9, gopt.ATTR_CACHE_TIER: "none"}),
        (S.COMPLETE, 30.0, {gopt.ATTR_FIRST_BATCH: 9.0, gopt.ATTR_DATA_WAIT: 0.3,
                            gopt.ATTR_GPU_BUSY: 0.7, gopt.ATTR_CACHE_TIER: "none"}),
        (S.PRUNED, 4.0, {gopt.ATTR_FIRST_BATCH: 2.0, gopt.ATTR_DATA_WAIT: 0.5,
                         gopt.ATTR_CACHE_TIER: "none"}),
        (S.FAIL, 2.0, {}),
    ]
    for i, (state, seconds, attrs) in enumerate(specs):
        start = t0 + datetime.timedelta(minutes=i)
        exact.add_trial(optuna.trial.FrozenTrial(
            number=i, state=state, value=1.0 if state == S.COMPLETE else None,
            values=None, datetime_start=start,
            datetime_complete=start + datetime.timedelta(seconds=seconds), params={},
            distributions={}, user_attrs=attrs, system_attrs={}, intermediate_values={},
            trial_id=i))

    # No gpufeed attributes at all (a study run without track()).
    plain = optuna.create_study(study_name="plain", storage=url)
    plain.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=3)
    return url, str(path)


def test_track_records_every_figure_on_real_trials(storage):
    url, _ = storage
    study = optuna.load_study(study_name="real", storage=url)
    trials = study.get_trials(deepcopy=False)
    states = sorted(t.state.name for t in trials)
    assert states == ["COMPLETE"] * 3 + ["FAIL"] + ["PRUNED"] * 2
    for t in trials:
        attrs = t.user_attrs
        duration = (t.datetime_complete - t.datetime_start).total_seconds()
        assert 0 <= attrs[gopt.ATTR_FIRST_BATCH] <= duration
        assert 0 <= attrs[gopt.ATTR_DATA_WAIT] <= 1
        assert attrs[gopt.ATTR_SAMPLES_PER_S] > 0
        assert attrs[gopt.ATTR_CACHE_TIER] == "ram"
        assert attrs[gopt.ATTR_VERDICT]
        assert gopt.ATTR_GPU_BUSY not in attrs  # the CPU device has no GPU time to measure

    result = gopt.summary(study)
    assert result["trials"] == 6
    assert {k: v["count"] for k, v in result["states"].items()} == {
        "COMPLETE": 3, "PRUNED": 2, "FAIL": 1}
    assert list(result["states"]) == ["COMPLETE", "PRUNED", "FAIL"]
    assert result["overall"]["tracked"] == 6
    assert 0 < result["overall"]["first_batch_share"] <= 1


def test_summary_gives_exact_counts_durations_and_shares(storage):
    url, _ = storage
    result = gopt.summary(optuna.load_study(study_name="exact", storage=url))
    complete, pruned, fail = (result["states"][s] for s in ("COMPLETE", "PRUNED", "FAIL"))
    assert (complete["count"], pruned["count"], fail["count"]) == (2, 1, 1)
    assert complete["mean_duration_s"] == pytest.approx(20.0)
    assert pruned["mean_duration_s"] == pytest.approx(4.0)
    assert fail["mean_duration_s"] == pytest.approx(2.0)
    # Time-weighted: (1 + 9) s of (10 + 30) s before the first batch.
    assert complete["first_batch_share"] == pytest.approx(0.25)
    assert pruned["first_batch_share"] == pytest.approx(0.5)
    assert fail["first_batch_share"] is None and fail["tracked"] == 0
    assert complete["mean_data_wait_share"] == pytest.approx(0.2)
    assert complete["mean_gpu_busy_share"] == pytest.approx(0.8)
    assert pruned["mean_gpu_busy_share"] is None
    # Overall: 12 s of 44 s tracked time (the failed trial recorded nothing).
    assert result["overall"]["first_batch_share"] == pytest.approx(12 / 44)
    assert result["verdict"].startswith("start-up takes 27 % of trial time: use cache='shm'")
    assert "pruned trials took 9 % of the study's trial time" in result["verdict"]


def test_trials_command_prints_the_table_and_json(storage, capsys):
    url, _ = storage
    assert gopt.main([url, "--study", "exact"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "study exact: 4 trials"
    complete = next(l for l in lines if l.strip().startswith("COMPLETE"))
    assert complete.split() == ["COMPLETE", "2", "20.00", "s", "25", "%", "20", "%", "80", "%"]
    pruned = next(l for l in lines if l.strip().startswith("PRUNED"))
    assert pruned.split() == ["PRUNED", "1", "4.00", "s", "50", "%", "50", "%", "-"]
    fail = next(l for l in lines if l.strip().startswith("FAIL"))
    assert fail.split() == ["FAIL", "1", "2.00", "s", "-", "-", "-"]
    assert lines[-1].startswith("verdict: start-up takes 27 %")

    assert gopt.main([url, "--study", "exact", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["states"]["COMPLETE"]["count"] == 2
    assert data["overall"]["first_batch_share"] == pytest.approx(12 / 44)


def test_a_study_without_gpufeed_attributes_gets_counts_and_durations(storage, capsys):
    url, _ = storage
    assert gopt.main([url, "--study", "plain"]) == 0
    out = capsys.readouterr().out
    complete = next(l for l in out.splitlines() if l.strip().startswith("COMPLETE"))
    words = complete.split()
    assert words[:2] == ["COMPLETE", "3"] and words[3] == "s"
    assert words[4:] == ["-", "-", "-"]
    assert "no gpufeed figures on these trials" in out
    # Every study when none is named.
    assert gopt.main([url]) == 0
    out = capsys.readouterr().out
    assert "study real: 6 trials" in out and "study exact: 4 trials" in out
    assert "study plain: 3 trials" in out


def test_bad_url_missing_database_and_missing_study_are_clear_errors(storage, tmp_path, capsys):
    url, path = storage
    assert gopt.main([url, "--study", "nope"]) == 3
    err = capsys.readouterr().err
    assert "no study named 'nope'" in err and "studies there: real, exact, plain" in err

    missing = tmp_path / "absent.db"
    assert gopt.main([f"sqlite:///{missing}"]) == 3
    assert f"no SQLite database at {missing}" in capsys.readouterr().err
    assert not missing.exists()  # nothing made where nothing was

    assert gopt.main(["study.db"]) == 2
    assert "is not a storage URL" in capsys.readouterr().err
    assert gopt.main(["nosuchdialect://host/db"]) == 2
    assert "cannot open the Optuna storage nosuchdialect://host/db" in capsys.readouterr().err

    not_optuna = tmp_path / "other.db"
    import sqlite3
    sqlite3.connect(not_optuna).execute("create table t (x)").connection.commit()
    assert gopt.main([f"sqlite:///{not_optuna}"]) == 2
    assert "is not an Optuna storage" in capsys.readouterr().err


def test_the_cli_binary_hands_trials_to_python(storage):
    """The C++ `gpufeed trials` runs `python -m gpufeed trials` (the package's entry point):
    one run end to end (a fresh interpreter importing torch takes a few seconds: the only
    test here that starts one)."""
    binary = os.environ.get("GPUFEED_BIN")
    if not binary or not os.path.exists(binary):
        pytest.skip("GPUFEED_BIN names no built gpufeed binary")
    url, _ = storage
    env = dict(os.environ, GPUFEED_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    done = subprocess.run([binary, "trials", url, "--study", "nope"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 3
    assert "no study named 'nope'" in done.stderr and "studies there: real" in done.stderr


def test_the_cli_binary_runs_the_python_it_was_built_for(storage, tmp_path):
    """Without $GPUFEED_PYTHON or a PYTHONPATH, `gpufeed trials` from a build tree runs the
    interpreter the package was built for and that tree's staged package, not the python3
    first on PATH (here a stand-in that fails: on the development VM that python3 has no
    torch and no gpufeed)."""
    binary = os.environ.get("GPUFEED_BIN")
    if not binary or not os.path.exists(binary):
        pytest.skip("GPUFEED_BIN names no built gpufeed binary")
    if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        pytest.skip("the build's default interpreter is /usr/bin/python3; this is another")
    url, _ = storage
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\necho 'the python3 on PATH ran' >&2\nexit 42\n")
    (fake / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("GPUFEED_PYTHON", "PYTHONPATH")}
    env["PATH"] = f"{fake}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run([binary, "trials", url, "--study", "nope"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert "the python3 on PATH ran" not in done.stderr
    assert done.returncode == 3, done.stderr
    assert "no study named 'nope'" in done.stderr
