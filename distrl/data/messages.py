"""The messages between the parts of a run, typed: a key renamed in one place fails where it is read, in tests.

- ``SampleInfo``: a worker's small report on one batch (to the driver, through the coordinator, and to
  every learner, which reads the env steps, the policy version and the observation statistics).
- ``SampleReport``: what the coordinator's ``gather`` says of one update's batches (the infos that came in, the
  samples given up on, the workers whose sample was sent again).
- ``UpdateResult``: what a learner's update says to the loop: the metrics row's learner keys apart from what the
  loop acts on (the new version, batches lost with their node, stale steps, the update's time, the device step's
  first-update check).
- ``Weights``: what a learner's update produces for the workers, one object per update.
- ``PolicySample``: one trained policy's part of a ``SampleInfo`` where several train (``agents.policies``).

Plain dataclasses of numbers, strings and numpy arrays: they pickle through Ray as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from distrl.compile.check_answers import Answers


@dataclass
class PolicySample:
    """One trained policy's part of a worker's batch (``agents.policies``): its slots' steps, episodes and
    statistics."""

    env_steps: int
    episode_returns: list[float]
    episode_lengths: list[int]
    obs_stats: tuple | None = None
    return_stats: tuple | None = None
    episode_info: dict[str, list[float]] = field(default_factory=dict)  # env.info_metrics at each episode's end
    info_missing: dict[str, int] = field(default_factory=dict)  # episodes that ended without the key


@dataclass
class SampleInfo:
    worker_index: int
    incarnation: str  # new on every (re)start of the worker: the driver counts restarts by it
    seed: int  # the worker's random stream (a restarted worker draws a new one)
    policy_version: int  # the version of the weights that acted first
    policy_version_mean: float  # the mean over its steps (newer weights can arrive mid-sample)
    env_steps: int  # env steps in the batch (action repeats included)
    batch_bytes: int
    episode_returns: list[float]  # episodes that ended in this batch
    episode_lengths: list[int]
    sample_s: float  # the whole sample call
    policy_s: float  # forward and action sampling
    env_s: float  # the vector env's step (the rest of sample_s is bookkeeping)
    finished_at: float  # wall clock: the driver's start-up timeline reads the first batch's
    obs_stats: tuple | None  # (count, mean, var) of the raw observations seen, with env.normalize_obs
    policy_backend: str  # the backend that acted, after any fallback
    recompiles: int  # graphs compiled after the worker's warm-up
    graph_breaks: int
    weight_sync_checks: int  # weight syncs whose compiled policy was checked against eager
    env_errors: int = 0  # env steps that raised (reset and masked)
    env_error_messages: list[str] = field(default_factory=list)  # the first few
    env_nonfinite: int = 0  # steps whose observation or reward was NaN or inf (reset and masked)
    env_nonfinite_messages: list[str] = field(default_factory=list)
    league_results: list[dict] = field(default_factory=list)  # a league run: games finished in this batch
    return_stats: tuple | None = None  # (count, mean, var) of each env's discounted return, with env.normalize_reward
    node_id: str = ""  # the Ray node the worker ran on ("" outside Ray): a lost node's workers are not waited for
    # (first step, version) each time the acting weights changed, from (0, policy_version); [] reads as one version
    version_changes: list[tuple[int, int]] = field(default_factory=list)
    # several trained policies (agents.policies): each one's part of the batch, by name (the fields above: all of them)
    policies: dict[str, PolicySample] | None = None
    episode_info: dict[str, list[float]] = field(default_factory=dict)  # env.info_metrics at each episode's end
    info_missing: dict[str, int] = field(default_factory=dict)  # episodes that ended without the key

    def for_policy(self, name: str) -> SampleInfo:
        """This report as the learner of policy ``name`` reads it: its env steps, episodes and statistics."""
        part = self.policies[name]
        return replace(
            self,
            env_steps=part.env_steps,
            episode_returns=part.episode_returns,
            episode_lengths=part.episode_lengths,
            obs_stats=part.obs_stats,
            return_stats=part.return_stats,
            episode_info=part.episode_info,
            info_missing=part.info_missing,
            policies=None,
        )

    @property
    def newest_version(self) -> int:
        """The version of the weights that acted last."""
        return self.version_changes[-1][1] if self.version_changes else self.policy_version

    def step_versions(self, steps: int) -> np.ndarray:
        """``[steps]``: the version of the weights that acted at each step."""
        versions = np.full(steps, self.policy_version, dtype=np.int64)
        for first, version in self.version_changes:
            versions[first:] = version
        return versions


@dataclass
class SampleReport:
    infos: list[SampleInfo]  # the batches that came in, by worker index
    timeouts: list[dict] = field(default_factory=list)  # {"worker", "waited_s"} per sample given up on
    resubmitted: list[int] = field(default_factory=list)  # workers that died mid-sample and were sent it again
    stale_batches: int = 0  # async: batches dropped since the last report, older than rollout.max_policy_lag allows
    workers_lost: list[int] = field(default_factory=list)  # workers given up (Ray will not restart them), left out
    workers_down: list[int] = field(default_factory=list)  # workers that went down since the last report
    workers_evicted: list[int] = field(default_factory=list)  # of those, the ones distrl stopped (for a learner's room)
    workers_back: list[int] = field(default_factory=list)  # workers answering again (or at last) since then
    # async: the oldest policy version the update trains on (rollout.max_policy_lag behind it): the stream dropped the
    # batches with no newer step, and the learner leaves out the older steps of the rest; None: every step trains
    min_version: int | None = None


@dataclass
class UpdateResult:
    version: int  # the learner's policy version after the update (unchanged when there was none)
    metrics: dict[str, float] = field(default_factory=dict)  # the update's keys of the metrics row ({}: no update)
    learn_s: float | None = None  # the update's time; None: no update (every batch was lost)
    env_steps: int = 0  # env steps trained on
    stale_steps: int = 0  # async: steps left out, older than rollout.max_policy_lag allows
    learner_batch_bytes: int = 0  # bytes this rank fetched (the row has the busiest rank's)
    lost_batches: list[int] = field(default_factory=list)  # report indices of batches lost with their node
    learner_step: dict | None = (
        None  # the device step's first update: the step and how its check went (Learner.describe)
    )

    @property
    def updated(self) -> bool:
        return self.learn_s is not None

    def __getitem__(self, key: str):
        """A metric by name, or one of the typed fields (``env_steps``, ``stale_steps``, ...), for in-process
        callers."""
        return self.metrics[key] if key in self.metrics else getattr(self, key)

    def as_dict(self) -> dict:
        """Every metric and every typed field that is set, by name."""
        fields = {k: v for k, v in vars(self).items() if k != "metrics" and v is not None}
        return {**self.metrics, **fields}

    def __contains__(self, key: str) -> bool:
        """Whether the update reported ``key``: a metric, or a typed field that is set (``learner_step`` once)."""
        return key in self.metrics or getattr(self, key, None) is not None


@dataclass
class Weights:
    version: int  # the learner's update count that produced them
    model: dict[str, np.ndarray]  # the state dict as numpy arrays
    obs_norm: dict | None = None  # RunningMeanStd state with env.normalize_obs
    # several trained policies (agents.policies): each one's weights by name (``model`` is then empty)
    policies: dict[str, Weights] | None = None
    # eager's outputs with these weights on the workers' check inputs, for an onnxrt worker's check after this sync
    # without torch (distrl/compile/check_answers.py); None where the workers check against their own eager model
    check: Answers | None = None


@dataclass
class EvalResult:
    """An evaluation of one checkpoint's policy (``distrl/driver/evaluation.py``), for the metrics row and the best."""

    iteration: int  # the checkpoint evaluated
    returns: list[float]  # each episode's (a league game's result for the learner: 1 win, 0 draw, -1 loss)
    lengths: list[int]
    seconds: float
    scores: dict[str, float] = field(default_factory=dict)  # a league run: the mean score (a draw 0.5) by opponent
    episode_info: dict[str, list[float]] = field(default_factory=dict)  # env.info_metrics at each episode's end
    info_missing: dict[str, int] = field(default_factory=dict)

    @property
    def return_mean(self) -> float:
        return float(np.mean(self.returns))

    def metrics(self) -> dict[str, float]:
        """The metrics row's ``eval_*`` keys."""
        row = {
            "eval_return_mean": self.return_mean,
            "eval_return_std": float(np.std(self.returns)),
            "eval_length_mean": float(np.mean(self.lengths)),
            "eval_episodes": len(self.returns),
            "eval_iteration": self.iteration,
            "eval_s": round(self.seconds, 3),
        }
        row.update({f"eval_score_{name}": score for name, score in self.scores.items()})
        row.update(info_metrics(self.episode_info, self.info_missing, "eval_"))
        return row


def info_metrics(values: dict[str, list[float]], missing: dict[str, int], prefix: str = "") -> dict[str, float]:
    """The metrics row's keys for ``env.info_metrics``: each key's mean, min and max over the episodes that reported
    it, and how many ended without it (``info_KEY_mean`` ...; ``prefix`` before them)."""
    row: dict[str, float] = {}
    for key in sorted(set(values) | set(missing)):
        seen = values.get(key, [])
        if seen:
            row[f"{prefix}info_{key}_mean"] = float(np.mean(seen))
            row[f"{prefix}info_{key}_min"] = float(np.min(seen))
            row[f"{prefix}info_{key}_max"] = float(np.max(seen))
        if missing.get(key):
            row[f"{prefix}info_{key}_missing"] = missing[key]
    return row
