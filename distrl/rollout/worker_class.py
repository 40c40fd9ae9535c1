"""Which rollout worker a run's config needs: ``RolloutWorker``, or ``PolicySetWorker`` where several policies train
(``agents.policies``); and that class as a Ray actor."""

from __future__ import annotations

import ray

from distrl.config.schema import Config
from distrl.rollout.policy_set_worker import PolicySetWorker
from distrl.rollout.stream import WEIGHTS_GROUP
from distrl.rollout.worker import RolloutWorker


def worker_class(config: Config) -> type[RolloutWorker]:
    return PolicySetWorker if config.agents.several else RolloutWorker


def make_worker(config: Config, *args, **kwargs) -> RolloutWorker:
    """The worker ``config`` needs, built in this process (tests, ``distrl diagnose``, benchmarks)."""
    return worker_class(config)(config, *args, **kwargs)


def remote_worker_class(config: Config | None = None):
    """``config``'s worker class (None: ``RolloutWorker``) as a Ray actor class: ``stage_weights`` runs on a thread of
    its own (call it with ``.options(concurrency_group=WEIGHTS_GROUP)``), beside the sample it updates; every other
    method runs one at a time as in a plain actor."""
    cls = RolloutWorker if config is None else worker_class(config)
    return ray.remote(concurrency_groups={WEIGHTS_GROUP: 1})(cls)
