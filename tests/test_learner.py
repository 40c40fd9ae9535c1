"""Learner update on real batches: the non-finite guard skips a step whole, on the device; the device step takes the
same optimiser steps as the plain loop; the device rule."""

import numpy as np
import pytest
import torch

from distrl.config import load_config
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.rollout import RolloutWorker


def _setup(*extra):
    config = load_config(
        None,
        ["env.num_envs_per_worker=8", "rollout.rollout_length=64", "ppo.minibatch_size=128", "ppo.epochs=2", *extra],
    )
    worker = RolloutWorker(config)
    learner = Learner(config, *probe_spaces(config.env))
    worker.set_weights(learner.get_weights())
    return worker, learner


def _adam_steps(learner) -> list[float]:
    return [float(state["step"]) for state in learner.optimizer.state.values()]


@pytest.mark.parametrize("step", ["loop", "device"])
def test_non_finite_minibatches_leave_weights_and_adam_state_untouched(step):
    worker, learner = _setup(f"learner.step={step}")
    assert learner.step_kind == step
    info, batch = worker.sample()
    batch.rewards[:] = np.nan  # every return and advantage is NaN: every minibatch's loss is
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    metrics = learner.update((info, batch))
    assert metrics["gradient_steps"] == 8  # 512 samples / 128 x 2 epochs
    assert metrics["skipped_updates"] == 8 and learner.skipped_updates == 8
    for key, value in learner.model.state_dict().items():
        torch.testing.assert_close(value, before[key], rtol=0, atol=0)
    assert all(step == 0 for step in _adam_steps(learner))  # the skipped steps are not counted by Adam either
    assert all(torch.isfinite(s["exp_avg"]).all() for s in learner.optimizer.state.values())

    info, batch = worker.sample()  # finite data: every step is taken
    metrics = learner.update((info, batch))
    assert metrics["skipped_updates"] == 8 and all(step == 8 for step in _adam_steps(learner))
    assert np.isfinite(metrics["loss_value"]) and metrics["gradient_steps"] == 8
    changed = any(not torch.equal(v, before[k]) for k, v in learner.model.state_dict().items())
    assert changed


STEP_CONFIGS = {
    "mlp": ["env.num_envs_per_worker=8", "rollout.rollout_length=64", "ppo.minibatch_size=128", "ppo.epochs=3"],
    "mlp_target_kl": [
        "env.num_envs_per_worker=8",
        "rollout.rollout_length=64",
        "ppo.minibatch_size=64",
        "ppo.epochs=4",
        "ppo.target_kl=0.002",
        "ppo.lr=0.01",
    ],
    "cnn": [
        "env.id=ALE/Breakout-v5",
        "model.type=cnn",
        "model.hidden=[64]",
        "model.shared_trunk=true",
        "learner.compile=eager",
        "learner.amp=off",
        "env.num_envs_per_worker=4",
        "rollout.rollout_length=32",
        "ppo.minibatch_size=32",
        "ppo.epochs=2",
    ],
    "user_encoder": [  # model.encoder: a user's module (LayerNorm, GELU, residual), the loss compiled by inductor
        "model.encoder=distrl.models.examples:residual_mlp",
        "learner.compile=inductor",
        "env.num_envs_per_worker=8",
        "rollout.rollout_length=64",
        "ppo.minibatch_size=128",
        "ppo.epochs=2",
    ],
    "gaussian_bf16": [
        "env.id=Pendulum-v1",
        "env.vectorization=sync",
        "env.num_envs_per_worker=8",
        "rollout.rollout_length=32",
        "ppo.minibatch_size=64",
        "learner.amp=bf16",
    ],
}


def _twin_learners(name, device_overrides=()):
    """A worker's batches and two learners from one seed: the plain loop and the device step."""
    base = STEP_CONFIGS[name] + list(device_overrides)
    loop_config, device_config = (
        load_config(None, base + ["learner.step=loop"]),
        load_config(None, base + ["learner.step=device"]),
    )
    worker = RolloutWorker(loop_config)
    spaces = probe_spaces(loop_config.env)
    return worker, Learner(loop_config, *spaces), Learner(device_config, *spaces)


