"""Policy backends for rollout workers."""

from distrl.compile.policy import EagerPolicy, InferencePolicy, load_state_dict_numpy

__all__ = ["EagerPolicy", "InferencePolicy", "load_state_dict_numpy"]
