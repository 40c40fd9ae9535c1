"""The learning rate over a run (``ppo.lr``, ``ppo.anneal_lr``), and how a resumed run carries it on.

A new run's rate falls linearly from ``ppo.lr`` at 0 env steps to 0 at ``stop.env_steps`` (CleanRL's annealing);
without annealing, or without a step budget, it stays at ``ppo.lr``. The schedule is learner state: a checkpoint
holds it, and a resume continues it under one rule (``continued``), written in docs/usage.md:

- a resume that moves ``stop.env_steps`` goes on from the rate reached, linearly to 0 at the new budget, never a jump;
- a resume that changes ``ppo.lr`` scales every rate after it by new / old (what Ray Tune's PBT asks when it
  perturbs ``ppo.lr``);
- ``ppo.anneal_lr: false`` holds the rate at ``ppo.lr``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from distrl.config.schema import PPOConfig


@dataclass(frozen=True)
class LinearSchedule:
    """``start_lr`` at ``start_steps`` trained env steps, falling linearly to 0 at ``horizon`` (None: constant)."""

    lr: float  # the ppo.lr the schedule was set for (a resume that changes it scales the rates)
    start_steps: int
    start_lr: float
    horizon: int | None

    def rate(self, trained_env_steps: int) -> float:
        if self.horizon is None:
            return self.start_lr
        if trained_env_steps >= self.horizon or self.horizon <= self.start_steps:
            return 0.0
        return self.start_lr * (self.horizon - trained_env_steps) / (self.horizon - self.start_steps)

    def state(self) -> dict:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict) -> LinearSchedule:
        horizon = state["horizon"]
        return cls(
            float(state["lr"]),
            int(state["start_steps"]),
            float(state["start_lr"]),
            None if horizon is None else int(horizon),
        )


def new_schedule(ppo: PPOConfig, env_steps: int | None) -> LinearSchedule:
    """A new run's schedule; ``env_steps``: the run's step budget (``stop.env_steps``)."""
    return LinearSchedule(ppo.lr, 0, ppo.lr, env_steps if ppo.anneal_lr else None)


def continued(
    ppo: PPOConfig, env_steps: int | None, saved: dict | None, trained_env_steps: int, last_lr: float | None = None
) -> tuple[LinearSchedule, str | None]:
    """The schedule a resumed learner goes on with (``ppo``, ``env_steps``: the resumed run's settings) from the one
    its checkpoint saved, and what changed (None: the saved schedule as it was). ``last_lr``: the rate the optimiser
    last used, for a checkpoint that holds no schedule (written before it did): taken as where that run stood."""
    horizon = env_steps if ppo.anneal_lr else None
    if saved is None:
        start_lr = ppo.lr if last_lr is None else float(last_lr)
        schedule = LinearSchedule(ppo.lr, trained_env_steps, start_lr, horizon)
        return schedule, f"the checkpoint holds no schedule: from the optimiser's last rate {start_lr:.3g}"
    schedule = LinearSchedule.from_state(saved)
    changes = []
    if ppo.lr != schedule.lr:
        scale = ppo.lr / schedule.lr
        schedule = LinearSchedule(ppo.lr, schedule.start_steps, schedule.start_lr * scale, schedule.horizon)
        changes.append(f"ppo.lr {LinearSchedule.from_state(saved).lr:g} -> {ppo.lr:g} scales the rate by {scale:.3g}")
    if not ppo.anneal_lr:
        if schedule.horizon is not None or schedule.start_lr != ppo.lr:
            changes.append("ppo.anneal_lr false: held at ppo.lr")
        return LinearSchedule(ppo.lr, trained_env_steps, ppo.lr, None), "; ".join(changes) or None
    if horizon != schedule.horizon:
        rate = schedule.rate(trained_env_steps)
        changes.append(
            f"stop.env_steps {_steps(schedule.horizon)} -> {_steps(horizon)}: on from the rate reached"
            + (", held without a step budget" if horizon is None else "")
        )
        schedule = LinearSchedule(schedule.lr, trained_env_steps, rate, horizon)
    return schedule, "; ".join(changes) or None


def _steps(horizon: int | None) -> str:
    return "none" if horizon is None else f"{horizon:,}"
