"""Build one gymnasium vector env per worker from the env section of the config.

gymnasium 1.x vector envs autoreset in NEXT_STEP mode: the step after a done returns the
reset observation and ignores the action. Rollout workers mask that transition, so every
env built here is checked to use NEXT_STEP.
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Callable
from functools import partial

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from distrl.common.errors import EnvSpecError, describe_error
from distrl.config.schema import EnvConfig
from distrl.envs.guard import GuardedEnv, GuardedVectorEnv
from distrl.envs.wrappers import ActionRepeat


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
        if not isinstance(env, gym.Env):
            name = f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', target)}"
            raise EnvSpecError(f"env.id={name!r}: the factory returned {type(env).__name__}, not a gymnasium.Env")
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


def make_env(cfg: EnvConfig, **kwargs) -> gym.Env:
    """One env built as a worker's copies are (same preprocessing), with extra constructor ``kwargs``
    (e.g. ``render_mode="rgb_array"`` for videos)."""
    target = resolve_env_id(cfg.id)
    atari = _is_atari(cfg.id)
    # ale-py's vector env takes its own kwargs (reward_clipping, ...); the single Atari env is built with its defaults.
    base = {} if atari and cfg.vectorization == "native" else dict(cfg.kwargs)
    return _single_env_thunk(target, {**base, **kwargs}, cfg.action_repeat, atari, cfg.max_consecutive_errors)


def make_vec_env(cfg: EnvConfig, num_threads: int | None = None) -> gym.vector.VectorEnv:
    """The worker's vector env of ``cfg.num_envs_per_worker`` copies (not yet reset).

    ``num_threads``: the CPUs the worker was given. ale-py's vector env otherwise starts a thread per
    env copy: 14 one-CPU workers x 8 envs ran 112 emulator threads on 16 cores, starving the learner.
    An ``env.kwargs`` ``num_threads`` wins."""
    target = resolve_env_id(cfg.id)
    n = cfg.num_envs_per_worker
    if cfg.vectorization == "native":
        assert isinstance(target, str)
        spec = gym.spec(target)
        if spec.vector_entry_point is None:
            raise EnvSpecError(
                f"env.vectorization=native: {cfg.id} has no vector_entry_point; use env.vectorization sync or async"
            )
        kwargs = dict(cfg.kwargs)
        if _is_atari(cfg.id):
            # ale-py's vector env clips rewards by default; distrl clips in the learner (ppo.reward_clip), so episode
            # returns are the game's score, as SB3 and CleanRL report them.
            kwargs.setdefault("reward_clipping", False)
            if num_threads is not None:
                kwargs.setdefault("num_threads", num_threads)
        envs = gym.make_vec(target, num_envs=n, vectorization_mode="vector_entry_point", **kwargs)
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


SUPPORTED_SPACES = ("observations: a Box (vectors, or uint8 images [C, H, W]); actions: Discrete or a 1-d Box. "
                    "A Dict of Box observations can be flattened by gymnasium.wrappers.FlattenObservation in an env "
                    "factory; MultiDiscrete actions are not supported")


def probe_spaces(cfg: EnvConfig) -> tuple[gym.Space, gym.Space]:
    """Single observation and action spaces of the env a worker would build; EnvSpecError if distrl cannot train it."""
    probe = cfg.model_copy(update={"num_envs_per_worker": 1, "vectorization": "sync" if cfg.vectorization == "async" else cfg.vectorization})
    problem = None
    hook, sys.unraisablehook = sys.unraisablehook, lambda *_: None  # a half-built env's __del__ may raise: not news
    try:
        envs = make_vec_env(probe)
    except EnvSpecError:
        raise
    except Exception as exc:  # the env's own constructor refused: its kwargs, a missing dependency, ...
        problem = f"env.id={cfg.id!r} with env.kwargs={dict(cfg.kwargs)}: the env could not be built: {describe_error(exc)}"
    finally:
        gc.collect()
        sys.unraisablehook = hook
    if problem is not None:
        raise EnvSpecError(problem)
    try:
        obs_space, action_space = envs.single_observation_space, envs.single_action_space
    finally:
        envs.close()
    if not isinstance(obs_space, gym.spaces.Box):
        raise EnvSpecError(f"env.id={cfg.id!r}: observation space {obs_space} is not supported ({SUPPORTED_SPACES})")
    if not (isinstance(action_space, gym.spaces.Discrete) or (isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1)):
        raise EnvSpecError(f"env.id={cfg.id!r}: action space {action_space} is not supported ({SUPPORTED_SPACES})")
    return obs_space, action_space


def probe_run(config) -> tuple[gym.Space, gym.Space]:
    """The ``gymnasium`` env kind's probe (``distrl/envs/kinds.py``)."""
    return probe_spaces(config.env)


def make_run_vec_env(config, num_threads: int | None = None) -> gym.vector.VectorEnv:
    """The ``gymnasium`` env kind's vector env (``distrl/envs/kinds.py``)."""
    return make_vec_env(config.env, num_threads)