def _assert_same_steps(loop, device, samples, rtol, atol, metrics_rel=1e-4):
    for sample in samples:
        a, b = loop.update(sample), device.update(sample)
        assert a["gradient_steps"] == b["gradient_steps"] and a["kl_early_stop"] == b["kl_early_stop"]
        assert a["skipped_steps"] == b["skipped_steps"]
        for key in ("loss_policy", "loss_value", "entropy", "approx_kl", "clip_frac", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=metrics_rel, abs=1e-6), key
    for key, value in loop.model.state_dict().items():
        torch.testing.assert_close(device.model.state_dict()[key], value, rtol=rtol, atol=atol)
    steps = (
        [float(s["step"]) for s in loop.optimizer.state.values()],
        [float(s["step"]) for s in device.optimizer.state.values()],
    )
    assert steps[0] == steps[1]


@pytest.mark.parametrize("name", list(STEP_CONFIGS))
def test_device_step_takes_the_same_optimiser_steps_as_the_loop_on_cpu(name):
    """Same seed, same batches: after three updates the weights agree to float32 rounding (the same kernels run in
    the same order; only where the skips and the KL stop are decided differs)."""
    worker, loop, device = _twin_learners(name)
    assert loop.step_kind == "loop" and device.step_kind == "device" and device.device_step.graph is None
    samples = []
    for _ in range(3):
        worker.set_weights(loop.get_weights())
        samples.append(worker.sample())
    _assert_same_steps(loop, device, samples, rtol=1e-5, atol=1e-6)
    if name == "mlp_target_kl":  # the KL stop happened, the same way on both
        assert loop.update(samples[0])["kl_early_stop"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["mlp", "mlp_target_kl", "cnn", "gaussian_bf16", "user_encoder"])
def test_cuda_graph_step_takes_the_same_optimiser_steps_as_the_loop(name):
    """On CUDA the device step is a captured graph: same steps as the loop on the same GPU, within float32 rounding
    of a few updates, its statistics too (cuDNN and cuBLAS pick their own algorithms under capture: a CNN's value loss
    2.2e-4 apart on an H200, a bf16 policy loss 0.7 %)."""
    worker, loop, device = _twin_learners(name, ["learner.device=cuda", "learner.num_gpus_per_learner=1"])
    samples = []
    for _ in range(3):
        worker.set_weights(loop.get_weights())
        samples.append(worker.sample())
    tolerance = 2e-2 if name == "gaussian_bf16" else 1e-3
    _assert_same_steps(loop, device, samples, rtol=tolerance, atol=tolerance, metrics_rel=tolerance)
    assert device.device_step.graph is not None


def test_auto_step_is_the_device_step_only_where_it_applies():
    from distrl.learner.step_rules import choose_step

    config = load_config(None, [])
    assert choose_step(config, "cuda", 1) == ("device", "on CUDA: the whole minibatch step as one CUDA graph")
    kind, why = choose_step(config, "cpu", 1)
    assert kind == "loop" and why.startswith("the learner is on CPU")
    for overrides, reason in (
        (["model.lstm_size=16", "model.shared_trunk=true"], "recurrent"),
        (["learner.amp=fp16"], "gradient scaler"),
        (["learner.compile=reduce-overhead"], "captures its own CUDA graphs"),
    ):
        kind, why = choose_step(load_config(None, overrides), "cuda", 1)
        assert kind == "loop" and reason in why, why
    kind, why = choose_step(config, "cuda", 2)
    assert kind == "loop" and "DDP" in why


def test_device_step_refused_by_the_config_where_it_cannot_run():
    from distrl.config import ConfigError

    with pytest.raises(ConfigError, match="learner.step=device: not with recurrent models"):
        load_config(None, ["learner.step=device", "model.lstm_size=16", "model.shared_trunk=true"])


