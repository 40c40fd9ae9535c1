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
from distrl.envs.stepping import SerialStepper


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
    episode_info: dict[str, list[float]] = field(default_factory=dict)  # env.info_metrics at each episode's end
    info_missing: dict[str, int] = field(default_factory=dict)  # episodes that ended without the key
    policies: dict | None = None  # several trained policies: each one's part (``PolicySample``), by name

    def add_episodes(self, episodes: EpisodeTracker) -> None:
        """The episodes ``episodes`` saw end since it was last asked."""
        returns, lengths = episodes.pop()
        self.episode_returns.extend(returns)
        self.episode_lengths.extend(lengths)
        self.add_info(*episodes.pop_info())

    def add_info(self, values: dict[str, list[float]], missing: dict[str, int]) -> None:
        for key, seen in values.items():
            self.episode_info.setdefault(key, []).extend(seen)
        for key, count in missing.items():
            self.info_missing[key] = self.info_missing.get(key, 0) + count

    def add_statistics(self, raw_obs: np.ndarray | None, discounted: np.ndarray | None, obs_ndim: int) -> None:
        """The batch's observation statistics (its raw observations ``[T, n, *obs]``, where env.normalize_obs asks)
        and return statistics (the discounted returns of its valid steps, where env.normalize_reward asks)."""
        if raw_obs is not None:
            self.obs_stats = RunningMeanStd.batch_stats(raw_obs, obs_ndim)
        if discounted is not None:
            self.return_stats = RunningMeanStd.batch_stats(discounted, 0)

    def absorb(self, other: RunStats) -> None:
        """Add ``other``'s timings, env errors and episodes to these (a sample's total over its runners)."""
        for name in ("policy_s", "env_s", "env_errors", "env_nonfinite"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("error_messages", "nonfinite_messages", "episode_returns", "episode_lengths"):
            getattr(self, name).extend(getattr(other, name))
        self.add_info(other.episode_info, other.info_missing)


@dataclass
class Fill:
    """One batch while it fills, with what its statistics are read from once it is full."""

    batch: Batch
    raw_obs_seen: np.ndarray | None  # [T+1, n, *obs] raw observations (env.normalize_obs)
    returns_seen: np.ndarray | None  # [T, n] discounted returns (env.normalize_reward)
    versions: np.ndarray | None = None  # [T, n] the policy version that acted at each step (ready copies)

    def seen(self, steps: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The raw observations it acted on ``[T, n, *obs]`` and the discounted returns of its valid steps (each None
        where nothing normalises them)."""
        raw, returns = self.raw_obs_seen, self.returns_seen
        return None if raw is None else raw[:steps], None if returns is None else returns[self.batch.valid]


class CopyRunner:
    """What every runner keeps of each env copy across batches, however its steps come: the model memory's state,
    whether its next observation starts an episode, its episode tracker and, with ``env.normalize_reward``, its
    discounted return so far (SB3's ``VecNormalize.returns``)."""

    def __init__(self, envs, memory, observe: Callable[[np.ndarray], np.ndarray], dist, config, rng):
        self.envs, self.memory, self.observe = envs, memory, observe
        self.dist, self.config, self.rng = dist, config, rng
        self.num_envs = n = envs.num_envs
        self.action_mask: np.ndarray | None = None  # legal actions, for envs that report them
        self.state = memory.initial(n)
        self.next_is_start = np.ones(n, dtype=bool)
        self.episodes = EpisodeTracker(n, config.env.action_repeat, tuple(config.env.info_metrics))
        self.discounted_returns = np.zeros(n, np.float64) if config.env.normalize_reward else None

    def new_batch(self, num_envs: int | None = None) -> Batch:
        """An empty batch of this runner's copies, or ``num_envs`` (a worker's, across its groups)."""
        layout = self.memory.batch_layout(self.config.ppo.seq_len)
        actions = 0 if self.action_mask is None else self.action_mask.shape[1]
        space, dist = self.envs.single_observation_space, self.dist
        steps, n = self.config.rollout.rollout_length, num_envs or self.num_envs
        return Batch.empty(steps, n, space, dist.action_shape, dist.action_dtype, num_actions=actions, **layout)

    def new_fill(self, batch: Batch, versions: bool = False) -> Fill:
        """``batch`` to fill, with room for what its statistics need (``versions``: each step's acting version)."""
        cfg, steps, n = self.config, self.config.rollout.rollout_length, self.num_envs
        obs_shape = self.envs.single_observation_space.shape
        return Fill(
            batch,
            np.empty((steps + 1, n, *obs_shape), dtype=batch.obs.dtype) if cfg.env.normalize_obs else None,
            np.zeros((steps, n), np.float64) if self.discounted_returns is not None else None,
            np.zeros((steps, n), np.int64) if versions else None,
        )


class EnvRunner(CopyRunner):
    def __init__(
        self,
        envs,
        memory,
        observe: Callable[[np.ndarray], np.ndarray],
        dist,
        config,
        seed: int,
        rng: np.random.Generator,
        stepper: SerialStepper | None = None,
    ):
        """``envs``: the group's vector env (not reset yet); ``memory``: the model's ``Memory``; ``observe(raw)``: the
        observation as the policy takes it (normalised, cast); ``dist``: the model's ``ActionDist``; ``rng``: the
        worker's random stream for actions; ``stepper``: how the group's steps run (``distrl/envs/stepping.py``; serial
        by default)."""
        super().__init__(envs, memory, observe, dist, config, rng)
        self.stepper = stepper or SerialStepper(envs)
        self.raw_obs, reset_info = envs.reset(seed=seed)
        self.action_mask = reset_info.get("action_mask")
        self.no_error = np.zeros(self.num_envs, dtype=bool)  # the info of a step no guard touched

    def policy_inputs(self) -> tuple[np.ndarray, ...]:
        """A real batch as the policy sees it: the current observations with the memory's state (keeps nothing)."""
        return self.memory.inputs(self.state, self.observe(self.raw_obs), self.next_is_start)[0]

    # --- one batch, step by step (``run_groups`` interleaves several runners' steps) -----------------------------
    def begin(self, batch: Batch) -> Fill:
        """Start filling ``batch`` (this runner's columns of the worker's batch)."""
        self.memory.record_start(batch, self.state)
        return self.new_fill(batch)

    def act(self, progress: Fill, t: int, policy, stats: RunStats) -> np.ndarray | None:
        """The policy on observation ``t``: its value into the batch and, before the last (bootstrap) observation, the
        actions sampled for step ``t`` as the env takes them (None at the bootstrap)."""
        batch = progress.batch
        obs = self.observe(self.raw_obs)
        batch.obs[t] = obs
        if progress.raw_obs_seen is not None:
            progress.raw_obs_seen[t] = self.raw_obs
        tick = time.perf_counter()
        starts = self.next_is_start
        inputs, seen = self.memory.inputs(self.state, obs, starts)
        pd_params, value, *extra = policy(*inputs)
        batch.values[t] = value
        if t == self.config.rollout.rollout_length:  # bootstrap value only; the next batch starts from here
            stats.policy_s += time.perf_counter() - tick
            return None
        actions, logp = self.dist.sample_numpy(pd_params, self.rng, self.action_mask)
        stats.policy_s += time.perf_counter() - tick
        if self.action_mask is not None:
            batch.action_mask[t] = self.action_mask
        self.memory.record_step(batch, t, self.state, starts, self.config.ppo.seq_len)
        self.state = self.memory.after(seen, tuple(extra))
        batch.actions[t], batch.logp[t] = actions, logp
        return self.dist.env_actions(actions, self.envs.single_action_space)

    def record(self, progress: Fill, t: int, result: tuple, stats: RunStats) -> None:
        """Step ``t``'s result (what the vector env's step returned) into the batch and the episode statistics."""
        batch, no_error = progress.batch, self.no_error
        self.raw_obs, reward, terminated, truncated, env_info = result
        if self.action_mask is not None:
            self.action_mask = env_info["action_mask"]
        raw_error = env_info.get("_env_error", no_error)  # the env raised and was reset
        raw_nonfinite = env_info.get("_env_nonfinite", no_error)  # NaN or inf in its observation or reward
        reset = raw_error | raw_nonfinite | env_info.get("_env_reset", no_error)  # reset by the guard
        valid = self.episodes.step(reward, terminated, truncated, reset, env_info)  # False on NEXT_STEP reset steps
        error, nonfinite = raw_error & valid, raw_nonfinite & valid
        if error.any():  # keep the step out of the loss and the statistics
            stats.env_errors += int(error.sum())
            stats.error_messages.extend(str(m) for m in env_info["env_error"][error][:3])
        if nonfinite.any():
            stats.env_nonfinite += int(nonfinite.sum())
            stats.nonfinite_messages.extend(
                f"env {i}: {env_info['env_nonfinite'][i]}" for i in np.flatnonzero(nonfinite)[:3]
            )
        batch.rewards[t], batch.terminated[t], batch.truncated[t] = reward, terminated, truncated
        batch.valid[t] = valid & ~reset
        self.next_is_start = ~valid  # the observation after a reset step starts an episode
        if progress.returns_seen is not None:
            ended = terminated | truncated | reset
            progress.returns_seen[t] = track_returns(
                self.discounted_returns, slice(None), reward, batch.valid[t], ended, self.config.ppo.gamma
            )

    def end(self, progress: Fill, stats: RunStats) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The batch is full: its episodes into ``stats``; returns what its statistics are read from (``Fill.seen``)."""
        stats.add_episodes(self.episodes)
        return progress.seen(self.config.rollout.rollout_length)


def track_returns(
    returns: np.ndarray, copies, reward: np.ndarray, valid: np.ndarray, ended: np.ndarray, gamma: float
) -> np.ndarray:
    """env.normalize_reward: add a step's reward to the discounted return of ``copies`` (an index array, or a slice
    for every copy), in place, and start again where an episode ended (SB3's VecNormalize: ``returns = returns * gamma
    + reward``, zeroed at done); returns their discounted returns after the step, for the statistics. Only valid steps
    count (a reset step's reward is no reward); NaN or inf counts as 0."""
    reward = np.where(valid, np.nan_to_num(np.asarray(reward, np.float64), nan=0.0, posinf=0.0, neginf=0.0), 0.0)
    after = np.where(valid, returns[copies] * gamma + reward, returns[copies])
    returns[copies] = np.where(ended, 0.0, after)
    return after


class EnvGroups:
    """A worker's env copies in groups (``rollout.env_groups``), an ``EnvRunner`` each, stepped in turns into one
    batch (``run_groups``): the worker's runner, as a ``ReadyEnvRunner`` or a ``PolicySetRunner`` is."""

    def __init__(self, runners: list[EnvRunner]):
        self.runners = runners
        self.stepping = runners[0].stepper.kind  # how its steps run, for the start-up report
        self.num_envs = sum(runner.num_envs for runner in runners)

    def policy_inputs(self) -> tuple[np.ndarray, ...]:
        return self.runners[0].policy_inputs()

    def next_batch(self, policy, before_step: Callable[[], int]) -> tuple[Batch, RunStats]:
        """The next batch of ``rollout_length`` steps of every copy (``run_groups``)."""
        batch = self.runners[0].new_batch(self.num_envs)
        return batch, run_groups(self.runners, batch, policy, before_step)

    def close(self) -> None:
        for runner in self.runners:
            runner.stepper.close()
            runner.envs.close()


def run_groups(runners: list[EnvRunner], batch: Batch, policy, before_step: Callable[[], int]) -> RunStats:
    """Fill ``batch`` with ``rollout_length`` steps of every runner's env copies (runner ``g`` into the ``g``-th equal
    column block) and the bootstrap observation after them.

    Each step the runners take turns: one waits for its envs' previous step, records it, acts on the observations and
    starts its next step, so with a background stepper the policy acts for one group while the others' envs step
    (Sample Factory's double buffering). ``before_step()`` runs before each step and returns the policy version that
    acts at it (newer weights staged meanwhile are taken there): every group acts with the same version at a step.
    One runner with a serial stepper is the plain loop: step, act, step."""
    parts = [batch] if len(runners) == 1 else batch.split(len(runners))
    stats = RunStats()
    ends = _take_turns(runners, parts, [policy] * len(runners), [stats] * len(runners), stats, before_step)
    raw_obs, discounted = zip(*ends)
    stats.add_statistics(  # the groups' columns side by side, as one vector env's
        None if raw_obs[0] is None else np.concatenate(raw_obs, axis=1),
        None if discounted[0] is None else np.concatenate(discounted),
        len(runners[0].envs.single_observation_space.shape),
    )
    return stats


def run_policies(
    runners: list[EnvRunner], batches: list[Batch], policies: list, before_step: Callable[[], int]
) -> tuple[RunStats, list[RunStats]]:
    """``run_groups`` for runners that each act with a policy of their own into a batch of their own (several trained
    policies, each over its slots of one env: ``distrl/envs/slot_views.py``). Returns the whole sample's statistics
    (timings, versions, every episode) and each runner's own (its episodes, observation and return statistics)."""
    total, each = RunStats(), [RunStats() for _ in runners]
    ends = _take_turns(runners, batches, policies, each, total, before_step)
    for runner, stats, (raw_obs, discounted) in zip(runners, each, ends):
        stats.add_statistics(raw_obs, discounted, len(runner.envs.single_observation_space.shape))
        total.absorb(stats)
    return total, each


def _take_turns(
    runners: list[EnvRunner],
    parts: list[Batch],
    policies: list,
    stats_of: list[RunStats],
    versions: RunStats,
    before_step: Callable[[], int],
) -> list[tuple]:
    """The step loop: runner ``g`` fills ``parts[g]`` acting with ``policies[g]``, its timings and episodes into
    ``stats_of[g]``, the acting versions into ``versions``; returns each runner's ``end``."""
    steps = runners[0].config.rollout.rollout_length
    progress = [runner.begin(part) for runner, part in zip(runners, parts)]
    version = 0
    for t in range(steps + 1):
        for g, (runner, run, policy, stats) in enumerate(zip(runners, progress, policies, stats_of)):
            if t > 0:
                tick = time.perf_counter()
                result = runner.stepper.finish()
                stats.env_s += time.perf_counter() - tick
                runner.record(run, t - 1, result, stats)
            if g == 0:
                version = before_step()
            actions = runner.act(run, t, policy, stats)
            if actions is not None:
                runner.stepper.start(actions)
        if t < steps:
            versions.acted_versions += version
            if not versions.version_changes or version != versions.version_changes[-1][1]:
                versions.version_changes.append((t, version))
    return [runner.end(run, stats) for runner, run, stats in zip(runners, progress, stats_of)]
