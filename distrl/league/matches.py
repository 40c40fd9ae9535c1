"""Games between two players outside training: ``distrl eval`` of a league run, and tournaments.

A player is a function ``(obs, mask, rng) -> actions`` on one seat's observations (a row per member of its
team; a team's members all act with one player): the random
and scripted baselines, or a trained policy (the run's learner or a snapshot) acting in eager
torch with its action masks, greedily or by sampling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from distrl.common.threads import torch_threads
from distrl.envs.games import Game, baseline_actions, make_game

Player = Callable[[np.ndarray, np.ndarray | None, np.random.Generator], np.ndarray]


@dataclass
class Match:
    score: float  # player A's: 1 win, 0.5 draw, 0 loss
    seat: int  # player A's seat
    record: dict  # the game's moves (and positions where it has them), for replays


def baseline_player(game: Game, name: str, heuristic: dict | None = None) -> Player:
    return lambda obs, mask, rng: baseline_actions(game, name, obs, mask, rng, heuristic)


def model_player(model, deterministic: bool) -> Player:
    """A trained actor-critic acting on numpy observations (eager torch, CPU)."""
    model = model.eval()
    dist = model.dist

    def act(obs: np.ndarray, mask: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        with torch.inference_mode(), torch_threads(1):  # as a worker acts: one thread, whatever the cores' load
            pd_params = model(torch.from_numpy(np.ascontiguousarray(obs, dtype=np.float32)))[0].numpy()
        if deterministic:
            return dist.greedy_numpy(pd_params, mask)
        return dist.sample_numpy(pd_params, rng, mask)[0]

    return act


def play(
    env_id: str, kwargs: dict, player_a: Player, player_b: Player, games: int, rng: np.random.Generator
) -> list[Match]:
    """``games`` games of A against B at once, A in seat 0 in the even ones and seat 1 in the odd ones."""
    game = make_game(env_id, games, kwargs)
    seat_a = np.arange(games) % 2
    game.reset(np.ones(games, dtype=bool), int(rng.integers(2**31)))
    live = np.ones(games, dtype=bool)
    matches: list[Match | None] = [None] * games
    space = game.action_space
    while live.any():
        to_move = game.to_move() & live[:, None]
        joint = np.zeros((games, 2, game.team_size, *space.shape), dtype=space.dtype)
        for seat in (0, 1):
            for player, sits in ((player_a, seat_a == seat), (player_b, seat_a != seat)):
                copies = to_move[:, seat] & sits
                if copies.any():  # every member of the seat's team acts with the player, one batch
                    obs, mask = game.observe(seat, copies)
                    joint[copies, seat] = np.asarray(player(obs, mask, rng)).reshape(
                        int(copies.sum()), game.team_size, *space.shape
                    )
        result = game.step(joint, to_move)
        for i in np.flatnonzero(result.done & live):
            score = result.score[i] if seat_a[i] == 0 else 1.0 - result.score[i]
            matches[i] = Match(float(score), int(seat_a[i]), game.record(int(i)))
        live &= ~result.done
    return matches
