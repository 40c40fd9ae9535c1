"""What a learner keeps across updates and what a checkpoint holds of it (tensors and plain types only)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from distrl.algo.base import Algorithm
from distrl.algo.schedule import LinearSchedule, continued
from distrl.common.running_mean_std import RunningMeanStd
from distrl.common.spaces import image_part_mask
from distrl.config.schema import Config
from distrl.data.messages import SampleInfo
from distrl.learner.value_norm import ValueNormaliser


@dataclass
class LearnerCounters:
    version: int = 0  # updates done: the version of the weights the learner holds
    trained_env_steps: int = 0  # the learning rate's schedule reads it
    skipped_updates: int = 0  # gradient steps skipped by the non-finite guard, so far


class Normalisers:
    """The running statistics the learner keeps: raw observations (``env.normalize_obs``; a Dict observation's image
    parts are left to the CNN) and discounted returns (``env.normalize_reward``), merged from every worker's, and the
    value targets (``ppo.normalize_value``, ``value_norm.py``), merged from every rank's."""

    def __init__(self, config, model, obs_space):
        self.obs = None
        if config.env.normalize_obs:
            self.obs = RunningMeanStd(model.input_space.shape, skip=image_part_mask(obs_space))
        self.returns = RunningMeanStd(()) if config.env.normalize_reward else None
        self.values = ValueNormaliser() if config.ppo.normalize_value else None

    def merge_obs(self, infos: list[SampleInfo]) -> None:
        if self.obs is not None:
            for info in infos:
                if info.obs_stats is not None:
                    self.obs.merge(*info.obs_stats)

    def merge_returns(self, infos: list[SampleInfo]) -> None:
        for info in infos:
            if info.return_stats is not None:
                self.returns.merge(*info.return_stats)


def _rms_tensors(rms: RunningMeanStd | None) -> dict | None:
    """A running statistic's state as tensors (a checkpoint holds tensors and plain types only)."""
    return None if rms is None else {k: torch.as_tensor(v) for k, v in rms.state().items()}


def learner_state(
    model,
    optimizer,
    normalisers: Normalisers,
    generator: torch.Generator,
    counters: LearnerCounters,
    schedule: LinearSchedule,
) -> dict:
    """Everything a checkpoint needs to resume learning exactly (tests/test_checkpoint.py holds each field to an
    uninterrupted run's)."""
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "obs_norm": _rms_tensors(normalisers.obs),
        "return_norm": _rms_tensors(normalisers.returns),
        "value_norm": _rms_tensors(None if normalisers.values is None else normalisers.values.stats),
        "generator": generator.get_state(),
        "torch_rng": torch.get_rng_state(),
        "version": counters.version,
        "trained_env_steps": counters.trained_env_steps,
        "skipped_updates": counters.skipped_updates,
        "lr_schedule": schedule.state(),
    }


def load_learner_state(
    state: dict,
    model,
    optimizer,
    normalisers: Normalisers,
    generator: torch.Generator,
    counters: LearnerCounters,
    algorithm: Algorithm,
    config: Config,
    device: torch.device,
) -> None:
    """Take ``state``; the learning rate's schedule goes on under this run's ``config``
    (``distrl/algo/schedule.py``)."""
    model.load_state_dict(state["model"])
    lr, capturable = optimizer.param_groups[0]["lr"], optimizer.param_groups[0]["capturable"]
    optimizer.load_state_dict(state["optimizer"])
    for group in optimizer.param_groups:  # this learner's step kind decides these, not the saver's
        group["capturable"] = capturable
        group["lr"] = (
            torch.tensor(float(group["lr"]), device=device) if isinstance(lr, torch.Tensor) else float(group["lr"])
        )
    if normalisers.obs is not None and state.get("obs_norm") is not None:
        normalisers.obs = RunningMeanStd.from_state(state["obs_norm"])
    if normalisers.returns is not None and state.get("return_norm") is not None:
        normalisers.returns = RunningMeanStd.from_state(state["return_norm"])
    if normalisers.values is not None and state.get("value_norm") is not None:
        normalisers.values = ValueNormaliser.from_state(state["value_norm"])
    generator.set_state(state["generator"])
    torch.set_rng_state(state["torch_rng"])
    counters.version = int(state["version"])
    counters.trained_env_steps = int(state["trained_env_steps"])
    counters.skipped_updates = int(state["skipped_updates"])
    last_lr = float(optimizer.param_groups[0]["lr"])
    algorithm.schedule = continued(
        config.ppo, config.stop.env_steps, state.get("lr_schedule"), counters.trained_env_steps, last_lr
    )[0]
