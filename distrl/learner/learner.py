"""Learner: the update on batches from rollout workers, optionally one of several DDP ranks.

The algorithm (``distrl/algo/``, ``config.algo``) gives the targets, the minibatch loss, the
learning rate and the epoch plan; the learner owns the device, DDP, the optimiser, the epoch
loop (or the device step) and the state a checkpoint holds.

A plain class: tests drive it in-process, the driver wraps it with ``ray.remote``. With
``world_size > 1`` rank r trains on shard r (an equal slice of the envs) of every worker's
batch, and gradients are averaged by torch DistributedDataParallel. Under Ray each rank
fetches only its own shards (``update_refs``); in-process, ``update`` takes whole batches.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import time
from datetime import timedelta

import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from distrl.algo import build_algorithm
from distrl.algo.base import CurrentOutputs
from distrl.common import affinity
from distrl.common.errors import describe_error
from distrl.common.ray_actor import in_ray_actor
from distrl.common.running_mean_std import RunningMeanStd
from distrl.common.spaces import image_part_mask
from distrl.compile.dynamo_stats import dynamo_counts
from distrl.config.schema import Config
from distrl.data.batch import Batch
from distrl.data.messages import SampleInfo, SampleReport, Weights
from distrl.data.samples import TrainingSamples
from distrl.learner.step import DeviceStep
from distrl.learner.step_check import StepCheck, StepCheckFailed, UpdateState, compare_updates, nudge_one_ulp
from distrl.learner.step_rules import choose_step
from distrl.models import build_model

log = logging.getLogger("distrl.learner")

_NOT_PER_STEP = ("obs", "starts", "h0", "c0")  # what the forward reads, not the loss


class _TrainForward(nn.Module):
    """Routes training forwards through one ``forward`` so DDP sees (and syncs) every call."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, obs, h=None, c=None, starts=None):
        if starts is None:
            return self.model(obs)
        return self.model.forward_sequence(obs, h, c, starts)


def _rms_tensors(rms: RunningMeanStd | None) -> dict | None:
    """A running statistic's state as tensors (a checkpoint holds tensors and plain types only)."""
    return None if rms is None else {k: torch.as_tensor(v) for k, v in rms.state().items()}


def resolve_device(requested: str, assigned_gpus: list | None, num_gpus: float, cuda_available: bool) -> torch.device:
    """The learner's device for ``learner.device``.

    ``auto`` is CUDA only when the learner was given a GPU: by Ray (``assigned_gpus``, its accelerator
    ids, when it runs as an actor: Ray does not hide GPUs from an actor that asked for none) or, run
    in-process (``assigned_gpus`` None), by the config (``learner.num_gpus_per_learner`` > 0).
    """
    if requested != "auto":
        return torch.device(requested)
    given = bool(assigned_gpus) if assigned_gpus is not None else num_gpus > 0
    return torch.device("cuda" if given and cuda_available else "cpu")


def _ray_assigned_gpus() -> list | None:
    """The GPU ids Ray gave this actor; None outside a Ray actor."""
    if not in_ray_actor():
        return None
    import ray

    return list(ray.get_runtime_context().get_accelerator_ids().get("GPU", []))


