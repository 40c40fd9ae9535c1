"""Learner: the actor that runs updates on batches from rollout workers, optionally one of several DDP ranks.

A thin shell over its parts, each in its own module:

- ``hardware.py``: the device, CPU threads and cores, mixed precision;
- ``update.py``: one update (statistics, the staleness bound per step, the algorithm's targets, the report);
- ``epochs.py``, ``step.py``: the plain loop over the epochs, and the device step;
- ``step_rules.py``, ``trial.py``: which step, kernels and precision, tried on the first update and checked;
- ``distributed.py``: DDP between ranks;
- ``state.py``: the counters, the running statistics and what a checkpoint holds;
- ``refs.py``: the calls by object ref (this rank's shards fetched, batches lost with their node left out).

The algorithm (``distrl/algo/``, ``config.algo``) gives the targets, the minibatch loss, the learning rate and the
epoch plan. A plain class: tests drive it in-process, the driver wraps it with ``ray.remote``. With
``world_size > 1`` rank r trains on shard r (an equal slice of the envs) of every worker's batch. Under Ray each rank
fetches only its own shards (``update_refs``); in-process, ``update`` takes whole batches.
"""

from __future__ import annotations

import gymnasium as gym
import torch
from torch import nn

from distrl.algo import build_algorithm
from distrl.common.hardware import cpu_bf16, has_convolutions, has_wide_layers
from distrl.common.wire import from_wire, to_wire
from distrl.config.schema import Config
from distrl.data.batch import Batch
from distrl.data.messages import SampleInfo, UpdateResult, Weights
from distrl.learner import distributed
from distrl.learner.epochs import LoopEpochs
from distrl.learner.hardware import LearnerHardware, choose_memory_format, heads_outside_autocast, resolve_device
from distrl.learner.optimizer import Adam
from distrl.learner.refs import UpdatesByRef
from distrl.learner.state import LearnerCounters, Normalisers, learner_state, load_learner_state
from distrl.learner.step import DeviceStep
from distrl.learner.step_rules import choose_kernels, choose_precision, choose_step
from distrl.learner.trial import TrialEpochs, Way
from distrl.learner.update import MinibatchLoss, Update
from distrl.models import build_model
from distrl.models.user import encoder_parameters

__all__ = ["Learner", "resolve_device"]


