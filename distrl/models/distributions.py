"""Action distributions, kept outside the model graph so every compile backend sees the same graph.

The model emits ``pd_params``: logits ``[B, n]`` for Discrete spaces, or the mean and log
standard deviation concatenated ``[B, 2A]`` for Box spaces. Workers sample in numpy (one
code path for every backend); the learner scores actions in torch.

Action masks (``[B, n]`` bool, True = legal; the ``action_mask`` of board games) apply to
categorical distributions outside the graph, in acting and in the loss alike: an illegal
action's logit becomes ``MASKED_LOGIT``, so its probability is exactly 0 and it adds nothing to
the entropy (a finite value, not -inf: 0 * -inf would make the entropy NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

_LOG_2PI = math.log(2 * math.pi)
MASKED_LOGIT = -1e9  # exp(MASKED_LOGIT - max) underflows to 0 in float32


def masked_logits_numpy(logits: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """``logits [B, n]`` with illegal actions (``mask`` False) set to ``MASKED_LOGIT``."""
    return logits if mask is None else np.where(mask, logits, np.float32(MASKED_LOGIT))


@dataclass(frozen=True)
class ActionDist:
    kind: str  # "categorical" | "gaussian"
    action_dim: int  # number of actions (categorical) or action components (gaussian)

    @staticmethod
    def for_space(space: gym.Space) -> ActionDist:
        if isinstance(space, gym.spaces.Discrete):
            return ActionDist("categorical", int(space.n))
        if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
            return ActionDist("gaussian", int(space.shape[0]))
        raise ValueError(f"action space {space} is not supported (Discrete or 1-d Box)")

    @property
    def action_shape(self) -> tuple[int, ...]:
        return () if self.kind == "categorical" else (self.action_dim,)

    @property
    def action_dtype(self):
        return np.int64 if self.kind == "categorical" else np.float32

    # --- torch, for the learner -------------------------------------------------------
    def log_prob_entropy(self, pd_params: torch.Tensor, actions: torch.Tensor,
                         mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """Log-probability of ``actions`` and entropy, both ``[B]``; ``mask [B, n]`` (categorical): legal actions."""
        if self.kind == "categorical":
            if mask is not None:
                pd_params = pd_params.masked_fill(~mask.bool(), MASKED_LOGIT)
            log_p = torch.log_softmax(pd_params, dim=-1)
            logp = log_p.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(log_p.exp() * log_p).sum(-1)
            return logp, entropy
        mean, log_std = pd_params.split(self.action_dim, dim=-1)
        z = (actions - mean) * torch.exp(-log_std)
        logp = (-0.5 * z.pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)
        entropy = (log_std + 0.5 * (1.0 + _LOG_2PI)).sum(-1)
        return logp, entropy

    # --- numpy, for rollout workers ----------------------------------------------------
    def sample_numpy(self, pd_params: np.ndarray, rng: np.random.Generator,
                     mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """Sample actions and their log-probabilities from ``pd_params [B, P]``; ``mask [B, n]``: legal actions."""
        if self.kind == "categorical":
            pd_params = masked_logits_numpy(pd_params, mask)
            # Inverse CDF on unnormalised probabilities: fewer numpy calls than Gumbel-max.
            shifted = pd_params - pd_params.max(axis=-1, keepdims=True)
            cdf = np.exp(shifted).cumsum(axis=-1)
            total = cdf[:, -1]
            # u in (0, 1]: an action of probability 0 can never be drawn.
            u = (1.0 - rng.random(len(pd_params), dtype=np.float32)) * total
            actions = (cdf < u[:, None]).sum(axis=-1)
            logp = shifted[np.arange(len(pd_params)), actions] - np.log(total)
            return actions, logp.astype(np.float32)
        mean, log_std = pd_params[:, : self.action_dim], pd_params[:, self.action_dim :]
        noise = rng.standard_normal(mean.shape, dtype=np.float32)
        actions = mean + np.exp(log_std) * noise
        logp = (-0.5 * noise**2 - log_std - 0.5 * _LOG_2PI).sum(-1)
        return actions.astype(np.float32), logp.astype(np.float32)

    def greedy_numpy(self, pd_params: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        if self.kind == "categorical":
            return np.argmax(masked_logits_numpy(pd_params, mask), axis=-1)
        return pd_params[:, : self.action_dim].astype(np.float32)
