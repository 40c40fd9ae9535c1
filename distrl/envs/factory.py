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

from distrl.common.errors import EnvSpecError, describe_error, install_hint
from distrl.common.imports import import_named_module
from distrl.common.spaces import is_structured
from distrl.config.schema import EnvConfig
from distrl.envs.guard import GuardedEnv, GuardedVectorEnv
from distrl.envs.wrappers import ActionRepeat


def is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/")


def _register_minatar(module) -> None:
    if not any(name.startswith("MinAtar/") for name in gym.registry):  # registering twice warns of overriding
        module.register_envs()


# Optional packages whose env ids are names, registered by importing the package: the id's prefix -> the module and
# how it registers them.
REGISTERING_PACKAGES = {
    "ALE/": ("ale_py", gym.register_envs),
    "MinAtar/": ("minatar.gym", _register_minatar),  # the miniature Atari suite: 10 x 10 bool images, channels last
}


def _import_env_module(env_id: str, module_name: str):
    return import_named_module(module_name, f"env.id={env_id!r}", EnvSpecError)


def resolve_env_id(env_id: str) -> str | Callable[..., gym.Env]:
    """A registered gymnasium id; the callable behind 'package.module:factory'; or, for gymnasium's own
    'module:EnvName-v0' form, the id that importing the module registered."""
    if ":" in env_id:
        module_name, _, attr = env_id.partition(":")
        module = _import_env_module(env_id, module_name)
        factory = getattr(module, attr, None)
        if callable(factory):
            return factory
        if attr in gym.registry:  # gymnasium.make("module:EnvName-v0"): the import registered the id
            return attr
        raise EnvSpecError(
            f"env.id={env_id!r}: module {module_name!r} has no callable {attr!r}, and importing it "
            f"registered no gymnasium id {attr!r}"
        )
    prefix = env_id.partition("/")[0] + "/"
    if prefix in REGISTERING_PACKAGES:
        package, register = REGISTERING_PACKAGES[prefix]
        try:
            module = importlib.import_module(package)
        except ImportError:
            top = package.partition(".")[0]
            raise EnvSpecError(f"env.id={env_id!r}: needs {top}{install_hint(top)}") from None
        if env_id not in gym.registry:
            register(module)
    try:
        gym.spec(env_id)
    except gym.error.Error as exc:
        raise EnvSpecError(f"env.id={env_id!r}: not a registered gymnasium env ({exc})") from None
    return env_id


def resolve_vectorization(cfg: EnvConfig) -> tuple[str, str | None]:
    """The vector env a worker builds, and why when ``env.vectorization: auto`` chose ``sync``: ``native`` (the
    env's own vector env, e.g. CartPole's or ale-py's) where the env has one and nothing rules it out, else
    ``sync``."""
    if cfg.vectorization != "auto":
        return cfg.vectorization, None
    target = resolve_env_id(cfg.id)
    if callable(target):
        return "sync", "an env factory has no native vector env"
    if cfg.action_repeat > 1:
        return "sync", f"env.action_repeat={cfg.action_repeat} repeats inside each env copy"
    if gym.spec(target).vector_entry_point is None:
        return "sync", f"{target} has no native vector env"
    return "native", None


def describe_vectorization(cfg: EnvConfig) -> str:
    """The vector env a worker builds, in the words the start-up summary and ``distrl diagnose`` both use (what
    ``auto`` chose, and why)."""
    if cfg.vectorization != "auto":
        return cfg.vectorization
    mode, why = resolve_vectorization(cfg)
    return f"{mode}, chosen by auto" + (f": {why}" if why else "")


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
    structured = env.observation_space if is_structured(env.observation_space) else None
    if (
        structured is not None
    ):  # one flat vector through the pipeline; the model reads the parts back (common/spaces.py)
        env = gym.wrappers.FlattenObservation(env)
    return GuardedEnv(env, max_errors, structured)


def make_env(cfg: EnvConfig, **kwargs) -> gym.Env:
    """One env built as a worker's copies are (same preprocessing), with extra constructor ``kwargs``
    (e.g. ``render_mode="rgb_array"`` for videos)."""
    target = resolve_env_id(cfg.id)
    atari = is_atari(cfg.id)
    # ale-py's vector env takes its own kwargs (reward_clipping, ...); the single Atari env is built with its defaults.
    base = {} if atari and resolve_vectorization(cfg)[0] == "native" else dict(cfg.kwargs)
    return _single_env_thunk(target, {**base, **kwargs}, cfg.action_repeat, atari, cfg.max_consecutive_errors)


