"""A rollout worker for several trained policies (``agents.policies``): each acts for its own slots of the worker's
multi-agent env.

The worker keeps one env (its copies x agents slots, ``distrl/envs/agent_slots.py``) and one env runner per policy over
a view of that policy's slots (``distrl/envs/slot_views.py``): the runners take turns as env groups do, and the env
steps once all of them have acted. Each policy has its own model, compiled policy, memory, observation statistics and
batch; the batch the worker returns is all of them by name (``PolicyBatches``), its report says each one's part
(``SampleInfo.policies``).
"""

from __future__ import annotations

import time
from functools import partial

import numpy as np
import torch

from distrl.common.running_mean_std import RunningMeanStd
from distrl.compile.build import CheckedPolicy
from distrl.config.schema import Config
from distrl.data.batch import Batch, PolicyBatches, policy_observation
from distrl.data.memory import memory_for
from distrl.data.messages import PolicySample, Weights
from distrl.envs import make_run_vec_env
from distrl.envs.agents import policy_map, view_spaces
from distrl.envs.kinds import WorkerSide
from distrl.envs.slot_views import slot_views
from distrl.models import build_model
from distrl.rollout.env_runner import EnvGroups, EnvRunner, RunStats, run_policies
from distrl.rollout.worker import RolloutWorker


class PolicySet:
    """The worker's policies, read as the worker reads its one policy (its report, backend and checks)."""

    def __init__(self, names: tuple[str, ...], policies: list[CheckedPolicy]):
        self.names, self.policies = names, policies

    report = property(lambda self: self.policies[0].report)
    backend = property(lambda self: self.policies[0].backend)
    sync_checks = property(lambda self: sum(policy.sync_checks for policy in self.policies))


class PolicySetRunner(EnvGroups):
    """The worker's runner: an ``EnvRunner`` per policy over its view of the worker's one env, taking turns
    (``run_policies``) into a batch of each policy's own."""

    def __init__(self, names: tuple[str, ...], runners: list[EnvRunner], envs):
        super().__init__(runners)
        self.names, self.envs = names, envs

    def next_batch(self, policy: PolicySet, before_step) -> tuple[PolicyBatches, RunStats]:
        """Every policy's ``rollout_length`` steps of its slots; the statistics of all of them, with each one's env
        steps, episodes and statistics as its part (``policies``)."""
        batches: list[Batch] = [runner.new_batch() for runner in self.runners]
        run, each = run_policies(self.runners, batches, policy.policies, before_step)
        steps = self.runners[0].config.rollout.rollout_length
        run.policies = {
            name: PolicySample(
                env_steps=steps * runner.num_envs,
                episode_returns=stats.episode_returns,
                episode_lengths=stats.episode_lengths,
                episode_info=stats.episode_info,
                info_missing=stats.info_missing,
                obs_stats=stats.obs_stats,
                return_stats=stats.return_stats,
            )
            for name, runner, stats in zip(self.names, self.runners, each)
        }
        return PolicyBatches(dict(zip(self.names, batches))), run

    def close(self) -> None:
        self.envs.close()  # the views' one env


class PolicySetWorker(RolloutWorker):
    def _build(self, config: Config, artifacts: dict | str | None) -> None:
        """``artifacts`` are not used: each policy's batch is its slots', not the worker's."""
        self.policy_map = mapping = policy_map(config)
        self.groups, self.groups_reason = 1, f"{len(mapping.names)} policies take turns over the worker's one env"
        self.envs = make_run_vec_env(config, num_threads=self.threads)
        self.env_groups = [self.envs]
        views = slot_views(self.envs, mapping.columns(self.num_envs), view_spaces(config))
        self.models = []
        for k, view in enumerate(views):  # policy k's initial weights are its learner's version 0
            torch.manual_seed(config.seed + k)
            observed = view.structured_observation_space or view.single_observation_space
            self.models.append(build_model(observed, view.single_action_space, config.model))
        torch.manual_seed(self.seed)
        self._model, self.dist = self.models[0], self.models[0].dist
        self.model_obs_space = views[0].structured_observation_space or views[0].single_observation_space
        self.obs_rms_of: list[RunningMeanStd | None] = [None] * len(self.models)
        # The first view's reset resets the env with the worker's seed; the others read their slots of it.
        runners = [
            EnvRunner(
                view, memory_for(model), partial(self._observe_as, k), model.dist, config, self.seed, self.rng, view
            )
            for k, (view, model) in enumerate(zip(views, self.models))
        ]
        self.runner = PolicySetRunner(mapping.names, runners, self.envs)
        self.memory = runners[0].memory
        start = time.perf_counter()
        self.shared_artifacts, self.artifacts, self.without_torch = False, None, False
        checked = [self._checked_policy(model, runner.policy_inputs()) for model, runner in zip(self.models, runners)]
        self.policy = PolicySet(mapping.names, checked)
        self.startup_s = time.perf_counter() - start
        self.env_side = WorkerSide()

    def _observe_as(self, k: int, raw: np.ndarray) -> np.ndarray:
        """Policy ``k``'s observation: normalised by its own statistics."""
        rms = self.obs_rms_of[k]
        if self.config.env.normalize_obs and rms is not None:
            return rms.normalize(raw, self.config.env.obs_clip)
        return policy_observation(raw)

    def set_weights(self, weights: Weights) -> None:
        """Act with each policy's ``weights.policies[name]`` unless they are already in use."""
        self._settle_thread()
        if weights.version == self.policy_version:
            return
        for k, (name, policy) in enumerate(zip(self.policy.names, self.policy.policies)):
            own = weights.policies[name]
            policy.update_weights(own.model)
            if own.obs_norm is not None:
                self.obs_rms_of[k] = RunningMeanStd.from_state(own.obs_norm)
        self.policy_version = weights.version
        if self.config.rollout.compile.verify_every_sync:
            for policy, runner in zip(self.policy.policies, self.runner.runners):
                policy.verify(runner.policy_inputs(), f"after weight sync {self.policy_version}")
