"""League games: two-sided games distrl can train a league on, by ``env.id``, and the ``league`` env kind.

- ``pettingzoo/ID``: a two-player game in PettingZoo's registry (``pettingzoo/classic/connect_four-v3``),
  parallel or turn-based (``pettingzoo_game.py``);
- ``distrl/Duel-v0``: distrl's own simultaneous-move game, 1v1 or between teams (``duel.py``);
- ``distrl/ConnectFour-v0``: PettingZoo's connect four, move for move, vectorised in numpy
  (``connect_four_game.py``).

Both are names, not code paths: building one imports only PettingZoo or distrl. Adding a game of
distrl's own: a file here and a row in ``OWN_GAMES`` (its class says its team size from its kwargs,
``team_size_of``, without building one). The rest of this folder plays them: ``seat.py``
(the learner's seat as a vector env: the ``league`` env kind), ``opponents.py`` (learned opponents
acting inside it), ``matchmaking.py`` (whom the learner plays: the league's plan, and the seat's
first games before one arrives). The league itself (snapshots, ratings, curriculum, tournaments)
is ``distrl/league/``, above this.
"""

from __future__ import annotations

import numpy as np

from distrl.common.spaces import action_space_problem
from distrl.config.league import is_game_id
from distrl.envs.games.base import Game, GameError, StepResult, baseline_actions, random_actions
from distrl.envs.games.connect_four_game import ConnectFourGame
from distrl.envs.games.duel import DuelGame

OWN_GAMES = {"distrl/Duel-v0": DuelGame, "distrl/ConnectFour-v0": ConnectFourGame}
PETTINGZOO = "pettingzoo/"


def make_game(env_id: str, num_envs: int, kwargs: dict | None = None) -> Game:
    """``num_envs`` copies of the game ``env_id``; ``GameError`` (one line) when it cannot be a league game."""
    kwargs = dict(kwargs or {})
    if env_id.startswith(PETTINGZOO):
        from distrl.envs.games.pettingzoo_game import PettingZooGame

        try:
            import pettingzoo  # noqa: F401
        except ImportError:
            raise GameError(f"env.id={env_id!r}: needs PettingZoo; pip install 'distrl[league]'") from None
        return PettingZooGame(env_id[len(PETTINGZOO) :], num_envs, kwargs)
    if env_id in OWN_GAMES:
        try:
            return OWN_GAMES[env_id](num_envs, **kwargs)
        except (TypeError, ValueError) as exc:  # an unknown or out-of-range argument
            raise GameError(f"env.id={env_id!r} with env.kwargs={kwargs}: {exc}") from None
    raise GameError(
        f"env.id={env_id!r}: not a league game (use pettingzoo/REGISTRY_ID, e.g. "
        f"pettingzoo/classic/connect_four-v3, or one of {', '.join(OWN_GAMES)})"
    )


def team_size_of(env_id: str, kwargs: dict | None = None) -> int:
    """Members a side in the game ``env_id`` with ``kwargs``, read without building it (a PettingZoo game's: 1)."""
    game = OWN_GAMES.get(env_id)
    return 1 if game is None else game.team_size_of(dict(kwargs or {}))


def probe_game(config) -> tuple:
    """The learner's observation and action spaces in ``config``'s game, after checking that every curriculum
    stage's game builds and that the league's settings fit it (shaping terms, a scripted player where named)."""
    from distrl.common.errors import describe_error

    league = config.league
    game = first = None
    slots = config.env.num_envs_per_worker
    for stage in league.stages():
        kwargs = {**config.env.kwargs, **stage.env_kwargs}
        try:
            game = make_game(config.env.id, 1, kwargs)
        except GameError:
            raise
        except Exception as exc:  # the game's own constructor refused its kwargs
            raise GameError(
                f"env.id={config.env.id!r} with kwargs {kwargs}: the game could not be built: {describe_error(exc)}"
            ) from None
        if slots % game.team_size:
            raise GameError(
                f"env.num_envs_per_worker={slots}: stage {stage.name!r} plays teams of {game.team_size}, and "
                "each member is a slot of the batch: use a multiple of every stage's team size"
            )
        first = first or (stage, game)
        if (game.observation_space, game.action_space) != (first[1].observation_space, first[1].action_space):
            raise GameError(
                f"league.curriculum: stage {stage.name!r} plays with observations {game.observation_space} "
                f"and actions {game.action_space}, stage {first[0].name!r} with "
                f"{first[1].observation_space} and {first[1].action_space}: one policy plays every stage "
                "(Duel: set env.kwargs.max_team_size to the largest team)"
            )
        if not game.has_heuristic and "heuristic" in stage.opponents and len(stage.opponents) == 1:
            raise GameError(
                f"league.curriculum: stage {stage.name!r} plays only the heuristic, and distrl has no "
                f"scripted player for {config.env.id}"
            )
        if game.has_heuristic and stage.heuristic:  # its settings, tried once on a real observation
            game.reset(np.ones(1, dtype=bool), 0)
            obs, mask = game.observe(0, np.ones(1, dtype=bool))
            try:
                game.heuristic(obs, mask, np.random.default_rng(0), **stage.heuristic)
            except TypeError as exc:
                raise GameError(
                    f"league.curriculum: stage {stage.name!r} heuristic={dict(stage.heuristic)}: {exc} "
                    "(the scripted player takes: noise)"
                ) from None
    unknown = sorted(set(league.reward.shaping) - set(game.shaping_terms))
    if unknown:
        offered = ", ".join(game.shaping_terms) or "none"
        raise GameError(
            f"league.reward.shaping={dict(league.reward.shaping)}: {config.env.id} offers no term "
            f"{', '.join(unknown)} (it offers: {offered})"
        )
    problem = action_space_problem(game.action_space)
    if problem:
        raise GameError(f"env.id={config.env.id!r}: {problem}")
    return game.observation_space, game.action_space


__all__ = [
    "Game",
    "GameError",
    "OWN_GAMES",
    "StepResult",
    "baseline_actions",
    "is_game_id",
    "make_game",
    "probe_game",
    "random_actions",
    "team_size_of",
]
