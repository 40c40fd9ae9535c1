"""Whether a model config fits an env's spaces, decided without torch (before Ray starts, while torch loads).

``ActorCritic`` raises the same errors when built; this is the same rule, read from the shapes.
"""

from __future__ import annotations

import gymnasium as gym

from distrl.common.imports import find_named_module
from distrl.common.spaces import action_space_problem, is_structured, obs_layout
from distrl.config.schema import ModelConfig
from distrl.models.image import conv_plan


def critic_only_parts(obs_space: gym.Space, cfg: ModelConfig) -> list[str]:
    """The parts of a Dict or Tuple observation only the critic reads (``model.critic_parts`` that it has)."""
    if not is_structured(obs_space):
        return []
    return [part.name for part in obs_layout(obs_space) if part.name in cfg.critic_parts]


def critic_parts_problem(obs_space: gym.Space, cfg: ModelConfig) -> str | None:
    """Parts only the critic reads need an encoder of the actor's own, and must leave the actor something to read."""
    only = critic_only_parts(obs_space, cfg)
    if not only:
        return None
    if cfg.shared_trunk:
        return (
            f"model.shared_trunk=true: the observation has parts only the critic reads ({', '.join(only)}: "
            "model.critic_parts), so the actor needs its own encoder; use shared_trunk: false"
        )
    names = [part.name for part in obs_layout(obs_space)]
    if len(only) == len(names):
        return (
            f"model.critic_parts={list(cfg.critic_parts)}: leaves the actor no part of the observation to read "
            f"(its parts: {', '.join(names)})"
        )
    return None


def _structured_problem(obs_space: gym.Space, cfg: ModelConfig) -> str | None:
    """A Dict or Tuple observation: each part gets its own encoder, so the model is an MLP trunk over them."""
    problem = critic_parts_problem(obs_space, cfg)
    if problem:
        return problem
    if cfg.type != "mlp":
        return (
            f"model.type={cfg.type}: not with {type(obs_space).__name__} observations; use mlp (each part gets its "
            "own encoder: a CNN for uint8 image parts, an MLP for the others)"
        )
    for part in obs_layout(obs_space):
        if part.image:
            try:
                conv_plan(part.shape, part.space.dtype, cfg, f"observation part {part.name!r}")
            except ValueError as exc:
                return str(exc)
    return None


def check_model_fits(obs_space: gym.Space, action_space: gym.Space, cfg: ModelConfig) -> None:
    """Raise ``ValueError`` naming the key when ``cfg`` cannot be built for these spaces."""
    problem = action_space_problem(action_space)
    if problem:
        raise ValueError(problem)
    if cfg.encoder is not None:  # the user's module takes the observation as it is (checked when built)
        problem = critic_parts_problem(obs_space, cfg)
        if problem:
            raise ValueError(problem)
        # Found, not run (torch loads while Ray starts): a module in the working directory goes on the path Ray's
        # workers copy.
        find_named_module(cfg.encoder.partition(":")[0], f"model.encoder={cfg.encoder!r}", ValueError)
        return
    if is_structured(obs_space):
        problem = _structured_problem(obs_space, cfg)
        if problem:
            raise ValueError(problem)
        return
    if cfg.type == "attention":
        if cfg.window == 0 and len(obs_space.shape) != 2:
            raise ValueError(
                f"model.window=0: needs observations that are a sequence [tokens, features], got shape "
                f"{obs_space.shape}; set model.window to attend over the last observations"
            )
        if cfg.window > 0 and len(obs_space.shape) != 1:
            raise ValueError(
                f"model.type=attention with model.window={cfg.window}: needs vector observations, got "
                f"shape {obs_space.shape}"
            )
        return
    if cfg.type == "cnn":
        conv_plan(obs_space.shape, obs_space.dtype, cfg)
