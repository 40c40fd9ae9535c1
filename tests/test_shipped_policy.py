"""An ``onnxrt`` worker built from the driver's export and check (``distrl/compile/shipped.py``): it builds and samples
without torch, acts exactly as a worker that built its policy with torch does, still falls back (or fails with
``strict``) on a session that is not the model, and loads torch for the check after a weight sync."""

import dataclasses
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest

from distrl.compile import CompileError
from distrl.compile.shipped import ShippedPolicy, ships_policy
from distrl.config import load_config
from distrl.data.messages import Weights
from distrl.driver.artifacts import worker_artifacts
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.rollout import RolloutWorker, remote_worker_class
from tests.conftest import ROOT

SMALL = ["env.num_envs_per_worker=4", "rollout.rollout_length=16", "ppo.minibatch_size=16", "ppo.seq_len=8"]

# A worker in a fresh interpreter where importing torch fails.
WITHOUT_TORCH = """
import pickle, sys
sys.modules["torch"] = None
from distrl.config import load_config
from distrl.rollout.worker import RolloutWorker
worker = RolloutWorker(load_config({config!r}, {overrides!r}), artifacts=pickle.load(open({path!r}, "rb")))
info, batch = worker.sample()
print(worker.policy.backend, worker.backend_info()["without_torch"], info.env_steps, batch.actions.shape)
"""


def artifacts_for(config):
    return worker_artifacts(config, *probe_spaces(config.env))


@pytest.mark.parametrize(
    "config_file", ["cartpole", "cartpole_lstm", "cartpole_attention", "dict_image_cartpole", "pendulum"]
)
def test_an_onnxrt_worker_builds_and_samples_without_torch(tmp_path, config_file):
    """Every model memory (none, LSTM, attention window), a Dict observation and a Gaussian action space."""
    config_path = str(ROOT / "configs" / f"{config_file}.yaml")
    config = load_config(config_path, SMALL)
    artifacts = artifacts_for(config)
    assert ships_policy(artifacts)
    path = tmp_path / "artifacts.pkl"
    path.write_bytes(pickle.dumps(artifacts))
    code = WITHOUT_TORCH.format(config=config_path, overrides=SMALL, path=str(path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    backend, without_torch, steps, *_ = out.stdout.split()
    assert (backend, without_torch, steps) == ("onnxrt", "True", str(4 * 16))


@pytest.mark.parametrize("config_file", ["cartpole", "cartpole_lstm"])
def test_a_shipped_workers_batches_are_those_of_a_worker_built_with_torch(config_file):
    """Same config and seed: the worker checked against the driver's answers and the one that checked against its own
    eager model act with the same session on the same weights, so their batches agree bit for bit, before and after
    a weight sync."""
    config = load_config(str(ROOT / "configs" / f"{config_file}.yaml"), SMALL)
    artifacts = artifacts_for(config)
    shipped = RolloutWorker(config, artifacts=artifacts)
    built = RolloutWorker(config, artifacts={"onnx": artifacts["onnx"]})
    assert isinstance(shipped.policy, ShippedPolicy) and not isinstance(built.policy, ShippedPolicy)
    assert shipped.policy.backend == built.policy.backend == "onnxrt"
    rng = np.random.default_rng(3)
    new = {
        k: (v + 0.1 * rng.standard_normal(v.shape)).astype(v.dtype) if v.dtype.kind == "f" else v
        for k, v in artifacts["check"].cases[0][0].items()
    }
    for weights in (None, Weights(version=1, model=new)):
        (_, a), (_, b) = shipped.sample(weights), built.sample(weights)
        for field in dataclasses.fields(a):
            x, y = getattr(a, field.name), getattr(b, field.name)
            if isinstance(x, np.ndarray):
                np.testing.assert_array_equal(x, y, err_msg=field.name)
    # The sync was checked against eager: torch's model, built on demand, holds the new weights.
    assert shipped.policy.sync_checks == 1 and shipped.policy.backend == "onnxrt"
    for name, value in shipped.model.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), new[name])


def _tampered(artifacts: dict, case: int) -> dict:
    """``artifacts`` whose check expects other outputs in ``case`` (0: the version-0 weights; 1: after a weight
    update): what a session that computes something else, or keeps its old weights, would be measured against."""
    check = artifacts["check"]
    cases = list(check.cases)
    weights, answers = cases[case]
    cases[case] = (
        weights,
        dataclasses.replace(
            answers,
            eager=tuple(np.float32(1.5) * e + np.float32(0.1) for e in answers.eager),
            reference=tuple(r * 1.5 + 0.1 for r in answers.reference),
        ),
    )  # another model's
    return {**artifacts, "check": dataclasses.replace(check, cases=cases)}


