"""Connect four (``distrl/ConnectFour-v0``), vectorised in numpy over every copy: PettingZoo's game, move for move.

The same rules, observations, masks and rewards as PettingZoo's ``classic/connect_four-v3``
(seat 0 moves first; observations ``[6, 7, 2]`` from the mover's side, plane 0 its stones, plane
1 the opponent's, row 0 at the top; the legal-move mask is the mover's, all zero for the seat
that waits; a win gives the mover +1 and the other -1, a full board 0 each), so a policy trained
on one plays the other. The difference is speed: every copy moves in one numpy step, where
PettingZoo's game is a Python loop per copy and per move. An illegal move (possible only without
the mask) ends the game: -1 for the mover, 0 for the other, as PettingZoo's TerminateIllegalWrapper
scores it.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from distrl.envs.games.base import StepResult
from distrl.envs.games.connect_four import four_in_a_row, heuristic, landing_rows

ROWS, COLUMNS = 6, 7


class ConnectFourGame:
    shaping_terms = ()
    masked = True
    has_heuristic = True
    team_size = 1

    @staticmethod
    def team_size_of(kwargs: dict) -> int:
        return 1

    def __init__(self, num_envs: int):
        self.num_envs = num_envs
        self.observation_space = gym.spaces.Box(0.0, 1.0, (ROWS, COLUMNS, 2), np.float32)
        self.action_space = gym.spaces.Discrete(COLUMNS)
        self.stones = np.zeros((num_envs, 2, ROWS, COLUMNS), dtype=bool)  # by seat
        self.mover = np.zeros(num_envs, dtype=np.int64)
        self.playing = np.zeros(num_envs, dtype=bool)
        self.moves: list[list] = [[] for _ in range(num_envs)]

    def reset(self, copies: np.ndarray, seed: int | None = None) -> None:
        self.stones[copies] = False
        self.mover[copies] = 0
        self.playing[copies] = True
        for i in np.flatnonzero(copies):
            self.moves[i] = []

    def to_move(self) -> np.ndarray:
        moving = np.zeros((self.num_envs, 2), dtype=bool)
        moving[self.playing, self.mover[self.playing]] = True
        return moving

    def observe(self, seat: int, copies: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        index = np.flatnonzero(copies)
        stones = self.stones[index]
        obs = np.stack([stones[:, seat], stones[:, 1 - seat]], axis=-1).astype(np.float32)
        mask = ~stones[:, :, 0, :].any(axis=1) & (self.playing[index] & (self.mover[index] == seat))[:, None]
        return obs, mask

    def step(self, actions: np.ndarray, acting: np.ndarray) -> StepResult:
        result = StepResult.nothing_yet(self.num_envs)
        rewards, done, score = result.rewards, result.done, result.score
        index = np.flatnonzero(acting.any(axis=1) & self.playing)
        if len(index) == 0:
            return result
        seat = self.mover[index]
        column = np.asarray(actions[index, seat, 0]).astype(np.int64)
        for i, s, c in zip(index, seat, column):
            self.moves[i].append([int(s), int(c)])
        inside = (column >= 0) & (column < COLUMNS)
        row = np.full(len(index), -1)
        row[inside] = landing_rows(self.stones[index[inside]].any(axis=1))[np.arange(inside.sum()), column[inside]]
        legal = row >= 0
        self.stones[index[legal], seat[legal], row[legal], column[legal]] = True
        won = np.zeros(len(index), dtype=bool)
        won[legal] = four_in_a_row(self.stones[index[legal], seat[legal]])
        full = self.stones[index].any(axis=1)[:, 0, :].all(axis=1)
        ended = won | full | ~legal
        mover_reward = np.where(won, 1.0, np.where(legal, 0.0, -1.0))
        other_reward = np.where(won, -1.0, 0.0)
        rewards[index, seat, 0] = mover_reward
        rewards[index, 1 - seat, 0] = other_reward
        seat0 = np.where(seat == 0, mover_reward, other_reward)
        seat1 = np.where(seat == 0, other_reward, mover_reward)
        finished = index[ended]
        done[finished] = True
        score[finished] = np.where(seat0 > seat1, 1.0, np.where(seat0 == seat1, 0.5, 0.0))[ended]
        self.playing[finished] = False
        self.mover[index] = 1 - seat
        return result

    def heuristic(self, obs, mask, rng, noise: float = 0.0):
        return heuristic(obs, mask, rng, noise)

    def record(self, copy: int) -> dict:
        """The moves of the copy's current game: ``[seat, column]`` per move."""
        return {"moves": [list(m) for m in self.moves[copy]]}
