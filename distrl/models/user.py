"""Your own encoder (``model.encoder``): a torch module from your code between the observations and distrl's heads.

``factory(observation_space, **model.encoder_kwargs)`` returns an ``nn.Module`` from a batch of observations to
features ``[B, F]``. distrl wraps it (``UserEncoder``) in the tensor-in interface every backend compiles and exports,
and adds what it adds to its own encoders: the action and value heads, the LSTM core, the critic's copy. It is code,
so it is imported only where the user named it (``distrl/config/trust.py``); an onnxrt worker runs its export and
imports neither torch nor the module.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from distrl.common.imports import import_named_module
from distrl.common.spaces import is_structured, obs_layout
from distrl.config import ConfigError
from distrl.config.schema import ModelConfig


def _key(cfg: ModelConfig) -> str:
    return f"model.encoder={cfg.encoder!r}"


def encoder_factory(cfg: ModelConfig):
    module_name, _, name = cfg.encoder.partition(":")
    module = import_named_module(module_name, _key(cfg), lambda line: ConfigError([line]))
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ConfigError([f"{_key(cfg)}: module {module_name!r} has no callable {name!r}"])
    return factory


def _is_image(space: gym.Space) -> bool:
    """Pixels: a uint8 Box (its values reach the model as they are, never normalised)."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8


class UserEncoder(nn.Module):
    """The user's ``module`` behind distrl's tensor-in interface. A Box observation reaches it in the space's shape;
    a Dict or Tuple as a dict or tuple of its parts, each cut from gymnasium's flattening (which distrl carries) in
    its own shape (a Discrete part one-hot, as gymnasium flattens it). uint8 pixels arrive as uint8 (a whole-Box
    image normalised by env.normalize_obs as floats, like any normalised observation), every other value in the
    module's floating dtype."""

    def __init__(self, module: nn.Module, obs_space: gym.Space, what: str, leave_out: tuple[str, ...] = ()):
        super().__init__()
        self.module = module
        self.kind = "dict" if isinstance(obs_space, gym.spaces.Dict) else "tuple" if is_structured(obs_space) else "box"
        # Offsets in the whole observation's flattening, which forward takes, for the parts the module reads.
        self.parts = [
            (p.name, p.offset, p.size, p.shape, _is_image(p.space))
            for p in obs_layout(obs_space)
            if p.name not in leave_out
        ]
        self.pixels = self.kind == "box" and _is_image(obs_space)
        # The floating dtype is read from a parameter at each call: the compile check runs a float64 copy.
        self.dtype_of = next((name for name, p in module.named_parameters() if p.is_floating_point()), None)
        self.out_dim = self._features(obs_space, what)

    def _dtype(self) -> torch.dtype:
        if self.dtype_of is None:
            return torch.float32
        return functools.reduce(getattr, self.dtype_of.split("."), self.module).dtype

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        dtype = self._dtype()
        if self.kind == "box":  # uint8 frames come as they are; normalised ones (env.normalize_obs) as floats
            return self.module(obs if self.pixels and obs.dtype == torch.uint8 else obs.to(dtype))
        parts = [
            obs[:, offset : offset + size].reshape(-1, *shape).to(torch.uint8 if pixels else dtype)
            for _, offset, size, shape, pixels in self.parts
        ]
        if self.kind == "dict":
            return self.module({name: part for (name, *_), part in zip(self.parts, parts)})
        return self.module(tuple(parts))

    def _features(self, obs_space: gym.Space, what: str) -> int:
        """F: the module's ``out_dim``, else read off one forward on two sampled observations (which also checks it
        maps a batch to ``[B, F]``)."""
        declared = getattr(self.module, "out_dim", None)
        if isinstance(declared, int) and not isinstance(declared, bool) and declared > 0:
            return declared
        samples = [gym.spaces.flatten(obs_space, obs_space.sample()) for _ in range(2)]
        batch = torch.as_tensor(np.stack(samples).astype(np.float32))
        try:
            with torch.no_grad():
                out = self(batch)
        except Exception as exc:
            raise ConfigError([f"{what}: its forward on a batch of 2 observations raised {_error(exc)}"]) from None
        if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != 2:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ConfigError([f"{what}: returned {got} for a batch of 2 observations; an encoder returns [B, F]"])
        return int(out.shape[1])


def _error(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__


def build_user_encoder(obs_space: gym.Space, cfg: ModelConfig, leave_out: tuple[str, ...] = ()) -> UserEncoder:
    """The user's encoder of ``obs_space``; a Dict's parts named in ``leave_out`` are not given to it (the actor's,
    with ``model.critic_parts``): its factory sees the Dict without them."""
    seen = obs_space
    if leave_out and isinstance(obs_space, gym.spaces.Dict):
        seen = gym.spaces.Dict({k: v for k, v in obs_space.spaces.items() if k not in leave_out})
    factory = encoder_factory(cfg)
    what = _key(cfg)
    try:
        module = factory(seen, **cfg.encoder_kwargs)
    except Exception as exc:
        raise ConfigError(
            [f"{what}: {cfg.encoder.partition(':')[2]}(observation_space, **model.encoder_kwargs) raised {_error(exc)}"]
        ) from None
    if not isinstance(module, nn.Module):
        raise ConfigError([f"{what}: the factory returned {type(module).__name__}, not a torch.nn.Module"])
    return UserEncoder(module, obs_space, what, leave_out)


def encoder_parameters(model: nn.Module) -> int:
    """The parameters in a model's user encoders (the actor's, and the critic's copy where it has one)."""
    return sum(p.numel() for m in model.modules() if isinstance(m, UserEncoder) for p in m.module.parameters())
