"""Env kinds: how a run's env is probed and built, one module each and a row in ``ENV_KINDS``.

- ``gymnasium``: a gymnasium id or a ``package.module:factory`` (``distrl/envs/factory.py``);
- ``league``: a two-player game seen from the learner's seat, its opponents acting inside the vector
  env (``distrl/envs/games/seat.py``);
- ``agents``: an N-agent PettingZoo parallel env, each agent of each copy a slot of the batch, all acting with one
  shared policy (``distrl/envs/agents.py``).

A kind's module defines ``runs(config) -> bool`` (whether the config's env is of this kind: the first
row whose ``runs`` says so is the run's kind, so ``gymnasium``, which takes every config, is the last),
``probe_run(config) -> (observation space, action space)`` (checking what it can before Ray starts) and
``make_run_vec_env(config, num_threads) -> VectorEnv`` (not yet reset) and ``describe(config) -> str`` (that vector
env in the start-up summary's words), and may define ``agents_per_copy(config) -> int`` (the slots each env copy
fills: 1 where not defined) and
``worker_side(envs, policies) -> WorkerSide``: what the kind adds to a rollout worker (the league:
opponents that act with the worker's policies, the driver's plan in, finished games out).
The table holds the modules themselves, so import-linter sees every kind: adding one is a module in
``distrl/envs/`` and a row here.
"""

from __future__ import annotations

from types import ModuleType

import gymnasium as gym

from distrl.common.errors import EnvSpecError
from distrl.envs import agents, factory
from distrl.envs.games import seat

ENV_KINDS: dict[str, ModuleType] = {  # in the order asked: the first whose runs(config) is true
    "league": seat,
    "agents": agents,
    "gymnasium": factory,
}


def env_kind(config) -> str:
    """The kind of ``config``'s env: the first row of ``ENV_KINDS`` that runs it."""
    return next(name for name, kind in ENV_KINDS.items() if kind.runs(config))


def _kind(config) -> ModuleType:
    return ENV_KINDS[env_kind(config)]


def probe_run_spaces(config, policy: str | None = None) -> tuple[gym.Space, gym.Space]:
    """The spaces a run's policy acts in: its env's, or in a league run its game's from one seat (checking the
    league's settings against the game too); ``policy``: which of several trained policies (``agents.policies``:
    their agents' spaces may differ; None: the first's)."""
    kind = env_kind(config)
    if config.agents.several and kind != "agents":
        raise EnvSpecError(
            f"agents.policies={config.agents.policies}: several policies need a PettingZoo parallel env "
            f"(env.id={config.env.id!r} is a {kind} env); use shared"
        )
    if config.agents.critic != "local" and kind != "agents":
        raise EnvSpecError(
            f"agents.critic={config.agents.critic}: a central critic needs a PettingZoo parallel env "
            f"(env.id={config.env.id!r} is a {kind} env); use local (a single-agent env gives its critic "
            "privileged observations as a Dict observation's 'critic' part: model.critic_parts)"
        )
    if policy is not None and config.agents.several:
        return agents.policy_spaces(config)[policy]
    return ENV_KINDS[kind].probe_run(config)


def resolve_agents(config):
    """``config`` with ``env.agents_per_copy`` its env's (a PettingZoo env's agent count; 1 for every other kind), its
    checks run again on the slots that makes (``ConfigError`` where they fail); ``config`` itself where it holds it."""
    from distrl.config import ConfigError, load_config

    kind = _kind(config)
    agents = kind.agents_per_copy(config) if hasattr(kind, "agents_per_copy") else 1
    given = config.env.agents_per_copy
    if given == agents or (given is None and agents == 1 and config.env.agents_known):  # nothing the config lacks
        return config
    if given is not None:
        raise ConfigError(
            [
                f"env.agents_per_copy={given}: env.id={config.env.id!r} has {agents} agent{'s' * (agents != 1)} a "
                "copy; leave it out (distrl reads it from the env)"
            ]
        )
    return load_config(config, {"env.agents_per_copy": agents})


def describe_run_env(config) -> str:
    """The vector env a worker builds for ``config``, in the words the start-up summary and ``distrl diagnose`` use
    (what ``auto`` chose, and why)."""
    return _kind(config).describe(config)


def make_run_vec_env(config, num_threads: int | None = None) -> gym.vector.VectorEnv:
    """A worker's vector env for ``config`` (``num_threads``: the CPUs the worker was given)."""
    return _kind(config).make_run_vec_env(config, num_threads)


class WorkerSide:
    """What an env kind adds to a rollout worker; this one adds nothing (a gymnasium env)."""

    def before_sample(self, plan) -> None:
        """The plan the driver sent with this sample request (None: none)."""

    def after_sample(self, info) -> None:
        """Add what the kind reports of the batch to its ``SampleInfo``."""


def worker_side(config, envs, policies) -> WorkerSide:
    """The kind's ``WorkerSide`` for a worker's ``envs``; ``policies``: the worker's ``PolicyTools`` (its policy,
    another on its backend, the inputs it acts on, the action distribution)."""
    make = getattr(_kind(config), "worker_side", None)
    return WorkerSide() if make is None else make(envs, policies)
