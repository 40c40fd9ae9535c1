"""The league seen from the learner's seat: a gymnasium vector env whose opponents act inside it.

Each copy plays one game at a time against one opponent, drawn when the game starts from the
plan the driver sends (``set_plan``): ``latest`` (the worker's own policy), a snapshot, the
``random`` or the ``heuristic`` baseline. The learner takes the first mover's seat in its first
game and, with ``league.both_seats``, alternates seats game by game. In turn-based games the
opponent's replies (and its opening move when it moves first) happen inside ``step``, so every
observation the worker sees is one where the learner is to move; in simultaneous games both act
in the same step. The worker therefore records the learner's transitions only.

Teams (a game whose sides have ``team_size`` members, Duel's 2v2 and 3v3): each member of the
learner's team is a slot of the batch, slot ``g * team_size + m`` member ``m`` in game ``g``, so
``env.num_envs_per_worker`` counts slots and the worker runs ``num_envs_per_worker / team_size``
games; every member of the opposing team acts with the same opponent (one snapshot, one
baseline). A member out of play while its game goes on ends its episode there, and its slot
gives dead steps (``info["_env_reset"]``: no transition, no episode) until the game's next
one starts. A curriculum stage may change the team size: the slots stay, the games are rebuilt.

Gymnasium's NEXT_STEP autoreset: the step after a game ends starts the copy's next game and
ignores its action. ``info["action_mask"]`` holds the legal moves of masked games (the worker
masks with it). Finished games are reported by ``pop_results``. A curriculum stage that changes
the game's kwargs truncates the games in progress (unscored) and starts the new stage's games
at the next step. The worker wraps this env in the env guard (``distrl/envs/guard.py``) like a
native vector env: a game that raises is reset as a whole, its games in progress end unscored,
and the step is masked and counted as an env error.
"""

from __future__ import annotations

from contextlib import contextmanager

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from distrl.common.errors import OwnCodeError, describe_error
from distrl.config.league import BASELINES
from distrl.envs.games import baseline_actions, make_game, probe_game, team_size_of
from distrl.envs.games.base import GameError, StepResult
from distrl.envs.games.matchmaking import WinRates, opponent_shares
from distrl.envs.games.opponents import LearnedOpponents
from distrl.envs.guard import GuardedVectorEnv


def available_shares(shares: dict[str, float], has_heuristic: bool) -> dict[str, float]:
    """``shares`` without a heuristic the game lacks, renormalised."""
    kept = {k: v for k, v in shares.items() if has_heuristic or k != "heuristic"}
    total = sum(kept.values())
    return {k: v / total for k, v in kept.items()} if total > 0 else {"random": 1.0}


