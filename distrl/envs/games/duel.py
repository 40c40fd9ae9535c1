"""Duel (``distrl/Duel-v0``): two discs in a round arena, moving at once; push the other out to win.

A simultaneous-move game, vectorised in numpy over every copy (no Python loop per copy), so a
league is not only board games. Each step both players choose an acceleration: one of 9
(still and 8 directions) or, with ``continuous=True``, a 2-d force in [-1, 1]. Discs collide
elastically (equal masses). A disc whose centre leaves the arena loses; both at once, or
``max_steps`` reached, is a draw. Each seat observes itself first: its position and velocity,
the other's, and the share of time left (9 numbers), so both seats see the game alike.

Shaping terms (``league.reward.shaping``): ``centre``: the decrease of the player's own distance
from the centre this step; ``push``: the increase of the opponent's.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from distrl.envs.games.base import StepResult

DIRECTIONS = np.array([[0, 0]] + [[np.cos(a), np.sin(a)] for a in np.arange(8) * np.pi / 4], dtype=np.float64)


class DuelGame:
    shaping_terms = ("centre", "push")
    masked = False
    has_heuristic = True

    def __init__(self, num_envs: int, arena_radius: float = 1.0, disc_radius: float = 0.1, accel: float = 0.01,
                 friction: float = 0.9, max_steps: int = 200, continuous: bool = False):  # fmt: skip
        self.num_envs = num_envs
        self.arena, self.disc, self.accel, self.friction, self.max_steps = arena_radius, disc_radius, accel, friction, max_steps
        self.continuous = continuous
        limit = np.full(9, np.inf, dtype=np.float32)
        self.observation_space = gym.spaces.Box(-limit, limit, (9,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32) if continuous else gym.spaces.Discrete(9)
        self.pos = np.zeros((num_envs, 2, 2))
        self.vel = np.zeros((num_envs, 2, 2))
        self.t = np.zeros(num_envs, dtype=np.int64)
        self.live = np.zeros(num_envs, dtype=bool)
        self.rng = np.random.default_rng()
        self.trace: list[list] = [[] for _ in range(num_envs)]

    def reset(self, copies: np.ndarray, seed: int | None = None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        k = int(copies.sum())
        angle = self.rng.uniform(0, 2 * np.pi, k)
        start = 0.5 * self.arena * np.stack([np.cos(angle), np.sin(angle)], axis=1)
        self.pos[copies, 0], self.pos[copies, 1] = start, -start  # facing each other across the centre
        self.vel[copies] = 0.0
        self.t[copies] = 0
        self.live[copies] = True
        for i in np.flatnonzero(copies):
            self.trace[i] = [self.pos[i].round(4).tolist()]

    def to_move(self) -> np.ndarray:
        return np.repeat(self.live[:, None], 2, axis=1)

    def observe(self, seat: int, copies: np.ndarray) -> tuple[np.ndarray, None]:
        own, other = seat, 1 - seat
        time_left = 1.0 - self.t[copies] / self.max_steps
        obs = np.concatenate([self.pos[copies, own], self.vel[copies, own] * 10, self.pos[copies, other],
                              self.vel[copies, other] * 10, time_left[:, None]], axis=1)  # fmt: skip
        return obs.astype(np.float32), None

    def _force(self, actions: np.ndarray) -> np.ndarray:
        if self.continuous:
            return np.clip(np.asarray(actions, dtype=np.float64), -1.0, 1.0)
        return DIRECTIONS[np.asarray(actions, dtype=np.int64)]

    def step(self, actions: np.ndarray, acting: np.ndarray) -> StepResult:
        n = self.num_envs
        moving = acting.any(axis=1) & self.live
        before = np.linalg.norm(self.pos, axis=2)  # [N, 2]
        force = self._force(actions) * acting[..., None]  # [N, 2, 2]
        vel = self.vel * self.friction + force * self.accel
        pos = self.pos + vel
        # Elastic collision of equal masses: swap the velocity components along the line between the centres.
        gap = pos[:, 0] - pos[:, 1]
        dist = np.linalg.norm(gap, axis=1)
        hit = dist < 2 * self.disc
        if hit.any():
            normal = gap[hit] / np.maximum(dist[hit], 1e-9)[:, None]
            v0, v1 = vel[hit, 0], vel[hit, 1]
            exchange = np.minimum(((v0 - v1) * normal).sum(axis=1, keepdims=True), 0.0)  # only while closing in
            vel[hit, 0] = v0 - exchange * normal
            vel[hit, 1] = v1 + exchange * normal
            overlap = (2 * self.disc - dist[hit])[:, None] / 2
            pos[hit, 0] += normal * overlap
            pos[hit, 1] -= normal * overlap
        self.pos[moving], self.vel[moving] = pos[moving], vel[moving]
        self.t[moving] += 1
        after = np.linalg.norm(self.pos, axis=2)
        out = after > self.arena
        ended = moving & (out.any(axis=1) | (self.t >= self.max_steps))
        score = np.full(n, np.nan)
        score[ended] = np.where(out[ended, 1] & ~out[ended, 0], 1.0, np.where(out[ended, 0] & ~out[ended, 1], 0.0, 0.5))
        rewards = np.zeros((n, 2))
        rewards[ended, 0] = 2 * score[ended] - 1
        rewards[ended, 1] = -rewards[ended, 0]
        self.live &= ~ended
        for i in np.flatnonzero(moving):
            self.trace[i].append(self.pos[i].round(4).tolist())
        moved = (after - before) * moving[:, None]
        shaping = {"centre": -moved, "push": moved[:, ::-1].copy()}
        return StepResult(rewards, ended, score, shaping)

    def heuristic(self, obs: np.ndarray, mask, rng: np.random.Generator, noise: float = 0.0) -> np.ndarray:
        """Charge at the opponent, aiming past it away from the centre; back to the centre when near the edge."""
        own, other = obs[:, 0:2].astype(np.float64), obs[:, 4:6].astype(np.float64)
        outward = other / np.maximum(np.linalg.norm(other, axis=1, keepdims=True), 1e-6)
        target = other + 0.3 * outward - own
        near_edge = np.linalg.norm(own, axis=1) > 0.75 * self.arena
        target[near_edge] = -own[near_edge]
        direction = target / np.maximum(np.linalg.norm(target, axis=1, keepdims=True), 1e-6)
        if self.continuous:
            actions = direction.astype(np.float32)
            wild = rng.random(len(obs)) < noise
            actions[wild] = rng.uniform(-1, 1, (int(wild.sum()), 2)).astype(np.float32)
            return actions
        actions = np.argmax(direction @ DIRECTIONS[1:].T, axis=1) + 1
        wild = rng.random(len(obs)) < noise
        actions[wild] = rng.integers(0, 9, int(wild.sum()))
        return actions

    def record(self, copy: int) -> dict:
        return {"positions": [list(p) for p in self.trace[copy]], "arena_radius": self.arena, "disc_radius": self.disc}

    def render(self, positions: list, size: int = 160) -> list[np.ndarray]:
        """RGB frames ``[size, size, 3]`` of a recorded game (seat 0 red, seat 1 blue)."""
        ys, xs = np.mgrid[0:size, 0:size]
        scale = size / (2.2 * self.arena)
        cx = cy = size / 2
        frames = []
        ring = np.abs(np.hypot(xs - cx, ys - cy) - self.arena * scale) < 1.5
        for step in positions:
            frame = np.full((size, size, 3), 245, dtype=np.uint8)
            frame[ring] = (60, 60, 60)
            for seat, colour in ((0, (220, 40, 40)), (1, (40, 80, 220))):
                px, py = cx + step[seat][0] * scale, cy - step[seat][1] * scale
                frame[np.hypot(xs - px, ys - py) < self.disc * scale] = colour
            frames.append(frame)
        return frames
