"""The state of a run between iterations: counters, the return window, fault counts and the stop rules.

Pure: no Ray, no files. The driver feeds it what workers and learners reported, asks it
whether to stop, and saves ``state()`` in every checkpoint so a resumed run carries on.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

import numpy as np

from distrl.config.schema import StopConfig

RETURN_WINDOW = 100  # episodes in the mean that `stop.episode_return_mean` and `solved_at_s` use


@dataclass
class RunState:
    iteration: int = 0
    env_steps: int = 0
    time_s: float = 0.0  # wall time of earlier segments of a resumed run
    episodes: int = 0
    solved_at_s: float | None = None
    worker_restarts: int = 0
    learner_restarts: int = 0
    env_errors: int = 0
    env_nonfinite: int = 0  # env steps with NaN/inf observations or rewards (reset and masked)
    worker_timeouts: int = 0  # samples that did not return within rollout.sample_timeout_s
    gradient_steps: int = 0
    skipped_steps: int = 0  # gradient steps the learner's non-finite guard skipped
    stale_batches: int = 0  # async: batches older than rollout.max_policy_lag allows, dropped untrained
    stale_steps: int = 0  # async: steps of batches trained on, left out as older than rollout.max_policy_lag allows
    batches_lost: int = 0  # batches whose node died before the learner fetched them (not trained on, not counted)
    workers_lost: int = 0  # async: times a worker stopped answering (its process or node gone) or was lost for good
    eval_failures: int = 0  # evaluations whose actor died, failed or ran out of time (distrl/driver/evaluation.py)
    eval_return_mean: float | None = None  # the newest evaluation's (stop.eval_return_mean)
    recent_returns: collections.deque = field(default_factory=lambda: collections.deque(maxlen=RETURN_WINDOW))
    recent_lengths: collections.deque = field(default_factory=lambda: collections.deque(maxlen=RETURN_WINDOW))
    # several trained policies (agents.policies): each one's agents' recent returns, by policy name
    policy_returns: dict[str, collections.deque] = field(default_factory=dict)

    def state(self) -> dict:
        """Plain data for a checkpoint."""
        return {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "time_s": self.time_s,
            "episodes": self.episodes,
            "solved_at_s": self.solved_at_s,
            "worker_restarts": self.worker_restarts,
            "learner_restarts": self.learner_restarts,
            "env_errors": self.env_errors,
            "env_nonfinite": self.env_nonfinite,
            "worker_timeouts": self.worker_timeouts,
            "gradient_steps": self.gradient_steps,
            "skipped_steps": self.skipped_steps,
            "stale_batches": self.stale_batches,
            "stale_steps": self.stale_steps,
            "workers_lost": self.workers_lost,
            "batches_lost": self.batches_lost,
            "eval_failures": self.eval_failures,
            "eval_return_mean": self.eval_return_mean,
            "recent_returns": list(self.recent_returns),
            "recent_lengths": list(self.recent_lengths),
            "policy_returns": {name: list(returns) for name, returns in self.policy_returns.items()},
        }

    @classmethod
    def from_state(cls, state: dict) -> RunState:
        run = cls(
            iteration=int(state["iteration"]),
            env_steps=int(state["env_steps"]),
            time_s=float(state["time_s"]),
            episodes=int(state["episodes"]),
            solved_at_s=state["solved_at_s"],
            worker_restarts=int(state.get("worker_restarts", 0)),  # absent in checkpoints of distrl 0.1.0
            learner_restarts=int(state.get("learner_restarts", 0)),
            env_errors=int(state.get("env_errors", 0)),
            env_nonfinite=int(state.get("env_nonfinite", 0)),  # absent before distrl 0.2
            worker_timeouts=int(state.get("worker_timeouts", 0)),
            gradient_steps=int(state.get("gradient_steps", 0)),
            skipped_steps=int(state.get("skipped_steps", 0)),
            stale_batches=int(state.get("stale_batches", 0)),  # absent before the async pipeline
            stale_steps=int(state.get("stale_steps", 0)),  # absent before steps were left out one by one
            workers_lost=int(state.get("workers_lost", 0)),
            batches_lost=int(state.get("batches_lost", 0)),
            eval_failures=int(state.get("eval_failures", 0)),  # absent before evaluation during training
            eval_return_mean=state.get("eval_return_mean"),
        )
        run.recent_returns.extend(state["recent_returns"])
        run.recent_lengths.extend(state["recent_lengths"])
        run.add_policy_returns(state.get("policy_returns", {}))  # absent before several policies trained
        return run

    def add_policy_returns(self, by_policy: dict[str, list[float]]) -> None:
        for name, returns in by_policy.items():
            self.policy_returns.setdefault(name, collections.deque(maxlen=RETURN_WINDOW)).extend(returns)

    def policy_return_means(self) -> dict[str, float]:
        """Each policy's mean over its agents' last ``RETURN_WINDOW`` episodes ({}: one policy)."""
        return {name: float(np.mean(returns)) for name, returns in self.policy_returns.items() if returns}

    def return_mean(self) -> float | None:
        """Mean return of the last ``RETURN_WINDOW`` episodes (fewer early in a run)."""
        return float(np.mean(self.recent_returns)) if self.recent_returns else None

    def length_mean(self) -> float | None:
        return float(np.mean(self.recent_lengths)) if self.recent_lengths else None

    def reached(self, target: float | None) -> bool:
        """The return target is met over a full window of episodes: one definition for solving and stopping."""
        mean = self.return_mean()
        return target is not None and mean is not None and len(self.recent_returns) >= RETURN_WINDOW and mean >= target

    def add_iteration(
        self,
        env_steps: int,
        returns: list[float],
        lengths: list[int],
        elapsed_s: float,
        target: float | None,
        by_policy: dict[str, list[float]] | None = None,
    ) -> None:
        """Count one finished iteration and the episodes it ended (``by_policy``: each policy's part of ``returns``)."""
        self.iteration += 1
        self.add_policy_returns(by_policy or {})
        self.env_steps += env_steps
        self.episodes += len(returns)
        self.recent_returns.extend(returns)
        self.recent_lengths.extend(lengths)
        if self.solved_at_s is None and self.reached(target):
            self.solved_at_s = round(elapsed_s, 3)


def stop_reason(stop: StopConfig, run: RunState, elapsed_s: float) -> str | None:
    """Which stop condition holds now (a return target first), or None to go on."""
    if run.reached(stop.episode_return_mean):
        return "episode_return_mean"
    evaluated = run.eval_return_mean
    if stop.eval_return_mean is not None and evaluated is not None and evaluated >= stop.eval_return_mean:
        return "eval_return_mean"
    if stop.env_steps is not None and run.env_steps >= stop.env_steps:
        return "env_steps"
    if stop.time_s is not None and elapsed_s >= stop.time_s:
        return "time_s"
    return None
