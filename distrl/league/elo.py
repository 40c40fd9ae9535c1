"""Elo ratings: the standard update for games as they are reported, and a fit for tournaments.

Expected score of A against B: ``E = 1 / (1 + 10 ** ((R_B - R_A) / 400))``; after a game with
score ``S`` (1 win, 0.5 draw, 0 loss) ``R_A += K (S - E)`` and ``R_B += K ((1 - S) - (1 - E))``
(Elo 1978; the FIDE rule). A tournament's table instead fits every rating at once to all its
games (the Bradley-Terry model behind Elo, as BayesElo and Ordo do), so the order in which the
games were played does not matter.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

SCALE = 400.0


def expected(rating_a: float, rating_b: float) -> float:
    """A's expected score against B."""
    return 1.0 / (1.0 + 10.0 ** ((rating_b - rating_a) / SCALE))


def update(rating_a: float, rating_b: float, score_a: float, k: float) -> tuple[float, float]:
    """Both ratings after one game in which A scored ``score_a``."""
    delta = k * (score_a - expected(rating_a, rating_b))
    return rating_a + delta, rating_b - delta


def fit(
    names: list[str],
    games: Iterable[tuple[str, str, float]],
    anchor: str,
    anchor_rating: float,
    iterations: int = 2000,
    prior_games: float = 1.0,
) -> dict[str, float]:
    """Maximum-likelihood Elo ratings for ``games`` ``(a, b, score of a)``, ``anchor`` held at ``anchor_rating``.

    Each pair is given ``prior_games`` virtual draws, so a player who won or lost every game still gets a
    finite rating. Minorisation-maximisation updates (Hunter 2004) on the Bradley-Terry strengths.
    """
    index = {name: i for i, name in enumerate(names)}
    n = len(names)
    wins = np.zeros((n, n))  # wins[i, j]: points i scored against j
    for a, b, score in games:
        wins[index[a], index[b]] += score
        wins[index[b], index[a]] += 1.0 - score
    played = wins + wins.T
    met = played > 0
    wins = wins + np.where(met, prior_games / 2, 0.0)
    played = played + np.where(met, prior_games, 0.0)
    strength = np.ones(n)
    for _ in range(iterations):
        total = wins.sum(axis=1)
        denom = (played / (strength[:, None] + strength[None, :])).sum(axis=1)
        new = np.where(denom > 0, total / np.maximum(denom, 1e-300), strength)
        new = new / new[index[anchor]]
        if np.allclose(new, strength, rtol=1e-10, atol=0):
            strength = new
            break
        strength = new
    ratings = SCALE * np.log10(np.maximum(strength, 1e-300))
    return {name: float(anchor_rating + ratings[i]) for name, i in index.items()}
