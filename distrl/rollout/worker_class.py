"""Which rollout worker a run's config needs: ``RolloutWorker``, or ``PolicySetWorker`` where several policies train
(``agents.policies``). Ray runs it through ``worker_actor.py``."""

from __future__ import annotations

from distrl.config.schema import Config
from distrl.rollout.worker import RolloutWorker


def worker_class(config: Config) -> type[RolloutWorker]:
    if config.agents.several:  # imported only then: it loads torch, which an onnxrt RolloutWorker may not need
        from distrl.rollout.policy_set_worker import PolicySetWorker

        return PolicySetWorker
    return RolloutWorker


def make_worker(config: Config, *args, **kwargs) -> RolloutWorker:
    """The worker ``config`` needs, built in this process (tests, ``distrl diagnose``, benchmarks)."""
    return worker_class(config)(config, *args, **kwargs)
