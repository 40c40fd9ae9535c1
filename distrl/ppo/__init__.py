"""PPO math: GAE and the clipped loss, pure functions on tensors."""

from distrl.ppo.gae import gae, gae_reference
from distrl.ppo.loss import PPOLossCoefs, masked_mean, ppo_loss

__all__ = ["PPOLossCoefs", "gae", "gae_reference", "masked_mean", "ppo_loss"]
