"""The CUDA paths: a GPU learner in-process (pinned host memory, AMP) and through Ray. Skipped without CUDA."""

import json

import numpy as np
import pytest
import torch

from distrl.config import load_config
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.rollout import RolloutWorker
from tests.conftest import run_cli

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
SMALL = [
    "env.num_envs_per_worker=8",
    "rollout.rollout_length=32",
    "ppo.minibatch_size=64",
    "learner.device=cuda",
    "learner.num_gpus_per_learner=1",
]


def test_batches_reach_the_gpu_through_pinned_memory():
    config = load_config(None, SMALL)
    worker = RolloutWorker(config)
    learner = Learner(config, *probe_spaces(worker.config.env))
    _, batch = worker.sample()
    tensors = learner.hardware.to_tensors(batch)
    for key, value in batch.arrays().items():
        assert tensors[key].device.type == "cuda", key
        np.testing.assert_array_equal(tensors[key].cpu().numpy(), value)


@pytest.mark.parametrize("amp", ["off", "bf16", "fp16"])
def test_gpu_update_matches_cpu_update(amp):
    """The first update's value loss on CUDA equals the CPU learner's on the same batch and weights (fp32: tight)."""
    worker = RolloutWorker(load_config(None, SMALL))
    sample = worker.sample()
    cpu = Learner(load_config(None, SMALL[:3]), *probe_spaces(worker.config.env))
    gpu = Learner(load_config(None, [*SMALL, f"learner.amp={amp}"]), *probe_spaces(worker.config.env))
    m_cpu, m_gpu = cpu.update(sample), gpu.update(sample)
    rel = 1e-4 if amp == "off" else 5e-2
    assert m_gpu["loss_value"] == pytest.approx(m_cpu["loss_value"], rel=rel)
    assert gpu.scaler.is_enabled() == (amp == "fp16")


@pytest.mark.parametrize("compile", ["inductor", "auto"])
def test_inductor_inside_the_cuda_graph_matches_the_loop(compile):
    """learner.compile inductor with the device step: inductor's kernels captured in the step's CUDA graph, held to the
    eager loop on the first update; auto times the eager-kernel graph and the inductor graph and keeps the faster."""
    config = load_config(None, [*SMALL, f"learner.compile={compile}"])
    worker = RolloutWorker(config)
    learner = Learner(config, *probe_spaces(config.env))
    worker.set_weights(learner.get_weights())
    step = learner.update(worker.sample())["learner_step"]
    assert learner.step_check.ok, learner.step_check.reason
    assert learner.step_kind == "device" and learner.device_step.graph is not None
    if compile == "inductor":
        assert step["kernels"] == "inductor" and learner.device_step.loss_fn != learner.device_step.loss.terms
    else:
        assert [r["way"] for r in step["trial"]] == [
            "device step, eager kernels, fp32",
            "device step, inductor kernels, fp32",
        ]
        assert all(r["step_ms"] > 0 for r in step["trial"]) and step["kernels"] in ("eager", "inductor")
    later = learner.update(worker.sample())
    assert np.isfinite(later["loss_value"]) and later["learner_recompiles"] == 0


@pytest.mark.slow
def test_train_with_a_gpu_learner_through_ray(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "configs/cartpole.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "learner.device=cuda",
        "--set",
        "learner.num_gpus_per_learner=1",
        "--set",
        "learner.compile=true",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "episode_return_mean"
    placement = json.loads((run_dir / "placement.json").read_text())
    assert any(spot.get("device", "").startswith("cuda") and spot.get("gpu_ids") for spot in placement.values()), (
        placement
    )


@pytest.mark.slow
def test_auto_device_learner_that_asked_for_no_gpu_stays_on_cpu_on_a_gpu_machine(tmp_path):
    """Ray does not hide GPUs from an actor that asked for none: learner.device auto must still mean the CPU."""
    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "configs/cartpole.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "learner.num_gpus_per_learner=0",
        "--set",
        "stop.env_steps=20000",
        "--set",
        "stop.episode_return_mean=null",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    placement = json.loads((run_dir / "placement.json").read_text())
    assert placement["learner-0"]["device"] == "cpu" and placement["learner-0"]["gpu_ids"] == [], placement


@pytest.mark.slow
def test_breakout_with_the_cuda_graph_learner_step_through_ray(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "configs/breakout.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "learner.num_gpus_per_learner=1",
        "--set",
        "stop.env_steps=4096",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "(learner.step device): on CUDA: the whole minibatch step as one CUDA graph"
        in (run_dir / "setup.txt").read_text()
    )
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["gradient_steps"] > 0 and rows[-1]["skipped_updates"] == 0 and rows[-1]["learner_recompiles"] == 0


@pytest.mark.parametrize("backend", ["FLASH_ATTENTION", "EFFICIENT_ATTENTION"])
def test_attention_policy_in_bf16_runs_on_a_fused_sdpa_kernel(backend):
    """With learner.amp bf16 the attention model's SDPA can run on the flash or memory-efficient kernel: restricted
    to that kernel alone, forward and backward succeed (PyTorch raises when no allowed kernel fits)."""
    import gymnasium as gym
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from distrl.models import build_model

    cfg = load_config(None, ["model.type=attention", "model.window=16", "model.d_model=64", "model.heads=4"]).model
    model = build_model(gym.spaces.Box(-1, 1, (8,), np.float32), gym.spaces.Discrete(4), cfg).cuda()
    x = torch.randn(256, 16, 8, device="cuda")
    with sdpa_kernel(getattr(SDPBackend, backend)), torch.autocast("cuda", dtype=torch.bfloat16):
        pd, value = model(x)
        (pd.float().sum() + value.float().sum()).backward()
    assert torch.isfinite(pd.float()).all() and model.actor_encoder.embed.weight.grad is not None
