"""Generalised Advantage Estimation (Schulman et al. 2016) with NEXT_STEP autoreset masking.

Shapes: ``T`` steps, ``N`` envs. Step ``t`` goes from observation ``t`` to observation
``t + 1``; ``values`` has ``T + 1`` rows so ``values[t + 1]`` is the value of the next
observation. When step ``t`` ends an episode, observation ``t + 1`` is the episode's final
observation (NEXT_STEP autoreset), so a truncated episode bootstraps from ``values[t + 1]``
and a terminated one does not. Step ``t + 1`` is then the env's reset step: it is marked
invalid and gets zero advantage. ``done`` (terminated or truncated) stops accumulation;
only ``terminated`` stops bootstrapping (TorchRL keeps the two apart the same way).
"""

from __future__ import annotations

import torch


def gae(
    rewards: torch.Tensor,  # [T, N]
    values: torch.Tensor,  # [T + 1, N]
    terminated: torch.Tensor,  # [T, N] bool
    truncated: torch.Tensor,  # [T, N] bool
    valid: torch.Tensor,  # [T, N] bool; False on NEXT_STEP reset steps
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and value targets ``[T, N]``; both are zero on invalid steps."""
    steps = rewards.shape[0]
    expected = {
        "values": (steps + 1, *rewards.shape[1:]),
        "terminated": rewards.shape,
        "truncated": rewards.shape,
        "valid": rewards.shape,
    }
    for name, tensor in (("values", values), ("terminated", terminated), ("truncated", truncated), ("valid", valid)):
        if tuple(tensor.shape) != tuple(expected[name]):
            raise ValueError(
                f"gae: {name} has shape {tuple(tensor.shape)}, expected {tuple(expected[name])} "
                f"(rewards {tuple(rewards.shape)})"
            )
    not_terminated = 1.0 - terminated.float()
    not_done = 1.0 - (terminated | truncated).float()
    valid_f = valid.float()
    deltas = (rewards + gamma * values[1:] * not_terminated - values[:-1]) * valid_f
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(steps - 1, -1, -1):
        running = deltas[t] + gamma * gae_lambda * not_done[t] * running
        running = running * valid_f[t]
        advantages[t] = running
    returns = (advantages + values[:-1]) * valid_f
    return advantages, returns
