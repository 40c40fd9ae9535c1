"""Column views of one vector env, stepped together: a worker acting for several policies (``agents.policies``).

Each trained policy acts for its own slots (``distrl/envs/policy_map.py``), so the worker runs one env runner per
policy, each over a view of the same vector env. A view's ``step`` only leaves its slots' actions; the env steps once
every view has sent them, at the first view's ``finish``, and each view reads its own columns of the result (the
worker's runners take turns in that order: ``distrl/rollout/env_runner.py``). Reset works the same way: the first
view's reset resets the env, the others read their columns of it. Policies whose agents' spaces differ each read the
first columns of the env's zero-padded observations that are theirs, and send actions of their own kind.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from distrl.common.spaces import is_structured


class _Joint:
    """The shared vector env, its pending actions and its last result."""

    def __init__(self, envs, columns: list[np.ndarray]):
        self.envs, self.columns = envs, columns
        self.actions: np.ndarray | None = None
        self.sent = [False] * len(columns)
        self.result: tuple | None = None
        self.unread = 0  # views that have not read ``result`` yet

    def reset(self, seed: int | None) -> tuple:
        if self.unread == 0:
            self.result, self.unread = self.envs.reset(seed=seed), len(self.columns)
        self.unread -= 1
        return self.result

    def start(self, view: int, actions: np.ndarray) -> None:
        actions = np.asarray(actions)
        if self.actions is None:
            self.actions = np.empty((self.envs.num_envs, *actions.shape[1:]), dtype=actions.dtype)
        if isinstance(self.actions, np.ndarray) and (actions.shape[1:], actions.dtype) != (
            self.actions.shape[1:],
            self.actions.dtype,
        ):
            self.actions = list(self.actions)  # policies whose action spaces differ: one action per slot
        if isinstance(self.actions, list):
            for column, action in zip(self.columns[view], actions):
                self.actions[column] = action
        else:
            self.actions[self.columns[view]] = actions
        self.sent[view] = True

    def finish(self) -> tuple:
        if self.unread == 0:
            if not all(self.sent):
                raise RuntimeError("a joint step was read before every policy's view sent its actions")
            self.result, self.unread = self.envs.step(self.actions), len(self.columns)
            self.sent = [False] * len(self.columns)
        self.unread -= 1
        return self.result


def _columns_of(value, columns: np.ndarray, num_envs: int):
    """An info entry's part for ``columns``: per-slot arrays sliced, anything else (a message list) as it is."""
    if isinstance(value, np.ndarray) and value.ndim >= 1 and value.shape[0] == num_envs:
        return value[columns]
    return value


class SlotView:
    """The vector env's slots ``columns``, as an env runner uses a vector env; with its ``stepper``."""

    kind = "joint"  # the stepper's kind, as ``distrl/envs/stepping.py``'s steppers name theirs

    def __init__(self, joint: _Joint, index: int, spaces: tuple | None = None):
        """``spaces``: the view's own (observation, action) spaces where its agents' differ from the env's first
        agent's (``distrl/envs/agents.py: policy_spaces``); its observations are then the first columns of the env's
        zero-padded ones."""
        self.joint, self.index = joint, index
        self.columns = joint.columns[index]
        envs = joint.envs
        self.num_envs = len(self.columns)
        self.single_observation_space = envs.single_observation_space
        self.single_action_space = envs.single_action_space
        self.structured_observation_space = getattr(envs, "structured_observation_space", None)
        self.width = None  # its observations' width in the env's wider array, where they are narrower
        if spaces is not None:
            observed, self.single_action_space = spaces
            self.structured_observation_space = observed if is_structured(observed) else None
            self.single_observation_space = gym.spaces.flatten_space(observed) if is_structured(observed) else observed
            width = int(np.prod(self.single_observation_space.shape))
            self.width = width if width < envs.single_observation_space.shape[0] else None

    def _part(self, result: tuple) -> tuple:
        obs, *arrays, info = result
        n = self.joint.envs.num_envs
        obs = np.asarray(obs)[self.columns]
        return (
            obs if self.width is None else obs[:, : self.width],
            *(np.asarray(a)[self.columns] for a in arrays),
            {k: _columns_of(v, self.columns, n) for k, v in info.items()},
        )

    def reset(self, *, seed: int | None = None, options=None) -> tuple:
        return self._part(self.joint.reset(seed))

    # the stepper's side (``SerialStepper``'s methods)
    @property
    def envs(self) -> SlotView:
        return self

    def start(self, actions: np.ndarray) -> None:
        self.joint.start(self.index, actions)

    def finish(self) -> tuple:
        return self._part(self.joint.finish())

    def close(self) -> None:
        if self.index == 0:
            self.joint.envs.close()


def slot_views(envs, columns: list[np.ndarray], spaces: list[tuple] | None = None) -> list[SlotView]:
    """A view per column set of ``envs`` (each is its env runner's env and stepper); ``spaces``: each view's own
    (observation, action) spaces, where policies' differ."""
    joint = _Joint(envs, columns)
    return [SlotView(joint, i, None if spaces is None else spaces[i]) for i in range(len(columns))]
