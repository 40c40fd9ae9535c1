"""Videos of a policy playing: gymnasium's ``RecordVideo`` around one env built as the workers build theirs."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from distrl.config.schema import EnvConfig


def missing_video_package() -> str | None:
    """What is missing to write MP4 files (said the same way by `eval --video` and the trainer's videos), or None."""
    import importlib.util

    if importlib.util.find_spec("moviepy") is None:
        return "needs moviepy to write MP4 files; pip install 'distrl[video]'"
    return None


def record_episodes(
    policy,
    cfg: EnvConfig,
    video_dir: str | Path,
    episodes: int,
    seed: int,
    deterministic: bool = True,
    name_prefix: str = "eval",
) -> np.ndarray:
    """Play ``episodes`` episodes one after another, each written to ``video_dir`` as an MP4; returns their returns."""
    import gymnasium as gym

    from distrl.envs import EnvSpecError, make_env

    video_dir = Path(video_dir)
    video_dir.mkdir(parents=True, exist_ok=True)
    base = make_env(cfg, render_mode="rgb_array")
    try:
        base.reset(seed=seed)
        base.render()
    except gym.error.DependencyNotInstalled as exc:  # e.g. classic-control rendering needs pygame
        base.close()
        raise EnvSpecError(
            f"env.id={cfg.id!r}: cannot render frames for a video ({exc}); pip install 'distrl[video]'"
        ) from None
    with warnings.catch_warnings():  # one folder holds many runs' videos, each under its own name_prefix
        warnings.filterwarnings("ignore", message=".*Overwriting existing videos.*")
        env = gym.wrappers.RecordVideo(
            base, str(video_dir), episode_trigger=lambda _: True, name_prefix=name_prefix, disable_logger=True
        )
    returns = []
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            state, start, total, done = policy.initial_state(1), True, 0.0, False
            while not done:
                action, state = policy.predict(obs[None], state, np.array([start]), deterministic)
                obs, reward, terminated, truncated, _ = env.step(action[0])
                total += float(reward)
                start, done = False, terminated or truncated
            returns.append(total)
    finally:
        env.close()  # writes the last video
    return np.asarray(returns)


class TrainingVideos:
    """One episode with the newest weights every K iterations, recorded in a background thread into RUN_DIR/videos
    (``logging.video_every_iterations``); an iteration whose previous video is still recording is skipped."""

    def __init__(self, config, spaces: tuple, run_dir: Path):
        from concurrent.futures import ThreadPoolExecutor

        self.config = config
        self.spaces = spaces
        self.video_dir = Path(run_dir) / "videos"
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="distrl-video")
        self.pending = None

    def maybe_record(self, iteration: int, weights: dict) -> bool:
        if self.pending is not None and not self.pending.done():
            return False
        self.pending = self.pool.submit(self._record, iteration, weights)
        return True

    def _record(self, iteration: int, weights: dict) -> float:
        import torch

        from distrl.common.running_mean_std import RunningMeanStd
        from distrl.deploy.policy import Policy
        from distrl.models import build_model

        model = build_model(*self.spaces, self.config.model)
        model.load_state_dict(
            {k: torch.tensor(v) for k, v in weights.model.items()}
        )  # copies: Ray's arrays are read-only
        rms = RunningMeanStd.from_state(weights.obs_norm) if weights.obs_norm else None
        policy = Policy(self.config, model, rms, *self.spaces)
        return float(
            record_episodes(
                policy,
                self.config.env,
                self.video_dir,
                1,
                self.config.seed + iteration,
                name_prefix=f"iteration-{iteration:06d}",
            )[0]
        )

    def close(self) -> None:
        """Wait for the video being recorded (it is the run's last), then stop the thread."""
        self.pool.shutdown(wait=True)
        if self.pending is not None and self.pending.exception() is not None:
            from distrl.common.log import get_logger

            get_logger("video").warning(f"training video failed: {self.pending.exception()}")
