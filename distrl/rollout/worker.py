"""RolloutWorker: steps one vector env with the current policy and returns fixed-size batches.

A plain class: tests drive it in-process, the driver wraps it with ``ray.remote`` (``worker_actor.py``). The worker
owns the policy, its weights and the report on each batch (``SampleInfo``); the step loop is its runner's
(``env_runner.py``, ``ready_runner.py``). Newer weights reach a running sample (``stage_weights``) and act from its
next step; each step's log-probability is the acting policy's, and the batch reports the version each step acted
with (``version_changes``) and their mean (the policy lag).
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import ray

from distrl.common import affinity, priority
from distrl.common.ray_actor import in_ray_actor
from distrl.common.running_mean_std import RunningMeanStd
from distrl.common.threads import use_torch_threads
from distrl.compile.checked import CheckedPolicyBase
from distrl.compile.dynamo_stats import dynamo_counts
from distrl.compile.shipped import ShippedPolicy, ships_policy
from distrl.config.schema import Config
from distrl.data.batch import Batch, policy_observation
from distrl.data.memory import memory_for
from distrl.data.messages import SampleInfo, Weights
from distrl.envs import make_run_vec_env
from distrl.envs.factory import make_vec_env
from distrl.envs.kinds import resolve_agents, worker_side
from distrl.envs.stepping import SerialStepper, background_stepper, env_groups
from distrl.rollout.env_runner import EnvGroups, EnvRunner
from distrl.rollout.ready_runner import ReadyEnvRunner


@dataclass(frozen=True)
class PolicyTools:
    """What an env kind's worker side may use of the worker's policy (``distrl.envs.kinds.worker_side``)."""

    policy: CheckedPolicyBase  # the worker's own, acting with the newest weights
    new_policy: Callable[[], CheckedPolicyBase]  # another of the same model on the same backend, checked likewise
    inputs: Callable[[], tuple]  # the inputs the worker acts on next (for the checks)
    dist: object  # the model's ActionDist


class RolloutWorker:
    def __init__(
        self, config: Config, worker_index: int = 0, seed_offset: int = 0, artifacts: dict | str | None = None
    ):
        """``artifacts``: the backend's shared export or compile (``prepare_artifacts``), or the name of the Ray
        actor that holds them (the run's coordinator)."""
        self._settle_process(config, worker_index, seed_offset)
        self._build(self.config, artifacts)
        self.compile_counts = dynamo_counts()

    def _build(self, config: Config, artifacts: dict | str | None) -> None:
        """The envs, the runner that steps them (``runner``: ``next_batch``, ``policy_inputs``, ``close``,
        ``stepping``) and the policy; a worker of another kind builds its own (``policy_set_worker.py``)."""
        seed, threads = self.seed, self.threads
        # rollout.env_groups: the env copies in groups of their own vector env each, stepped in turns (env_runner.py)
        groups, self.groups_reason = env_groups(config)
        self.groups = groups
        per_group = {"num_envs_per_worker": config.env.num_envs_per_worker // groups}  # whole env copies each
        group_config = (
            config if groups == 1 else config.model_copy(update={"env": config.env.model_copy(update=per_group)})
        )
        ready = config.rollout.ready_envs  # acting on the copies as they become ready (ready_runner.py)
        make_ready_envs = lambda: make_vec_env(config.env, threads, ready)  # noqa: E731
        self.env_groups = [
            make_ready_envs() if ready else make_run_vec_env(group_config, num_threads=threads) for _ in range(groups)
        ]
        self.envs = self.env_groups[0]
        # The model reads a Dict or Tuple observation's parts from its flattening (distrl/common/spaces.py).
        self.model_obs_space = (
            getattr(self.envs, "structured_observation_space", None) or self.envs.single_observation_space
        )
        self._model = None
        start = time.perf_counter()
        cfg = config.rollout.compile
        if isinstance(artifacts, str):  # large artifacts: the named coordinator hands out their object-store ref
            artifacts = _fetch_artifacts(artifacts)
        fetch_s = time.perf_counter() - start
        # onnxrt with the driver's export and check: this process acts without loading torch (compile/shipped.py)
        shipped = cfg.backend == "onnxrt" and ships_policy(artifacts)
        if not shipped:
            self._model = self._build_model()
        spec = artifacts["model_spec"] if shipped else self._model  # what the step loop needs of the model
        self.dist = spec.dist
        self.obs_rms: RunningMeanStd | None = None
        self.memory = memory_for(spec)
        # Group g's copies take the seeds a single vector env would give them (seed + their index among all copies).
        per_group = self.num_envs // groups
        if ready:
            self.runner = ReadyEnvRunner(
                self.envs, make_ready_envs, self.memory, self._observe, self.dist, config, seed, self.rng
            )
        else:
            stepper = SerialStepper if groups == 1 else background_stepper
            parts = (self.memory, self._observe, self.dist)
            self.runner = EnvGroups(
                [
                    EnvRunner(envs, *parts, config, seed + g * per_group, self.rng, stepper(envs))
                    for g, envs in enumerate(self.env_groups)
                ]
            )
        start = time.perf_counter()
        self.artifacts = artifacts
        if shipped:
            self.policy = ShippedPolicy(artifacts, cfg.options, cfg.strict, threads, self._build_model)
        else:
            self.policy = self._checked_policy(self.model)
        self.startup_s = fetch_s + time.perf_counter() - start
        self.without_torch = sys.modules.get("torch") is None  # built without loading it (a shipped policy's worker)
        self.shared_artifacts = bool(artifacts)
        # What the env kind adds to the worker (a league game: opponents that act with this worker's policies).
        self.env_side = worker_side(
            config, self.envs, PolicyTools(self.policy, self._new_policy, self.runner.policy_inputs, self.dist)
        )

    def _settle_process(self, config: Config, worker_index: int, seed_offset: int) -> None:
        """What every worker sets up before its envs and policies: its niceness, cores and threads, its random stream,
        the weights it acts with."""
        config = resolve_agents(config)  # the driver's is resolved already; a worker built on its own resolves here
        self.config = config
        self.worker_index = worker_index
        self.incarnation = uuid.uuid4().hex[:8]  # new on every (re)start of this worker
        self.node_id = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
        # Under Ray (not a test's own process): nicer than the learner, before the env and policy start their threads.
        in_actor = in_ray_actor()
        self.niceness = priority.raise_niceness(config.rollout.worker_niceness) if in_actor else None
        # learner.reserve_cores: a learner on this machine has its cores to itself while it updates
        # (common/affinity.py).
        self.cores = affinity.WorkerCores() if in_actor and config.learner.reserve_cores else None
        # Torch, ONNX Runtime (it follows torch's count) and the env's own threads all use the CPUs Ray gave this
        # worker.
        self.threads = max(1, int(config.rollout.num_cpus_per_worker))
        use_torch_threads(self.threads)
        self.num_envs = config.env.slots  # the batch's width: env copies x their agents
        seed = config.seed * 1_000_003 + worker_index * 10_007 + seed_offset
        if _restarted_by_ray():  # Ray re-runs this constructor with the same arguments: draw a new stream
            seed = int(np.random.SeedSequence().generate_state(1)[0] >> 1)  # < 2**31: ale-py takes an int32 seed
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.policy_version = 0
        self.staged: Weights | None = None  # newer weights sent while a sample runs (stage_weights)
        self.staged_lock = threading.Lock()

    # --- the policy --------------------------------------------------------------------
    @property
    def model(self):
        """The eager torch model, with the weights in use. A worker acting through a shipped policy builds it (and
        loads torch) only when it is asked for: by a check after a sync, a fallback to eager, or a caller."""
        return self.policy.module if self._model is None else self._model

    def _build_model(self, seeded: bool = True):
        """The model, built with the learner's seed so its weights are the learner's version 0 (a new run's first
        batch can be sampled while the learner is still starting); not ``seeded``: one whose weights are loaded."""
        import torch

        from distrl.models import build_model

        use_torch_threads(self.threads)  # torch may have loaded just now
        if seeded:
            torch.manual_seed(self.config.seed)
        model = build_model(self.model_obs_space, self.envs.single_action_space, self.config.model)
        if seeded:
            torch.manual_seed(self.seed)
        return model

    def _new_policy(self) -> CheckedPolicyBase:
        """Another policy of this model on this worker's backend, checked like its own (a league opponent's)."""
        return self._checked_policy(self._build_model(seeded=False))

    def _checked_policy(self, module, inputs: tuple | None = None) -> CheckedPolicyBase:
        """``module`` compiled by the worker's backend (``rollout.compile``), checked against eager on ``inputs`` (by
        default the observations the worker acts on next)."""
        from distrl.compile.build import CheckedPolicy

        cfg = self.config.rollout.compile
        inputs = self.runner.policy_inputs() if inputs is None else inputs
        options = (cfg.options, cfg.strict, self.artifacts, cfg.precision, cfg.memory_format)
        return CheckedPolicy(module, cfg.backend, inputs, cfg.mode, *options)

    def ready(self) -> str:
        """Constructed and answering (the coordinator asks after a restart): this process's incarnation."""
        return self.incarnation

    def backend_info(self) -> dict:
        report = self.policy.report
        return {
            "requested": report.requested,
            "backend": report.backend,
            "reason": report.reason,
            "startup_s": self.startup_s,
            "shared_artifacts": self.shared_artifacts,
            "without_torch": self.without_torch,
            "timings_us": report.timings_us,
            "form": str(report.form),
            "form_reason": report.form_reason,
            "env_groups": self.groups,
            "env_stepping": self.runner.stepping,
            "env_groups_reason": self.groups_reason,
        }

    def placement(self) -> dict:
        """Where this actor runs (only meaningful inside a Ray actor)."""
        ctx = ray.get_runtime_context()
        return {
            "node_id": ctx.get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "placement_group": ctx.get_placement_group_id(),
            "gpu_ids": list(ctx.get_accelerator_ids().get("GPU", [])),
            "cores": sorted(self.cores.refresh()) if self.cores is not None else None,
        }

    def _settle_thread(self) -> None:
        """The worker's per-thread settings on the thread Ray runs this call on, which may not be the constructor's:
        its niceness, its cores (``learner.reserve_cores``), and torch's thread count (MKL's is per thread, see
        ``distrl.common.threads``)."""
        if self.niceness is not None:
            priority.at_least(self.niceness)
        if self.cores is not None:
            self.cores.refresh()
        use_torch_threads(self.threads)

    # --- weights ---------------------------------------------------------------------
    def set_weights(self, weights: Weights) -> None:
        """Act with ``weights`` (from ``Learner.get_weights``) unless they are already in use."""
        self._settle_thread()
        if weights.version == self.policy_version:
            return
        self.policy.update_weights(weights.model)
        if weights.obs_norm is not None:
            self.obs_rms = RunningMeanStd.from_state(weights.obs_norm)
        self.policy_version = weights.version
        if self.config.rollout.compile.verify_every_sync:
            # On the observations it is about to act on: a compiled graph holding stale weights fails here.
            self.policy.verify(self.runner.policy_inputs(), f"after weight sync {self.policy_version}", weights.check)

    def stage_weights(self, weights: Weights) -> int:
        """Act with ``weights`` from the next step of the sample running now (or of the next sample); returns their
        version. Runs on its own thread under Ray (``WEIGHTS_GROUP``): it only leaves them for the sampling thread."""
        with self.staged_lock:
            self.staged = weights
        return weights.version

    def _take_staged(self) -> None:
        """Act with the weights ``stage_weights`` left, if newer than the ones in use (a learner rebuilt from an older
        snapshot sends its own with the next sample request: those are taken as they are)."""
        with self.staged_lock:
            staged, self.staged = self.staged, None
        if staged is not None and staged.version > self.policy_version:
            self.set_weights(staged)

    # --- sampling --------------------------------------------------------------------
    def _observe(self, raw: np.ndarray) -> np.ndarray:
        """The observation as the policy takes it: normalised, and in the policy's dtype (uint8 frames stay uint8;
        MuJoCo's float64 and any other dtype become float32, which every backend's graph is built for)."""
        if self.config.env.normalize_obs and self.obs_rms is not None:
            return self.obs_rms.normalize(raw, self.config.env.obs_clip)
        return policy_observation(raw)

    def sample(self, weights: Weights | None = None, league: dict | None = None) -> tuple[SampleInfo, Batch]:
        """Collect ``rollout_length`` steps from every env: ``(info, batch)``.

        ``info`` is the small report the driver aggregates (version, episodes, timings, backend,
        errors) and the learner reads (env steps, observation statistics). ``league``: the driver's
        matchmaking plan for a league run (``distrl.league.run.LeagueRun.worker_plan``).
        """
        self._settle_thread()
        if weights is not None:
            self.set_weights(weights)
        self._take_staged()
        self.env_side.before_sample(league)
        start = time.perf_counter()
        batch, run = self.runner.next_batch(self.policy, self._before_step)
        info = self._report(run, batch, start)
        self.env_side.after_sample(info)
        return info, batch

    def _report(self, run, batch, start: float) -> SampleInfo:
        """The ``SampleInfo`` of a sample that began at ``start``: ``run``'s statistics (``RunStats``, each trained
        policy's part among them), ``batch``'s bytes, this worker's identity, backend and compile counts."""
        steps = self.config.rollout.rollout_length
        return SampleInfo(
            worker_index=self.worker_index,
            incarnation=self.incarnation,
            node_id=self.node_id,
            seed=self.seed,
            policy_version=run.version_changes[0][1],
            policy_version_mean=run.acted_versions / steps,
            version_changes=run.version_changes,
            env_steps=steps * self.num_envs * self.config.env.action_repeat,
            batch_bytes=batch.nbytes,
            episode_returns=run.episode_returns,
            episode_lengths=run.episode_lengths,
            episode_info=run.episode_info,
            info_missing=run.info_missing,
            sample_s=time.perf_counter() - start,
            policy_s=run.policy_s,
            env_s=run.env_s,
            finished_at=time.time(),
            obs_stats=run.obs_stats,
            return_stats=run.return_stats,
            policy_backend=self.policy.backend,
            recompiles=dynamo_counts()["compiled_graphs"] - self.compile_counts["compiled_graphs"],
            graph_breaks=dynamo_counts()["graph_breaks"],
            weight_sync_checks=self.policy.sync_checks,
            env_errors=run.env_errors,
            env_error_messages=run.error_messages[:3],
            env_nonfinite=run.env_nonfinite,
            env_nonfinite_messages=run.nonfinite_messages[:3],
            policies=run.policies,
        )

    def _before_step(self) -> int:
        """Before each env step: newer weights staged meanwhile are taken, and the worker moves off a learner's cores
        while it updates; returns the policy version that acts at this step."""
        if self.staged is not None:  # read without the lock: a miss is taken at the next step
            self._take_staged()
        if self.cores is not None:  # off a learner's cores while it updates (learner.reserve_cores)
            self.cores.follow()
        return self.policy_version

    def close(self) -> None:
        """Stop the runner's steppers and close its envs."""
        self.runner.close()

    def sample_shards(self, weights: Weights | None = None, num_shards: int = 1, league: dict | None = None) -> tuple:
        """``sample``, returned as ``(info, shard_0, ..., shard_{n-1})`` for ``num_shards`` learners.

        Under Ray each element is its own object: the coordinator gathers ``info`` (a few hundred
        bytes) for the driver, and learner r fetches only ``shard_r``.
        """
        info, batch = self.sample(weights, league)
        return (info, *batch.split(num_shards))


def _fetch_artifacts(holder: str, timeout_s: float = 60.0) -> dict | None:
    """The artifacts the named actor ``holder`` keeps (``SampleCoordinator.artifacts``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            actor = ray.get_actor(holder)
            break
        except ValueError:  # created just before this worker: not registered yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    held = ray.get(actor.artifacts.remote(), timeout=timeout_s)
    return ray.get(held[0]) if held else None


def _restarted_by_ray() -> bool:
    """Whether this is a Ray actor being reconstructed after its process died."""
    import warnings

    try:
        with warnings.catch_warnings():  # it reads Ray's deprecated actor_id property internally
            warnings.simplefilter("ignore")
            return bool(ray.is_initialized() and ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # not inside an actor
        return False