def test_auto_device_is_cuda_only_when_the_learner_was_given_a_gpu():
    from distrl.learner import resolve_device

    # Inside a Ray actor: what Ray assigned decides, whatever the machine has.
    assert resolve_device("auto", [], 0, cuda_available=True).type == "cpu"  # asked Ray for 0 GPUs on a GPU machine
    assert resolve_device("auto", ["0"], 1, cuda_available=True).type == "cuda"
    assert resolve_device("auto", ["0"], 1, cuda_available=False).type == "cpu"
    # In-process (no Ray): the config's request decides.
    assert resolve_device("auto", None, 0, cuda_available=True).type == "cpu"
    assert resolve_device("auto", None, 1, cuda_available=True).type == "cuda"
    assert resolve_device("cpu", ["0"], 1, cuda_available=True).type == "cpu"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_capturing_the_cuda_graph_does_not_move_the_weights():
    worker, loop, device = _twin_learners("mlp", ["learner.device=cuda", "learner.num_gpus_per_learner=1"])
    samples = device.device_step  # noqa: F841 (built lazily at the first update)
    before = {k: v.clone() for k, v in device.model.state_dict().items()}
    info, batch = worker.sample()
    data = device.hardware.to_tensors(batch)
    from distrl.algo.ppo import gae
    from distrl.data import TrainingSamples

    advantages, returns = gae(
        data["rewards"], data["values"], data["terminated"], data["truncated"], data["valid"], 0.99, 0.95
    )
    training = TrainingSamples.from_rollout(data, advantages, returns)
    device.device_step._build(training.tensors, 128)  # warm-up and capture only
    for key, value in device.model.state_dict().items():
        torch.testing.assert_close(value, before[key], rtol=0, atol=0)
    assert all(float(s["step"]) == 0 for s in device.optimizer.state.values())


# --- the device step's first update, checked against the loop (learner/step_check.py) ---------------------------------


def _first_update(name, *overrides):
    """A device-step learner's first update beside a loop learner's, on one batch from one seed."""
    worker, loop, device = _twin_learners(name, overrides)
    sample = worker.sample()
    return loop.update(sample), device.update(sample), loop, device, worker


@pytest.mark.parametrize("name", ["mlp", "mlp_target_kl", "gaussian_bf16"])
def test_device_steps_first_update_is_checked_against_the_loop_and_kept(name):
    loop_metrics, metrics, loop, device, _ = _first_update(name)
    assert device.step_check.ok, device.step_check.reason
    assert device.step_kind == "device" and device.device_step is not None
    assert (
        metrics["learner_step"]["step_check"]["ok"]
        and "matched the loop" in metrics["learner_step"]["step_check"]["reason"]
    )
    assert metrics["gradient_steps"] == loop_metrics["gradient_steps"]
    for key, value in loop.model.state_dict().items():  # the three runs of the check left the device step's update
        torch.testing.assert_close(device.model.state_dict()[key], value, rtol=1e-5, atol=1e-6)
    assert [float(s["step"]) for s in device.optimizer.state.values()] == _adam_steps(loop)


def test_a_device_step_that_raises_on_its_first_update_falls_back_to_the_loop(monkeypatch):
    from distrl.learner.step import DeviceStep

    def capture_fails(self, *args):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(DeviceStep, "run", capture_fails)
    loop_metrics, metrics, loop, device, worker = _first_update("mlp")
    assert not device.step_check.ok and device.step_kind == "loop" and device.device_step is None
    assert "raised RuntimeError: operation not permitted" in device.step_reason
    assert (
        metrics["learner_step"]["step"] == "loop" and "the loop runs instead" in metrics["learner_step"]["step_reason"]
    )
    assert {k: v for k, v in metrics.as_dict().items() if k in loop_metrics and k not in ("learn_s",)} == {
        k: v for k, v in loop_metrics.as_dict().items() if k != "learn_s"
    }  # the loop's update is the one kept
    for key, value in loop.model.state_dict().items():
        torch.testing.assert_close(device.model.state_dict()[key], value, rtol=0, atol=0)
    sample = worker.sample()  # later updates: the loop, exactly as a loop learner's
    loop.update(sample), device.update(sample)
    for key, value in loop.model.state_dict().items():
        torch.testing.assert_close(device.model.state_dict()[key], value, rtol=0, atol=0)


