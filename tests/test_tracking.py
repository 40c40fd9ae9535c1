"""Watching a run: grouped TensorBoard tags, W&B offline files, training and eval videos, unclipped Atari returns."""

import json

import numpy as np
import pytest

from distrl.config import load_config
from distrl.driver.metrics import GROUPS, scalars
from tests.conftest import run_cli


def _decode(path) -> tuple[int, tuple]:
    """Decode an MP4 back into RGB frames (ffmpeg through imageio-ffmpeg, which moviepy brings): (count, shape)."""
    import imageio.v2 as imageio

    count, shape = 0, None
    with imageio.get_reader(str(path), "ffmpeg") as reader:
        for frame in reader:
            count, shape = count + 1, frame.shape
            assert frame.dtype == np.uint8 and frame.max() > frame.min()  # a picture, not a blank
    return count, shape


@pytest.mark.slow
def test_tensorboard_groups_wandb_offline_and_videos(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "configs/cartpole.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "stop.env_steps=40000",
        "--set",
        "stop.episode_return_mean=null",
        "--set",
        "logging.video_every_iterations=2",
        "--set",
        "logging.wandb={project: distrl-test, mode: offline, tags: [ci]}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # TensorBoard: every numeric key of a real row lands in a named group.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {
        "rollout/episode_return_mean",
        "train/loss_value",
        "perf/sps",
        "compile/weight_sync_checks",
        "faults/worker_restarts",
    } <= tags
    assert not [t for t in tags if t.startswith("other/")], sorted(tags)
    row = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert set(scalars(row)) <= tags
    # W&B offline: its run files, under the run directory.
    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1, list((run_dir / "wandb").iterdir())
    run_id = (run_dir / "wandb_run_id").read_text().strip()
    record = (offline[0] / f"run-{run_id}.wandb").read_bytes()  # W&B's record log, what `wandb sync` uploads
    assert b"rollout/episode_return_mean" in record and b"train/loss_value" in record and b"ppo" in record
    # Training videos, every 2 iterations, decodable.
    videos = sorted((run_dir / "videos").glob("iteration-*.mp4"))
    assert videos, list(run_dir.iterdir())
    count, shape = _decode(videos[0])
    assert count > 5 and len(shape) == 3 and shape[-1] == 3
    # distrl eval --video: one MP4 per episode, frames = steps + the reset frame (CartPole: return = steps).
    video_dir = tmp_path / "eval-videos"
    result = run_cli("eval", str(run_dir), "--episodes", "2", "--video", str(video_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    clips = sorted(video_dir.glob("*.mp4"))
    assert len(clips) == 2, result.stdout
    for clip in clips:
        count, shape = _decode(clip)
        assert shape == (400, 600, 3) and count >= 9


def test_every_metrics_key_has_a_group():
    grouped = [key for keys in GROUPS.values() for key in keys]
    assert len(grouped) == len(set(grouped))
    row = {key: 1.0 for key in grouped} | {"policy_backend": "onnxrt", "kl_early_stop": True}
    out = scalars(row)
    assert out["train/kl_early_stop"] == 1 and "policy_backend" not in str(out)
    assert scalars({"loss_value": float("nan"), "episode_return_mean": None}) == {}


def test_every_key_of_a_metrics_row_has_a_group():
    """A key added to the rows (driver/report.py) without a group would land in TensorBoard's other/."""
    from distrl.data.messages import UpdateResult
    from distrl.driver.report import iteration_row
    from distrl.driver.run_state import RunState
    from tests.test_run_state import sample_info

    row = iteration_row(
        RunState(iteration=1, env_steps=10), [sample_info()], UpdateResult(version=1, learn_s=0.2), 0.3, 1.0, 33.0
    )
    assert not [tag for tag in scalars(row) if tag.startswith("other/")], sorted(scalars(row))


def test_atari_returns_are_the_game_score_not_clipped():
    pytest.importorskip("ale_py")
    from distrl.envs import make_vec_env

    envs = make_vec_env(
        load_config("configs/breakout.yaml", ["env.id=ALE/SpaceInvaders-v5", "env.num_envs_per_worker=2"]).env
    )
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    best = 0.0
    for _ in range(600):
        _, reward, *_ = envs.step(rng.integers(0, envs.single_action_space.n, size=2))
        best = max(best, float(np.max(reward)))
        if best > 1:
            break
    envs.close()
    assert best > 1  # Space Invaders scores 5-30 per invader: ale-py's default clipping would give 1


def test_worker_episode_returns_are_recorded_before_the_learners_reward_clip():
    from distrl.rollout import RolloutWorker

    config = load_config(
        None,
        ["env.num_envs_per_worker=8", "rollout.rollout_length=64", "ppo.minibatch_size=128", "ppo.reward_clip=0.5"],
    )
    info, _ = RolloutWorker(config).sample()
    # CartPole pays 1 per step: an unclipped return equals the episode's length (clipped to 0.5 it would be half).
    assert info.episode_returns and info.episode_returns == [float(n) for n in info.episode_lengths]
