"""Vector environments for rollout workers."""

from distrl.envs.factory import EnvSpecError, make_vec_env, probe_spaces, resolve_env_id

__all__ = ["EnvSpecError", "make_vec_env", "probe_spaces", "resolve_env_id"]
