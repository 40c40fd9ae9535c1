"""PPO (Schulman et al. 2017): GAE advantages and the clipped surrogate, pure functions on tensors (``gae.py``,
``loss.py``), and the algorithm the learner runs (``algorithm.py``)."""

from distrl.algo.ppo.algorithm import PPO, build
from distrl.algo.ppo.gae import gae
from distrl.algo.ppo.loss import PPOLossCoefs, masked_mean, ppo_loss

__all__ = ["PPO", "PPOLossCoefs", "build", "gae", "masked_mean", "ppo_loss"]
