"""Play episodes with a checkpoint's policy."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from distrl.common.checkpoint import CheckpointError
from distrl.deploy.policy import Policy, chosen_checkpoint
from distrl.envs import make_run_vec_env
from distrl.envs.agents import agent_names, policy_map, view_spaces
from distrl.envs.episodes import EpisodeTracker
from distrl.envs.kinds import env_kind
from distrl.envs.slot_views import slot_views


def evaluate(
    path: str | Path,
    episodes: int = 10,
    deterministic: bool = True,
    seed: int = 12345,
    env_id: str | None = None,
    trusted_envs: Collection[str] = (),
    video_dir: str | Path | None = None,
    say: Callable[[str], object] = lambda line: None,
    policy: str | None = None,
    which: str = "best",
    progress: Callable[[int, int], object] = lambda done, total: None,
) -> np.ndarray:
    """Returns of ``episodes`` complete episodes (raw env reward); env as in ``policy_from_checkpoint``.

    ``video_dir``: record every episode there as MP4 (gymnasium's ``RecordVideo``), one env at a time. ``say`` is
    told which checkpoint plays: a run directory's best, or its newest with ``which`` latest (``chosen_checkpoint``). A
    run of several trained policies
    (``agents.policies``) plays each agent with its own policy; ``policy`` names the one whose agents' episodes count
    (None: every agent's). ``progress(done, total)`` is told each time an episode ends.
    """
    path, how, names = chosen_checkpoint(path, which)
    if names and policy is not None and policy not in names:
        raise CheckpointError(f"policy={policy!r}: not in checkpoint {str(path)!r}; it holds {', '.join(names)}")
    players = (
        [Policy.from_checkpoint(path, env_id, trusted_envs, name) for name in names]
        if names
        else [Policy.from_checkpoint(path, env_id, trusted_envs, policy)]
    )
    first = players[0]
    say(f"checkpoint {first.checkpoint} ({how})" + (f", policies {', '.join(names)}" if names else ""))
    if first.config.league is not None:
        raise CheckpointError(
            f"checkpoint={str(path)!r}: a league run plays against an opponent; give --opponent "
            "random, heuristic or a snapshot's name (main@ITERATION)"
        )
    for k, player in enumerate(players):
        player.seed(seed + k)
    if video_dir is not None and env_kind(first.config) == "agents":
        raise CheckpointError(
            f"checkpoint={str(path)!r}: videos of a PettingZoo parallel env are not recorded yet; "
            "play it without --video"
        )
    if video_dir is not None:
        from distrl.deploy.video import record_episodes

        return record_episodes(first, first.config.env, video_dir, episodes, seed, deterministic)
    envs, views = eval_envs(first.config, names, min(episodes, 16))
    try:
        played = play_episodes(players, views, episodes, deterministic, seed, counted(names, policy), progress)
    finally:
        envs.close()
    return np.asarray(played.returns)


@dataclass
class Episodes:
    """What ``play_episodes`` saw: each counted episode's return and length, in the order they ended."""

    returns: list[float]
    lengths: list[int]
    info: dict[str, list[float]]  # env.info_metrics at each counted episode's end
    info_missing: dict[str, int]


def counted(names: tuple[str, ...], policy: str | None) -> list[int]:
    """The views whose episodes count: ``policy``'s (None: every one)."""
    return [k for k, name in enumerate(names or [None]) if policy is None or name == policy]


def eval_envs(config, names: tuple[str, ...], num_envs: int, env_kwargs: dict | None = None) -> tuple:
    """``(envs, views)``: about ``num_envs`` slots of the run's env (``env_kwargs`` over ``env.kwargs``), each trained
    policy of ``names`` playing its slots through a view, as in a worker (its spaces its own); one policy: all
    slots."""
    copies = num_envs
    if env_kind(config) == "agents":  # whole copies of the env's agents (an episode is one agent's)
        agents = len(agent_names(config))
        copies = -(-num_envs // agents)
        num_envs = copies * agents
    env = config.env.model_copy(
        update={"num_envs_per_worker": copies, "kwargs": {**config.env.kwargs, **(env_kwargs or {})}}
    )
    envs = make_run_vec_env(config.model_copy(update={"env": env}))
    views = (
        slot_views(envs, policy_map(config).columns(num_envs), view_spaces(config))
        if names
        else slot_views(envs, [np.arange(num_envs)])
    )
    return envs, views


def play_episodes(
    players: list[Policy],
    views: list,
    episodes: int,
    deterministic: bool,
    seed: int,
    counted_views: list[int],
    progress: Callable[[int, int], object] = lambda done, total: None,
    info_keys: tuple[str, ...] = (),
) -> Episodes:
    """Play until ``episodes`` episodes of the ``counted_views`` ended (each view reset with ``seed``, each player its
    view's); the first ``episodes`` of them, in the order they ended (``info_keys``: the info read at their ends)."""
    seen = [view.reset(seed=seed)[0] for view in views]
    trackers = [EpisodeTracker(view.num_envs, info_keys=info_keys) for view in views]
    states = [player.initial_state(view.num_envs) for player, view in zip(players, views)]
    starts = [np.ones(view.num_envs, dtype=bool) for view in views]
    done = 0
    while done < episodes:
        for k, (player, view) in enumerate(zip(players, views)):
            own, states[k] = player.predict(seen[k], states[k], starts[k], deterministic)
            view.start(own)
        results = [view.finish() for view in views]
        for k, (obs, reward, terminated, truncated, info) in enumerate(results):
            # after a reset step an episode starts; an agent's steps after it finished (``_env_reset``) count for none
            seen[k] = obs
            starts[k] = ~trackers[k].step(reward, terminated, truncated, info.get("_env_reset"), info)
        ended = sum(len(trackers[k].returns) for k in counted_views)
        if ended != done:
            done = ended
            progress(min(done, episodes), episodes)
    returns = [r for k in counted_views for r in trackers[k].returns][:episodes]
    lengths = [n for k in counted_views for n in trackers[k].lengths][:episodes]
    info = {key: [v for k in counted_views for v in trackers[k].info[key]] for key in info_keys}
    missing = {key: sum(trackers[k].info_missing[key] for k in counted_views) for key in info_keys}
    return Episodes(returns, lengths, info, missing)
