"""Vector environments for rollout workers."""

from distrl.config.trust import SHIPPED_FACTORIES, check_env_trust, is_factory
from distrl.envs.factory import (
    EnvSpecError,
    make_env,
    make_vec_env,
    probe_spaces,
    resolve_env_id,
    resolve_vectorization,
)
from distrl.envs.guard import EnvFailure
from distrl.envs.kinds import ENV_KINDS, make_run_vec_env, probe_run_spaces

__all__ = [
    "ENV_KINDS",
    "EnvFailure",
    "EnvSpecError",
    "SHIPPED_FACTORIES",
    "check_env_trust",
    "is_factory",
    "make_env",
    "make_run_vec_env",
    "make_vec_env",
    "probe_run_spaces",
    "probe_spaces",
    "resolve_env_id",
    "resolve_vectorization",
]
