"""Duel (``distrl/Duel-v0``): two teams of discs in a round arena, moving at once; push the others out to win.

A simultaneous-move game, vectorised in numpy over every copy (no Python loop per copy), so a
league is not only board games. Each side has ``team_size`` discs (1: the 1v1 duel; 2: 2v2, ...).
Each step every disc in play chooses an acceleration: one of 9 (still and 8 directions) or, with
``continuous=True``, a 2-d force in [-1, 1]. Discs collide elastically (equal masses). A disc
whose centre leaves the arena is out of play. A side with no disc left loses; both at once is a
draw; at ``max_steps`` the side with more discs in play wins, equal is a draw (``tiebreak="centre"``:
the side whose discs in play are nearer the centre, on average, wins, as in king of the hill).

Observations, one row per disc, each disc seeing itself first: its position and velocity, then
its teammates', then the opponents', then the share of time left. The rows are laid out for
``max_team_size`` discs a side (default ``team_size``), so a league's curriculum can step from
1v1 to 3v3 with one model: with more than one disc a side, each other disc has a flag first (1
in play, 0 out or absent) and zeros for the absent ones. 1v1 is 9 numbers (own, the other's,
time).

Rewards, per disc: the step that ends the game gives every disc in play before it its side's
result (+1 win, -1 loss, 0 draw); a disc pushed out while the game goes on has lost: -1, and its
episode ends there. Shaping terms (``league.reward.shaping``), per disc: ``centre``: the
decrease of its own distance from the centre this step; ``push``: the mean increase of the
opponents' distances (those in play before the step).
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

    @staticmethod
    def team_size_of(kwargs: dict) -> int:
        """Discs a side with these constructor ``kwargs``, without building a game."""
        return int(kwargs.get("team_size", 1))

    def __init__(
        self,
        num_envs: int,
        arena_radius: float = 1.0,
        disc_radius: float = 0.1,
        accel: float = 0.01,
        friction: float = 0.9,
        max_steps: int = 200,
        continuous: bool = False,
        team_size: int = 1,
        max_team_size: int | None = None,
        tiebreak: str = "none",
    ):
        max_team_size = team_size if max_team_size is None else max_team_size
        if tiebreak not in ("none", "centre"):
            raise ValueError(f"tiebreak={tiebreak!r}: none or centre")
        self.tiebreak = tiebreak
        if not 1 <= int(team_size) <= int(max_team_size):
            raise ValueError(
                f"team_size={team_size}, max_team_size={max_team_size}: need 1 <= team_size <= max_team_size"
            )
        self.num_envs = num_envs
        self.arena, self.disc, self.accel, self.friction, self.max_steps = (
            arena_radius,
            disc_radius,
            accel,
            friction,
            max_steps,
        )
        self.continuous = continuous
        self.team_size, self.max_team_size = int(team_size), int(max_team_size)
        self.flags = self.max_team_size > 1  # a flag per other disc: in play or not
        size = 4 + (2 * self.max_team_size - 1) * (4 + self.flags) + 1
        limit = np.full(size, np.inf, dtype=np.float32)
        self.observation_space = gym.spaces.Box(-limit, limit, (size,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32) if continuous else gym.spaces.Discrete(9)
        t = self.team_size
        self.pos = np.zeros((num_envs, 2, t, 2))
        self.vel = np.zeros((num_envs, 2, t, 2))
        self.in_play = np.zeros((num_envs, 2, t), dtype=bool)
        self.t = np.zeros(num_envs, dtype=np.int64)
        self.live = np.zeros(num_envs, dtype=bool)
        self.rng = np.random.default_rng()
        self.trace: list[list] = [[] for _ in range(num_envs)]
        # Start angles of a side's discs around its direction, a little more than a disc apart on the start circle.
        spacing = 2 * np.arcsin(min(1.0, 1.25 * disc_radius / (0.5 * arena_radius)))
        self._offsets = (np.arange(t) - (t - 1) / 2) * spacing

    def reset(self, copies: np.ndarray, seed: int | None = None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        k = int(copies.sum())
        angle = self.rng.uniform(0, 2 * np.pi, k)[:, None] + self._offsets  # [k, t]
        start = 0.5 * self.arena * np.stack([np.cos(angle), np.sin(angle)], axis=2)
        self.pos[copies, 0], self.pos[copies, 1] = start, -start  # facing each other across the centre
        self.vel[copies] = 0.0
        self.in_play[copies] = True
        self.t[copies] = 0
        self.live[copies] = True
        for i in np.flatnonzero(copies):
            self.trace[i] = [self._frame(i)]

    def to_move(self) -> np.ndarray:
        return np.repeat(self.live[:, None], 2, axis=1)

    def observe(self, seat: int, copies: np.ndarray) -> tuple[np.ndarray, None]:
        """``[k * team_size, ...]``: every disc of ``seat``'s side in ``copies``, copy by copy."""
        t, m = self.team_size, self.max_team_size
        pos, vel, on = self.pos[copies], self.vel[copies] * 10, self.in_play[copies]  # [k, 2, t, ...]
        k = len(pos)
        time_left = np.repeat(1.0 - self.t[copies] / self.max_steps, t)[:, None]
        # Every disc's features: (flag,) position, velocity; zeros for a disc out of play (when flagged).
        parts = [on[..., None]] if self.flags else []
        disc = np.concatenate([*parts, pos, vel], axis=3) * (on[..., None] if self.flags else 1.0)  # [k, 2, t, f]
        f = disc.shape[3]
        mates = np.zeros((k, t, m - 1, f))
        for i in range(t):
            others = [j for j in range(t) if j != i]
            mates[:, i, : len(others)] = disc[:, seat, others]
        rivals = np.zeros((k, t, m, f))
        rivals[:, :, :t] = disc[:, 1 - seat][:, None]
        own = np.concatenate([pos[:, seat], vel[:, seat]], axis=2)  # [k, t, 4]
        obs = np.concatenate(
            [own.reshape(k * t, 4), mates.reshape(k * t, -1), rivals.reshape(k * t, -1), time_left], axis=1
        )
        return obs.astype(np.float32), None

    def _force(self, actions: np.ndarray) -> np.ndarray:
        if self.continuous:
            return np.clip(np.asarray(actions, dtype=np.float64), -1.0, 1.0)
        return DIRECTIONS[np.asarray(actions, dtype=np.int64)]

    def step(self, actions: np.ndarray, acting: np.ndarray) -> StepResult:
        """``actions [N, 2, team_size, ...]``; a side acts where ``acting [N, 2]``, each of its discs in play."""
        n, t = self.num_envs, self.team_size
        moving = acting.any(axis=1) & self.live
        was_on = self.in_play.copy()
        before = np.linalg.norm(self.pos, axis=3)  # [N, 2, t]
        pushing = (acting[..., None] & was_on)[..., None]
        vel = np.where(was_on[..., None], self.vel * self.friction + self._force(actions) * pushing * self.accel, 0.0)
        pos = self.pos + vel
        self._collide(pos.reshape(n, 2 * t, 2), vel.reshape(n, 2 * t, 2), was_on.reshape(n, 2 * t))
        self.pos[moving], self.vel[moving] = pos[moving], vel[moving]
        self.t[moving] += 1
        after = np.linalg.norm(self.pos, axis=3)
        self.in_play &= ~(moving[:, None, None] & (after > self.arena))
        left = self.in_play.sum(axis=2)  # [N, 2]
        timed_out = self.t >= self.max_steps
        ended = moving & ((left == 0).any(axis=1) | timed_out)
        lead = (left[:, 0] - left[:, 1]).astype(np.float64)
        if self.tiebreak == "centre":  # equal discs at the time limit: the side nearer the centre, on average, wins
            mean_r = (after * self.in_play).sum(axis=2) / np.maximum(left, 1)
            lead = np.where((lead == 0) & timed_out & (left > 0).all(axis=1), mean_r[:, 1] - mean_r[:, 0], lead)
        score = np.full(n, np.nan)
        score[ended] = np.where(lead[ended] > 0, 1.0, np.where(lead[ended] < 0, 0.0, 0.5))
        rewards = np.zeros((n, 2, t))
        out_now = was_on & ~self.in_play & moving[:, None, None]
        rewards[out_now] = -1.0  # out while the game goes on: lost (the end's result replaces it below)
        side_result = np.stack([2 * score - 1, 1 - 2 * score], axis=1)  # [N, 2]
        rewards[ended] = np.where(was_on[ended], side_result[ended][..., None], 0.0)
        self.live &= ~ended
        for i in np.flatnonzero(moving):
            self.trace[i].append(self._frame(i))
        moved = (after - before) * (moving[:, None, None] & was_on)  # [N, 2, t]
        pushed = moved.sum(axis=2) / np.maximum(was_on.sum(axis=2), 1)  # [N, 2]: a side's discs, on average
        shaping = {"centre": -moved, "push": np.repeat(pushed[:, ::-1, None], t, axis=2)}
        return StepResult(rewards, ended, score, shaping, out=out_now & ~ended[:, None, None])

    def _collide(self, pos: np.ndarray, vel: np.ndarray, on: np.ndarray) -> None:
        """Elastic collisions of equal masses between discs in play, pair by pair (in place): swap the velocity
        components along the line between the centres, and part the overlap."""
        for a in range(pos.shape[1]):
            for b in range(a + 1, pos.shape[1]):
                gap = pos[:, a] - pos[:, b]
                dist = np.linalg.norm(gap, axis=1)
                hit = (dist < 2 * self.disc) & on[:, a] & on[:, b]
                if not hit.any():
                    continue
                normal = gap[hit] / np.maximum(dist[hit], 1e-9)[:, None]
                va, vb = vel[hit, a], vel[hit, b]
                exchange = np.minimum(((va - vb) * normal).sum(axis=1, keepdims=True), 0.0)  # only while closing in
                vel[hit, a] = va - exchange * normal
                vel[hit, b] = vb + exchange * normal
                overlap = (2 * self.disc - dist[hit])[:, None] / 2
                pos[hit, a] += normal * overlap
                pos[hit, b] -= normal * overlap

    def heuristic(self, obs: np.ndarray, mask, rng: np.random.Generator, noise: float = 0.0) -> np.ndarray:
        """Each disc charges at the nearest opponent, aiming past it away from the centre; back to the centre when
        near the edge. With the centre tiebreak it also holds the centre: it charges only an opponent nearer the
        centre than itself, and otherwise moves to the centre."""
        obs = obs.astype(np.float64)
        own = obs[:, 0:2]
        f, m = 4 + self.flags, self.max_team_size
        start = 4 + (m - 1) * f
        rivals = obs[:, start : start + m * f].reshape(len(obs), m, f)
        on = rivals[:, :, 0] > 0.5 if self.flags else np.ones((len(obs), m), dtype=bool)
        where = rivals[:, :, self.flags : self.flags + 2]
        distance = np.where(on, np.linalg.norm(where - own[:, None], axis=2), np.inf)
        other = where[np.arange(len(obs)), distance.argmin(axis=1)]
        outward = other / np.maximum(np.linalg.norm(other, axis=1, keepdims=True), 1e-6)
        target = other + 0.3 * outward - own
        if self.tiebreak == "centre":  # an opponent farther out is losing the tiebreak already: hold the centre
            hold = np.linalg.norm(other, axis=1) >= np.linalg.norm(own, axis=1)
            target[hold] = -own[hold]
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

    def _frame(self, copy: int) -> list:
        """One step of a replay: each side's discs' positions, None for a disc out of play."""
        return [
            [
                self.pos[copy, s, i].round(4).tolist() if self.in_play[copy, s, i] else None
                for i in range(self.team_size)
            ]
            for s in (0, 1)
        ]

    def record(self, copy: int) -> dict:
        return {
            "positions": [list(p) for p in self.trace[copy]],
            "arena_radius": self.arena,
            "disc_radius": self.disc,
            "team_size": self.team_size,
        }

    def render(self, positions: list, size: int = 160) -> list[np.ndarray]:
        """RGB frames ``[size, size, 3]`` of a recorded game (seat 0's side red, seat 1's blue)."""
        ys, xs = np.mgrid[0:size, 0:size]
        scale = size / (2.2 * self.arena)
        cx = cy = size / 2
        frames = []
        ring = np.abs(np.hypot(xs - cx, ys - cy) - self.arena * scale) < 1.5
        for step in positions:
            frame = np.full((size, size, 3), 245, dtype=np.uint8)
            frame[ring] = (60, 60, 60)
            for side, colour in ((0, (220, 40, 40)), (1, (40, 80, 220))):
                for disc in step[side]:
                    if disc is not None:
                        px, py = cx + disc[0] * scale, cy - disc[1] * scale
                        frame[np.hypot(xs - px, ys - py) < self.disc * scale] = colour
            frames.append(frame)
        return frames
