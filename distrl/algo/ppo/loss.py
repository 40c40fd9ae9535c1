"""The clipped PPO objective (Schulman et al. 2017) as a pure function of tensors.

All inputs are flat ``[B]`` tensors for one minibatch; ``mask`` selects the samples that
count (NEXT_STEP reset steps and padding are excluded).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PPOLossCoefs:
    clip_coef: float
    vf_coef: float
    ent_coef: float
    clip_vloss: bool
    norm_adv: bool
    huber_delta: float | None = None  # None: the squared error


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def ppo_loss(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    new_values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    mask: torch.Tensor,
    coefs: PPOLossCoefs,
    weights: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Total loss and its parts. ``old_logp``: the log-probs the ratio is measured from (the behaviour policy's,
    or the learner's at the update's start); ``weights``: each sample's weight on the surrogate (None: 1)."""
    mask = mask.float()
    count = mask.sum().clamp(min=1.0)  # once, not once per mean: on a GPU each is a kernel launch per step

    def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # the module's, with the count shared
        return (x * mask).sum() / count

    if coefs.norm_adv:
        mean = masked_mean(advantages, mask)
        var = masked_mean((advantages - mean) ** 2, mask)
        advantages = (advantages - mean) / (var.sqrt() + 1e-8)
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    surrogate = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - coefs.clip_coef, 1 + coefs.clip_coef))
    policy_loss = masked_mean(surrogate if weights is None else weights * surrogate, mask)

    def error(values: torch.Tensor) -> torch.Tensor:  # 0.5 e^2, or Huber's (the same up to delta, then linear)
        if coefs.huber_delta is None:
            return 0.5 * (values - returns) ** 2
        return torch.nn.functional.huber_loss(values, returns, reduction="none", delta=coefs.huber_delta)

    if coefs.clip_vloss:
        clipped = old_values + (new_values - old_values).clamp(-coefs.clip_coef, coefs.clip_coef)
        value_loss = masked_mean(torch.max(error(new_values), error(clipped)), mask)
    else:
        value_loss = masked_mean(error(new_values), mask)
    entropy_mean = masked_mean(entropy, mask)
    loss = policy_loss + coefs.vf_coef * value_loss - coefs.ent_coef * entropy_mean
    with torch.no_grad():
        # k3 estimator of KL(old || new) (Schulman, "Approximating KL divergence").
        approx_kl = masked_mean((ratio - 1) - log_ratio, mask)
        clip_frac = masked_mean(((ratio - 1).abs() > coefs.clip_coef).float(), mask)
    return {
        "loss": loss,
        "loss_policy": policy_loss,
        "loss_value": value_loss,
        "entropy": entropy_mean,
        "approx_kl": approx_kl,
        "clip_frac": clip_frac,
    }
