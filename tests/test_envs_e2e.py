"""End-to-end runs of the envs users bring: MuJoCo Hopper learns (float64 observations on onnxrt, observation and
return normalisation), and a Dict observation of an image and a vector trains to its target with onnxrt workers."""

import json

import pytest

from tests.conftest import run_cli


@pytest.mark.slow
def test_short_hopper_run_learns(tmp_path):
    pytest.importorskip("mujoco")
    run_dir = tmp_path / "hopper"
    result = run_cli(
        "train",
        "configs/mujoco/hopper.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "stop.env_steps=100000",
        "--set",
        "logging.tensorboard=false",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    setup = (run_dir / "setup.txt").read_text()  # the start-up summary in full
    assert "(sync, chosen by auto" not in setup and "normalize obs + reward" in setup
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["policy_backend"] == "onnxrt"  # float64 observations, no fallback to eager
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    first = next(r["episode_return_mean"] for r in rows if r.get("episode_return_mean") is not None)
    # A random Hopper policy falls over at about 20; 100k steps of these settings reached about 300 here.
    assert first < 100 and summary["episode_return_mean"] > 150, (first, summary["episode_return_mean"])
    evaluated = run_cli("eval", summary["checkpoint"], "--episodes", "3")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert float(evaluated.stdout.split("return mean")[1].split()[0]) > 150


@pytest.mark.slow
def test_dict_image_and_vector_observations_train_on_onnxrt(tmp_path):
    run_dir = tmp_path / "dict"
    # A mean of 200 over 100 episodes (a random policy's is about 20) shows learning in half the steps of 475.
    result = run_cli(
        "train",
        "configs/dict_image_cartpole.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "logging.tensorboard=false",
        "--set",
        "stop.episode_return_mean=200",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["policy_backend"] == "onnxrt"
    assert summary["stop_reason"] == "episode_return_mean" and summary["episode_return_mean"] >= 200, summary
    exported = run_cli("export", str(run_dir), str(tmp_path / "dict.onnx"))
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert "inputs image,state;" in " ".join(exported.stdout.split())  # however the line wraps


@pytest.mark.slow
def test_return_statistics_resume_with_the_run(tmp_path):
    """The learner's return statistics are in every checkpoint, and a resumed run goes on from them."""
    from distrl.common.checkpoint import load_checkpoint

    run_dir = tmp_path / "run"
    common = [
        "--set",
        "env.normalize_reward=true",
        "--set",
        "stop.episode_return_mean=null",
        "--set",
        "checkpoint.every_iterations=2",
        "--set",
        "logging.tensorboard=false",
    ]
    first = run_cli(
        "train", "configs/cartpole.yaml", "--run-dir", str(run_dir), "--set", "stop.env_steps=40000", *common
    )
    assert first.returncode == 0, first.stderr[-3000:]
    saved = load_checkpoint(run_dir)["learner"]["return_norm"]
    assert saved["count"] > 0 and float(saved["var"]) > 0
    second = run_cli("train", "--resume", str(run_dir), "--set", "stop.env_steps=80000", *common)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resuming at iteration 5" in second.stdout
    resumed = load_checkpoint(run_dir)["learner"]["return_norm"]
    # Counted on from the first run's statistics: every valid step of both runs (CartPole's invalid steps are few).
    assert resumed["count"] > saved["count"] * 1.8