class _TrainForward(nn.Module):
    """Routes training forwards through one ``forward`` so DDP sees (and syncs) every call."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, obs, h=None, c=None, starts=None):
        if starts is None:
            return self.model(obs)
        return self.model.forward_sequence(obs, h, c, starts)


class Learner(UpdatesByRef):
    def __init__(
        self,
        config: Config,
        obs_space: gym.Space,
        action_space: gym.Space,
        rank: int = 0,
        world_size: int = 1,
        policy_index: int = 0,
        hardware: LearnerHardware | None = None,
    ):
        """``policy_index``: which of several trained policies this learner trains (``agents.policies``; its initial
        weights are seeded by it, as the workers' copy is); ``hardware``: the process's, where several learners share
        it (None: this learner's own)."""
        self.config = config
        self.rank, self.world_size = rank, world_size
        self.hardware = hardware or LearnerHardware(config, rank, world_size)
        device = self.hardware.device
        torch.manual_seed(config.seed + policy_index)
        self.model = build_model(obs_space, action_space, config.model).to(device)
        # An onnxrt worker checks each sync against eager's answers sent with the weights: it needs no torch for it.
        self.check_answers = _check_answers(config, self.model) if rank == 0 else None
        # Before the optimiser: Adam's moments take each parameter's layout (a convolution's input follows its weight).
        self.memory_format, self.memory_format_reason = choose_memory_format(
            config.learner.memory_format, self.model, device
        )
        if self.memory_format == torch.channels_last:
            self.model.to(memory_format=torch.channels_last)
        self.algorithm = build_algorithm(config)
        has_conv = has_convolutions(self.model)
        self.hardware.use_threads(has_conv)
        step_kind, step_reason = choose_step(config, device.type, world_size)
        kernels, self.kernels_reason = choose_kernels(config, step_kind, device.type, world_size, has_conv)
        precisions, self.precision_reason = choose_precision(
            config, device.type, world_size, has_conv, cpu_bf16(), has_wide_layers(self.model)
        )
        if set(precisions) - {"fp32"}:
            heads_outside_autocast(self.model)
        captured = step_kind == "device" and device.type == "cuda"
        # The fused kernel updates every parameter in one call (CPU and CUDA): fewer, larger ops per step. A captured
        # step keeps Adam's step counts on the device and reads the learning rate from a tensor the host refills.
        lr = self.algorithm.learning_rate(0)
        lr = torch.tensor(lr, device=device) if captured else lr
        self.optimizer = Adam(self.model.parameters(), lr=lr, eps=1e-5, fused=True, capturable=captured)
        self.normalisers = Normalisers(config, self.model, obs_space)
        self.counters = LearnerCounters()
        self.generator = torch.Generator().manual_seed(config.seed + rank)
        self.loss = MinibatchLoss(self.model, _TrainForward(self.model), self.algorithm, device.type)  # fp32

        def loop(loss, loss_fn) -> LoopEpochs:
            return LoopEpochs(
                loss, loss_fn, self.model, self.optimizer, self.hardware.scaler, self.algorithm.plan, device, world_size
            )

        reference = loop(self.loss, self.loss.terms)  # the plain eager fp32 loop, which every other way is held to
        ways = []
        for kernel in kernels:
            for precision in precisions:
                loss = self.loss if precision == "fp32" else self.loss.with_precision(precision)
                loss_fn = loss.terms if kernel == "eager" else self._compile(loss.terms)
                way_loop = reference if (kernel, precision) == ("eager", "fp32") else loop(loss, loss_fn)
                runner = (
                    way_loop
                    if step_kind == "loop"
                    else DeviceStep(loss, loss_fn, self.model, self.optimizer, self.algorithm.plan, device, captured)
                )
                ways.append(Way(kernel, precision, runner, way_loop))
        self.epochs = TrialEpochs(reference, ways, step_reason, config.learner.step_strict, try_first=world_size == 1)
        self.updates = Update(
            config, self.model, self.algorithm, self.optimizer, self.epochs, self.hardware, world_size, self.normalisers
        )

    def _compile(self, loss_terms):
        """A way's minibatch loss compiled by inductor (forward + loss; AOTAutograd compiles its backward too)."""
        cfg = self.config.learner.compile
        mode = None if cfg.mode == "default" else cfg.mode
        if cfg.critic_mode is None:
            return torch.compile(loss_terms, mode=mode, dynamic=False)
        # Separate modes: compile the towers one by one (RL-Games' actor/critic split).
        # Module.compile works in place, so state_dict keys (and weight syncs) are unchanged.
        self.model.actor_encoder.compile(mode=mode, dynamic=False)
        critic_mode = None if cfg.critic_mode == "default" else cfg.critic_mode
        self.model.critic_encoder.compile(mode=critic_mode, dynamic=False)
        return loss_terms

    # --- what the parts hold, by the names tests and tools read --------------------------
    device = property(lambda self: self.hardware.device)
    scaler = property(lambda self: self.hardware.scaler)
    obs_rms = property(lambda self: self.normalisers.obs)
    return_rms = property(lambda self: self.normalisers.returns)
    trained_env_steps = property(lambda self: self.counters.trained_env_steps)
    skipped_updates = property(lambda self: self.counters.skipped_updates)
    step_kind = property(lambda self: self.epochs.kind)
    step_reason = property(lambda self: self.epochs.reason)
    step_check = property(lambda self: self.epochs.check)
    device_step = property(lambda self: self.epochs.step)

    @property
    def version(self) -> int:
        return self.counters.version

    @version.setter
    def version(self, value: int) -> None:
        self.counters.version = value

    # --- distributed -----------------------------------------------------------------
    rendezvous_address = staticmethod(distributed.rendezvous_address)

    def init_distributed(self, address: str, port: int) -> None:
        distributed.start_group(self.device, address, port, self.rank, self.world_size)
        self.loss.set_forward(distributed.wrap(self.loss.train_forward))

    def policy_version(self) -> int:
        """Updates done so far: the version of the weights ``get_weights`` returns."""
        return self.counters.version

    def device_name(self) -> str:
        return str(self.device)

    def describe(self) -> dict:
        """The device and the step in use, with why (for the start-up summary and ``summary.json``); ``step_check``:
        how the device step's first update compared with the loop's (None before it, or without the device step)."""
        check = self.epochs.check
        layout = "channels_last" if self.memory_format == torch.channels_last else "contiguous"
        return {
            "device": str(self.device),
            "step": self.epochs.kind,
            "step_reason": self.epochs.reason,
            "step_check": check.as_dict() if check is not None else None,
            **self.epochs.describe(),
            "kernels_reason": self.kernels_reason,
            "precision_reason": self.precision_reason,
            "memory_format": layout,
            "memory_format_reason": self.memory_format_reason,
            "threads": self.hardware.threads,
            "threads_reason": self.hardware.threads_reason,
            "encoder_parameters": encoder_parameters(self.model) if self.config.model.encoder else None,
        }

    def placement(self) -> dict:
        """Where this actor runs (only meaningful inside a Ray actor)."""
        import ray

        ctx = ray.get_runtime_context()
        return {
            "node_id": ctx.get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "gpu_ids": list(ctx.get_accelerator_ids().get("GPU", [])),
            "device": str(self.device),
            "placement_group": ctx.get_placement_group_id(),
            "cores": self.hardware.cores.cores or None,
        }

    # --- weights and state -------------------------------------------------------------
    def get_weights(self) -> Weights:
        # contiguous: the workers' policies take plain C-ordered arrays (a channels-last weight is not one)
        model = {k: v.detach().cpu().contiguous().numpy() for k, v in self.model.state_dict().items()}
        return Weights(
            version=self.counters.version,
            model=model,
            obs_norm=self.obs_rms.state() if self.obs_rms is not None else None,
            check=self.check_answers(model) if self.check_answers is not None else None,
        )

    def state(self) -> dict:
        """Everything a checkpoint needs to resume learning exactly (tensors and plain types only)."""
        return learner_state(
            self.model, self.optimizer, self.normalisers, self.generator, self.counters, self.algorithm.schedule
        )

    def snapshot(self) -> dict:
        """``state`` as it crosses to the driver after each update: its tensors as numpy arrays, which Ray stores out
        of band (``distrl/common/wire.py``)."""
        return to_wire(self.state())

    def load_state(self, state: dict) -> None:
        """Take ``state`` (``state`` or ``snapshot``'s)."""
        load_learner_state(
            from_wire(state),
            self.model,
            self.optimizer,
            self.normalisers,
            self.generator,
            self.counters,
            self.algorithm,
            self.config,
            self.device,
        )

    # --- the update ----------------------------------------------------------------------
    def update(self, *samples: tuple[SampleInfo, Batch], min_version: int | None = None) -> UpdateResult:
        """One update on this rank's shard of each worker's ``(info, batch)`` (``RolloutWorker.sample``); steps that
        acted with a policy version older than ``min_version`` are left out (None: every step trains)."""
        return self._update(
            [info for info, _ in samples],
            [batch.split(self.world_size)[self.rank] for _, batch in samples],
            min_version,
        )

    def _update(self, infos: list[SampleInfo], shards: list[Batch], min_version: int | None) -> UpdateResult:
        checking = self.epochs.checking  # the first update, where the learner's ways are tried and checked
        result = self.updates(infos, shards, min_version, self.counters, self.generator)
        if checking:  # the driver says how it compared, and keeps it for summary.json
            result.learner_step = self.describe()
        return result

    def close(self) -> None:
        distributed.leave()


def _check_answers(config: Config, model: nn.Module):
    """What computes eager's answers for the check an ``onnxrt`` worker runs after each weight sync
    (``distrl/compile/check_answers.py``), on the inputs the driver's build check used; None where no worker needs them.
    Built from the model before anything compiles it.

    Not for a convolutional model: its float64 forward is slow on a CPU, and the learner's every update would wait
    for it. Such a worker checks against its own eager model, loading torch at its first sync."""
    cfg = config.rollout.compile
    if cfg.backend != "onnxrt" or not cfg.verify_every_sync or config.agents.several or has_convolutions(model):
        return None
    from distrl.compile.check import CheckAnswers
    from distrl.data.memory import example_inputs

    return CheckAnswers(model, example_inputs(model, config.env.slots, config.seed))
