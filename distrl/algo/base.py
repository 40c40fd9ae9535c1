"""What an algorithm gives the learner, and what the learner keeps.

The learner (``distrl/learner/learner.py``) owns the device, DDP, the optimiser, the epoch loop (or
the device step) and the state a checkpoint holds. An algorithm owns the math: the targets it
computes once per update from the whole batch (``targets``), the loss of one minibatch (``loss``),
the learning rate at a point of the run, and the epoch plan (how many passes, minibatches of
what size, when to stop early, the gradient clip). Adding one is a folder ``distrl/algo/NAME/``
whose ``__init__.py`` defines ``build(config) -> Algorithm``, and its name in the config's
``ALGORITHMS`` table (``distrl/config/schema.py``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from distrl.algo.schedule import LinearSchedule


@dataclass(frozen=True)
class EpochPlan:
    epochs: int  # passes over the update's samples
    minibatch_size: int  # samples per gradient step, summed over learners
    target_kl: float | None  # stop the passes once a step's approx_kl exceeds this (None: never)
    max_grad_norm: float  # global-norm clipping of every step's gradients


class CurrentOutputs(NamedTuple):
    """The learner's model at the update's start on a batch (one forward pass, made when an algorithm asks)."""

    logp: torch.Tensor  # [T, N] its policy's log-probabilities of the batch's actions
    values: torch.Tensor  # [T, N] its values of the batch's observations (the bootstrap row T not included)


class Targets(NamedTuple):
    advantages: torch.Tensor  # [T, N], zero on invalid steps
    returns: torch.Tensor  # [T, N] value targets, zero on invalid steps
    # [T, N] log-probs the surrogate's ratio is measured from (the trust region's centre); None: the behaviour
    # policy's, recorded at sampling; ppo.proximal: learner centres it on the learner's policy (decoupled PPO).
    proximal_logp: torch.Tensor | None = None
    # [T + 1, N] the values the targets were computed from, where they are not those recorded at sampling; the value
    # loss's clip is then centred on them.
    values: torch.Tensor | None = None
    # [T, N] a weight on each sample's surrogate (an off-policy correction's); None: 1.
    weights: torch.Tensor | None = None


class Algorithm(ABC):
    plan: EpochPlan
    schedule: LinearSchedule  # the learning rate over the run: learner state, continued on a resume (schedule.py)

    @abstractmethod
    def targets(self, data: dict[str, torch.Tensor], current: Callable[[], CurrentOutputs]) -> Targets:
        """Advantages and value targets ``[T, N]`` of a batch (``Batch`` arrays as tensors), without gradients.

        ``current()``: the learner's current model on the batch, its log-probabilities of the batch's actions and
        its values (one forward pass over the batch, made on the first call only: an off-policy correction's).
        """

    @abstractmethod
    def loss(
        self, dist, pd_params: torch.Tensor, values: torch.Tensor, mb: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """The loss of one minibatch and its parts (means over the samples that count).

        ``dist``: the model's ``ActionDist``; ``pd_params [B, P]`` and ``values [B]``: the model's outputs
        in float32; ``mb``: the minibatch's per-step tensors, flat ``[B, ...]`` (``actions``, ``logp``,
        ``values``, ``advantages``, ``returns``, ``mask``, ``action_mask`` where the env has masks).
        The result has ``loss`` (minimised), and ``approx_kl`` where the plan has a ``target_kl``; every
        other key is averaged over the update's steps into its metrics.
        """

    def learning_rate(self, trained_env_steps: int) -> float:
        """The optimiser's learning rate after ``trained_env_steps`` env steps of training."""
        return self.schedule.rate(trained_env_steps)
