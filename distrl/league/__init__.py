"""Self-play: a league of snapshots and baselines rated by Elo, its matchmaking plan, a curriculum, tournaments
(the games, and the learner's seat in them: ``distrl/envs/games/``). Names are loaded on first use (the config
imports ``distrl.config.league`` without torch)."""

from __future__ import annotations

from distrl.common.lazy import lazy_exports

_EXPORTS = {
    "League": "distrl.league.league",
    "LeagueConfig": "distrl.config.league",
    "LeagueRun": "distrl.league.run",
    "run_tournament": "distrl.league.tournament",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
