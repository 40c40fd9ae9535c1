"""APPO: PPO's clipped surrogate and value loss on V-trace targets, for batches a few policy versions old.

The asynchronous loop trains on batches sampled by policies up to ``rollout.max_policy_lag`` versions
behind the learner. V-trace corrects the advantages and value targets for that: each step's
importance ratio pi/mu (the learner's policy over the behaviour policy that acted, from the
log-probabilities recorded at sampling) is clipped at ``appo.rho_bar`` for the TD error and
``appo.c_bar`` for how far the correction reaches back. The ratios come from one forward pass of the
learner's current model over the batch per update; the values bootstrapped from are the learner's critic's with
``ppo.proximal: learner`` (as IMPALA's), else those recorded at sampling time (a few versions old at most).
The surrogate's ratio is measured from ``ppo.proximal``'s policy, as PPO's is; with ``learner`` (decoupled PPO)
the importance weight pi/mu that the decoupled objective puts on the advantage is V-trace's clipped rho, already
inside the advantage. Every other setting, loss and schedule is PPO's (the ``ppo`` section).
"""

from __future__ import annotations

import torch

from distrl.algo.appo.vtrace import vtrace
from distrl.algo.base import Targets
from distrl.algo.ppo.algorithm import PPO
from distrl.config.schema import APPOConfig, Config, PPOConfig


class APPO(PPO):
    def __init__(self, cfg: PPOConfig, appo: APPOConfig, total_env_steps: int | None, proximal: str = "behaviour"):
        super().__init__(cfg, total_env_steps, proximal)
        self.appo = appo

    def targets(self, data: dict[str, torch.Tensor], current) -> Targets:
        cfg = self.cfg
        rewards = self.scaled_rewards(data)
        with torch.no_grad():
            logp, values = current().logp, self.proximal_values(data, current)
            advantages, returns = vtrace(
                rewards,
                data["values"] if values is None else values,
                data["terminated"],
                data["truncated"],
                data["valid"],
                logp - data["logp"],
                cfg.gamma,
                cfg.gae_lambda,
                self.appo.rho_bar,
                self.appo.c_bar,
            )
            return Targets(advantages, returns, logp if self.proximal == "learner" else None, values)


def build(config: Config) -> APPO:
    return APPO(config.ppo, config.appo, config.stop.env_steps, config.proximal)
