"""League games: two-player games distrl can train a league on, by ``env.id``.

- ``pettingzoo/ID``: a two-player game in PettingZoo's registry (``pettingzoo/classic/connect_four-v3``),
  parallel or turn-based (``pettingzoo_game.py``);
- ``distrl/Duel-v0``: distrl's own simultaneous-move game (``duel.py``).

Both are names, not code paths: building one imports only PettingZoo or distrl. Adding a game of
distrl's own: a file here and a row in ``OWN_GAMES``.
"""

from __future__ import annotations

import importlib

import numpy as np

from distrl.config.league import is_game_id
from distrl.league.games.base import Game, GameError, StepResult, baseline_actions, random_actions

OWN_GAMES = {"distrl/Duel-v0": "distrl.league.games.duel:DuelGame"}
PETTINGZOO = "pettingzoo/"


def make_game(env_id: str, num_envs: int, kwargs: dict | None = None) -> Game:
    """``num_envs`` copies of the game ``env_id``; ``GameError`` (one line) when it cannot be a league game."""
    kwargs = dict(kwargs or {})
    if env_id.startswith(PETTINGZOO):
        from distrl.league.games.pettingzoo_game import PettingZooGame

        try:
            import pettingzoo  # noqa: F401
        except ImportError:
            raise GameError(f"env.id={env_id!r}: needs PettingZoo; pip install 'distrl[league]'") from None
        return PettingZooGame(env_id[len(PETTINGZOO):], num_envs, kwargs)
    if env_id in OWN_GAMES:
        module, _, attr = OWN_GAMES[env_id].partition(":")
        try:
            return getattr(importlib.import_module(module), attr)(num_envs, **kwargs)
        except TypeError as exc:
            raise GameError(f"env.id={env_id!r} with env.kwargs={kwargs}: {exc}") from None
    raise GameError(f"env.id={env_id!r}: not a league game (use pettingzoo/REGISTRY_ID, e.g. "
                    f"pettingzoo/classic/connect_four-v3, or one of {', '.join(OWN_GAMES)})")  # fmt: skip


def probe_game(config) -> tuple:
    """The learner's observation and action spaces in ``config``'s game, after checking that every curriculum
    stage's game builds and that the league's settings fit it (shaping terms, a scripted player where named)."""
    from distrl.common.errors import describe_error
    from distrl.models.fit import action_space_problem

    league = config.league
    game = None
    for stage in league.stages():
        kwargs = {**config.env.kwargs, **stage.env_kwargs}
        try:
            game = make_game(config.env.id, 1, kwargs)
        except GameError:
            raise
        except Exception as exc:  # the game's own constructor refused its kwargs
            raise GameError(f"env.id={config.env.id!r} with kwargs {kwargs}: the game could not be built: "
                            f"{describe_error(exc)}") from None  # fmt: skip
        if not game.has_heuristic and "heuristic" in stage.opponents and len(stage.opponents) == 1:
            raise GameError(f"league.curriculum: stage {stage.name!r} plays only the heuristic, and distrl has no "
                            f"scripted player for {config.env.id}")  # fmt: skip
        if game.has_heuristic and stage.heuristic:  # its settings, tried once on a real observation
            game.reset(np.ones(1, dtype=bool), 0)
            obs, mask = game.observe(0, np.ones(1, dtype=bool))
            try:
                game.heuristic(obs, mask, np.random.default_rng(0), **stage.heuristic)
            except TypeError as exc:
                raise GameError(f"league.curriculum: stage {stage.name!r} heuristic={dict(stage.heuristic)}: {exc} "
                                "(the scripted player takes: noise)") from None  # fmt: skip
    unknown = sorted(set(league.reward.shaping) - set(game.shaping_terms))
    if unknown:
        offered = ", ".join(game.shaping_terms) or "none"
        raise GameError(f"league.reward.shaping={dict(league.reward.shaping)}: {config.env.id} offers no term "
                        f"{', '.join(unknown)} (it offers: {offered})")  # fmt: skip
    problem = action_space_problem(game.action_space)
    if problem:
        raise GameError(f"env.id={config.env.id!r}: {problem}")
    return game.observation_space, game.action_space


__all__ = ["Game", "GameError", "OWN_GAMES", "StepResult", "baseline_actions", "is_game_id", "make_game", "probe_game",
           "random_actions"]
