"""The ``agents`` env kind: an N-agent PettingZoo parallel env, each agent of each copy a slot of the worker's batch
(``distrl/envs/agent_slots.py``), acting with one shared policy or with the policies ``agents.policies`` maps to them
(agents of different policies may have spaces of their own: ``policy_spaces``).

A run is of this kind (and not a league's: that is a ``league`` section) when its ``env.id`` is

- a PettingZoo registry id with distrl's ``pettingzoo/`` prefix (``pettingzoo/butterfly/knights_archers_zombies-v11``)
  naming a parallel env, or
- a ``package.module:factory`` returning a PettingZoo ``ParallelEnv`` (``env.kwargs`` are its arguments), with the
  trust rule of any factory (``distrl/config/trust.py``).

``env.num_envs_per_worker`` counts env copies, as for a single-agent env; each copy fills ``env.agents_per_copy``
slots (its agent count, which distrl reads from the env: ``agents_per_copy``), so a worker's batch is copies x agents
wide. The copies step in the worker's process, one after another (``env.vectorization``: auto or sync).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import lru_cache, partial

import gymnasium as gym
import numpy as np

from distrl.common.errors import EnvSpecError, describe_error
from distrl.common.spaces import is_structured
from distrl.envs.agent_slots import AgentSlotsVectorEnv, central_part_space
from distrl.envs.factory import SUPPORTED_SPACES, _supported_actions, _supported_observations, resolve_env_id
from distrl.envs.guard import GuardedVectorEnv
from distrl.envs.policy_map import PolicyMap, resolve

PREFIX = "pettingzoo/"


def _parallel_env_class():
    try:
        from pettingzoo.utils.env import ParallelEnv
    except ImportError:
        return None
    return ParallelEnv


def _make(env_id: str, kwargs: dict):
    """One parallel env for ``env_id``."""
    if env_id.startswith(PREFIX):
        try:
            import pettingzoo
        except ImportError:
            raise EnvSpecError(f"env.id={env_id!r}: needs PettingZoo: pip install 'distrl[multiagent]'") from None

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PettingZoo's deprecation notes on its own wrappers
            name = env_id[len(PREFIX) :]
            try:
                return pettingzoo.make("parallel", name, **kwargs)
            except pettingzoo.env_registry.exceptions.PettingZooRegistryError:
                pass
            try:
                pettingzoo.spec("aec", name)
            except pettingzoo.env_registry.exceptions.PettingZooRegistryError:
                raise EnvSpecError(
                    f"env.id={env_id!r}: not a parallel env in PettingZoo's registry "
                    "(pettingzoo.pprint_registry() lists them)"
                ) from None
            raise EnvSpecError(
                f"env.id={env_id!r}: a turn-based (AEC) game; train it by self-play with a league "
                "section (docs/league.md)"
            )
    return resolve_env_id(env_id)(**kwargs)


@dataclass(frozen=True)
class _Agents:
    """What a parallel env says of its agents, read from one env built for it."""

    names: tuple[str, ...]
    observation_spaces: tuple[gym.Space, ...]
    action_spaces: tuple[gym.Space, ...]
    state_space: gym.Space | None  # the env's global state (``state()``), where it has one


@lru_cache(maxsize=16)
def _agents_of(env_id: str, kwargs_key: tuple) -> _Agents | None:
    """The agents of ``env_id``'s parallel env, from one env built once per process (the kind's check, the start-up
    summary and the slots all read it); None where ``env_id`` builds something else (a gymnasium factory's env)."""
    parallel = _parallel_env_class()
    env = _make(env_id, dict(kwargs_key))
    try:
        if parallel is None or not isinstance(env, parallel):
            return None
        names = tuple(env.possible_agents)
        try:
            state_space = env.state_space
        except (AttributeError, NotImplementedError):
            state_space = None
        return _Agents(
            names,
            tuple(env.observation_space(n) for n in names),
            tuple(env.action_space(n) for n in names),
            state_space,
        )
    finally:
        try:
            env.close()
        except Exception:
            pass


@lru_cache(maxsize=16)
def _factory_builds_parallel_env(env_id: str, kwargs_key: tuple) -> bool:
    """Whether the factory ``env_id`` returns a PettingZoo ``ParallelEnv``: a class by its bases, a function by what it
    builds (once per process)."""
    parallel = _parallel_env_class()
    if parallel is None:
        return False
    try:
        target = resolve_env_id(env_id)
        if not callable(target):
            return False
        if isinstance(target, type):  # a class says what it builds without being built
            return issubclass(target, parallel)
        return _agents_of(env_id, kwargs_key) is not None
    except Exception:  # the gymnasium kind builds it again and reports the error in its own words
        return False


def _key(config) -> tuple:
    return tuple(sorted(config.env.kwargs.items()))


def runs(config) -> bool:
    """The ``agents`` kind runs a config without a league whose env is a PettingZoo parallel env."""
    if config.league is not None:
        return False
    env_id = config.env.id
    if env_id.startswith(PREFIX):
        return True
    return ":" in env_id and _factory_builds_parallel_env(env_id, _key(config))


def _check(config, agents: _Agents) -> dict[str | None, tuple[gym.Space, gym.Space]]:
    """Each trained policy's spaces (``None``: the one shared policy), its agents' own; EnvSpecError where distrl cannot
    train them."""
    cfg = config.env
    names = agents.names
    if not names:
        raise EnvSpecError(f"env.id={cfg.id!r}: the parallel env has no agents")
    if cfg.vectorization not in ("auto", "sync"):
        raise EnvSpecError(
            f"env.vectorization={cfg.vectorization}: a PettingZoo parallel env's copies step in the "
            "worker's process; use auto or sync"
        )
    if cfg.action_repeat > 1:
        raise EnvSpecError(f"env.action_repeat={cfg.action_repeat}: not for a PettingZoo parallel env; use 1")
    if config.logging.video_every_iterations:
        raise EnvSpecError(
            f"logging.video_every_iterations={config.logging.video_every_iterations}: videos of a "
            "PettingZoo parallel env are not recorded yet; use 0"
        )
    mapping = resolve(config.agents.policies, names) if config.agents.several else None
    ranks, copies = config.learner.num_learners, cfg.num_envs_per_worker
    uneven = [(p, m) for p, m in zip(mapping.names, mapping.agents) if copies * len(m) % ranks] if mapping else []
    if uneven:  # each learner rank trains an equal slice of every policy's slots
        policy, members = uneven[0]
        every = math.lcm(*(ranks // math.gcd(len(m), ranks) for m in mapping.agents))  # copies that split every policy
        raise EnvSpecError(
            f"learner.num_learners={ranks}: policy {policy!r} has {copies * len(members)} slots a worker ({copies} "
            "copies "
            f"x {len(members)} agent{'' if len(members) == 1 else 's'}), which do not split into {ranks} equal learner "
            f"shards; use env.num_envs_per_worker a multiple of {every}"
        )
    spaces_of = {
        name: (observed, acting)
        for name, observed, acting in zip(names, agents.observation_spaces, agents.action_spaces)
    }
    policies: dict[str | None, tuple[gym.Space, gym.Space]] = {}
    for policy, members in zip(mapping.names, mapping.agents) if mapping else [(None, names)]:
        obs_space, action_space = spaces_of[members[0]]
        for name in members[1:]:
            if spaces_of[name] != (obs_space, action_space):
                who = "one shared policy (agents.policies: shared)" if policy is None else f"policy {policy!r}"
                raise EnvSpecError(
                    f"env.id={cfg.id!r}: agent {name!r} has observation {spaces_of[name][0]} and actions "
                    f"{spaces_of[name][1]}, agent {members[0]!r} {obs_space} and {action_space}; {who} needs the same "
                    "spaces for all its agents (map agents whose spaces differ to policies of their own)"
                )
        if not _supported_observations(obs_space):
            raise EnvSpecError(
                f"env.id={cfg.id!r}: observation space {obs_space} is not supported ({SUPPORTED_SPACES})"
            )
        if not _supported_actions(action_space):
            raise EnvSpecError(f"env.id={cfg.id!r}: action space {action_space} is not supported ({SUPPORTED_SPACES})")
        policies[policy] = (obs_space, action_space)
    critic = config.agents.critic
    first = next(iter(policies.values()))[0]
    if any(o != first for o, _ in policies.values()):  # one array for every slot: each agent's vector, zero-padded
        seen = [o for o, _ in policies.values()]
        flat = [gym.spaces.flatten_space(o) for o in seen]
        if any(not is_structured(o) and len(o.shape) != 1 for o in seen) or len({f.dtype for f in flat}) > 1:
            raise EnvSpecError(
                f"env.id={cfg.id!r}: policies whose observation spaces differ need vector (or Dict/Tuple) "
                f"observations of one dtype; they are {', '.join(str(o) for o in seen)}"
            )
        if critic != "local":
            raise EnvSpecError(
                f"agents.critic={critic}: the agents' observation spaces differ; a central critic needs "
                "them alike; use local"
            )
    if critic == "local":
        return policies
    obs_space = first
    if not isinstance(obs_space, gym.spaces.Box) or obs_space.dtype == np.uint8:
        raise EnvSpecError(
            f"agents.critic={critic}: needs agents whose observations are vectors (a Box), not {obs_space}; use local"
        )
    if critic == "state" and not isinstance(agents.state_space, gym.spaces.Box):
        raise EnvSpecError(
            f"agents.critic=state: {cfg.id!r} has no global state (a Box state_space and state()); use "
            "observations (every agent's observation) or local"
        )
    own = gym.spaces.flatten_space(obs_space)
    extra = central_part_space(agents.state_space, critic, own, len(names))
    central = gym.spaces.Dict({"actor": obs_space, "critic": extra})
    return {policy: (central, acting) for policy, (_, acting) in policies.items()}


def _built(config) -> _Agents:
    """``config``'s parallel env's agents; EnvSpecError, in one line, where it cannot be built or is not one."""
    cfg = config.env
    try:
        agents = _agents_of(cfg.id, _key(config))
    except EnvSpecError:
        raise
    except Exception as exc:
        raise EnvSpecError(
            f"env.id={cfg.id!r} with env.kwargs={dict(cfg.kwargs)}: the env could not be built: {describe_error(exc)}"
        ) from None
    if agents is None:
        raise EnvSpecError(f"env.id={cfg.id!r}: the factory returned no PettingZoo ParallelEnv")
    return agents


def agent_names(config) -> tuple[str, ...]:
    """The agents of ``config``'s parallel env, in slot order (built once per process to find out)."""
    return _built(config).names


def policy_map(config) -> PolicyMap | None:
    """Which trained policy acts for which agent (``agents.policies``); None: one policy shared by every agent."""
    if not config.agents.several:
        return None
    return resolve(config.agents.policies, agent_names(config))


def describe(config) -> str:
    """The vector env a worker builds, in the start-up summary's words."""
    names = agent_names(config)
    shown = ", ".join(names) if len(names) <= 6 else ", ".join(names[:5]) + f", ... {names[-1]}"
    mapping = policy_map(config)
    policies = "one shared policy" if mapping is None else f"{len(mapping.names)} policies ({mapping.describe()})"
    critic = {
        "local": "",
        "state": ", a central critic on the env's state",
        "observations": ", a central critic on every agent's observation",
    }[config.agents.critic]
    return (
        f"{config.env.num_envs_per_worker} copies x {len(names)} agents ({shown}): "
        f"{config.env.num_envs_per_worker * len(names)} slots, "
        f"{policies}{critic}; stepped in the worker's process"
    )


def agents_per_copy(config) -> int:
    """The slots each env copy fills: its agents (``env.agents_per_copy``, set from here)."""
    return len(agent_names(config))


def policy_spaces(config) -> dict[str | None, tuple[gym.Space, gym.Space]]:
    """Each trained policy's observation and action spaces, checked (``None``: the one shared policy): its agents'
    own, which may differ from another policy's (``agents.policies``)."""
    return _check(config, _built(config))


def view_spaces(config) -> list[tuple[gym.Space, gym.Space]] | None:
    """Each policy's spaces in ``agents.policies`` order where they differ between policies (each policy's view of the
    env then reads its own: ``distrl/envs/slot_views.py``); None where every policy acts in the same spaces."""
    spaces = list(policy_spaces(config).values())
    return spaces if any(each != spaces[0] for each in spaces) else None


def probe_run(config) -> tuple[gym.Space, gym.Space]:
    """The ``agents`` kind's probe (``distrl/envs/kinds.py``): every policy's spaces checked; the first policy's
    returned (every policy's where they are alike; ``policy_spaces`` has each one's)."""
    return next(iter(policy_spaces(config).values()))


def make_run_vec_env(config, num_threads: int | None = None) -> gym.vector.VectorEnv:
    """The ``agents`` kind's vector env: ``env.num_envs_per_worker`` copies, each agent of each a slot, behind the env
    guard (an env that raises is reset as a whole, its episodes in progress ending unscored)."""
    cfg = config.env
    envs = AgentSlotsVectorEnv(
        partial(_make, cfg.id, dict(cfg.kwargs)), cfg.num_envs_per_worker, config.agents.critic, tuple(cfg.info_metrics)
    )
    structured = envs.structured_observation_space
    envs = GuardedVectorEnv(envs, cfg.max_consecutive_errors)
    envs.structured_observation_space = structured
    return envs
