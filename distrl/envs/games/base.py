"""What a two-sided game offers the league: N copies stepped together, both seats' views, masks, scores.

Seats are 0 and 1 (seat 0 moves first in turn-based games); each seat is a side of ``team_size``
members (1 for two-player games; Duel's teams have more), all acting with the same player.
Arrays have the copies on axis 0. ``observe`` returns one row per member, copy by copy; ``step``
takes every member's action, ``[N, 2, team_size, ...]``, and ``acting [N, 2]`` (which sides move
in each copy now); copies where nobody acts are left as they are. A finished copy stays finished
until ``reset``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import gymnasium as gym
import numpy as np

from distrl.common.errors import EnvSpecError


class GameError(EnvSpecError):
    """A game distrl cannot run as a league game (one line for the user, exit 2 like any env.id problem)."""


@dataclass
class StepResult:
    rewards: np.ndarray  # [N, 2, team_size] the game's own reward of each member of each seat
    done: np.ndarray  # [N] bool, the game ended at this step
    score: np.ndarray  # [N] seat 0's score where done (1 win, 0.5 draw, 0 loss), NaN elsewhere
    shaping: dict[str, np.ndarray]  # term -> [N, 2, team_size], per member (league.reward.shaping)
    out: np.ndarray | None = None  # [N, 2, team_size] members out of play from this step on, the game going on

    @classmethod
    def nothing_yet(cls, num_envs: int) -> StepResult:
        """A two-player step before any copy's move is applied: no reward, no game over, no score."""
        return cls(np.zeros((num_envs, 2, 1)), np.zeros(num_envs, dtype=bool), np.full(num_envs, np.nan), {})


class Game(Protocol):
    num_envs: int
    team_size: int  # members of each side
    observation_space: gym.spaces.Box  # one member's observation (float32)
    action_space: gym.Space
    masked: bool  # observe returns action masks
    shaping_terms: tuple[str, ...]

    def reset(self, copies: np.ndarray, seed: int | None = None) -> None:
        """Start new games in the copies where ``copies [N]`` is True."""

    def to_move(self) -> np.ndarray:
        """``[N, 2]`` bool: which seats act now (turn-based: one; simultaneous: both; finished: none)."""

    def observe(self, seat: int, copies: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The observations ``[k * team_size, ...]`` (float32) and action masks ``[k * team_size, n]`` (bool) of
        ``seat``'s members in ``copies``, copy by copy."""

    def step(self, actions: np.ndarray, acting: np.ndarray) -> StepResult:
        """Apply ``actions [N, 2, team_size, ...]`` of the seats in ``acting [N, 2]``."""

    def heuristic(
        self, obs: np.ndarray, mask: np.ndarray | None, rng: np.random.Generator, noise: float = 0.0
    ) -> np.ndarray:
        """The game's scripted player on one seat's members' observations: ``noise`` of its moves are uniformly
        random."""

    def record(self, copy: int) -> dict:
        """What a replay of the copy's current game needs (its moves so far, and frames where it renders)."""


def random_actions(space: gym.Space, mask: np.ndarray | None, rng: np.random.Generator, count: int) -> np.ndarray:
    """Uniform over the legal actions (``mask [count, n]``), or over a Box."""
    if isinstance(space, gym.spaces.Discrete):
        if mask is None:
            return rng.integers(0, space.n, size=count)
        weights = mask.astype(np.float64)
        cdf = weights.cumsum(axis=1)
        u = (1.0 - rng.random(count)) * cdf[:, -1]  # in (0, total]: an illegal action (weight 0) is never drawn
        return (cdf < u[:, None]).sum(axis=1)
    return rng.uniform(space.low, space.high, size=(count, *space.shape)).astype(np.float32)


def baseline_actions(
    game: Game,
    name: str,
    obs: np.ndarray,
    mask: np.ndarray | None,
    rng: np.random.Generator,
    heuristic: dict | None = None,
) -> np.ndarray:
    """The ``random`` or ``heuristic`` baseline's moves on one seat's observations (``heuristic``: its settings)."""
    if name == "random":
        return random_actions(game.action_space, mask, rng, len(obs))
    if name == "heuristic":
        return game.heuristic(obs, mask, rng, **(heuristic or {}))
    raise ValueError(f"unknown baseline {name!r}")