class LeagueVecEnv(gym.vector.VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, config):
        self.config = config
        self.league_cfg = config.league
        self.num_envs = config.env.num_envs_per_worker  # slots: games x the learner's team members
        stage = self.league_cfg.stages()[0]
        self.game_kwargs = {**config.env.kwargs, **stage.env_kwargs}
        self._build_game()
        self.single_observation_space = self.game.observation_space
        self.single_action_space = self.game.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.rng = np.random.default_rng()
        self.dead = np.zeros(self.num_envs, dtype=bool)  # a member out of play earlier in its game: dead steps
        # Until the driver's first plan: the shares of a league with no games yet (what its first plan holds).
        matchmaking = self.league_cfg.matchmaking
        first = opponent_shares([], list(stage.opponents), WinRates(matchmaking.win_rate_decay), matchmaking)
        self.shares = available_shares(first, self.game.has_heuristic)
        self.heuristic_kwargs = dict(stage.heuristic)
        self.learned = None  # LearnedOpponents, attached by the worker once its policy exists
        self.results: list[dict] = []
        self.stage = 0  # the curriculum stage whose game is being played (each result says it)
        self._pending: tuple[dict, int] | None = None  # the next stage's game kwargs and stage, from the next step

    def _build_game(self) -> None:
        """The game for ``self.game_kwargs``: as many copies as the slots hold teams of its team size; per game, the
        learner's seat (alternating), opponent and end."""
        team_size = team_size_of(self.config.env.id, self.game_kwargs)
        if self.num_envs % team_size:
            raise GameError(
                f"env.num_envs_per_worker={self.num_envs}: not a multiple of the team size {team_size} "
                f"({self.config.env.id} with {self.game_kwargs})"
            )
        self.team_size = team_size
        self.games = self.num_envs // team_size
        self.game = make_game(self.config.env.id, self.games, self.game_kwargs)
        self.seat = np.arange(self.games) % 2 if self.league_cfg.both_seats else np.zeros(self.games, dtype=np.int64)
        self.opponent = np.full(self.games, "random", dtype=object)
        self.done = np.zeros(self.games, dtype=bool)

    # --- the seam to the worker and the driver ---------------------------------------------------
    def attach(self, learned) -> None:
        """Who plays the learned opponents (``LearnedOpponents``)."""
        self.learned = learned

    def set_plan(self, plan: dict) -> None:
        """The driver's matchmaking plan: ``shares`` (opponent -> probability), ``weights`` (snapshot -> weights
        or ref), and the curriculum stage's ``env_kwargs`` and ``heuristic`` settings."""
        self.shares = available_shares(plan["shares"], self.game.has_heuristic)
        self.heuristic_kwargs = dict(plan.get("heuristic", {}))
        needed = {name: ref for name, ref in plan.get("weights", {}).items() if self.shares.get(name, 0) > 0}
        if self.learned is not None:
            self.learned.sync(needed, playing=set(self.opponent[~self.done]))
        kwargs = {**self.config.env.kwargs, **plan.get("env_kwargs", {})}
        stage = int(plan.get("stage", self.stage))
        if kwargs != self.game_kwargs:  # the new stage starts when the game is rebuilt, at the next step
            self._pending = (kwargs, stage)
        else:
            self._pending, self.stage = None, stage

    def pop_results(self) -> list[dict]:
        """Games finished since the last call: ``{"opponent", "score"`` (the learner's), ``"seat", "team_size",
        "stage"}`` (the curriculum stage whose game it was)."""
        out, self.results = self.results, []
        return out

    # --- gymnasium ---------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        every = np.ones(self.games, dtype=bool)
        self.game.reset(every, seed)
        first = self.game.to_move()
        self.seat[:] = np.where(first[:, 0] | ~first[:, 1], 0, 1)  # the first mover's seat, for the first game
        self._draw_opponents(every)
        self.done[:] = False
        self.dead[:] = False
        obs, mask = self._learner_view()
        return obs, _info(mask)

    def step(self, actions):
        actions = np.asarray(actions)
        if self._pending is not None:
            return self._change_game()
        restart = self.done.copy()
        if restart.any():
            self._start(restart)
        live = ~restart
        dead = self.dead.copy()  # out on an earlier step of a game still going on: a dead step
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        ended = np.zeros(self.games, dtype=bool)
        terminated = dead.copy()
        rows = np.arange(self.games)
        to_move = self.game.to_move()
        joint, acting = self._empty_actions(), np.zeros((self.games, 2), dtype=bool)
        mine = live & to_move[rows, self.seat]
        joint[rows[mine], self.seat[mine]] = actions.reshape(self.games, self.team_size, *actions.shape[1:])[mine]
        acting[rows[mine], self.seat[mine]] = True
        self._opponents_act(live & to_move[rows, 1 - self.seat], joint, acting)  # simultaneous games: at once
        self._fold(self.game.step(joint, acting), live, rewards, ended, terminated)
        while True:  # turn-based: the opponent replies until the learner is to move again or the game is over
            to_move = self.game.to_move()
            reply = live & ~ended & to_move[rows, 1 - self.seat] & ~to_move[rows, self.seat]
            if not reply.any():
                break
            joint, acting = self._empty_actions(), np.zeros((self.games, 2), dtype=bool)
            self._opponents_act(reply, joint, acting)
            self._fold(self.game.step(joint, acting), live, rewards, ended, terminated)
        self.done = ended
        obs, mask = self._learner_view()
        info = _info(mask)
        if dead.any():
            info["_env_reset"] = dead  # no transition of its own: the worker leaves it out of the loss and the episodes
        return obs, rewards, terminated, np.zeros(self.num_envs, dtype=bool), info

    # --- games -------------------------------------------------------------------------
    def _slots(self, games: np.ndarray) -> np.ndarray:
        """A per-game mask as a per-slot one (every member of the learner's team)."""
        return np.repeat(games, self.team_size)

    def _start(self, copies: np.ndarray) -> None:
        """New games in ``copies``: the other seat (both_seats), a new opponent, and its opening moves."""
        if self.league_cfg.both_seats:
            self.seat[copies] = 1 - self.seat[copies]
        self._draw_opponents(copies)
        self.game.reset(copies, None)
        self.dead[self._slots(copies)] = False
        rows = np.arange(self.games)
        while True:
            to_move = self.game.to_move()
            opening = copies & to_move[rows, 1 - self.seat] & ~to_move[rows, self.seat]
            if not opening.any():
                return
            joint, acting = self._empty_actions(), np.zeros((self.games, 2), dtype=bool)
            self._opponents_act(opening, joint, acting)
            result = self.game.step(joint, acting)
            if result.done.any():  # a game the opponent ended before the learner moved: start it again
                self.game.reset(result.done & copies, None)

    def _draw_opponents(self, copies: np.ndarray) -> None:
        names = list(self.shares)
        probs = np.array([self.shares[n] for n in names])
        self.opponent[copies] = np.asarray(names, dtype=object)[
            self.rng.choice(len(names), int(copies.sum()), p=probs / probs.sum())
        ]

    def _fold(
        self, result: StepResult, live: np.ndarray, rewards: np.ndarray, ended: np.ndarray, terminated: np.ndarray
    ) -> None:
        """Add one game step to the learner's members' rewards and ends, and to the reported results."""
        rows = np.arange(self.games)
        reward = result.rewards[rows, self.seat]  # [games, team]
        shaping = self.league_cfg.reward
        if not shaping.sparse:
            for term, coef in shaping.shaping.items():
                reward = reward + coef * result.shaping[term][rows, self.seat]
        playing = self._slots(live) & ~self.dead  # members in play before this step
        rewards += np.where(playing, reward.reshape(-1), 0.0)
        now = result.done & live & ~ended
        ended |= now
        terminated |= self._slots(now) & playing
        if result.out is not None:  # members pushed out of a game that goes on: their episodes end here
            out = result.out[rows, self.seat].reshape(-1) & playing
            terminated |= out
            self.dead |= out
        for i in np.flatnonzero(now):
            score = result.score[i] if self.seat[i] == 0 else 1.0 - result.score[i]
            self.results.append(
                {
                    "opponent": str(self.opponent[i]),
                    "score": float(score),
                    "seat": int(self.seat[i]),
                    "team_size": self.team_size,
                    "stage": self.stage,
                }
            )

    def _opponents_act(self, copies: np.ndarray, joint: np.ndarray, acting: np.ndarray) -> None:
        """Fill the opponents' actions in ``copies``. A player moves on its own view alone, so both seats' views are
        taken once and acted on together: one call per learned policy and one draw for all of them, one per
        baseline (every member of the opposing team acts with the same player)."""
        opp_seat = 1 - self.seat
        games, seats, views, masks = [], [], [], []
        for seat in (0, 1):
            chosen = copies & (opp_seat == seat)
            if chosen.any():
                view, view_mask = self.game.observe(seat, chosen)
                games.append(np.flatnonzero(chosen))
                seats.append(np.full(len(games[-1]), seat))
                views.append(view)
                masks.append(view_mask)
        if not games:
            return
        games, seats, obs = np.concatenate(games), np.concatenate(seats), np.concatenate(views)
        mask = None if masks[0] is None else np.concatenate(masks)
        names = np.repeat(self.opponent[games], self.team_size).astype(str)  # one row per member
        space = self.single_action_space
        moves = np.zeros((len(obs), *space.shape), dtype=space.dtype)
        learned = ~np.isin(names, BASELINES)
        for name in BASELINES:
            rows = names == name
            if rows.any():
                with _moving([name]):
                    moves[rows] = baseline_actions(
                        self.game, name, obs[rows], _rows(mask, rows), self.rng, self.heuristic_kwargs
                    )
        if learned.any():
            players = names[learned]
            with _moving(sorted(set(players))):
                if self.learned is None:
                    raise RuntimeError("it is a learned policy, and no policy is attached to this env")
                moves[learned] = self.learned.act(players, obs[learned], _rows(mask, learned), self.rng)
        joint[games, seats] = moves.reshape(len(games), self.team_size, *space.shape)
        acting[games, seats] = True

    def _empty_actions(self) -> np.ndarray:
        space = self.single_action_space
        return np.zeros((self.games, 2, self.team_size, *space.shape), dtype=space.dtype)

    def _learner_view(self) -> tuple[np.ndarray, np.ndarray | None]:
        obs = np.empty((self.num_envs, *self.single_observation_space.shape), dtype=np.float32)
        mask = np.ones((self.num_envs, self.single_action_space.n), dtype=bool) if self.game.masked else None
        for seat in (0, 1):
            rows = self.seat == seat
            if rows.any():
                slots = self._slots(rows)
                obs[slots], seat_mask = self.game.observe(seat, rows)
                if mask is not None:
                    mask[slots] = seat_mask
        return obs, mask

    def _change_game(self):
        """A new curriculum stage's game kwargs (a new team size too): end the games in progress (truncated,
        unscored); the new ones start at the next step."""
        obs, mask = self._learner_view()
        dead = self.dead.copy()
        (self.game_kwargs, self.stage), self._pending = self._pending, None
        seat = self.seat
        self._build_game()
        if len(seat) == self.games:  # the same games: each keeps its seat order
            self.seat = seat
        else:  # the first new games (after _start's turn) alternate from seat 0
            self.seat = (self.seat + 1) % 2 if self.league_cfg.both_seats else self.seat
        self.game.reset(np.ones(self.games, dtype=bool), None)
        self.done[:] = True
        self.dead[:] = False
        n = self.num_envs
        info = _info(mask)
        if dead.any():
            info["_env_reset"] = dead
        return obs, np.zeros(n), dead, ~dead, info


