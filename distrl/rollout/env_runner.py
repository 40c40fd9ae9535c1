"""EnvRunner: one group of env copies stepped with the policy into a batch, step by step.

It holds what lives across a group's batches: its vector env, the observation it is about to act on, its model
memory's state (``distrl/data/memory``), where episodes begin, its episode tracker and, with
``env.normalize_reward``, each copy's discounted return. ``run`` fills a batch's steps; the worker around it
(``worker.py``) owns the policy, the weights and the report. A worker whose envs are split into groups runs one
``EnvRunner`` per group, each into its columns of the batch.

NEXT_STEP autoreset: when step ``t`` ends an episode, the env ignores the action of step ``t + 1`` and returns the
reset observation. That step is recorded with ``valid=False`` and takes no part in the loss; observation ``t + 1``
(the final one) is kept so truncated episodes bootstrap from its value.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from distrl.common.running_mean_std import RunningMeanStd
from distrl.data.batch import Batch
from distrl.envs.episodes import EpisodeTracker


@dataclass
class RunStats:
    """What one ``run`` saw besides the batch it filled."""

    policy_s: float = 0.0  # forward and action sampling
    env_s: float = 0.0  # the vector env's step
    acted_versions: int = 0  # the policy versions of the steps, summed (their mean is the batch's)
    # (first step, version) each time the acting weights changed, from the version that acted at step 0
    version_changes: list[tuple[int, int]] = field(default_factory=list)
    env_errors: int = 0
    error_messages: list[str] = field(default_factory=list)
    env_nonfinite: int = 0
    nonfinite_messages: list[str] = field(default_factory=list)
    obs_stats: tuple | None = None
    return_stats: tuple | None = None
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)


class EnvRunner:
    def __init__(self, envs, memory, observe: Callable[[np.ndarray], np.ndarray], dist, config, seed: int,
                 rng: np.random.Generator):  # fmt: skip
        """``envs``: the group's vector env (not reset yet); ``memory``: the model's ``Memory``; ``observe(raw)``: the
        observation as the policy takes it (normalised, cast); ``dist``: the model's ``ActionDist``; ``rng``: the
        worker's random stream for actions."""
        self.envs = envs
        self.memory = memory
        self.observe = observe
        self.dist = dist
        self.config = config
        self.rng = rng
        self.num_envs = envs.num_envs
        self.raw_obs, reset_info = envs.reset(seed=seed)
        self.action_mask: np.ndarray | None = reset_info.get("action_mask")  # legal actions, for envs that report them
        self.state = memory.initial(self.num_envs)
        self.next_is_start = np.ones(self.num_envs, dtype=bool)
        self.episodes = EpisodeTracker(self.num_envs, config.env.action_repeat)
        # env.normalize_reward: each env's discounted return so far (SB3's VecNormalize.returns), carried across batches.
        self.discounted_returns = np.zeros(self.num_envs, np.float64) if config.env.normalize_reward else None

    def policy_inputs(self) -> tuple[np.ndarray, ...]:
        """A real batch as the policy sees it: the current observations with the memory's state (keeps nothing)."""
        return self.memory.inputs(self.state, self.observe(self.raw_obs), self.next_is_start)[0]

    def new_batch(self) -> Batch:
        steps = self.config.rollout.rollout_length
        return Batch.empty(steps, self.num_envs, self.envs.single_observation_space, self.dist.action_shape,
                           self.dist.action_dtype, num_actions=0 if self.action_mask is None else self.action_mask.shape[1],
                           **self.memory.batch_layout(self.config.ppo.seq_len))  # fmt: skip

    def run(self, batch: Batch, policy, before_step: Callable[[], int]) -> RunStats:
        """Fill ``batch`` with ``rollout_length`` steps of every env copy and the bootstrap observation after them.
        ``before_step()`` runs before each step and returns the policy version that acts at it (newer weights staged
        meanwhile are taken there)."""
        cfg = self.config
        steps, n = cfg.rollout.rollout_length, self.num_envs
        seq_len = cfg.ppo.seq_len
        obs_shape = self.envs.single_observation_space.shape
        self.memory.record_start(batch, self.state)
        raw_obs_seen = np.empty((steps + 1, n, *obs_shape), dtype=batch.obs.dtype) if cfg.env.normalize_obs else None
        returns_seen = np.zeros((steps, n), np.float64) if self.discounted_returns is not None else None
        stats = RunStats()
        no_error = np.zeros(n, dtype=bool)
        for t in range(steps + 1):
            version = before_step()
            obs = self.observe(self.raw_obs)
            batch.obs[t] = obs
            if raw_obs_seen is not None:
                raw_obs_seen[t] = self.raw_obs
            tick = time.perf_counter()
            starts = self.next_is_start
            inputs, seen = self.memory.inputs(self.state, obs, starts)
            pd_params, value, *extra = policy(*inputs)
            batch.values[t] = value
            if t == steps:  # bootstrap value only; the next batch starts from this observation with this state
                stats.policy_s += time.perf_counter() - tick
                break
            actions, logp = self.dist.sample_numpy(pd_params, self.rng, self.action_mask)
            stats.policy_s += time.perf_counter() - tick
            if self.action_mask is not None:
                batch.action_mask[t] = self.action_mask
            self.memory.record_step(batch, t, self.state, starts, seq_len)
            self.state = self.memory.after(seen, tuple(extra))
            batch.actions[t], batch.logp[t] = actions, logp
            stats.acted_versions += version
            if not stats.version_changes or version != stats.version_changes[-1][1]:
                stats.version_changes.append((t, version))

            tick = time.perf_counter()
            self.raw_obs, reward, terminated, truncated, env_info = self.envs.step(
                self.dist.env_actions(actions, self.envs.single_action_space))
            stats.env_s += time.perf_counter() - tick
            if self.action_mask is not None:
                self.action_mask = env_info["action_mask"]
            raw_error = env_info.get("_env_error", no_error)  # the env raised and was reset
            raw_nonfinite = env_info.get("_env_nonfinite", no_error)  # NaN or inf in its observation or reward
            reset = raw_error | raw_nonfinite | env_info.get("_env_reset", no_error)  # reset by the guard
            valid = self.episodes.step(reward, terminated, truncated, reset)  # False on NEXT_STEP reset steps
            error, nonfinite = raw_error & valid, raw_nonfinite & valid
            if error.any():  # keep the step out of the loss and the statistics
                stats.env_errors += int(error.sum())
                stats.error_messages.extend(str(m) for m in env_info["env_error"][error][:3])
            if nonfinite.any():
                stats.env_nonfinite += int(nonfinite.sum())
                stats.nonfinite_messages.extend(f"env {i}: {env_info['env_nonfinite'][i]}"
                                                for i in np.flatnonzero(nonfinite)[:3])  # fmt: skip
            batch.rewards[t], batch.terminated[t], batch.truncated[t] = reward, terminated, truncated
            batch.valid[t] = valid & ~reset
            self.next_is_start = ~valid  # the observation after a reset step starts an episode
            if returns_seen is not None:
                self._track_returns(t, reward, batch.valid[t], terminated | truncated | reset, returns_seen)

        stats.episode_returns, stats.episode_lengths = self.episodes.pop()
        if raw_obs_seen is not None:
            stats.obs_stats = RunningMeanStd.batch_stats(raw_obs_seen[:steps], len(obs_shape))
        if returns_seen is not None:
            stats.return_stats = RunningMeanStd.batch_stats(returns_seen[batch.valid], 0)
        return stats

    def _track_returns(self, t: int, reward: np.ndarray, valid: np.ndarray, ended: np.ndarray, seen: np.ndarray) -> None:
        """env.normalize_reward: add step ``t``'s reward to each env's discounted return (valid steps only: a reset
        step's reward is no reward), record it for the statistics, and start again where an episode ended
        (SB3's VecNormalize: ``returns = returns * gamma + reward``, zeroed at done)."""
        gamma = self.config.ppo.gamma
        reward = np.where(valid, np.nan_to_num(np.asarray(reward, np.float64), nan=0.0, posinf=0.0, neginf=0.0), 0.0)
        self.discounted_returns = np.where(valid, self.discounted_returns * gamma + reward, self.discounted_returns)
        seen[t] = self.discounted_returns
        self.discounted_returns[ended] = 0.0
