"""One update on the batches a learner was given: statistics merged, stale steps left out, targets, the epochs.

``Update`` is the algorithm's side of the learner: the running statistics (observations, discounted returns), the
staleness bound per step, the algorithm's targets (GAE, V-trace, the proximal policy), the learning rate and the
update's report (``UpdateResult``). How the epochs run is the ``epochs`` object's (``epochs.py``), where the tensors
live the ``hardware``'s (``hardware.py``).
"""

from __future__ import annotations

import functools
import time

import numpy as np
import torch

from distrl.algo.base import Algorithm, CurrentOutputs
from distrl.compile.dynamo_stats import dynamo_counts
from distrl.data.batch import Batch
from distrl.data.messages import SampleInfo, UpdateResult
from distrl.data.samples import TrainingSamples
from distrl.data.staleness import steps_inside
from distrl.learner.hardware import autocast
from distrl.learner.state import LearnerCounters
from distrl.learner.value_norm import in_critic_scale, in_return_scale

_NOT_PER_STEP = ("obs", "starts", "h0", "c0")  # what the forward reads, not the loss


class MinibatchLoss:
    """The model's forward and the algorithm's loss on one minibatch: what the epochs run (compiled, or inside the
    device
    step) and what the algorithm's targets read the current policy from."""

    def __init__(self, model, train_forward, algorithm: Algorithm, device_type: str, precision: str = "fp32"):
        """``train_forward``: the module the loss calls (DDP's wrapper with several ranks: ``set_forward``);
        ``precision``: the forward's autocast (``step_rules.PRECISIONS``)."""
        self.model, self.train_forward, self.algorithm = model, train_forward, algorithm
        self.device_type, self.precision = device_type, precision

    def with_precision(self, precision: str) -> MinibatchLoss:
        """The same loss with the forward autocast to ``precision``."""
        return MinibatchLoss(self.model, self.train_forward, self.algorithm, self.device_type, precision)

    def set_forward(self, train_forward) -> None:
        self.train_forward = train_forward

    def terms(self, mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Forward and the algorithm's loss for one minibatch (the part torch.compile compiles)."""
        pd_params, new_values, steps = self.forward(mb)
        return self.algorithm.loss(self.model.dist, pd_params, new_values, steps)

    def forward(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """The model on a minibatch: ``pd_params [B, P]`` and values ``[B]`` in fp32, and the per-step tensors flat."""
        with autocast(self.device_type, self.precision):
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
        steps = {
            k: v.reshape(-1, *v.shape[2:]) if self.model.is_recurrent else v
            for k, v in mb.items()
            if k not in _NOT_PER_STEP
        }
        return pd_params, new_values, steps


class Update:
    def __init__(self, config, model, algorithm: Algorithm, optimizer, epochs, hardware, world_size: int, normalisers):
        """``epochs``: how the epochs run (``trial.py``), with the minibatch loss they use (``epochs.loss``: the
        targets'
        forward takes its precision); ``normalisers``: the learner's ``Normalisers`` (observations, returns)."""
        self.config, self.model = config, model
        self.algorithm, self.optimizer, self.epochs, self.hardware = algorithm, optimizer, epochs, hardware
        self.world_size, self.normalisers = world_size, normalisers
        self._compiled_after_warmup: int | None = None  # graphs compiled by the end of the first update

    def __call__(
        self,
        infos: list[SampleInfo],
        shards: list[Batch],
        min_version: int | None,
        counters: LearnerCounters,
        generator: torch.Generator,
    ) -> UpdateResult:
        start = time.perf_counter()
        self.normalisers.merge_obs(infos)  # every rank merges every worker's stats, so all ranks agree
        data = self.hardware.to_tensors(Batch.concat(shards))
        versions = step_versions(infos, shards)
        stale_steps = leave_out_stale_steps(data, versions, min_version)
        if self.normalisers.returns is not None:
            self.normalisers.merge_returns(infos)
            # SB3's VecNormalize: rewards / sqrt(var + eps) of the discounted return, not centred.
            data["rewards"] = data["rewards"] / float(np.sqrt(self.normalisers.returns.var + 1e-8))
        seq_len = self.config.ppo.seq_len if self.model.is_recurrent else None
        zeros = torch.zeros_like(data["rewards"])
        current = functools.cache(
            lambda: self._current_outputs(  # one forward, made only when the algorithm asks
                TrainingSamples.from_rollout(data, zeros, zeros, seq_len, self.model.window),
                tuple(zeros.shape),
                seq_len,
            )
        )
        value_norm = self.normalisers.values
        data, current = in_return_scale(value_norm, data, current)
        targets = self.algorithm.targets(data, current)
        if targets.weights is not None:
            data = {**data, "weights": targets.weights}
        if targets.proximal_logp is not None:
            data = {**data, "logp": targets.proximal_logp}
        if targets.values is not None:
            data = {**data, "values": targets.values}
        advantages, returns = targets.advantages, targets.returns
        raw_values, raw_returns = data["values"], returns
        data, returns = in_critic_scale(value_norm, data, returns, self.world_size)
        lr = self.algorithm.learning_rate(counters.trained_env_steps)
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):  # a captured step reads it from the device
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr

        samples = TrainingSamples.from_rollout(data, advantages, returns, seq_len, self.model.window)
        stats = self.epochs.run(samples, self._num_minibatches(samples.num_samples), generator)
        counters.skipped_updates += stats["skipped_steps"]

        env_steps = sum(info.env_steps for info in infos)
        counters.trained_env_steps += env_steps
        lags = (
            counters.version - versions[data["valid"].cpu()]
        )  # of the steps trained on: left-out ones are no part of it
        values, valid = raw_values[:-1][data["valid"]], raw_returns[data["valid"]]
        explained_var = float(1 - (valid - values).var() / valid.var().clamp(min=1e-8))
        compiled = dynamo_counts()["compiled_graphs"]
        metrics = {
            **stats,
            "lr": lr,
            "explained_variance": explained_var,
            "skipped_updates": counters.skipped_updates,
            "policy_lag_mean": float(lags.double().mean()) if lags.numel() else 0.0,
            "learner_recompiles": compiled - self._compiled_after_warmup
            if self._compiled_after_warmup is not None
            else 0,
        }
        if self._compiled_after_warmup is None:
            self._compiled_after_warmup = compiled
        counters.version += 1
        return UpdateResult(
            version=counters.version,
            metrics=metrics,
            learn_s=time.perf_counter() - start,
            env_steps=env_steps,
            stale_steps=stale_steps,
            learner_batch_bytes=sum(shard.nbytes for shard in shards),
        )

    def _num_minibatches(self, samples_per_rank: int) -> int:
        """Equal on every rank (shards are equal), so DDP ranks take the same number of steps."""
        per_rank = max(1, self.algorithm.plan.minibatch_size // self.world_size)
        return max(1, samples_per_rank // per_rank)

    @torch.no_grad()
    def _current_outputs(self, samples: TrainingSamples, shape: tuple[int, int], seq_len: int | None) -> CurrentOutputs:
        """The current model on the batch: its policy's log-probabilities of the batch's actions and its values, each
        ``[T, N]``, in minibatch-sized chunks of ``samples`` taken in order."""
        size = max(1, self.algorithm.plan.minibatch_size // (seq_len or 1))
        logps, values = [], []
        for start in range(0, len(samples), size):
            mb = {k: v[start : start + size] for k, v in samples.tensors.items()}
            pd_params, new_values, steps = self.epochs.loss.forward(mb)
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


def step_versions(infos: list[SampleInfo], shards: list[Batch]) -> torch.Tensor:
    """``[T, N]`` on the CPU: the policy version that acted at each step of the update's batch (``data``'s layout: each
    shard's envs side by side)."""
    columns = [
        np.repeat(info.step_versions(shard.rewards.shape[0])[:, None], shard.num_envs, axis=1)
        for info, shard in zip(infos, shards, strict=True)
    ]
    return torch.from_numpy(np.concatenate(columns, axis=1))


def leave_out_stale_steps(data: dict[str, torch.Tensor], versions: torch.Tensor, min_version: int | None) -> int:
    """Async: the steps that acted with a version older than ``min_version``, the bound the stream's gather took the
    batches by (``SampleReport.min_version``: ``rollout.max_policy_lag`` behind this update), are made invalid, so they
    take no part in the targets or the loss, and the batch's newer steps train (Sample Factory masks per step too): the
    start of a rollout that new weights reached on its way, a slow worker's. Returns how many transitions were left
    out. A stale prefix changes no kept step's GAE or V-trace target: both run backwards from the batch's end."""
    if min_version is None:
        return 0
    keep = steps_inside(versions, min_version)
    if keep.all():
        return 0
    keep = keep.to(data["valid"].device)
    left_out = int((data["valid"] & ~keep).sum())
    data["valid"] = data["valid"] & keep  # a new tensor: the batch's own may be a read-only object-store view
    return left_out
