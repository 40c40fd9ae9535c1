"""Encoders for tests/test_user_encoder.py, imported as ``tests.encoders`` by the test and by distrl alike (the
encoder id ``tests.encoders:recorder``), so both see one ``Recorder``."""

import gymnasium as gym
import numpy as np
import torch
from torch import nn


class Recorder(nn.Module):
    """Remembers what it was given: a linear layer over every part, flattened."""

    seen: list = []

    def __init__(self, space: gym.Space):
        super().__init__()
        self.linear = nn.Linear(int(gym.spaces.flatdim(space)), 8)

    def forward(self, obs):
        Recorder.seen.append(obs)
        parts = obs.values() if isinstance(obs, dict) else obs if isinstance(obs, tuple) else [obs]
        return self.linear(torch.cat([p.flatten(1).to(self.linear.weight.dtype) for p in parts], dim=1))


def recorder(observation_space):
    return Recorder(observation_space)


class Bessel(nn.Module):
    """A modified Bessel function over the features: an operation ONNX's opsets do not have."""

    def __init__(self, space):
        super().__init__()
        self.linear = nn.Linear(int(np.prod(space.shape)), 16)

    def forward(self, obs):
        return torch.special.i0(self.linear(obs).clamp(-3, 3))


def bessel(observation_space):
    return Bessel(observation_space)


def three_dims(observation_space):
    class ThreeDims(nn.Module):
        def forward(self, obs):
            return obs.unsqueeze(1)

    return ThreeDims()


def not_a_module(observation_space):
    return "a string"
