"""PPO as the learner runs it: GAE targets once per update (rewards scaled and clipped first), the clipped loss per
minibatch, CleanRL's epoch plan (``ppo.epochs`` passes, KL early stop) and a linearly annealed learning rate.

``ppo.proximal: learner`` (``auto``'s choice under pipeline async) measures the clipped ratio from the learner's
policy at the update's start instead of the behaviour policy (the decoupled objective of Hilton et al. 2022, "Batch
size-invariance for policy
optimization"; RLlib's APPO does the same with its target network): a batch sampled a few versions back
(``pipeline: overlap``, ``async``) then starts its update unclipped, where measured from the lagged behaviour
policy many of its samples start outside the clip range and teach nothing. The learner's critic gives the values
too (GAE's baseline, the value loss's clip centre), as IMPALA's learner does: the critic that sampled a batch is an
update behind, and its values are what the advantages measure each action against.

``ppo.behaviour_weight_clip`` weights each sample's surrogate by the decoupled objective's importance weight,
pi_learner / pi_behaviour, capped and divided by the batch's mean weight (a constant advantage offset cancels, and a
lagged batch's step stays as large as a fresh one's). Off by default. Unweighted, the objective is not
baseline-invariant: an offset in the advantages moves the policy away from the behaviour policy, an update back, so
a change carries on into the next update: faster on some tasks, and on others an exploration that collapses before
any reward (docs/performance.md has both).
"""

from __future__ import annotations

import torch

from distrl.algo.base import Algorithm, EpochPlan, Targets
from distrl.algo.ppo.gae import gae
from distrl.algo.ppo.loss import PPOLossCoefs, masked_mean, ppo_loss
from distrl.algo.schedule import new_schedule
from distrl.config.schema import Config, PPOConfig


class PPO(Algorithm):
    def __init__(self, cfg: PPOConfig, total_env_steps: int | None, proximal: str = "behaviour"):
        """``proximal``: ``ppo.proximal`` resolved for the run (``Config.proximal``: ``auto`` is decided there)."""
        self.cfg = cfg
        self.proximal = proximal
        self.schedule = new_schedule(cfg, total_env_steps)  # stop.env_steps: where an annealed rate reaches 0
        self.plan = EpochPlan(cfg.epochs, cfg.minibatch_size, cfg.target_kl, cfg.max_grad_norm)
        self.coefs = PPOLossCoefs(
            clip_coef=cfg.clip_coef,
            vf_coef=cfg.vf_coef,
            ent_coef=cfg.ent_coef,
            clip_vloss=cfg.clip_vloss,
            norm_adv=cfg.norm_adv,
            huber_delta=cfg.huber_delta if cfg.value_loss == "huber" else None,
        )

    def scaled_rewards(self, data: dict[str, torch.Tensor]) -> torch.Tensor:
        """The batch's rewards scaled by ``ppo.reward_scale`` and clipped at ``ppo.reward_clip``."""
        rewards = data["rewards"] * self.cfg.reward_scale
        if self.cfg.reward_clip is not None:
            rewards = rewards.clamp(-self.cfg.reward_clip, self.cfg.reward_clip)
        return rewards

    def targets(self, data: dict[str, torch.Tensor], current) -> Targets:
        cfg = self.cfg
        rewards = self.scaled_rewards(data)
        with torch.no_grad():
            values = self.proximal_values(data, current)
            advantages, returns = gae(
                rewards,
                data["values"] if values is None else values,
                data["terminated"],
                data["truncated"],
                data["valid"],
                cfg.gamma,
                cfg.gae_lambda,
            )
            proximal_logp = self.proximal_logp(current)
            weights = None
            if proximal_logp is not None and cfg.behaviour_weight_clip is not None:
                weights = behaviour_weights(proximal_logp, data["logp"], data["valid"], cfg.behaviour_weight_clip)
            return Targets(advantages, returns, proximal_logp, values, weights)

    def proximal_logp(self, current) -> torch.Tensor | None:
        """The log-probs the clipped ratio is measured from, where ``ppo.proximal`` is the learner's policy (None: the
        behaviour policy's, recorded at sampling)."""
        return current().logp if self.proximal == "learner" else None

    def proximal_values(self, data: dict[str, torch.Tensor], current) -> torch.Tensor | None:
        """The values ``[T + 1, N]`` the targets are computed from, where ``ppo.proximal`` is the learner's model: its
        critic's on every valid step (None: those recorded at sampling). A reset step's row (the previous episode's
        final observation, a truncation's bootstrap) and the batch's bootstrap row T keep the recorded ones: the
        learner's forward starts a recurrent state afresh there, where the worker's carried the episode's."""
        if self.proximal != "learner":
            return None
        recorded = data["values"]
        return torch.cat([torch.where(data["valid"], current().values, recorded[:-1]), recorded[-1:]])

    def loss(
        self, dist, pd_params: torch.Tensor, values: torch.Tensor, mb: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        new_logp, entropy = dist.log_prob_entropy(
            pd_params, mb["actions"], mb["action_mask"] if "action_mask" in mb else None
        )
        return ppo_loss(
            new_logp,
            mb["logp"],
            mb["advantages"],
            values,
            mb["values"],
            mb["returns"],
            entropy,
            mb["mask"],
            self.coefs,
            mb.get("weights"),
        )


def behaviour_weights(
    proximal_logp: torch.Tensor, behaviour_logp: torch.Tensor, valid: torch.Tensor, cap: float
) -> torch.Tensor:
    """Each sample's pi_learner / pi_behaviour, capped at ``cap``, over their mean on the batch's valid steps (a batch's
    weights average 1; a fresh batch's are all 1)."""
    weights = (proximal_logp - behaviour_logp).exp().clamp(max=cap)
    return weights / masked_mean(weights, valid.to(weights.dtype)).clamp(min=1e-8)


def build(config: Config) -> PPO:
    return PPO(config.ppo, config.stop.env_steps, config.proximal)