class Learner:
    def __init__(
        self,
        config: Config,
        obs_space: gym.Space,
        action_space: gym.Space,
        rank: int = 0,
        world_size: int = 1,
    ):
        self.config = config
        self.rank, self.world_size = rank, world_size
        self.device = resolve_device(config.learner.device, _ray_assigned_gpus(), config.learner.num_gpus_per_learner,
                                     torch.cuda.is_available())  # fmt: skip
        torch.set_num_threads(max(1, int(config.learner.num_cpus_per_learner)))
        # learner.reserve_cores: under Ray, this process runs on cores of its machine that the workers leave to it while
        # it updates (distrl/common/affinity.py).
        reserved = math.ceil(config.learner.num_cpus_per_learner) if config.learner.reserve_cores and in_ray_actor() else 0
        self.cores = affinity.LearnerCores(reserved)  # 0: claims nothing
        if reserved and not self.cores.cores:
            log.warning(f"learner.reserve_cores: rank {rank} found fewer than {reserved + 1} unclaimed cores on its "
                        "machine (one is left for the workers); it shares them with the workers")
        torch.manual_seed(config.seed)
        self.model = build_model(obs_space, action_space, config.model).to(self.device)
        self.algorithm = build_algorithm(config)
        self.plan = self.algorithm.plan
        self.train_forward: nn.Module = _TrainForward(self.model)
        self.step_kind, self.step_reason = choose_step(config, self.device.type, world_size)
        captured = self.step_kind == "device" and self.device.type == "cuda"
        # The fused kernel updates every parameter in one call (CPU and CUDA): fewer, larger ops per step. A captured
        # step keeps Adam's step counts on the device and reads the learning rate from a tensor the host refills.
        lr = self.algorithm.learning_rate(0)
        lr = torch.tensor(lr, device=self.device) if captured else lr
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr, eps=1e-5, fused=True, capturable=captured)
        self.amp_dtype = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}[config.learner.amp]
        # fp16 needs loss scaling against gradient underflow; bf16 and fp32 do not.
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=config.learner.amp == "fp16")
        self.loss_fn = self._loss_terms
        self._compile()
        self.device_step = None
        if self.step_kind == "device":
            self.device_step = DeviceStep(self._loss_terms, self.model, self.optimizer, self.plan, self.device, captured)
        self._warned_uneven = False
        self.step_check: StepCheck | None = None  # the device step's first update against the loop's (step_check.py)
        self.generator = torch.Generator().manual_seed(config.seed + rank)
        self.obs_rms = None
        if config.env.normalize_obs:  # a Dict observation's image parts are left to the CNN (common/spaces.py)
            self.obs_rms = RunningMeanStd(self.model.input_space.shape, skip=image_part_mask(obs_space))
        self.return_rms = RunningMeanStd(()) if config.env.normalize_reward else None  # of discounted returns
        self.version = 0
        self.trained_env_steps = 0
        self.skipped_updates = 0
        self._compiled_after_warmup: int | None = None  # graphs compiled by the end of the first update

    def _autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def _compile(self) -> None:
        """Compile the minibatch loss (forward + loss; AOTAutograd compiles its backward too)."""
        cfg = self.config.learner.compile
        if cfg.backend == "eager":
            return
        mode = None if cfg.mode == "default" else cfg.mode
        if cfg.critic_mode is not None:
            # Separate modes: compile the towers one by one (RL-Games' actor/critic split).
            # Module.compile works in place, so state_dict keys (and weight syncs) are unchanged.
            self.model.actor_encoder.compile(mode=mode, dynamic=False)
            critic_mode = None if cfg.critic_mode == "default" else cfg.critic_mode
            self.model.critic_encoder.compile(mode=critic_mode, dynamic=False)
        else:
            self.loss_fn = torch.compile(self._loss_terms, mode=mode, dynamic=False)

    # --- distributed -----------------------------------------------------------------
    @staticmethod
    def rendezvous_address() -> tuple[str, int]:
        """An address and free port on this node for rank 0 to host the process group."""
        import socket

        import ray.util

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def init_distributed(self, address: str, port: int) -> None:
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        dist.init_process_group(
            backend,
            init_method=f"tcp://{address}:{port}",
            rank=self.rank,
            world_size=self.world_size,
            timeout=timedelta(seconds=120),
        )
        # DDP broadcasts rank 0's parameters at construction, so every rank starts identical.
        self.train_forward = nn.parallel.DistributedDataParallel(self.train_forward)

    def policy_version(self) -> int:
        """Updates done so far: the version of the weights ``get_weights`` returns."""
        return self.version

    def device_name(self) -> str:
        return str(self.device)

    def describe(self) -> dict:
        """The device and the step in use, with why (for the start-up summary and ``summary.json``); ``step_check``:
        how the device step's first update compared with the loop's (None before it, or without the device step)."""
        return {"device": str(self.device), "step": self.step_kind, "step_reason": self.step_reason,
                "step_check": self.step_check.as_dict() if self.step_check is not None else None}  # fmt: skip

    def placement(self) -> dict:
        """Where this actor runs (only meaningful inside a Ray actor)."""
        import ray

        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "node_ip": ray.util.get_node_ip_address(),
                "gpu_ids": list(ctx.get_accelerator_ids().get("GPU", [])), "device": str(self.device),
                "placement_group": ctx.get_placement_group_id(), "cores": self.cores.cores or None}  # fmt: skip

    # --- weights and state -------------------------------------------------------------
    def get_weights(self) -> Weights:
        return Weights(
            version=self.version,
            model={k: v.detach().cpu().numpy() for k, v in self.model.state_dict().items()},
            obs_norm=self.obs_rms.state() if self.obs_rms is not None else None,
        )

    def state(self) -> dict:
        """Everything a checkpoint needs to resume learning exactly (tensors and plain types only)."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "obs_norm": _rms_tensors(self.obs_rms),
            "return_norm": _rms_tensors(self.return_rms),
            "generator": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "version": self.version,
            "trained_env_steps": self.trained_env_steps,
            "skipped_updates": self.skipped_updates,
        }

    def load_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        lr, capturable = self.optimizer.param_groups[0]["lr"], self.optimizer.param_groups[0]["capturable"]
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:  # this learner's step kind decides these, not the saver's
            group["capturable"] = capturable
            group["lr"] = torch.tensor(float(group["lr"]), device=self.device) if isinstance(lr, torch.Tensor) else float(group["lr"])
        if self.obs_rms is not None and state.get("obs_norm") is not None:
            self.obs_rms = RunningMeanStd.from_state(state["obs_norm"])
        if self.return_rms is not None and state.get("return_norm") is not None:
            self.return_rms = RunningMeanStd.from_state(state["return_norm"])
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        self.version = int(state["version"])
        self.trained_env_steps = int(state["trained_env_steps"])
        self.skipped_updates = int(state["skipped_updates"])

    # --- the update ----------------------------------------------------------------------
    def _to_tensors(self, batch: Batch) -> dict[str, torch.Tensor]:
        pin = self.device.type == "cuda"
        out = {}
        for key, value in batch.arrays().items():
            tensor = torch.from_numpy(value)
            if pin:
                tensor = tensor.pin_memory()
            out[key] = tensor.to(self.device, non_blocking=pin)
        return out

    def update(self, *samples: tuple[SampleInfo, Batch], min_version: int | None = None) -> dict:
        """One update on this rank's shard of each worker's ``(info, batch)`` (``RolloutWorker.sample``); steps that
        acted with a policy version older than ``min_version`` are left out (None: every step trains)."""
        return self._update([info for info, _ in samples], [batch.split(self.world_size)[self.rank] for _, batch in samples],
                            min_version)  # fmt: skip

    def update_refs(self, sample_report: SampleReport, shard_refs: tuple) -> dict:
        """One update on the workers' infos (``sample_report.infos``, from the coordinator's ``collect``),
        fetching this rank's shard of each batch by ref (under Ray).

        A batch whose object is gone (it lived in the object store of a node that died before this fetch) is left
        out: the update trains on the others, and ``lost_batches`` names it (its index in the report) so the driver
        counts neither its env steps nor its episodes. Every rank loses the same batches (a batch's shards are
        stored together). With every batch gone there is no update (``learner_version`` unchanged).
        """
        with self.cores.updating():
            return self._fetch_and_update(sample_report, shard_refs)

    def _fetch_and_update(self, sample_report: SampleReport, shard_refs: tuple) -> dict:
        import ray

        infos, lost = list(sample_report.infos), []
        try:
            shards = ray.get(list(shard_refs))  # every transfer at once
        except ray.exceptions.ObjectLostError:  # a node's object store is gone (OwnerDiedError is one too): which?
            infos, shards = [], []
            for index, (info, ref) in enumerate(zip(sample_report.infos, shard_refs)):
                try:
                    shards.append(ray.get(ref))
                    infos.append(info)
                except ray.exceptions.ObjectLostError:
                    lost.append(index)
        if not shards:
            return {"lost_batches": lost, "learner_version": self.version}
        metrics = self._update(infos, shards, sample_report.min_version)
        metrics["lost_batches"] = lost
        return metrics

    def update_refs_and_snapshot(self, sample_report: SampleReport, shard_refs: tuple) -> tuple[dict, Weights, dict]:
        """``update_refs``, then the new weights (for workers) and full state (kept by the driver, for restarts)."""
        with self.cores.updating():
            metrics = self._fetch_and_update(sample_report, shard_refs)
            return metrics, self.get_weights(), self.state()

    def _update(self, infos: list[SampleInfo], shards: list[Batch], min_version: int | None) -> dict:
        start = time.perf_counter()
        if self.obs_rms is not None:
            for info in infos:  # every rank merges every worker's stats, so all ranks agree
                if info.obs_stats is not None:
                    self.obs_rms.merge(*info.obs_stats)
        data = self._to_tensors(Batch.concat(shards))
        versions = self._step_versions(infos, shards)
        stale_steps = self._leave_out_stale_steps(data, versions, min_version)
        if self.return_rms is not None:
            for info in infos:  # as the observation statistics: every rank merges every worker's
                if info.return_stats is not None:
                    self.return_rms.merge(*info.return_stats)
            # SB3's VecNormalize: rewards / sqrt(var + eps) of the discounted return, not centred.
            data["rewards"] = data["rewards"] / float(np.sqrt(self.return_rms.var + 1e-8))
        seq_len = self.config.ppo.seq_len if self.model.is_recurrent else None
        zeros = torch.zeros_like(data["rewards"])
        current = functools.cache(lambda: self._current_outputs(  # one forward, made only when the algorithm asks
            TrainingSamples.from_rollout(data, zeros, zeros, seq_len, self.model.window), tuple(zeros.shape), seq_len))
        targets = self.algorithm.targets(data, current)
        if targets.weights is not None:
            data = {**data, "weights": targets.weights}
        if targets.proximal_logp is not None:
            data = {**data, "logp": targets.proximal_logp}
        if targets.values is not None:
            data = {**data, "values": targets.values}
        advantages, returns = targets.advantages, targets.returns
        lr = self.algorithm.learning_rate(self.trained_env_steps)
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):  # a captured step reads it from the device
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr

        checking = self.device_step is not None and self.step_check is None
        stats = self._run_epochs(TrainingSamples.from_rollout(data, advantages, returns, seq_len, self.model.window))

        env_steps = sum(info.env_steps for info in infos)
        self.trained_env_steps += env_steps
        lags = self.version - versions[data["valid"].cpu()]  # of the steps trained on: left-out ones are no part of it
        values, valid = data["values"][:-1][data["valid"]], returns[data["valid"]]
        explained_var = float(1 - (valid - values).var() / valid.var().clamp(min=1e-8))
        metrics = {
            **stats,
            "learner_batch_bytes": sum(shard.nbytes for shard in shards),
            "lr": lr,
            "explained_variance": explained_var,
            "skipped_updates": self.skipped_updates,
            "policy_lag_mean": float(lags.double().mean()) if lags.numel() else 0.0,
            "learn_s": time.perf_counter() - start,
            "env_steps": env_steps,
            "stale_steps": stale_steps,
            "learner_version": self.version + 1,
            "learner_recompiles": dynamo_counts()["compiled_graphs"] - self._compiled_after_warmup
            if self._compiled_after_warmup is not None
            else 0,
        }
        if checking:  # the driver says how the device step's first update compared, and keeps it for summary.json
            metrics["learner_step"] = self.describe()
        if self._compiled_after_warmup is None:
            self._compiled_after_warmup = dynamo_counts()["compiled_graphs"]
        self.version += 1
        return metrics

    @staticmethod
    def _step_versions(infos: list[SampleInfo], shards: list[Batch]) -> torch.Tensor:
        """``[T, N]`` on the CPU: the policy version that acted at each step of the update's batch (``data``'s layout:
        each shard's envs side by side)."""
        columns = [np.repeat(info.step_versions(shard.rewards.shape[0])[:, None], shard.num_envs, axis=1)
                   for info, shard in zip(infos, shards, strict=True)]  # fmt: skip
        return torch.from_numpy(np.concatenate(columns, axis=1))

    @staticmethod
    def _leave_out_stale_steps(data: dict[str, torch.Tensor], versions: torch.Tensor, min_version: int | None) -> int:
        """Async: the steps that acted with a version older than ``min_version``, the bound the stream's gather took the
        batches by (``SampleReport.min_version``: ``rollout.max_policy_lag`` behind this update), are made invalid, so
        they take no part in the targets or the loss, and the batch's newer steps train (Sample Factory masks per step
        too): the start of a rollout that new weights reached on its way, a slow worker's. Returns how many transitions
        were left out. A stale prefix changes no kept step's GAE or V-trace target: both run backwards from the batch's
        end."""
        if min_version is None:
            return 0
        keep = versions >= min_version
        if keep.all():
            return 0
        keep = keep.to(data["valid"].device)
        left_out = int((data["valid"] & ~keep).sum())
        data["valid"] = data["valid"] & keep  # a new tensor: the batch's own may be a read-only object-store view
        return left_out

    def _num_minibatches(self, samples_per_rank: int) -> int:
        """Equal on every rank (shards are equal), so DDP ranks take the same number of steps."""
        per_rank = max(1, self.plan.minibatch_size // self.world_size)
        return max(1, samples_per_rank // per_rank)

    def _loss_terms(self, mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Forward and the algorithm's loss for one minibatch (the part torch.compile compiles)."""
        pd_params, new_values, steps = self._forward(mb)
        return self.algorithm.loss(self.model.dist, pd_params, new_values, steps)

    def _forward(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """The model on a minibatch: ``pd_params [B, P]`` and values ``[B]`` in fp32, and the per-step tensors flat."""
        with self._autocast():
            if self.model.is_recurrent:
                seq = {k: mb[k].transpose(0, 1) for k in ("obs", "starts")}  # back to time-major [L, S, ...]
                pd_params, new_values = self.train_forward(seq["obs"], mb["h0"], mb["c0"], seq["starts"])
                pd_params, new_values = pd_params.transpose(0, 1), new_values.transpose(0, 1)
            else:
                pd_params, new_values = self.train_forward(mb["obs"])
        # The distribution and loss math runs in fp32 whatever the autocast dtype.
        pd_params = pd_params.float().reshape(-1, pd_params.shape[-1])
        new_values = new_values.float().reshape(-1)

        # The per-step tensors, flat [B, ...] (a recurrent minibatch's are [S, L, ...]).
        steps = {k: v.reshape(-1, *v.shape[2:]) if self.model.is_recurrent else v
                 for k, v in mb.items() if k not in _NOT_PER_STEP}  # fmt: skip
        return pd_params, new_values, steps

    @torch.no_grad()
    def _current_outputs(self, samples: TrainingSamples, shape: tuple[int, int], seq_len: int | None) -> CurrentOutputs:
        """The current model on the batch: its policy's log-probabilities of the batch's actions and its values, each
        ``[T, N]``, in minibatch-sized chunks of ``samples`` taken in order."""
        size = max(1, self.plan.minibatch_size // (seq_len or 1))
        logps, values = [], []
        for start in range(0, len(samples), size):
            mb = {k: v[start : start + size] for k, v in samples.tensors.items()}
            pd_params, new_values, steps = self._forward(mb)
            mask = steps["action_mask"] if "action_mask" in steps else None
            logps.append(self.model.dist.log_prob_entropy(pd_params, steps["actions"], mask)[0])
            values.append(new_values)
        steps_, envs = shape

        def time_major(flat: torch.Tensor) -> torch.Tensor:
            if seq_len is None:  # units are steps, t * N + n
                return flat.reshape(steps_, envs)
            # units are sequences, chunk * N + n, of seq_len steps each
            return flat.reshape(steps_ // seq_len, envs, seq_len).transpose(1, 2).reshape(steps_, envs)

        return CurrentOutputs(time_major(torch.cat(logps)), time_major(torch.cat(values)))

    def _run_epochs(self, samples: TrainingSamples) -> dict:
        """The plan's epochs over the samples in minibatches: by the device step where it runs, else the loop."""
        num_mb = self._num_minibatches(samples.num_samples)
        if self.device_step is not None and not self.device_step.fits(len(samples), num_mb):
            if not self._warned_uneven:  # a batch short of a timed-out worker's part: minibatches of two sizes
                self._warned_uneven = True
                log.warning(f"{len(samples)} samples do not split into {num_mb} equal minibatches: this update runs "
                            "the plain loop (said once)")  # fmt: skip
            stats = self._loop_epochs(samples, num_mb)
        elif self.device_step is not None and self.step_check is None:
            stats = self._checked_device_update(samples, num_mb)
        elif self.device_step is not None:
            stats = self.device_step.run(samples, num_mb, self.plan.epochs, self.generator)
        else:
            stats = self._loop_epochs(samples, num_mb)
        self.skipped_updates += stats["skipped_steps"]
        return stats

    def _checked_device_update(self, samples: TrainingSamples, num_mb: int) -> dict:
        """The device step's first update, held to the loop's on the same minibatches (``step_check.py``)."""
        start = UpdateState.capture(self.model, self.optimizer, self.generator)
        loop = (self._loop_epochs(samples, num_mb), UpdateState.capture(self.model, self.optimizer, self.generator))
        start.restore(self.model, self.optimizer, self.generator)
        nudge_one_ulp(self.model)
        nudged = (self._loop_epochs(samples, num_mb), UpdateState.capture(self.model, self.optimizer, self.generator))
        start.restore(self.model, self.optimizer, self.generator)
        try:
            stats = self.device_step.run(samples, num_mb, self.plan.epochs, self.generator)
            device = (stats, UpdateState.capture(self.model, self.optimizer, self.generator))
            self.step_check = compare_updates(loop, nudged, device, self.model)
        except Exception as exc:  # a capture that fails, an op the graph cannot hold
            self.step_check = StepCheck(False, f"it raised {describe_error(exc)}")
        if self.step_check.ok:
            return stats
        problem = f"the device step's first update did not match the loop's: {self.step_check.reason}"
        if self.config.learner.step_strict:
            raise StepCheckFailed(f"{problem} (learner.step_strict=true)")
        loop[1].restore(self.model, self.optimizer, self.generator)  # the loop's update is the one kept
        self.device_step = None
        self.step_kind, self.step_reason = "loop", f"{problem}; the loop runs instead"
        return loop[0]

    def _loop_epochs(self, samples: TrainingSamples, num_mb: int) -> dict:
        """CleanRL's loop: the plan's epochs over the samples in minibatches, KL early stop."""
        cfg = self.plan
        # Statistics and the skip count stay on the device until the update ends: reading one per minibatch
        # would make the host wait for the accelerator at every step.
        totals: dict[str, torch.Tensor] = {}
        skipped = torch.zeros((), device=self.device)
        count = 0
        early_stop = False
        params = list(self.model.parameters())
        for _epoch in range(cfg.epochs):
            for minibatch in samples.minibatches(num_mb, self.generator):
                parts = self.loss_fn(minibatch)
                self.optimizer.zero_grad(set_to_none=True)
                self.scaler.scale(parts["loss"]).backward()
                self.scaler.unscale_(self.optimizer)
                grad_norm = nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
                # NaN/inf guard (gradients are already averaged across ranks, so every rank agrees): the fused
                # Adam skips its step, step count included, where found_inf is 1; fp16's scaler sets its own.
                bad = (~(torch.isfinite(grad_norm) & torch.isfinite(parts["loss"]))).float()
                if not self.scaler.is_enabled():
                    self.optimizer.found_inf = bad
                self.scaler.step(self.optimizer)
                self.scaler.update()
                skipped += bad
                parts["grad_norm"] = grad_norm
                for key, value in parts.items():
                    value = value.detach().float()
                    totals[key] = totals[key] + value if key in totals else value.clone()
                count += 1
                if cfg.target_kl is not None:
                    kl = parts["approx_kl"].detach().clone()
                    if self.world_size > 1:
                        dist.all_reduce(kl, op=dist.ReduceOp.AVG)
                    if kl > cfg.target_kl:
                        early_stop = True
                        break
            if early_stop:
                break
        if hasattr(self.optimizer, "found_inf"):
            del self.optimizer.found_inf
        skipped_steps = int(skipped)
        keys = list(totals)
        means = (torch.stack([totals[k] for k in keys]) / max(1, count)).tolist() if keys else []
        stats = dict(zip(keys, means))
        stats.pop("loss", None)
        stats["gradient_steps"] = count
        stats["skipped_steps"] = skipped_steps  # of this update's gradient steps (non-finite loss or gradients)
        stats["kl_early_stop"] = early_stop
        return stats

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