def test_a_device_step_whose_first_update_differs_falls_back_to_the_loop(monkeypatch):
    from distrl.learner.step import DeviceStep

    run = DeviceStep.run

    def off_by_a_little(self, *args):  # a captured graph that reads one buffer late would be off by far more
        stats = run(self, *args)
        with torch.no_grad():
            self.params[0].add_(1e-4)
        return stats

    monkeypatch.setattr(DeviceStep, "run", off_by_a_little)
    _, _, loop, device, _ = _first_update("mlp")
    assert not device.step_check.ok and device.step_kind == "loop"
    assert "weight " in device.step_check.reason and "differs by" in device.step_check.reason
    for key, value in loop.model.state_dict().items():  # the loop's update stands, not the device step's
        torch.testing.assert_close(device.model.state_dict()[key], value, rtol=0, atol=0)


def test_a_device_step_whose_statistics_differ_falls_back(monkeypatch):
    from distrl.learner.step import DeviceStep

    run = DeviceStep.run
    monkeypatch.setattr(DeviceStep, "run", lambda self, *a: {**run(self, *a), "gradient_steps": 1})
    _, _, _, device, _ = _first_update("mlp")
    assert not device.step_check.ok and "gradient_steps 1 where the loop's is 12" in device.step_check.reason


def test_step_strict_makes_a_failed_check_an_error(monkeypatch):
    from distrl.learner.step import DeviceStep
    from distrl.learner.step_check import StepCheckFailed

    monkeypatch.setattr(DeviceStep, "run", lambda self, *a: (_ for _ in ()).throw(RuntimeError("capture failed")))
    with pytest.raises(StepCheckFailed, match="raised RuntimeError: capture failed .*learner.step_strict=true"):
        _first_update("mlp", "learner.step_strict=true")


def test_the_check_runs_once_per_learner():
    worker, loop, device = _twin_learners("mlp")
    first = device.update(worker.sample())
    second = device.update(worker.sample())
    assert "learner_step" in first and "learner_step" not in second and device.describe()["step_check"]["ok"]


def test_channels_last_learner_takes_the_steps_a_contiguous_one_takes():
    """learner.memory_format auto lays a CNN out channels-last on a CPU learner: same batches, same seed, the same
    updates within float tolerance (other oneDNN kernels, summing in another order); the workers still get plain
    C-ordered arrays, and a state moves between the two layouts."""
    base = STEP_CONFIGS["cnn"]
    plain_config, auto_config = (
        load_config(None, base + [f"learner.memory_format={f}"]) for f in ("contiguous", "auto")
    )
    worker = RolloutWorker(plain_config)
    spaces = probe_spaces(plain_config.env)
    plain, nhwc = Learner(plain_config, *spaces), Learner(auto_config, *spaces)
    assert plain.memory_format == torch.contiguous_format
    assert nhwc.memory_format == torch.channels_last and nhwc.memory_format_reason.startswith(
        "auto: convolutions on a CPU"
    )
    convs = [m for m in nhwc.model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs)
    samples = []
    for _ in range(3):
        worker.set_weights(plain.get_weights())
        samples.append(worker.sample())
    _assert_same_steps(plain, nhwc, samples, rtol=1e-4, atol=1e-5)
    assert all(array.flags.c_contiguous for array in nhwc.get_weights().model.values())
    assert nhwc.describe()["memory_format"] == "channels_last"
    plain.load_state(nhwc.state())
    for key, value in nhwc.model.state_dict().items():
        torch.testing.assert_close(plain.model.state_dict()[key], value, rtol=0, atol=0)
    mlp = Learner(load_config(None, STEP_CONFIGS["mlp"]), *probe_spaces(load_config(None, STEP_CONFIGS["mlp"]).env))
    assert (mlp.memory_format, mlp.memory_format_reason) == (
        torch.contiguous_format,
        "auto: the model has no convolutions",
    )
