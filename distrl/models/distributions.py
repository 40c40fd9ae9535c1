"""Action distributions, kept outside the model graph so every compile backend sees the same graph.

The model emits ``pd_params``: logits ``[B, n]`` for Discrete spaces, the logits of every component
concatenated ``[B, sum(nvec)]`` for MultiDiscrete spaces (independent categoricals: log-probabilities
and entropies add up), or the mean and log standard deviation concatenated ``[B, 2A]`` for Box spaces. Workers sample in
numpy (one
code path for every backend); the learner scores actions in torch.

Action masks (``[B, n]`` bool, True = legal; the ``action_mask`` of board games) apply to
categorical distributions outside the graph, in acting and in the loss alike: an illegal
action's logit becomes ``MASKED_LOGIT``, so its probability is exactly 0 and it adds nothing to
the entropy (a finite value, not -inf: 0 * -inf would make the entropy NaN).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from distrl.models.sampling import LOG_2PI, MASKED_LOGIT, ActionSampling, masked_logits_numpy

__all__ = ["MASKED_LOGIT", "ActionDist", "masked_logits_numpy"]


@dataclass(frozen=True)
class ActionDist(ActionSampling):
    """``ActionSampling`` (the workers' numpy half) with the learner's log-probabilities and entropies in torch."""

    def log_prob_entropy(
        self, pd_params: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of ``actions`` and entropy, both ``[B]``; ``mask [B, n]`` (categorical): legal actions
        (multi_categorical: every component's, concatenated as sb3-contrib's MaskablePPO takes them)."""
        if self.kind == "multi_categorical":
            logps, entropies = [], []
            masks = [None] * len(self.nvec) if mask is None else mask.split(self.nvec, dim=-1)
            for i, (logits, part_mask) in enumerate(zip(pd_params.split(self.nvec, dim=-1), masks)):
                logp, entropy = ActionDist("categorical", logits.shape[-1]).log_prob_entropy(
                    logits, actions[..., i], part_mask
                )
                logps.append(logp)
                entropies.append(entropy)
            return torch.stack(logps, -1).sum(-1), torch.stack(entropies, -1).sum(-1)
        if self.kind == "categorical":
            if mask is not None:
                pd_params = pd_params.masked_fill(~mask.bool(), MASKED_LOGIT)
            log_p = torch.log_softmax(pd_params, dim=-1)
            logp = log_p.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(log_p.exp() * log_p).sum(-1)
            return logp, entropy
        mean, log_std = pd_params.split(self.action_dim, dim=-1)
        z = (actions - mean) * torch.exp(-log_std)
        logp = (-0.5 * z.pow(2) - log_std - 0.5 * LOG_2PI).sum(-1)
        entropy = (log_std + 0.5 * (1.0 + LOG_2PI)).sum(-1)
        return logp, entropy
