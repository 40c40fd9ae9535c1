"""Vector environments for rollout workers."""

from distrl.envs.guard import EnvFailure
from distrl.envs.factory import EnvSpecError, make_vec_env, probe_spaces, resolve_env_id

__all__ = ["EnvFailure", "EnvSpecError", "make_vec_env", "probe_spaces", "resolve_env_id"]
