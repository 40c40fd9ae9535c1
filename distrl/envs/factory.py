"""Build one gymnasium vector env per worker from the env section of the config.

gymnasium 1.x vector envs autoreset in NEXT_STEP mode: the step after a done returns the
reset observation and ignores the action. Rollout workers mask that transition, so every
env built here is checked to use NEXT_STEP.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import partial

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from distrl.config.schema import EnvConfig
from distrl.envs.guard import GuardedEnv, GuardedVectorEnv
from distrl.envs.wrappers import ActionRepeat


class EnvSpecError(Exception):
    """env.id names nothing that can be built."""


def _is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/")


def resolve_env_id(env_id: str) -> str | Callable[..., gym.Env]:
    """A registered gymnasium id, or the callable behind 'package.module:factory'."""
    if ":" in env_id:
        module_name, _, attr = env_id.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise EnvSpecError(f"env.id={env_id!r}: cannot import module {module_name!r} ({exc})") from None
        factory = getattr(module, attr, None)
        if not callable(factory):
            raise EnvSpecError(f"env.id={env_id!r}: module {module_name!r} has no callable {attr!r}")
        return factory
    if _is_atari(env_id):
        import ale_py  # noqa: PLC0415  (optional dependency, registers ALE/ ids)

        gym.register_envs(ale_py)
    try:
        gym.spec(env_id)
    except gym.error.Error as exc:
        raise EnvSpecError(f"env.id={env_id!r}: not a registered gymnasium env ({exc})") from None
    return env_id


def _single_env_thunk(target, kwargs: dict, action_repeat: int, atari: bool, max_errors: int) -> gym.Env:
    if callable(target):
        env = target(**kwargs)
    elif atari:
        # Frame skipping is done by AtariPreprocessing, so the base env must not skip.
        env = gym.make(target, **{"frameskip": 1, **kwargs})
        env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84, grayscale_obs=True)
        env = gym.wrappers.FrameStackObservation(env, 4)
    else:
        env = gym.make(target, **kwargs)
    if action_repeat > 1:
        env = ActionRepeat(env, action_repeat)
    return GuardedEnv(env, max_errors)


def make_vec_env(cfg: EnvConfig) -> gym.vector.VectorEnv:
    """The worker's vector env of ``cfg.num_envs_per_worker`` copies (not yet reset)."""
    target = resolve_env_id(cfg.id)
    n = cfg.num_envs_per_worker
    if cfg.vectorization == "native":
        assert isinstance(target, str)
        spec = gym.spec(target)
        if spec.vector_entry_point is None:
            raise EnvSpecError(
                f"env.vectorization=native: {cfg.id} has no vector_entry_point; use env.vectorization sync or async"
            )
        envs = gym.make_vec(target, num_envs=n, vectorization_mode="vector_entry_point", **cfg.kwargs)
        envs = GuardedVectorEnv(envs, cfg.max_consecutive_errors)
    else:
        thunk = partial(
            _single_env_thunk, target, dict(cfg.kwargs), cfg.action_repeat, _is_atari(cfg.id), cfg.max_consecutive_errors
        )
        vector_cls = gym.vector.SyncVectorEnv if cfg.vectorization == "sync" else gym.vector.AsyncVectorEnv
        envs = vector_cls([thunk] * n, autoreset_mode=AutoresetMode.NEXT_STEP)
    mode = envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if mode != AutoresetMode.NEXT_STEP:
        raise EnvSpecError(f"env.id={cfg.id!r}: vector env autoresets in {mode} mode; distrl needs NEXT_STEP")
    return envs


def probe_spaces(cfg: EnvConfig) -> tuple[gym.Space, gym.Space]:
    """Single observation and action spaces of the env a worker would build."""
    envs = make_vec_env(cfg.model_copy(update={"num_envs_per_worker": 1, "vectorization": "sync" if cfg.vectorization == "async" else cfg.vectorization}))
    try:
        return envs.single_observation_space, envs.single_action_space
    finally:
        envs.close()