@contextmanager
def _moving(players: list[str]):
    """The moves of the opponents named ``players``. A failure here is distrl's, not the game's: ``OwnCodeError``
    passes the env guard, which resets the game for errors the game itself raises."""
    try:
        yield
    except Exception as exc:
        named = ", ".join(repr(str(p)) for p in players)
        plural = "s" if len(players) > 1 else ""
        raise OwnCodeError(f"league opponent{plural} {named} could not move: {describe_error(exc)}") from exc


def _rows(mask: np.ndarray | None, rows: np.ndarray) -> np.ndarray | None:
    return None if mask is None else mask[rows]


def _info(mask: np.ndarray | None) -> dict:
    return {} if mask is None else {"action_mask": mask}


def runs(config) -> bool:
    """The ``league`` env kind runs a config with a ``league`` section (its env a two-player game)."""
    return config.league is not None


def describe(config) -> str:
    """The ``league`` env kind's vector env in words: its game table (``distrl/envs/kinds.py``)."""
    return config.env.vectorization


def probe_run(config) -> tuple[gym.Space, gym.Space]:
    """The ``league`` env kind's probe (``distrl/envs/kinds.py``): the game's spaces from the learner's seat."""
    return probe_game(config)


def make_run_vec_env(config, num_threads: int | None = None) -> gym.vector.VectorEnv:
    """The ``league`` env kind's vector env: the learner's seat, behind the env guard (``LeagueVecEnv``'s docstring)."""
    return GuardedVectorEnv(LeagueVecEnv(config), config.env.max_consecutive_errors)


class LeagueWorkerSide:
    """The ``league`` env kind in a rollout worker: its opponents act with policies on the worker's backend, each
    sample request's matchmaking plan reaches the game, and the games a batch finished go back with its report."""

    def __init__(self, envs, policies):
        self.game_env: LeagueVecEnv = envs.env  # inside the env guard
        self.game_env.attach(LearnedOpponents(policies.policy, policies.new_policy, policies.inputs, policies.dist))

    def before_sample(self, plan: dict | None) -> None:
        if plan is not None:
            self.game_env.set_plan(plan)

    def after_sample(self, info) -> None:
        info.league_results = self.game_env.pop_results()  # games finished in this batch, for the league's ratings
        info.weight_sync_checks += self.game_env.learned.checks


def worker_side(envs, policies) -> LeagueWorkerSide:
    """The ``league`` env kind's part of a rollout worker (``distrl/envs/kinds.py``)."""
    return LeagueWorkerSide(envs, policies)