@pytest.mark.parametrize("case", [0, 1])
def test_a_session_that_is_not_the_model_falls_back_to_eager_or_fails_with_strict(case):
    config = load_config(None, SMALL)
    artifacts = _tampered(artifacts_for(config), case)
    worker = RolloutWorker(config, artifacts=artifacts)
    report = worker.policy.report
    assert worker.policy.backend == report.backend == "eager"
    assert "differs from eager" in report.reason and ("after a weight update" in report.reason) == (case == 1)
    # Eager acts with the learner's version-0 weights, as the session would have.
    for name, value in worker.model.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), artifacts["check"].cases[0][0][name])
    info, _ = worker.sample()
    assert info.policy_backend == "eager"
    strict = load_config(None, [*SMALL, "rollout.compile.strict=true"])
    with pytest.raises(CompileError, match="rollout.compile.backend=onnxrt: .*differs from eager"):
        RolloutWorker(strict, artifacts=artifacts)


def test_a_worker_without_the_check_builds_its_policy_with_torch():
    """Artifacts of another backend, or of an older driver (the export alone): the worker checks against its own
    eager model, as before."""
    config = load_config(None, SMALL)
    artifacts = artifacts_for(config)
    assert not ships_policy({"onnx": artifacts["onnx"]})
    worker = RolloutWorker(config, artifacts={"onnx": artifacts["onnx"]})
    assert not isinstance(worker.policy, ShippedPolicy) and worker.policy.backend == "onnxrt"
    eager = load_config(None, [*SMALL, "rollout.compile.backend=eager"])
    assert worker_artifacts(eager, *probe_spaces(eager.env)) is None


def test_a_sync_is_checked_against_the_learners_answers_without_the_eager_model():
    """The learner sends eager's answers for its new weights on the shipped check's inputs (``Weights.check``): the
    worker's check after the sync needs no torch model. Answers that are not these weights' fall back to eager; answers
    for other inputs are not used (the eager model is built and checks instead)."""
    config = load_config(None, SMALL)
    artifacts = artifacts_for(config)
    learner = Learner(config, *probe_spaces(config.env))
    worker = RolloutWorker(config, artifacts=artifacts)
    info, batch = worker.sample()
    learner.update((info, batch))
    weights = learner.get_weights()
    assert weights.check is not None and weights.check.inputs_key == worker.policy.check_key
    info, _ = worker.sample(weights)
    assert info.weight_sync_checks == 1 and info.policy_backend == "onnxrt"
    assert worker.policy._module is None  # no eager model was built: torch's answers came with the weights

    learner.update((info, batch))
    other_inputs = learner.get_weights()
    other_inputs.check = dataclasses.replace(other_inputs.check, inputs_key="another")
    worker.set_weights(other_inputs)
    assert worker.policy.sync_checks == 2 and worker.policy._module is not None and worker.policy.backend == "onnxrt"

    learner.update((info, batch))
    wrong = learner.get_weights()
    wrong.check = dataclasses.replace(
        wrong.check,
        eager=tuple(e + 1 for e in wrong.check.eager),
        reference=tuple(r + 1 for r in wrong.check.reference),
    )
    worker.set_weights(wrong)
    assert worker.policy.backend == "eager" and "after weight sync 3" in worker.policy.report.reason


def test_a_convolutional_models_learner_sends_no_answers():
    """Its float64 forward is too slow for every update to wait on (``learner._check_answers``): the worker checks
    against its own eager model after a sync, as a worker built with torch does."""
    config = load_config(str(ROOT / "configs" / "dict_image_cartpole.yaml"), SMALL)
    learner = Learner(config, *probe_spaces(config.env))
    assert learner.get_weights().check is None
    plain = load_config(None, SMALL)
    assert Learner(plain, *probe_spaces(plain.env)).get_weights().check is not None


def test_under_ray_an_onnxrt_worker_samples_and_takes_syncs_without_loading_torch(ray_local):
    """The real thing: a worker actor built from the driver's artifacts, sampling for a learner through three updates
    with every sync checked, has no libtorch mapped in its process."""
    ray = ray_local
    config = load_config(None, SMALL)
    worker = remote_worker_class().options(num_cpus=0.1).remote(config, 0, 0, artifacts_for(config))
    learner = Learner(config, *probe_spaces(config.env))
    try:
        assert ray.get(worker.backend_info.remote())["without_torch"]
        info, batch = ray.get(worker.sample.remote())
        for version in range(1, 4):
            learner.update((info, batch))
            info, batch = ray.get(worker.sample.remote(learner.get_weights()))
            assert info.policy_version == version and info.policy_backend == "onnxrt"
        assert info.weight_sync_checks == 3
        pids = [
            p.pid
            for p in psutil.Process().children(recursive=True)
            if "ray::RolloutWorkerActor" in " ".join(p.cmdline())
        ]
        assert pids and not any("libtorch" in Path(f"/proc/{pid}/maps").read_text() for pid in pids)
    finally:
        ray.kill(worker)


def test_the_shipped_initial_weights_are_a_workers_own_whatever_the_drivers_threads():
    """The driver builds the model with one thread, as a worker does: an orthogonal init's QR rounds differently with
    more, and the shipped weights are what a new run's workers act with first."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        config = load_config(None, SMALL)
        shipped = artifacts_for(config)["check"].cases[0][0]
        own = RolloutWorker(config).model.state_dict()
        for name, value in own.items():
            np.testing.assert_array_equal(value.numpy(), shipped[name], err_msg=name)
    finally:
        torch.set_num_threads(threads)
