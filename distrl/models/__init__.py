"""Actor-critic models and action distributions."""

from distrl.models.actor_critic import ActorCritic, build_model
from distrl.models.distributions import ActionDist

__all__ = ["ActionDist", "ActorCritic", "build_model"]
