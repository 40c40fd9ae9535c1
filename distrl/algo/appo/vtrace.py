"""V-trace (Espeholt et al. 2018, IMPALA) with NEXT_STEP autoreset masking, as a pure function of tensors.

Shapes and episode rules as in ``distrl/algo/ppo/gae.py``: ``T`` steps, ``N`` envs, ``values`` with
``T + 1`` rows; ``done`` stops the accumulation, only ``terminated`` stops bootstrapping, invalid
(reset) steps get zero advantage. ``log_rhos`` are log(pi(a|x) / mu(a|x)): the learner's policy over
the behaviour policy that acted. With rho_t = min(rho_bar, ratio) and c_t = lambda * min(c_bar, ratio):

    delta_t = rho_t * (r_t + gamma * V(x_{t+1}) * (1 - terminated_t) - V(x_t))
    A_t     = delta_t + gamma * c_t * (1 - done_t) * A_{t+1}
    v_t     = V(x_t) + A_t

``v_t`` is IMPALA's value target; ``A_t`` (the clipped, lambda-weighted correction) is the advantage
the surrogate takes, as PufferLib computes it: at ratio 1 (on-policy data) with rho_bar, c_bar >= 1
both are exactly GAE's advantages and returns.
"""

from __future__ import annotations

import torch


def vtrace(
    rewards: torch.Tensor,  # [T, N]
    values: torch.Tensor,  # [T + 1, N]
    terminated: torch.Tensor,  # [T, N] bool
    truncated: torch.Tensor,  # [T, N] bool
    valid: torch.Tensor,  # [T, N] bool; False on NEXT_STEP reset steps
    log_rhos: torch.Tensor,  # [T, N] log(pi / mu) of the actions taken
    gamma: float,
    gae_lambda: float,
    rho_bar: float,
    c_bar: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and value targets ``[T, N]``; both are zero on invalid steps."""
    steps = rewards.shape[0]
    for name, tensor, shape in (
        ("values", values, (steps + 1, *rewards.shape[1:])),
        ("terminated", terminated, rewards.shape),
        ("truncated", truncated, rewards.shape),
        ("valid", valid, rewards.shape),
        ("log_rhos", log_rhos, rewards.shape),
    ):
        if tuple(tensor.shape) != tuple(shape):
            raise ValueError(
                f"vtrace: {name} has shape {tuple(tensor.shape)}, expected {tuple(shape)} "
                f"(rewards {tuple(rewards.shape)})"
            )
    valid_f = valid.float()
    ratios = torch.where(valid, log_rhos, 0.0).exp()  # a reset step's action was ignored: no ratio there
    rhos = ratios.clamp(max=rho_bar)
    cs = gae_lambda * ratios.clamp(max=c_bar)
    not_terminated = 1.0 - terminated.float()
    not_done = 1.0 - (terminated | truncated).float()
    deltas = rhos * (rewards + gamma * values[1:] * not_terminated - values[:-1]) * valid_f
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(steps - 1, -1, -1):
        running = deltas[t] + gamma * cs[t] * not_done[t] * running
        running = running * valid_f[t]
        advantages[t] = running
    returns = (advantages + values[:-1]) * valid_f
    return advantages, returns
