"""The numpy half of an action distribution: what a rollout worker needs to act, importable without torch.

``ActionSampling`` reads the policy's ``pd_params`` (see ``distributions.py`` for their layout), samples actions and
their log-probabilities, and turns them into the env's actions; ``ActionDist`` adds the learner's torch half. A
worker that acts through ONNX Runtime never loads torch (``distrl/compile/shipped.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

LOG_2PI = math.log(2 * math.pi)
MASKED_LOGIT = -1e9  # exp(MASKED_LOGIT - max) underflows to 0 in float32


def masked_logits_numpy(logits: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """``logits [B, n]`` with illegal actions (``mask`` False) set to ``MASKED_LOGIT``."""
    return logits if mask is None else np.where(mask, logits, np.float32(MASKED_LOGIT))


def _sample_categorical(logits: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Actions and log-probabilities from ``logits [B, n]`` (inverse CDF on unnormalised probabilities: fewer numpy
    calls than Gumbel-max)."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    cdf = np.exp(shifted).cumsum(axis=-1)
    total = cdf[:, -1]
    # u in (0, 1]: an action of probability 0 can never be drawn.
    u = (1.0 - rng.random(len(logits), dtype=np.float32)) * total
    actions = (cdf < u[:, None]).sum(axis=-1)
    return actions, shifted[np.arange(len(logits)), actions] - np.log(total)


@dataclass(frozen=True)
class ActionSampling:
    kind: str  # "categorical" | "multi_categorical" | "gaussian"
    action_dim: int  # width of pd_params' action part: actions (categorical), sum(nvec), or action components
    nvec: tuple[int, ...] = ()  # multi_categorical: each component's number of actions

    @classmethod
    def for_space(cls, space: gym.Space):
        if isinstance(space, gym.spaces.Discrete):
            return cls("categorical", int(space.n))
        if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
            nvec = tuple(int(n) for n in space.nvec)
            return cls("multi_categorical", sum(nvec), nvec)
        if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
            return cls("gaussian", int(space.shape[0]))
        raise ValueError(f"action space {space} is not supported (Discrete, 1-d MultiDiscrete or 1-d Box)")

    @property
    def action_shape(self) -> tuple[int, ...]:
        return {"categorical": (), "multi_categorical": (len(self.nvec),)}.get(self.kind, (self.action_dim,))

    @property
    def action_dtype(self):
        return np.float32 if self.kind == "gaussian" else np.int64

    # --- numpy, for rollout workers ----------------------------------------------------
    def sample_numpy(
        self, pd_params: np.ndarray, rng: np.random.Generator, mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Sample actions and their log-probabilities from ``pd_params [B, P]``; ``mask [B, n]``: legal actions."""
        if self.kind == "categorical":
            actions, logp = _sample_categorical(masked_logits_numpy(pd_params, mask), rng)
            return actions, logp.astype(np.float32)
        if self.kind == "multi_categorical":
            logits = masked_logits_numpy(pd_params, mask)
            bounds = np.cumsum((0, *self.nvec))
            drawn = [_sample_categorical(logits[:, a:b], rng) for a, b in zip(bounds[:-1], bounds[1:])]
            actions = np.stack([a for a, _ in drawn], axis=-1)
            return actions, np.sum([lp for _, lp in drawn], axis=0).astype(np.float32)
        mean, log_std = pd_params[:, : self.action_dim], pd_params[:, self.action_dim :]
        noise = rng.standard_normal(mean.shape, dtype=np.float32)
        actions = mean + np.exp(log_std) * noise
        logp = (-0.5 * noise**2 - log_std - 0.5 * LOG_2PI).sum(-1)
        return actions.astype(np.float32), logp.astype(np.float32)

    def env_actions(self, actions: np.ndarray, space: gym.Space) -> np.ndarray:
        """The actions the env takes: Gaussian samples clipped to the Box (the batch keeps them unclipped, so their
        log-probabilities stay exact), MultiDiscrete components shifted by the space's start."""
        if self.kind == "gaussian":
            return np.clip(actions, space.low, space.high)
        if self.kind == "multi_categorical":
            return actions + space.start
        return actions

    def greedy_numpy(self, pd_params: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        if self.kind == "categorical":
            return np.argmax(masked_logits_numpy(pd_params, mask), axis=-1)
        if self.kind == "multi_categorical":
            logits, bounds = masked_logits_numpy(pd_params, mask), np.cumsum((0, *self.nvec))
            return np.stack([np.argmax(logits[:, a:b], axis=-1) for a, b in zip(bounds[:-1], bounds[1:])], axis=-1)
        return pd_params[:, : self.action_dim].astype(np.float32)
