"""Play episodes with a checkpoint's policy."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import numpy as np

from distrl.common.checkpoint import CheckpointError, load_checkpoint
from distrl.common.running_mean_std import RunningMeanStd
from distrl.config import Config, ConfigError, config_from_dict
from distrl.envs import check_env_trust, make_vec_env, probe_run_spaces
from distrl.envs.episodes import EpisodeTracker
from distrl.models import ActorCritic, build_model


def checkpoint_config(payload: dict, path: str | Path) -> Config:
    """The config a loaded checkpoint was trained with; ``CheckpointError`` when it is not a valid one."""
    try:
        return config_from_dict(payload["config"])
    except ConfigError as exc:
        raise CheckpointError(f"checkpoint={str(path)!r}: its config is not valid ({exc.lines[0]})") from None


def policy_from_checkpoint(path: str | Path, env_id: str | None = None, trusted_envs: Collection[str] = ()
                           ) -> tuple[Config, ActorCritic, RunningMeanStd | None, object, object]:  # fmt: skip
    """The config, the trained model (eval mode), its observation normaliser and the env spaces.

    The env is the checkpoint's own, or ``env_id`` (named by the caller, so trusted). An env
    factory read from the checkpoint is imported only when named in ``trusted_envs``
    (``distrl/envs/trust.py``): a checkpoint is data.
    """
    payload = load_checkpoint(path)
    config = checkpoint_config(payload, path)
    if env_id is not None:  # the checkpoint's env kwargs belonged to its own env: not carried over
        config = config.model_copy(update={"env": config.env.model_copy(update={"id": env_id, "kwargs": {}})})
        trusted_envs = [*trusted_envs, env_id]
    check_env_trust(config.env.id, trusted_envs, f"checkpoint {str(path)!r}", flag="--env")
    try:
        obs_space, action_space = probe_run_spaces(config)  # a league run's policy: one seat of its game
        model = build_model(obs_space, action_space, config.model)
        model.load_state_dict(payload["learner"]["model"])
    except (KeyError, RuntimeError) as exc:
        raise CheckpointError(f"checkpoint={str(path)!r}: does not match its own config ({exc})") from None
    obs_norm = payload["learner"].get("obs_norm")
    rms = RunningMeanStd.from_state({k: v.numpy() for k, v in obs_norm.items()}) if obs_norm else None
    return config, model.eval(), rms, obs_space, action_space


def evaluate(path: str | Path, episodes: int = 10, deterministic: bool = True, seed: int = 12345,
             env_id: str | None = None, trusted_envs: Collection[str] = (), video_dir: str | Path | None = None
             ) -> np.ndarray:  # fmt: skip
    """Returns of ``episodes`` complete episodes (raw env reward); env as in ``policy_from_checkpoint``.

    ``video_dir``: record every episode there as MP4 (gymnasium's ``RecordVideo``), one env at a time.
    """
    from distrl.deploy.policy import Policy

    policy = Policy.from_checkpoint(path, env_id, trusted_envs)
    if policy.config.league is not None:
        raise CheckpointError(f"checkpoint={str(path)!r}: a league run plays against an opponent; give --opponent "
                              "random, heuristic or a snapshot's name (main@ITERATION)")  # fmt: skip
    policy.seed(seed)
    if video_dir is not None:
        from distrl.deploy.video import record_episodes

        return record_episodes(policy, policy.config.env, video_dir, episodes, seed, deterministic)
    num_envs = min(episodes, 16)
    envs = make_vec_env(policy.config.env.model_copy(update={"num_envs_per_worker": num_envs}))
    obs, _ = envs.reset(seed=seed)
    tracker = EpisodeTracker(num_envs)
    state, start = policy.initial_state(num_envs), np.ones(num_envs, dtype=bool)
    while len(tracker.returns) < episodes:
        actions, state = policy.predict(obs, state, start, deterministic)
        obs, reward, terminated, truncated, _ = envs.step(actions)
        start = ~tracker.step(reward, terminated, truncated)  # after a reset step, an episode starts
    envs.close()
    return np.asarray(tracker.returns[:episodes])
