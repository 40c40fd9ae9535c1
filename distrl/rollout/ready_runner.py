"""ReadyEnvRunner: a worker's env copies acted on as they become ready (``rollout.ready_envs``).

ale-py's vector env with ``batch_size`` (EnvPool's async model) steps every copy in its own threads and returns the
first ``batch_size`` copies whose step is done, with their ids; the policy acts for those while the others still step,
so no copy waits for the slowest one (``env_groups`` splits the copies once and for all: a group waits for its slowest).

The batch keeps its layout, ``[T, n]`` with column ``i`` holding ``T`` consecutive steps of copy ``i`` and its
bootstrap observation, each column filling at its own pace (a step cursor per copy). A copy whose column is full keeps
stepping into the next batch's column, and its observation at ``T`` is this batch's bootstrap and the next one's step
0. So a step near a batch's start may have acted with the weights of the batch before: each step records the version
that acted at it, and ``version_changes`` gives each row its oldest (the staleness bound and the policy lag read them).

Only ale-py's native vector env says which copies a result belongs to, so this runs only there (the config refuses the
rest). An LSTM's ``(h, c)`` is kept per copy and recorded into its column at each ``ppo.seq_len`` chunk's start. An env
error or non-finite numbers end every copy's step in flight (truncated, kept out of the loss and the statistics) and a
new env replaces the old: ale-py cannot reset with copies in flight.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from distrl.data.batch import Batch
from distrl.envs.guard import nonfinite_parts
from distrl.rollout.env_runner import CopyRunner, Fill, RunStats, track_returns


class ReadyEnvRunner(CopyRunner):
    def __init__(
        self,
        envs,
        make_envs: Callable,
        memory,
        observe: Callable[[np.ndarray], np.ndarray],
        dist,
        config,
        seed: int,
        rng: np.random.Generator,
    ):
        """``envs``: the worker's vector env with ``batch_size`` (not reset); ``make_envs()``: another like it, to
        replace one that failed; ``memory``: the model's ``Memory``; ``observe(raw)``: the observation as the policy
        takes it; ``dist``: the model's ``ActionDist``; ``rng``: the worker's random stream for actions."""
        super().__init__(envs, memory, observe, dist, config, rng)
        self.make_envs, n = make_envs, self.num_envs
        self.steps = config.rollout.rollout_length
        self.stepping = (
            f"ale-py send/recv, acting on the first {config.rollout.ready_envs} of {n} copies whose step is done"
        )
        space = self.envs.single_observation_space
        self.raw_obs = np.zeros((n, *space.shape), dtype=space.dtype)  # each copy's newest observation
        self.seen = np.zeros(n, dtype=bool)  # copies whose first observation has come back
        self.in_flight = np.zeros(n, dtype=bool)  # copies stepping with an action sent
        self.cursor = np.zeros(n, dtype=np.int64)  # steps recorded in each column since the oldest open batch began
        self.fills: list[Fill] = []  # the oldest open batch first, then those begun by copies running ahead
        self._first = self._reset(seed)  # (ids, observations): the copies the reset returned, acted on first

    def _reset(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Reset the env (copy ``i`` seeded ``seed + i``, as every vector env); the copies it returned. The others'
        first observations come back with later ``recv``s, in their turn."""
        raw, info = self.envs.reset(seed=seed)
        ids = np.asarray(info["env_id"])
        self.raw_obs[ids] = raw
        self.seen[ids] = True
        return ids, raw

    def policy_inputs(self) -> tuple[np.ndarray, ...]:
        """A real batch as the policy sees it: the copies' newest observations (those that have come back), with the
        memory's state."""
        ids = np.flatnonzero(self.seen)
        return self.memory.inputs(_rows(self.state, ids), self.observe(self.raw_obs[ids]), self.next_is_start[ids])[0]

    def close(self) -> None:
        self.envs.close()

    # --- one batch ----------------------------------------------------------------------------------------------
    def next_batch(self, policy, before_step: Callable[[], int]) -> tuple[Batch, RunStats]:
        """The next full batch: receive the ready copies, record their steps, act for them, send, until every column
        holds ``rollout_length`` steps and its bootstrap observation. ``before_step()`` runs before each act and returns
        the policy version that acts (newer weights staged meanwhile are taken there)."""
        stats = RunStats()
        while True:
            if self._first is not None:
                ids, raw = self._first
                self._first = None
            else:
                tick = time.perf_counter()
                result, problem, nonfinite = self.envs.recv_ready()
                stats.env_s += time.perf_counter() - tick
                if problem:
                    self._replace_envs(result, problem, nonfinite, stats)
                    continue
                raw, reward, terminated, truncated, info = result
                ids = np.asarray(info["env_id"])
                stepped = self.in_flight[ids]
                if stepped.all():
                    self._record(ids, raw, reward, terminated, truncated, info=info)
                else:  # copies whose first observation this is (ale-py returns them in their turn after a reset)
                    rows = {k: v[stepped] for k, v in info.items() if isinstance(v, np.ndarray) and len(v) == len(ids)}
                    self._record(
                        ids[stepped], raw[stepped], reward[stepped], terminated[stepped], truncated[stepped], info=rows
                    )
                    self.raw_obs[ids[~stepped]] = raw[~stepped]
                    self.seen[ids] = True
            actions = self._act(ids, policy, before_step(), stats)
            self.envs.send(actions)
            self.in_flight[ids] = True
            if self.in_flight.all() and self.cursor.min() >= self.steps:
                return self._finish(stats)

    def _fill(self, k: int) -> Fill:
        """Open batch ``k`` (0: the oldest), begun here if no copy has reached it yet."""
        while len(self.fills) <= k:
            self.fills.append(self.new_fill(self.new_batch(), versions=True))
        return self.fills[k]

    def _act(self, ids: np.ndarray, policy, version: int, stats: RunStats) -> np.ndarray:
        """The policy on copies ``ids``' newest observations, into each one's column at its cursor (and, at a column's
        step 0 of a later batch, into the batch before as its bootstrap); returns their actions as the env takes
        them."""
        tick = time.perf_counter()
        raw = self.raw_obs[ids]
        obs = self.observe(raw)
        state, starts = _rows(self.state, ids), self.next_is_start[ids]
        inputs, seen = self.memory.inputs(state, obs, starts)
        pd_params, value, *extra = policy(*inputs)
        actions, logp = self.dist.sample_numpy(pd_params, self.rng)
        if self.memory.name != "none":  # the state before this step, into each column at its step
            self._record_memory(ids, state, starts)
        _put_rows(self.state, ids, self.memory.after(seen, tuple(extra)))
        which, row = np.divmod(self.cursor[ids], self.steps)
        for k in np.unique(which):
            sel = which == k
            fill, r, c = self._fill(int(k)), row[sel], ids[sel]
            batch = fill.batch
            batch.obs[r, c], batch.values[r, c] = obs[sel], value[sel]
            batch.actions[r, c], batch.logp[r, c] = actions[sel], logp[sel]
            fill.versions[r, c] = version
            if fill.raw_obs_seen is not None:
                fill.raw_obs_seen[r, c] = raw[sel]
            boot = sel & (row == 0)
            if k > 0 and boot.any():  # observation T of the batch before: its bootstrap value
                before, c = self.fills[int(k) - 1], ids[boot]
                before.batch.obs[self.steps, c], before.batch.values[self.steps, c] = obs[boot], value[boot]
                if before.raw_obs_seen is not None:
                    before.raw_obs_seen[self.steps, c] = raw[boot]
        stats.policy_s += time.perf_counter() - tick
        return self.dist.env_actions(actions, self.envs.single_action_space)

    def _record_memory(self, ids: np.ndarray, state, starts: np.ndarray) -> None:
        """``Memory.record_step`` for copies ``ids`` (each at its own step): one call per step they are at."""
        cursors = self.cursor[ids]
        for cursor in np.unique(cursors):
            sel = cursors == cursor
            k, t = divmod(int(cursor), self.steps)
            batch, rows = self._fill(k).batch, _rows(state, np.flatnonzero(sel))
            self.memory.record_step(batch, t, rows, starts[sel], self.config.ppo.seq_len, cols=ids[sel])

    def _record(
        self,
        ids: np.ndarray,
        raw: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        error: np.ndarray | None = None,
        info: dict | None = None,
    ) -> None:
        """The steps of copies ``ids`` into their columns at their cursors; ``error``: steps that failed (kept out of
        the loss and the statistics); ``info``: the step's info, row for row with ``ids``."""
        reset = np.zeros(len(ids), dtype=bool) if error is None else error
        valid = self.episodes.step_copies(ids, reward, terminated, truncated, reset, info)
        self.next_is_start[ids] = ~valid  # the observation after a reset step starts an episode
        which, row = np.divmod(self.cursor[ids], self.steps)
        for k in np.unique(which):
            sel = which == k
            fill, r, c = self.fills[int(k)], row[sel], ids[sel]
            batch = fill.batch
            batch.rewards[r, c], batch.terminated[r, c] = reward[sel], terminated[sel]
            batch.truncated[r, c] = truncated[sel]
            batch.valid[r, c] = valid[sel] & ~reset[sel]
            if fill.returns_seen is not None:
                ended = (terminated | truncated | reset)[sel]
                fill.returns_seen[r, c] = track_returns(
                    self.discounted_returns, c, reward[sel], batch.valid[r, c], ended, self.config.ppo.gamma
                )
        self.cursor[ids] += 1
        self.raw_obs[ids] = raw

    def _replace_envs(self, result, problem: str, nonfinite: np.ndarray | None, stats: RunStats) -> None:
        """The env raised (or returned non-finite numbers): every copy's step in flight ends there, truncated and
        kept out of the loss (a native vector env fails as a whole), and a new env takes its place."""
        failed = np.flatnonzero(self.in_flight)
        n = len(failed)
        zeros = np.zeros(n, dtype=bool)
        self._record(failed, self.raw_obs[failed], np.zeros(n), zeros, ~zeros, error=~zeros)
        if nonfinite is not None:  # named as the guard names them in a vector env's step
            stats.env_nonfinite += int(nonfinite.sum())
            ids, obs, reward = np.asarray(result[4]["env_id"]), result[0], result[1]
            stats.nonfinite_messages.extend(
                f"env {ids[j]}: {nonfinite_parts(obs[j], reward[j])} not finite" for j in np.flatnonzero(nonfinite)[:3]
            )
        else:
            stats.env_errors += n
            stats.error_messages.append(problem)
        errors = self.envs.errors  # the budget of consecutive failures carries over to the new env
        self.envs.close()
        self.envs = self.make_envs()
        self.envs.errors = errors
        self.in_flight[:] = False
        self.seen[:] = False
        self._first = self._reset(int(self.rng.integers(2**31 - self.num_envs)))

    def _finish(self, stats: RunStats) -> tuple[Batch, RunStats]:
        """The oldest open batch is full: it leaves, with its statistics; the next one becomes the oldest."""
        fill = self.fills.pop(0)
        self.cursor -= self.steps
        versions = fill.versions.min(axis=1)  # each row's oldest acting version (never older going down the rows)
        stats.acted_versions = float(fill.versions.mean(axis=1).sum())
        stats.version_changes = [(0, int(versions[0]))] + [
            (t, int(versions[t])) for t in range(1, self.steps) if versions[t] != versions[t - 1]
        ]
        stats.add_episodes(self.episodes)
        stats.add_statistics(*fill.seen(self.steps), len(self.envs.single_observation_space.shape))
        return fill.batch, stats


def _rows(state, ids: np.ndarray):
    """The memory's state of copies ``ids`` (None, an array, or a tuple of arrays, one row per copy)."""
    if state is None:
        return None
    return tuple(part[ids] for part in state) if isinstance(state, tuple) else state[ids]


def _put_rows(state, ids: np.ndarray, rows) -> None:
    """Copies ``ids``' new state into the memory's state (``_rows``' inverse)."""
    if state is None:
        return
    for part, new in zip(state, rows) if isinstance(state, tuple) else ((state, rows),):
        part[ids] = new
