"""Videos of a policy playing: gymnasium's ``RecordVideo`` around one env built as the workers build theirs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from distrl.config.schema import EnvConfig


def make_render_env(cfg: EnvConfig):
    """One env like a worker's (same preprocessing), rendering RGB frames."""
    from distrl.envs.factory import _is_atari, _single_env_thunk, resolve_env_id

    target = resolve_env_id(cfg.id)
    atari = _is_atari(cfg.id)
    # ale-py's vector env takes its own kwargs (reward_clipping, ...); the single Atari env is built with its defaults.
    kwargs = {} if atari and cfg.vectorization == "native" else dict(cfg.kwargs)
    return _single_env_thunk(target, {**kwargs, "render_mode": "rgb_array"}, cfg.action_repeat, atari, cfg.max_consecutive_errors)


def record_episodes(policy, cfg: EnvConfig, video_dir: str | Path, episodes: int, seed: int,
                    deterministic: bool = True, name_prefix: str = "eval") -> np.ndarray:  # fmt: skip
    """Play ``episodes`` episodes one after another, each written to ``video_dir`` as an MP4; returns their returns."""
    import gymnasium as gym

    video_dir = Path(video_dir)
    video_dir.mkdir(parents=True, exist_ok=True)
    env = gym.wrappers.RecordVideo(make_render_env(cfg), str(video_dir), episode_trigger=lambda _: True,
                                   name_prefix=name_prefix, disable_logger=True)  # fmt: skip
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
