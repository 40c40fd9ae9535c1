"""Single-env wrappers and small env factories usable as env.id='distrl.envs.wrappers:NAME'."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class ActionRepeat(gym.Wrapper):
    """Repeat each action ``repeat`` times, summing rewards; stops early at episode end."""

    def __init__(self, env: gym.Env, repeat: int):
        super().__init__(env)
        self.repeat = repeat

    def step(self, action):
        total = 0.0
        for _ in range(self.repeat):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info


class KeepObservationIndices(gym.ObservationWrapper):
    """Keep only some components of a flat Box observation (e.g. hide velocities)."""

    def __init__(self, env: gym.Env, indices: list[int]):
        super().__init__(env)
        self.indices = np.asarray(indices)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(space.low[self.indices], space.high[self.indices], dtype=space.dtype)

    def observation(self, observation):
        return observation[self.indices]


def cartpole_no_velocity(**kwargs) -> gym.Env:
    """CartPole-v1 seeing only cart position and pole angle, so a policy needs memory."""
    return KeepObservationIndices(gym.make("CartPole-v1", **kwargs), [0, 2])
