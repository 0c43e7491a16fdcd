"""The study verdict of `gpufeed trials` names only what the trials measured: no CUDA context
for a study whose batches stayed on the CPU, and the doctor's cpu-starved finding where the
trials recorded it. A tracked trial records where its batches went."""

import datetime

import pytest

import gpufeed
import gpufeed.optuna as gopt

optuna = pytest.importorskip("optuna")
optuna.logging.set_verbosity(optuna.logging.WARNING)

T0 = datetime.datetime(2026, 1, 1, 12, 0, 0)


def _study(attrs_per_trial, seconds=10.0):
    """An in-memory study of COMPLETE trials of `seconds` each with the given attributes."""
    study = optuna.create_study()
    for i, attrs in enumerate(attrs_per_trial):
        start = T0 + datetime.timedelta(minutes=i)
        study.add_trial(optuna.trial.FrozenTrial(
            number=i, state=optuna.trial.TrialState.COMPLETE, value=1.0, values=None,
            datetime_start=start, datetime_complete=start + datetime.timedelta(seconds=seconds),
            params={}, distributions={}, user_attrs=attrs, system_attrs={},
            intermediate_values={}, trial_id=i))
    return study


def _cpu_trial(verdict, first_batch=4.0, tier="shm"):
    return {gopt.ATTR_FIRST_BATCH: first_batch, gopt.ATTR_DATA_WAIT: 0.35,
            gopt.ATTR_CACHE_TIER: tier, gopt.ATTR_VERDICT: verdict, gopt.ATTR_DEVICE: "cpu"}


def test_a_cpu_only_cpu_starved_study_is_called_starved_with_no_cuda_context():
    study = _study([_cpu_trial("cpu-starved")] * 3 + [_cpu_trial("input-bound")])
    verdict = gopt.summary(study)["verdict"]
    assert "CUDA" not in verdict
    assert verdict.startswith("the doctor found 3 of 4 trials cpu-starved")
    assert "start-up 40 %" in verdict and "data wait 35 %" in verdict
    assert "GPU busy" not in verdict  # nothing measured it


def test_a_cpu_only_slow_start_up_names_no_cuda_context():
    study = _study([_cpu_trial("healthy")] * 2 + [_cpu_trial("cpu-starved")])
    verdict = gopt.summary(study)["verdict"]
    assert verdict.startswith("start-up takes 40 % of trial time although the trials already "
                              "map a shared cache (shm)")
    assert "CUDA" not in verdict
    assert "the batches stayed on the CPU" in verdict
    assert verdict.endswith("; the doctor found 1 of 3 trials cpu-starved")


def test_a_gpu_study_with_a_slow_start_up_names_the_cuda_context():
    gpu = dict(_cpu_trial("healthy"), **{gopt.ATTR_DEVICE: "cuda", gopt.ATTR_GPU_BUSY: 0.9})
    verdict = gopt.summary(_study([gpu] * 2))["verdict"]
    assert "(model, CUDA context)" in verdict
    assert "cpu-starved" not in verdict


def test_trials_recorded_before_the_device_attribute_claim_no_device():
    old = {k: v for k, v in _cpu_trial("healthy").items() if k != gopt.ATTR_DEVICE}
    verdict = gopt.summary(_study([old] * 2))["verdict"]
    assert "CUDA" not in verdict and "stayed on the CPU" not in verdict


def test_a_data_wait_verdict_points_at_a_real_way_to_run_the_doctor():
    waits = dict(_cpu_trial("input-bound", first_batch=0.1, tier="none"))
    verdict = gopt.summary(_study([waits] * 2))["verdict"]
    assert verdict.startswith("trials wait for data 35 %")
    assert "loader.report()" in verdict and "gpufeed doctor" not in verdict


def test_a_tracked_cpu_trial_records_its_device():
    def objective(trial):
        loader = gpufeed.Loader(gpufeed.synthetic("x:float32[4]", 64), batch_size=16,
                                device="cpu")
        for _ in gopt.track(trial, loader):
            pass
        return 0.0

    study = optuna.create_study()
    study.optimize(objective, n_trials=1)
    trial = study.trials[0]
    assert trial.user_attrs[gopt.ATTR_DEVICE] == "cpu"
    overall = gopt.summary(study)["overall"]
    assert overall["devices"] == ["cpu"]
    assert sum(overall["doctor_verdicts"].values()) == 1
