"""A worker's policy on a GPU (``rollout.compile.backend: cuda``, ``rollout.num_gpus_per_worker``): the device policy
on the CPU device acts as eager does, through weight syncs and its checks; without CUDA the backend falls back to
eager and says why; through Ray a worker holds its GPU share. On a CUDA machine the same policy runs captured as a
CUDA graph (the ``gpu`` tests at the end; skipped here)."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.compile import CheckedPolicy
from distrl.compile.build import build_inference_policy
from distrl.compile.check import check_against_eager
from distrl.compile.policy import DevicePolicy, EagerPolicy
from distrl.config import load_config
from distrl.data.memory import memory_for
from distrl.models import build_model
from tests.conftest import run_cli
from tests.test_api import run_script

MODELS = {
    "mlp": ("CartPole-v1", []),
    "lstm": ("CartPole-v1", ["model.lstm_size=16", "model.shared_trunk=true", "model.hidden=[32]"]),
    "cnn": (
        "ALE/Breakout-v5",
        ["model.type=cnn", "model.hidden=[64]", "model.shared_trunk=true", "model.activation=relu"],
    ),
}


def model_and_inputs(kind: str, n: int = 6, seed: int = 0):
    env_id, overrides = MODELS[kind]
    config = load_config(None, [f"env.id={env_id}", *overrides])
    if kind == "cnn":
        obs_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
        action_space = gym.spaces.Discrete(4)
    else:
        env = gym.make(env_id)
        obs_space, action_space = env.observation_space, env.action_space
    torch.manual_seed(seed)
    model = build_model(obs_space, action_space, config.model).eval()
    rng = np.random.default_rng(seed)
    obs = np.stack([obs_space.sample() for _ in range(n)])
    obs = obs if obs.dtype == np.uint8 else rng.standard_normal(obs.shape).astype(np.float32)
    inputs = memory_for(model).example(obs, None)
    if kind == "lstm":  # a state that is not all zeros
        inputs = (inputs[0], *(rng.standard_normal(x.shape).astype(np.float32) for x in inputs[1:]))
    return model, inputs


@pytest.mark.parametrize("kind", list(MODELS))
def test_device_policy_on_the_cpu_device_acts_as_eager_does(kind):
    model, inputs = model_and_inputs(kind)
    policy = DevicePolicy(model, "cpu")
    got, want = policy(*inputs), EagerPolicy(model)(*inputs)
    assert len(got) == len(want) == (4 if kind == "lstm" else 2)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    again = policy(*inputs)
    assert all(a is not g and not np.shares_memory(a, g) for a, g in zip(again, got))  # no call overwrites a batch's


@pytest.mark.parametrize("kind", ["mlp", "lstm"])
def test_device_policy_takes_weight_syncs_and_passes_the_checks(kind):
    """The policy keeps its own copy of the module: a sync reaches it through ``update_weights``, and the checked
    policy's check against eager (the CPU module, synced beside it) passes before and after."""
    model, inputs = model_and_inputs(kind)
    checked = CheckedPolicy(model, "eager", inputs)
    checked.policy = DevicePolicy(model, "cpu")  # what the cuda backend builds, on the CPU device
    checked.verify(inputs, "at build")
    newer, _ = model_and_inputs(kind, seed=1)
    weights = {k: v.numpy().copy() for k, v in newer.state_dict().items()}
    before = checked(*inputs)
    checked.update_weights(weights)
    after = checked(*inputs)
    assert not np.allclose(before[0], after[0])
    for g, w in zip(after, EagerPolicy(newer)(*inputs)):
        np.testing.assert_array_equal(g, w)
    checked.verify(inputs, "after a sync")
    assert checked.backend == "cuda" and checked.sync_checks == 2
    assert check_against_eager(checked.policy, model, inputs, "fp32") is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_backend_without_a_gpu_falls_back_to_eager_and_says_why():
    model, inputs = model_and_inputs("mlp")
    policy, report = build_inference_policy(model, "cuda", inputs)
    assert policy.backend == "eager" and report.backend == "eager"
    assert "no CUDA device here" in report.reason
    from distrl.compile.build import CompileError

    with pytest.raises(CompileError, match="rollout.compile.backend=cuda: RuntimeError: no CUDA device here"):
        build_inference_policy(model, "cuda", inputs, strict=True)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the gpu tests below run the real thing")
def test_a_worker_holds_its_gpu_share_through_ray_and_falls_back_where_cuda_is_missing(tmp_path):
    """A Ray that says it has a GPU (a resource count, on a machine without CUDA): the worker is placed with its
    share, Ray hands it the GPU's id, and its policy, finding no CUDA device, runs eager and the banner says why."""
    run_dir = tmp_path / "run"
    result = run_script(f"""
        import ray
        import distrl

        ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, configure_logging=False)
        result = distrl.train("configs/cartpole.yaml", overrides=["rollout.compile.backend=cuda",
                              "rollout.num_gpus_per_worker=0.5", "stop.env_steps=4096",
                              "stop.episode_return_mean=null"],
                              run_dir={str(run_dir)!r}, progress=True)
        print("STOP", result.stop_reason)
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout + result.stderr
    assert "STOP env_steps" in out
    assert "policy backend eager (requested cuda)" in out, out[-3000:]  # the short screen says it at a glance
    setup = (run_dir / "setup.txt").read_text()  # the start-up summary in full
    assert "1 CPU + 0.5 GPU/worker, policy backend eager (requested cuda)" in setup, setup
    assert "rollout.compile.backend=cuda: RuntimeError: no CUDA device here" in out
    placement = json.loads((run_dir / "placement.json").read_text())
    assert placement["worker-0"]["gpu_ids"] == ["0"], placement


# --- on a CUDA machine --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_policy_replays_its_graph_with_each_sync_s_weights(kind):
    model, inputs = model_and_inputs(kind)
    policy, report = build_inference_policy(model, "cuda", inputs, strict=True)
    assert report.backend == "cuda" and bool(policy.graphs) == (kind != "lstm"), report
    newer, _ = model_and_inputs(kind, seed=1)
    policy.update_weights({k: v.numpy().copy() for k, v in newer.state_dict().items()})
    assert check_against_eager(policy, newer, inputs, "fp32") is None  # the captured graph reads the new weights
    other = tuple(np.ascontiguousarray(x[:3]) for x in inputs)  # another batch size: a graph of its own
    assert check_against_eager(policy, newer, other, "fp32") is None


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_breakout_workers_act_on_their_gpu_share_through_ray(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "configs/breakout.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "rollout.num_workers=2",
        "--set",
        "rollout.compile.backend=cuda",
        "--set",
        "rollout.compile.strict=true",
        "--set",
        "rollout.num_gpus_per_worker=0.25",
        "--set",
        "learner.num_gpus_per_learner=0.5",
        "--set",
        "stop.env_steps=8192",
        "--set",
        "stop.episode_return_mean=null",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "policy backend cuda" in result.stdout + result.stderr
    placement = json.loads((run_dir / "placement.json").read_text())
    assert all(placement[f"worker-{i}"]["gpu_ids"] for i in range(2)), placement
