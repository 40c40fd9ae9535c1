"""PPO math: GAE and the clipped loss, pure functions on tensors."""

from distrl.ppo.gae import gae
from distrl.ppo.loss import PPOLossCoefs, masked_mean, ppo_loss

__all__ = ["PPOLossCoefs", "gae", "masked_mean", "ppo_loss"]
