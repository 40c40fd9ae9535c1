"""The league's state: its members, their Elo ratings, the learner's record against each, the curriculum stage.

Pure: no Ray, no torch. The driver's ``LeagueRun`` feeds it the match results workers report
and asks it for snapshots, promotions and each opponent's share of games; ``state()`` goes into
every checkpoint and ``from_state`` continues it on ``--resume``.

In a team game (Duel 2v2) every member of a team acts with one player, so a member below is a
team: a snapshot's rating is its team's, and a game is one result whatever the team size.

Members: the scripted baselines ``random`` (uniform over legal moves; its rating is the anchor,
held at ``league.elo.initial``) and ``heuristic`` (the game's scripted player), and frozen
snapshots of the learner, ``main@ITERATION``. The learner itself is ``main``; games against its
own current weights (``latest``, mirror self-play) move no rating.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from distrl.config.league import BASELINES, LeagueConfig
from distrl.envs.games.matchmaking import WinRates, opponent_shares
from distrl.league import elo

ANCHOR = "random"


@dataclass
class Member:
    name: str
    kind: str  # "baseline" | "snapshot"
    iteration: int  # when it was frozen (0 for baselines)
    rating: float
    weights: dict | None = None  # a snapshot's model state (numpy arrays)


@dataclass
class Record:
    """Wins, draws and losses of the learner against one opponent (or group), both seats and per seat."""

    wins: int = 0
    draws: int = 0
    losses: int = 0
    by_seat: dict = field(default_factory=lambda: {0: [0, 0, 0], 1: [0, 0, 0]})

    def add(self, score: float, seat: int) -> None:
        slot = 0 if score > 0.5 else 1 if score == 0.5 else 2
        self.wins += slot == 0
        self.draws += slot == 1
        self.losses += slot == 2
        self.by_seat[seat][slot] += 1

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    def rates(self) -> tuple[float, float, float]:
        n = max(1, self.games)
        return self.wins / n, self.draws / n, self.losses / n


def group_of(opponent: str) -> str:
    """``latest``, ``random``, ``heuristic`` or ``snapshots``."""
    return opponent if opponent in ("latest", *BASELINES) else "snapshots"


class League:
    def __init__(self, cfg: LeagueConfig):
        self.cfg = cfg
        self.rating = cfg.elo.initial  # the learner's ("main")
        self.members: dict[str, Member] = {name: Member(name, "baseline", 0, cfg.elo.initial) for name in BASELINES}
        self.rates = WinRates(cfg.matchmaking.win_rate_decay)
        self.totals: dict[str, Record] = {}  # by opponent, the whole run
        self.stage = 0
        self.stage_rates = WinRates(cfg.matchmaking.win_rate_decay)  # against this stage's opponents (not latest)
        self.stage_games = 0
        self.events: list[dict] = []  # snapshots and stage changes, in order
        self.games = 0
        self.pool_rates = WinRates(cfg.matchmaking.win_rate_decay)  # against any snapshot, since the newest was taken
        self.pool_games = 0

    # --- members -------------------------------------------------------------------------
    @property
    def snapshots(self) -> list[Member]:
        return sorted((m for m in self.members.values() if m.kind == "snapshot"), key=lambda m: m.iteration)

    def add_snapshot(self, iteration: int, weights: dict) -> Member:
        """Freeze the learner's weights as ``main@ITERATION``, rated as the learner is now; drop the oldest past
        ``league.max_snapshots``."""
        member = Member(f"main@{iteration}", "snapshot", iteration, self.rating, weights)
        self.members[member.name] = member
        dropped = self.snapshots[: max(0, len(self.snapshots) - self.cfg.max_snapshots)]
        for old in dropped:
            del self.members[old.name]
        self.events.append(
            {
                "event": "snapshot",
                "iteration": iteration,
                "name": member.name,
                "elo": round(self.rating, 1),
                "dropped": [m.name for m in dropped],
            }
        )
        self.pool_rates, self.pool_games = WinRates(self.cfg.matchmaking.win_rate_decay), 0
        return member

    def wants_snapshot(self, iteration: int) -> str | None:
        """Why a snapshot is due after ``iteration`` (None: not yet)."""
        newest = self.snapshots[-1] if self.snapshots else None
        if newest is None:
            return "the league's first member"
        every = self.cfg.snapshot_every
        if every and iteration - newest.iteration >= every:
            return f"every {every} iterations"
        threshold = self.cfg.snapshot_win_rate
        if threshold is None:
            return None
        if self.cfg.snapshot_against == "pool":  # games since the newest snapshot, so a new one is not due at once
            played, rate, against = self.pool_games, self.pool_rates.rate("pool"), "the pool"
        else:
            played = self.totals[newest.name].games if newest.name in self.totals else 0
            rate, against = self.rates.rate(newest.name), newest.name
        if played >= self.cfg.snapshot_min_games and rate >= threshold:
            return f"win rate {rate:.2f} against {against} >= {threshold}"
        return None

    # --- games ---------------------------------------------------------------------------
    def record(self, results: list[dict]) -> None:
        """Fold in finished games: ``{"opponent", "score"`` (the learner's: 1, 0.5, 0), ``"seat"}``, and
        ``"stage"`` (the curriculum stage the game was played in; only this stage's games count toward its
        promotion)."""
        k = self.cfg.elo.k
        allowed = self.current_stage.opponents
        for result in results:
            name, score, seat = result["opponent"], float(result["score"]), int(result["seat"])
            self.games += 1
            self.totals.setdefault(name, Record()).add(score, seat)
            self.rates.record(name, score)
            if group_of(name) == "snapshots":
                self.pool_rates.record("pool", score)
                self.pool_games += 1
            # Mirror games say nothing of progress, nor do games of an earlier stage still arriving (a worker
            # finishes its batch, under async several, before it plays the new stage's game).
            this_stage = int(result.get("stage", self.stage)) == self.stage
            if name != "latest" and group_of(name) in allowed and this_stage:
                self.stage_rates.record("stage", score)
                self.stage_games += 1
            member = self.members.get(name)
            if member is None:  # latest (its own weights), or a snapshot dropped since the plan was made
                continue
            new_main, new_opponent = elo.update(self.rating, member.rating, score, k)
            self.rating = new_main
            if name != ANCHOR:
                member.rating = new_opponent

    # --- matchmaking and the curriculum ------------------------------------------------------
    @property
    def current_stage(self):
        return self.cfg.stages()[self.stage]

    def shares(self) -> dict[str, float]:
        """Each opponent's probability in the next games (``opponent_shares`` for this stage)."""
        names = [m.name for m in self.snapshots]
        return opponent_shares(names, list(self.current_stage.opponents), self.rates, self.cfg.matchmaking)

    def maybe_promote(self, iteration: int) -> str | None:
        """Move to the next curriculum stage when this one's rule holds; returns what happened (for the log)."""
        stage = self.current_stage
        rule = stage.promote
        if rule is None or self.stage_games < rule.min_games:
            return None
        rate = self.stage_rates.rate("stage")
        if rate < rule.win_rate:
            return None
        self.stage += 1
        self.stage_rates = WinRates(self.cfg.matchmaking.win_rate_decay)
        self.stage_games = 0
        new = self.current_stage
        message = (
            f"curriculum: stage {stage.name!r} -> {new.name!r} at iteration {iteration} (win rate {rate:.2f} >= "
            f"{rule.win_rate} against {', '.join(stage.opponents)})"
        )
        self.events.append(
            {"event": "stage", "iteration": iteration, "from": stage.name, "to": new.name, "win_rate": round(rate, 3)}
        )
        return message

    # --- reports -----------------------------------------------------------------------
    def metrics(self, results: list[dict]) -> dict:
        """The metrics row's league keys: Elo, size, stage, and win/draw/loss rates by group for these games."""
        row = {
            "league_elo": self.rating,
            "league_size": len(self.snapshots),
            "league_stage": self.stage,
            "league_games": len(results),
        }
        sizes = {int(result.get("team_size", 1)) for result in results}
        if sizes:  # a curriculum over team sizes (Duel's 1v1 -> 3v3): which size these games were
            row["league_team_size"] = max(sizes)
        by_group: dict[str, Record] = {}
        for result in results:
            by_group.setdefault(group_of(result["opponent"]), Record()).add(float(result["score"]), int(result["seat"]))
        for group, record in by_group.items():
            win, draw, loss = record.rates()
            row[f"league_win_{group}"], row[f"league_draw_{group}"], row[f"league_loss_{group}"] = win, draw, loss
            row[f"league_games_{group}"] = record.games
        if self.snapshots:
            row["league_elo_best_snapshot"] = max(m.rating for m in self.snapshots)
        return row

    def summary(self) -> dict:
        """For summary.json: ratings, the record against each opponent, the stage and the events."""
        return {
            "elo": round(self.rating, 1),
            "stage": self.current_stage.name,
            "games": self.games,
            "members": {
                m.name: {"kind": m.kind, "iteration": m.iteration, "elo": round(m.rating, 1)}
                for m in self.members.values()
            },
            "record": {
                name: {
                    "wins": r.wins,
                    "draws": r.draws,
                    "losses": r.losses,
                    "by_seat": {str(s): v for s, v in r.by_seat.items()},
                }
                for name, r in self.totals.items()
            },
            "events": self.events,
        }

    # --- checkpoints ---------------------------------------------------------------------
    def state(self) -> dict:
        """Plain data and tensors only (checkpoints load with ``weights_only``)."""
        import torch

        return {
            "rating": self.rating,
            "members": [
                {
                    "name": m.name,
                    "kind": m.kind,
                    "iteration": m.iteration,
                    "rating": m.rating,
                    "weights": None
                    if m.weights is None
                    else {k: torch.from_numpy(np.array(v)) for k, v in m.weights.items()},
                }
                for m in self.members.values()
            ],
            "rates": self.rates.state(),
            "totals": {
                name: {
                    "wins": r.wins,
                    "draws": r.draws,
                    "losses": r.losses,
                    "by_seat": {s: list(v) for s, v in r.by_seat.items()},
                }
                for name, r in self.totals.items()
            },
            "stage": self.stage,
            "stage_rates": self.stage_rates.state(),
            "stage_games": self.stage_games,
            "events": list(self.events),
            "games": self.games,
            "pool_rates": self.pool_rates.state(),
            "pool_games": self.pool_games,
        }

    @classmethod
    def from_state(cls, cfg: LeagueConfig, state: dict) -> League:
        league = cls(cfg)
        league.rating = float(state["rating"])
        league.members = {}
        for m in state["members"]:
            weights = None if m["weights"] is None else {k: v.numpy() for k, v in m["weights"].items()}
            league.members[m["name"]] = Member(m["name"], m["kind"], int(m["iteration"]), float(m["rating"]), weights)
        decay = cfg.matchmaking.win_rate_decay
        league.rates = WinRates.from_state(decay, state["rates"])
        league.totals = {
            name: Record(r["wins"], r["draws"], r["losses"], {int(s): list(v) for s, v in r["by_seat"].items()})
            for name, r in state["totals"].items()
        }
        league.stage = min(int(state["stage"]), len(cfg.stages()) - 1)
        league.stage_rates = WinRates.from_state(decay, state["stage_rates"])
        league.stage_games = int(state["stage_games"])
        league.events = list(state["events"])
        league.games = int(state["games"])
        if "pool_rates" in state:  # checkpoints written before league.snapshot_against existed have none
            league.pool_rates = WinRates.from_state(decay, state["pool_rates"])
            league.pool_games = int(state["pool_games"])
        return league
