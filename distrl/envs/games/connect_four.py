"""Connect four's scripted player: win if it can, block the opponent's win, else a centre-weighted random move.

Works on PettingZoo's observation ``[6, 7, 2]`` from the mover's side (plane 0: its stones,
plane 1: the opponent's; row 0 at the top, stones fall to the highest free row index).
"""

from __future__ import annotations

import numpy as np

CENTRE_WEIGHTS = np.array([1.0, 2.0, 3.0, 4.0, 3.0, 2.0, 1.0])


def four_in_a_row(board: np.ndarray) -> np.ndarray:
    """``board [B, 6, 7]`` bool: whether each holds four in a row (any direction)."""
    b = board
    rows = b[:, :, 0:4] & b[:, :, 1:5] & b[:, :, 2:6] & b[:, :, 3:7]
    cols = b[:, 0:3, :] & b[:, 1:4, :] & b[:, 2:5, :] & b[:, 3:6, :]
    down = b[:, 0:3, 0:4] & b[:, 1:4, 1:5] & b[:, 2:5, 2:6] & b[:, 3:6, 3:7]
    up = b[:, 3:6, 0:4] & b[:, 2:5, 1:5] & b[:, 1:4, 2:6] & b[:, 0:3, 3:7]
    return rows.any((1, 2)) | cols.any((1, 2)) | down.any((1, 2)) | up.any((1, 2))


def landing_rows(occupied: np.ndarray) -> np.ndarray:
    """``[B, 7]``: the row a stone dropped in each column lands on (-1: the column is full)."""
    free = ~occupied  # [B, 6, 7]
    rows = np.arange(6)[None, :, None]
    return np.where(free, rows, -1).max(axis=1)


def completes_four(stones: np.ndarray, landing: np.ndarray) -> np.ndarray:
    """``[B, 7]``: whether dropping a stone of ``stones [B, 6, 7]`` in each column makes four (a full column: no)."""
    batch = len(stones)
    boards = np.repeat(stones[:, None], 7, axis=1)  # [B, 7 columns, 6, 7]: one board per column's drop
    b, c = np.nonzero(landing >= 0)
    boards[b, c, landing[b, c], c] = True
    out = four_in_a_row(boards.reshape(batch * 7, 6, 7)).reshape(batch, 7)
    return out & (landing >= 0)


def heuristic(obs: np.ndarray, mask: np.ndarray | None, rng: np.random.Generator, noise: float = 0.0) -> np.ndarray:
    """Moves for observations ``[B, 6, 7, 2]`` (any dtype) and legal-move masks ``[B, 7]``."""
    own, other = obs[..., 0] > 0.5, obs[..., 1] > 0.5
    landing = landing_rows(own | other)
    legal = landing >= 0 if mask is None else mask.astype(bool)
    win = completes_four(own, landing) & legal
    block = completes_four(other, landing) & legal
    weights = np.where(legal, CENTRE_WEIGHTS, 0.0)
    weights = np.where(block.any(1, keepdims=True), block * 1.0, weights)
    weights = np.where(win.any(1, keepdims=True), win * 1.0, weights)
    if noise > 0:
        random_rows = rng.random(len(obs)) < noise
        weights[random_rows] = legal[random_rows].astype(np.float64)
    cdf = weights.cumsum(axis=1)
    u = (1.0 - rng.random(len(obs))) * cdf[:, -1]
    return np.minimum((cdf < u[:, None]).sum(axis=1), 6)
