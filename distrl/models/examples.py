"""Encoders written as a user writes them (``model.encoder``; docs/models.md): plain torch modules from a batch of
observations to features ``[B, F]``. distrl ships them as worked examples, and so trusts them as it trusts its own
configs; a module of yours is imported only when you name it.

- ``residual_mlp``: a vector observation through residual blocks of LayerNorm, GELU and a linear layer.
- ``dict_cnn``: a Dict observation; a small CNN for each uint8 image part, a linear layer for each other part.
- ``minatar_cnn``: the network of ``configs/minatar_breakout.yaml`` (one 3 x 3 convolution of 16, a dense layer of
  128, ReLU) over MinAtar's bool frames, written out as a module.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from torch import nn


class ResidualMLP(nn.Module):
    def __init__(self, obs_dim: int, width: int, blocks: int):
        super().__init__()
        self.embed = nn.Linear(obs_dim, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(width), nn.GELU(), nn.Linear(width, width)) for _ in range(blocks)
        )
        self.out = nn.LayerNorm(width)
        self.out_dim = width  # F, declared (distrl would otherwise read it off one forward)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.embed(obs.flatten(1))
        for block in self.blocks:
            x = x + block(x)
        return torch.nn.functional.gelu(self.out(x))


def residual_mlp(observation_space: gym.Space, width: int = 64, blocks: int = 2) -> nn.Module:
    """Residual LayerNorm-GELU blocks over a Box observation of any shape (flattened)."""
    return ResidualMLP(int(np.prod(observation_space.shape)), width, blocks)


class DictCNN(nn.Module):
    def __init__(self, space: gym.spaces.Dict, channels: int, features: int):
        super().__init__()
        self.images, self.vectors = nn.ModuleDict(), nn.ModuleDict()
        width = 0
        for name, part in space.spaces.items():
            if isinstance(part, gym.spaces.Box) and part.dtype == np.uint8 and len(part.shape) == 3:
                c, h, w = part.shape  # channels first
                self.images[name] = nn.Sequential(
                    nn.Conv2d(c, channels, 3, stride=1),
                    nn.ReLU(),
                    nn.Flatten(),
                    nn.Linear(channels * (h - 2) * (w - 2), features),
                    nn.ReLU(),
                )
            else:
                self.vectors[name] = nn.Sequential(nn.Linear(int(np.prod(part.shape or (1,))), features), nn.Tanh())
            width += features
        self.out_dim = width

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        features = []
        for name, encoder in self.images.items():
            features.append(encoder(obs[name].float() / 255.0))  # uint8 pixels, as the space has them
        for name, encoder in self.vectors.items():
            features.append(encoder(obs[name].flatten(1)))
        return torch.cat(features, dim=-1)


def dict_cnn(observation_space: gym.Space, channels: int = 16, features: int = 64) -> nn.Module:
    """A Dict observation: uint8 images of ``[C, H, W]`` through a 3 x 3 convolution, every other part a linear layer;
    the features side by side."""
    if not isinstance(observation_space, gym.spaces.Dict):
        raise TypeError(f"dict_cnn reads a Dict observation, not {type(observation_space).__name__}")
    return DictCNN(observation_space, channels, features)


def _orthogonal(layer: nn.Module) -> nn.Module:
    nn.init.orthogonal_(layer.weight, math.sqrt(2))
    nn.init.zeros_(layer.bias)
    return layer


class MinAtarCNN(nn.Module):
    def __init__(self, height: int, width: int, channels: int, filters: int, hidden: int):
        super().__init__()
        # The orthogonal initialisation distrl gives its own CNN (gain sqrt 2, zero bias), each layer as it is made:
        # with the same seed, the same initial weights as model.type cnn draws.
        self.conv = _orthogonal(nn.Conv2d(channels, filters, 3, stride=1))
        self.fc = _orthogonal(nn.Linear(filters * (height - 2) * (width - 2), hidden))
        self.out_dim = hidden

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.permute(0, 3, 1, 2)  # MinAtar's frames keep their channels last
        x = torch.relu(self.conv(x)).flatten(1)
        return torch.relu(self.fc(x))


def minatar_cnn(observation_space: gym.Space, filters: int = 16, hidden: int = 128) -> nn.Module:
    """``configs/minatar_breakout.yaml``'s network over a MinAtar frame ``[10, 10, C]``."""
    height, width, channels = observation_space.shape
    return MinAtarCNN(height, width, channels, filters, hidden)
