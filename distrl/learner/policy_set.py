"""Several trained policies in one learner actor (``agents.policies``): a ``Learner`` per policy, on the same device.

RLlib's multi-agent learner holds a module per policy the same way. Each policy's learner trains on its own part of
every worker's batch (``PolicyBatches``, ``SampleInfo.for_policy``) with its own model, optimiser, running statistics
and device step; they update together, so the policy version is one number for all of them. Its weights, state and
metrics hold every policy's by name: the metrics row has ``NAME/key`` for each policy's learner keys, and the plain
keys as the mean over the policies (the progress bar and the report read those). With ``learner.num_learners``
ranks, each rank holds every policy and trains it on its shard of that policy's slots; each policy's forward is in
DDP of its own over the ranks' one process group.
"""

from __future__ import annotations

import gymnasium as gym

from distrl.common.wire import from_wire, to_wire
from distrl.config.schema import Config
from distrl.data.messages import SampleInfo, UpdateResult, Weights
from distrl.envs.agents import policy_map, policy_spaces
from distrl.learner import distributed
from distrl.learner.hardware import LearnerHardware
from distrl.learner.learner import Learner
from distrl.learner.refs import UpdatesByRef


class PolicySetLearner(UpdatesByRef):
    def __init__(
        self, config: Config, obs_space: gym.Space, action_space: gym.Space, rank: int = 0, world_size: int = 1
    ):
        self.config, self.rank, self.world_size = config, rank, world_size
        self.names = policy_map(config).names
        self.hardware = LearnerHardware(config, rank, world_size)
        spaces = policy_spaces(config)  # each policy's own (``obs_space``, ``action_space``: the first policy's)
        self.learners = {
            name: Learner(config, *spaces[name], rank, world_size, policy_index=k, hardware=self.hardware)
            for k, name in enumerate(self.names)
        }
        self.first = self.learners[self.names[0]]

    # --- as a ``Learner`` reads ------------------------------------------------------------
    device = property(lambda self: self.hardware.device)
    version = property(lambda self: self.first.version)

    def policy_version(self) -> int:
        return self.first.version

    def device_name(self) -> str:
        return str(self.device)

    def describe(self) -> dict:
        """The first policy's learner's device and step (every policy's is chosen by the same rules), and the names."""
        return {**self.first.describe(), "policies": list(self.names)}

    def placement(self) -> dict:
        return self.first.placement()

    def close(self) -> None:
        distributed.leave()

    # --- distributed: one process group, each policy's forward in DDP of its own -----------
    rendezvous_address = staticmethod(distributed.rendezvous_address)

    def init_distributed(self, address: str, port: int) -> None:
        """Join rank 0's group once; every policy's learner then averages its own gradients over it. Every rank
        updates the policies in the same order on equal shards, so their collectives line up."""
        distributed.start_group(self.device, address, port, self.rank, self.world_size)
        for learner in self.learners.values():
            learner.loss.set_forward(distributed.wrap(learner.loss.train_forward))

    # --- weights and state -------------------------------------------------------------
    def get_weights(self) -> Weights:
        own = {name: learner.get_weights() for name, learner in self.learners.items()}
        return Weights(version=self.first.version, model={}, policies=own)

    def state(self) -> dict:
        """Every policy's learner state by name; ``version`` at the top, as a single learner's state has it."""
        return {
            "policies": {name: learner.state() for name, learner in self.learners.items()},
            "version": self.first.version,
        }

    def snapshot(self) -> dict:
        return to_wire(self.state())

    def load_state(self, state: dict) -> None:
        state = from_wire(state)
        missing = [name for name in self.names if name not in state.get("policies", {})]
        if missing:
            raise ValueError(
                f"the learner state has no policy {', '.join(missing)} (it holds "
                f"{', '.join(state.get('policies', {})) or 'a single policy'})"
            )
        for name, learner in self.learners.items():
            learner.load_state(state["policies"][name])

    # --- the update ----------------------------------------------------------------------
    def update(self, *samples, min_version: int | None = None) -> UpdateResult:
        """One update of every policy on this rank's shard of ``(info, batches)`` pairs (``PolicySetWorker.sample``),
        in-process."""
        return self._update(
            [info for info, _ in samples],
            [batches.split(self.world_size)[self.rank] for _, batches in samples],
            min_version,
        )

    def _update(self, infos: list[SampleInfo], shards: list, min_version: int | None) -> UpdateResult:
        results = {
            name: learner._update(
                [info.for_policy(name) for info in infos], [s.batches[name] for s in shards], min_version
            )
            for name, learner in self.learners.items()
        }
        first = results[self.names[0]]
        metrics = {f"{name}/{key}": value for name, result in results.items() for key, value in result.metrics.items()}
        for key in first.metrics:  # the plain keys: the mean over the policies
            metrics[key] = sum(result.metrics[key] for result in results.values()) / len(results)
        return UpdateResult(
            version=first.version,
            metrics=metrics,
            learn_s=sum(r.learn_s for r in results.values()),
            env_steps=sum(r.env_steps for r in results.values()),
            stale_steps=sum(r.stale_steps for r in results.values()),
            learner_batch_bytes=sum(r.learner_batch_bytes for r in results.values()),
            learner_step=first.learner_step,
        )


def learner_class(config: Config) -> type:
    """The learner actor's class for ``config``: a ``Learner``, or a ``PolicySetLearner`` for several policies."""
    return PolicySetLearner if config.agents.several else Learner