def make_vec_env(cfg: EnvConfig, num_threads: int | None = None, ready: int = 0) -> gym.vector.VectorEnv:
    """The worker's vector env of ``cfg.num_envs_per_worker`` copies (not yet reset); ``ready``: ale-py's vector env
    returns the first this many copies whose step is done (its ``batch_size``; ``rollout.ready_envs``).

    ``num_threads``: the CPUs the worker was given. ale-py's vector env otherwise starts a thread per
    env copy: 14 one-CPU workers x 8 envs ran 112 emulator threads on 16 cores, starving the learner.
    An ``env.kwargs`` ``num_threads`` wins."""
    target = resolve_env_id(cfg.id)
    n = cfg.num_envs_per_worker
    vectorization, _ = resolve_vectorization(cfg)
    if vectorization == "native":
        if callable(target):
            raise EnvSpecError(
                f"env.vectorization=native: an env factory ('{cfg.id}') has no native vector env; use "
                "auto, sync or async"
            )
        spec = gym.spec(target)
        if spec.vector_entry_point is None:
            raise EnvSpecError(
                f"env.vectorization=native: {cfg.id} has no vector_entry_point; use env.vectorization auto, sync or "
                "async"
            )
        kwargs = dict(cfg.kwargs)
        if is_atari(cfg.id):
            # ale-py's vector env clips rewards by default; distrl clips in the learner (ppo.reward_clip), so episode
            # returns are the game's score, as SB3 and CleanRL report them.
            kwargs.setdefault("reward_clipping", False)
            if num_threads is not None:
                kwargs.setdefault("num_threads", num_threads)
            if ready:
                kwargs["batch_size"] = ready
        envs = gym.make_vec(target, num_envs=n, vectorization_mode="vector_entry_point", **kwargs)
        if is_structured(envs.single_observation_space):
            envs.close()
            raise EnvSpecError(
                f"env.vectorization=native: {cfg.id}'s {type(envs.single_observation_space).__name__} "
                "observations are flattened per env copy; use env.vectorization auto, sync or async"
            )
        envs = GuardedVectorEnv(envs, cfg.max_consecutive_errors)
        envs.structured_observation_space = None
    else:
        thunk = partial(
            _single_env_thunk, target, dict(cfg.kwargs), cfg.action_repeat, is_atari(cfg.id), cfg.max_consecutive_errors
        )
        vector_cls = gym.vector.SyncVectorEnv if vectorization == "sync" else gym.vector.AsyncVectorEnv
        envs = vector_cls([thunk] * n, autoreset_mode=AutoresetMode.NEXT_STEP)
        envs.structured_observation_space = envs.get_attr("structured_observation_space")[0]
    mode = envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if mode != AutoresetMode.NEXT_STEP:
        raise EnvSpecError(f"env.id={cfg.id!r}: vector env autoresets in {mode} mode; distrl needs NEXT_STEP")
    return envs


SUPPORTED_SPACES = (
    "observations: a Box (vectors, or uint8 images [C, H, W]), or a Dict or Tuple of Box, Discrete, "
    "MultiBinary and MultiDiscrete parts (an encoder each); actions: Discrete, a 1-d MultiDiscrete or "
    "a 1-d Box"
)


def probe_spaces(cfg: EnvConfig) -> tuple[gym.Space, gym.Space]:
    """Single observation and action spaces of the env a worker would build; EnvSpecError if distrl cannot train it."""
    mode = resolve_vectorization(cfg)[0]
    probe = cfg.model_copy(update={"num_envs_per_worker": 1, "vectorization": "sync" if mode == "async" else mode})
    problem = None
    hook, sys.unraisablehook = sys.unraisablehook, lambda *_: None  # a half-built env's __del__ may raise: not news
    try:
        envs = make_vec_env(probe)
    except EnvSpecError:
        raise
    except Exception as exc:  # the env's own constructor refused: its kwargs, a missing dependency, ...
        problem = (
            f"env.id={cfg.id!r} with env.kwargs={dict(cfg.kwargs)}: the env could not be built: {describe_error(exc)}"
        )
    finally:
        gc.collect()
        sys.unraisablehook = hook
    if problem is not None:
        raise EnvSpecError(problem)
    try:
        obs_space = envs.structured_observation_space or envs.single_observation_space
        action_space = envs.single_action_space
    finally:
        envs.close()
    if not _supported_observations(obs_space):
        raise EnvSpecError(f"env.id={cfg.id!r}: observation space {obs_space} is not supported ({SUPPORTED_SPACES})")
    if not _supported_actions(action_space):
        raise EnvSpecError(f"env.id={cfg.id!r}: action space {action_space} is not supported ({SUPPORTED_SPACES})")
    return obs_space, action_space


_PARTS = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)


def _supported_observations(space: gym.Space) -> bool:
    if isinstance(space, gym.spaces.Box):
        return True
    if isinstance(space, gym.spaces.Dict):
        return len(space.spaces) > 0 and all(_supported_part(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return len(space.spaces) > 0 and all(_supported_part(s) for s in space.spaces)
    return False


def _supported_part(space: gym.Space) -> bool:
    """A part gymnasium flattens to a fixed-size vector (nested Dicts and Tuples of such parts too)."""
    if isinstance(space, gym.spaces.Dict):
        return all(_supported_part(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return all(_supported_part(s) for s in space.spaces)
    return isinstance(space, _PARTS)


def _supported_actions(space: gym.Space) -> bool:
    if isinstance(space, gym.spaces.Discrete):
        return True
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiDiscrete)):
        return len(space.shape) == 1
    return False


def runs(config) -> bool:
    """The ``gymnasium`` env kind runs every config no other kind takes (the table's last row)."""
    return True


def probe_run(config) -> tuple[gym.Space, gym.Space]:
    """The ``gymnasium`` env kind's probe (``distrl/envs/kinds.py``)."""
    return probe_spaces(config.env)


def make_run_vec_env(config, num_threads: int | None = None) -> gym.vector.VectorEnv:
    """The ``gymnasium`` env kind's vector env (``distrl/envs/kinds.py``)."""
    return make_vec_env(config.env, num_threads)


def describe(config) -> str:
    """The ``gymnasium`` env kind's vector env in words (``distrl/envs/kinds.py``)."""
    return describe_vectorization(config.env)
