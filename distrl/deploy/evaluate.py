"""Play episodes with a checkpoint's policy."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

import numpy as np

from distrl.common.checkpoint import CheckpointError
from distrl.deploy.policy import Policy
from distrl.envs import make_run_vec_env
from distrl.envs.agents import agent_names
from distrl.envs.kinds import env_kind
from distrl.envs.episodes import EpisodeTracker


def evaluate(path: str | Path, episodes: int = 10, deterministic: bool = True, seed: int = 12345,
             env_id: str | None = None, trusted_envs: Collection[str] = (), video_dir: str | Path | None = None,
             say: Callable[[str], object] = lambda line: None) -> np.ndarray:  # fmt: skip
    """Returns of ``episodes`` complete episodes (raw env reward); env as in ``policy_from_checkpoint``.

    ``video_dir``: record every episode there as MP4 (gymnasium's ``RecordVideo``), one env at a time. ``say`` is
    told which checkpoint plays (a run directory's newest intact one).
    """
    policy = Policy.from_checkpoint(path, env_id, trusted_envs)
    say(f"checkpoint {policy.checkpoint}")
    if policy.config.league is not None:
        raise CheckpointError(f"checkpoint={str(path)!r}: a league run plays against an opponent; give --opponent "
                              "random, heuristic or a snapshot's name (main@ITERATION)")  # fmt: skip
    policy.seed(seed)
    if video_dir is not None and env_kind(policy.config) == "agents":
        raise CheckpointError(f"checkpoint={str(path)!r}: videos of a PettingZoo parallel env are not recorded yet; "
                              "play it without --video")  # fmt: skip
    if video_dir is not None:
        from distrl.deploy.video import record_episodes

        return record_episodes(policy, policy.config.env, video_dir, episodes, seed, deterministic)
    config = policy.config
    num_envs = min(episodes, 16)
    if env_kind(config) == "agents":  # slots: whole copies of the env's agents (an episode is one agent's)
        agents = len(agent_names(config))
        num_envs = -(-num_envs // agents) * agents
    envs = make_run_vec_env(config.model_copy(update={"env": config.env.model_copy(update={"num_envs_per_worker": num_envs})}))
    obs, _ = envs.reset(seed=seed)
    tracker = EpisodeTracker(num_envs)
    state, start = policy.initial_state(num_envs), np.ones(num_envs, dtype=bool)
    while len(tracker.returns) < episodes:
        actions, state = policy.predict(obs, state, start, deterministic)
        obs, reward, terminated, truncated, info = envs.step(actions)
        # after a reset step an episode starts; an agent's steps after it finished (``_env_reset``) count for none
        start = ~tracker.step(reward, terminated, truncated, info.get("_env_reset"))
    envs.close()
    return np.asarray(tracker.returns[:episodes])
