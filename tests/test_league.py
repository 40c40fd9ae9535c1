"""The league's parts by hand and in-process: Elo, PFSP, the curriculum, masks, seats, games, opponents."""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from distrl.config import ConfigError, load_config
from distrl.config.league import LeagueConfig, MatchmakingConfig
from distrl.envs.games import GameError, make_game, probe_game
from distrl.envs.games.connect_four import completes_four, four_in_a_row, landing_rows
from distrl.envs.games.connect_four import heuristic as connect_four_heuristic
from distrl.envs.games.matchmaking import WinRates, opponent_shares, pfsp_weight
from distrl.league import elo
from distrl.league.league import League
from distrl.models.distributions import ActionDist
from tests.conftest import ROOT

CONNECT4 = "pettingzoo/classic/connect_four-v3"


def league_config(env: dict | None = None, **league):
    return load_config(
        {
            "env": env or {"id": CONNECT4, "num_envs_per_worker": 16},
            "rollout": {"rollout_length": 32},
            "ppo": {"minibatch_size": 128},
            "model": {"hidden": [32]},
            "league": league,
        }
    )


# --- Elo ---------------------------------------------------------------------------------
def test_elo_update_by_hand():
    # FIDE's example shape: 1000 vs 1200, K 32. E = 1 / (1 + 10^(200/400)) = 0.240253
    e = 1 / (1 + 10**0.5)
    assert elo.expected(1000, 1200) == pytest.approx(e)
    a, b = elo.update(1000, 1200, 1.0, 32)
    assert a == pytest.approx(1000 + 32 * (1 - e)) and a == pytest.approx(1024.3119, abs=1e-3)
    assert b == pytest.approx(1200 - 32 * (1 - e))
    a, b = elo.update(1000, 1200, 0.5, 32)  # a draw still moves the underdog up
    assert a == pytest.approx(1000 + 32 * (0.5 - e)) and a + b == pytest.approx(2200)


def test_league_elo_follows_reported_games_and_holds_the_anchor():
    league = League(LeagueConfig(elo={"k": 32, "initial": 1000}))
    league.add_snapshot(0, {"w": np.zeros(1)})
    league.record([{"opponent": "random", "score": 1.0, "seat": 0}])
    # main 1000 vs random 1000: E = 0.5, +16; random is the anchor and stays.
    assert league.rating == pytest.approx(1016) and league.members["random"].rating == 1000
    league.record([{"opponent": "main@0", "score": 0.0, "seat": 1}])
    e = elo.expected(1016, 1000)
    assert league.rating == pytest.approx(1016 - 32 * e)
    assert league.members["main@0"].rating == pytest.approx(1000 + 32 * e)
    before = league.rating
    league.record([{"opponent": "latest", "score": 1.0, "seat": 0}])  # its own weights: no rating moves
    assert league.rating == before
    assert league.totals["main@0"].by_seat[1] == [0, 0, 1]


def test_elo_fit_recovers_a_known_gap():
    # A scores 75 % against B: Bradley-Terry puts A 400 log10(3) = 190.8 above B. C only meets B, evenly.
    games = [("A", "B", 1.0)] * 750 + [("A", "B", 0.0)] * 250 + [("C", "B", 1.0)] * 500 + [("C", "B", 0.0)] * 500
    ratings = elo.fit(["A", "B", "C"], games, anchor="B", anchor_rating=1000, prior_games=0.0)
    assert ratings["B"] == 1000
    assert ratings["A"] - 1000 == pytest.approx(400 * math.log10(3), abs=0.5)
    assert ratings["C"] == pytest.approx(1000, abs=0.5)
    # Every game won: the prior keeps the rating finite.
    finite = elo.fit(["A", "B"], [("A", "B", 1.0)] * 10, anchor="B", anchor_rating=1000)
    assert 1000 < finite["A"] < 2000


# --- matchmaking ---------------------------------------------------------------------------
def test_pfsp_weights_by_hand():
    assert pfsp_weight(0.25, "hard", 2) == pytest.approx(0.5625)
    assert pfsp_weight(0.25, "variance") == pytest.approx(0.1875)
    assert pfsp_weight(0.25, "linear") == pytest.approx(0.75)
    assert pfsp_weight(0.9, "uniform") == 1.0


def test_win_rates_decay_by_hand():
    rates = WinRates(decay=0.5)
    assert rates.rate("x") == 0.5  # never played: even
    rates.record("x", 1.0)  # weight 1, points 1 -> (1 + 0.5) / (1 + 1)
    assert rates.rate("x") == pytest.approx(0.75)
    rates.record("x", 0.0)  # weight 1.5, points 0.5 -> (0.5 + 0.5) / 2.5
    assert rates.rate("x") == pytest.approx(0.4)


def test_opponent_shares_by_hand():
    cfg = MatchmakingConfig(latest=0.2, snapshots=0.5, baselines=0.3, pfsp="hard", pfsp_exponent=2)
    rates = WinRates(decay=1.0)
    for _ in range(3):  # main@0: 3 wins -> (3.5 / 4) = 0.875; main@5: 3 losses -> 0.125
        rates.record("main@0", 1.0)
        rates.record("main@5", 0.0)
    shares = opponent_shares(["main@0", "main@5"], ["latest", "snapshots", "random", "heuristic"], rates, cfg)
    w0, w5 = (1 - 0.875) ** 2, (1 - 0.125) ** 2
    assert shares["latest"] == pytest.approx(0.2)
    assert shares["main@0"] == pytest.approx(0.5 * w0 / (w0 + w5))
    assert shares["main@5"] == pytest.approx(0.5 * w5 / (w0 + w5))
    assert shares["random"] == pytest.approx(0.15) and shares["heuristic"] == pytest.approx(0.15)
    assert sum(shares.values()) == pytest.approx(1)
    # No snapshot yet: its share goes to the others in proportion.
    early = opponent_shares([], ["latest", "snapshots", "random", "heuristic"], rates, cfg)
    assert early["latest"] == pytest.approx(0.2 / 0.5) and early["random"] == pytest.approx(0.3)
    # A curriculum stage that allows only the random player.
    assert opponent_shares(["main@0"], ["random"], rates, cfg) == {"random": 1.0}


def test_snapshot_rules():
    league = League(LeagueConfig(snapshot_every=5, snapshot_win_rate=0.7, snapshot_min_games=4))
    assert league.wants_snapshot(0) == "the league's first member"
    league.add_snapshot(0, {"w": np.zeros(1)})
    assert league.wants_snapshot(3) is None
    assert league.wants_snapshot(5) == "every 5 iterations"
    league.record([{"opponent": "main@0", "score": 1.0, "seat": s % 2} for s in range(4)])  # rate (4.5 / 5) = 0.9
    assert "win rate" in league.wants_snapshot(3)
    # Against the pool: games against any snapshot since the newest was taken.
    pool = League(LeagueConfig(snapshot_every=0, snapshot_win_rate=0.7, snapshot_min_games=4, snapshot_against="pool"))
    pool.add_snapshot(0, {"w": np.zeros(1)})
    pool.add_snapshot(1, {"w": np.zeros(1)})
    pool.record([{"opponent": name, "score": 1.0, "seat": 0} for name in ("main@0", "main@1", "random", "latest")])
    assert pool.wants_snapshot(2) is None  # two games against the pool: fewer than snapshot_min_games
    pool.record([{"opponent": name, "score": 1.0, "seat": 1} for name in ("main@0", "main@1")])
    assert pool.wants_snapshot(2) == "win rate 0.90 against the pool >= 0.7"
    pool.add_snapshot(2, {"w": np.zeros(1)})
    assert pool.wants_snapshot(3) is None  # counted afresh from the new snapshot
    pool.record([{"opponent": "main@2", "score": 1.0, "seat": 0}] * 3)
    restored = League.from_state(pool.cfg, pool.state())  # a checkpoint keeps the count
    assert restored.pool_games == 3 and restored.wants_snapshot(3) is None
    restored.record([{"opponent": "main@1", "score": 1.0, "seat": 0}])
    assert restored.wants_snapshot(3) == "win rate 0.90 against the pool >= 0.7"
    small = League(LeagueConfig(max_snapshots=2))
    for it in (0, 10, 20):
        small.add_snapshot(it, {"w": np.zeros(1)})
    assert [m.name for m in small.snapshots] == ["main@10", "main@20"]


def test_curriculum_promotes_on_win_rate_after_min_games():
    cfg = LeagueConfig(
        curriculum=[
            {"name": "easy", "opponents": ["random"], "promote": {"win_rate": 0.8, "min_games": 10}},
            {"name": "hard", "opponents": ["heuristic", "latest"]},
        ]
    )
    league = League(cfg)
    assert league.shares() == {"random": 1.0}
    league.record([{"opponent": "random", "score": 1.0, "seat": 0}] * 9)
    assert league.maybe_promote(3) is None  # 9 < min_games
    league.record([{"opponent": "latest", "score": 1.0, "seat": 0}] * 5)  # mirror games do not count for the stage
    assert league.maybe_promote(3) is None
    league.record([{"opponent": "random", "score": 1.0, "seat": 1}])
    message = league.maybe_promote(4)
    assert "'easy' -> 'hard'" in message and league.current_stage.name == "hard"
    assert set(league.shares()) == {"heuristic", "latest"}
    assert league.events[-1]["event"] == "stage"


def test_games_of_an_earlier_stage_arriving_late_do_not_promote_the_new_one():
    """Under async a worker finishes a batch or more of the old stage's games after a promotion: they are rated, but
    only games played in the new stage count toward its own promotion."""
    cfg = LeagueConfig(
        curriculum=[
            {"name": "1v1", "promote": {"win_rate": 0.0, "min_games": 4}},
            {"name": "2v2", "promote": {"win_rate": 0.0, "min_games": 4}},
            {"name": "3v3"},
        ]
    )
    league = League(cfg)
    league.record([{"opponent": "random", "score": 1.0, "seat": 0, "stage": 0}] * 4)
    assert "'1v1' -> '2v2'" in league.maybe_promote(1)
    elo = league.rating
    league.record([{"opponent": "random", "score": 1.0, "seat": 0, "stage": 0}] * 10)  # the old stage's, late
    assert league.rating > elo and league.games == 14  # rated and counted in the run's totals
    assert league.maybe_promote(2) is None and league.current_stage.name == "2v2"
    league.record([{"opponent": "random", "score": 0.0, "seat": 1, "stage": 1}] * 4)
    assert "'2v2' -> '3v3'" in league.maybe_promote(3)


def test_league_state_round_trips_through_a_checkpoint():
    league = League(
        LeagueConfig(curriculum=[{"name": "a", "promote": {"win_rate": 0.5, "min_games": 1}}, {"name": "b"}])
    )
    league.add_snapshot(0, {"w": np.arange(3, dtype=np.float32)})
    league.record([{"opponent": "main@0", "score": 1.0, "seat": 0}, {"opponent": "heuristic", "score": 0.5, "seat": 1}])
    league.maybe_promote(1)
    buffer = io.BytesIO()
    torch.save({"league": league.state()}, buffer)
    buffer.seek(0)
    loaded = League.from_state(league.cfg, torch.load(buffer, weights_only=True)["league"])
    assert loaded.summary() == league.summary()
    assert loaded.shares() == league.shares()
    np.testing.assert_array_equal(loaded.members["main@0"].weights["w"], [0, 1, 2])


# --- masks -------------------------------------------------------------------------------
def test_masked_sampling_never_draws_an_illegal_action():
    dist = ActionDist("categorical", 7)
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5000, 7)).astype(np.float32) * 3
    mask = rng.random((5000, 7)) < 0.4
    mask[np.arange(5000), rng.integers(0, 7, 5000)] = True  # at least one legal move each
    actions, logp = dist.sample_numpy(logits, rng, mask)
    assert mask[np.arange(5000), actions].all()
    masked = np.where(mask, logits, -np.inf)
    expected = (
        masked
        - np.log(np.exp(masked - masked.max(1, keepdims=True)).sum(1, keepdims=True))
        - masked.max(1, keepdims=True)
    )
    np.testing.assert_allclose(logp, expected[np.arange(5000), actions], rtol=1e-4, atol=1e-4)
    assert mask[np.arange(5000), dist.greedy_numpy(logits, mask)].all()


def test_masked_log_prob_and_entropy_cover_legal_actions_only():
    dist = ActionDist("categorical", 4)
    logits = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    mask = torch.tensor([[True, False, True, False]])
    logp, entropy = dist.log_prob_entropy(logits, torch.tensor([2]), mask)
    p = torch.softmax(torch.tensor([1.0, 3.0]), 0)
    assert logp.item() == pytest.approx(math.log(p[1].item()), rel=1e-6)
    assert entropy.item() == pytest.approx(-(p * p.log()).sum().item(), rel=1e-6)
    assert torch.isfinite(dist.log_prob_entropy(logits, torch.tensor([0]), torch.zeros_like(mask))[1]).all()


# --- games -------------------------------------------------------------------------------
def test_connect_four_heuristic_wins_then_blocks():
    rng = np.random.default_rng(0)
    obs = np.zeros((2, 6, 7, 2), dtype=np.float32)
    obs[0, 5, 0:3, 0] = 1  # own three in the bottom row: column 3 wins
    obs[0, 5, 4:6, 1] = 1
    obs[1, 5, 2:5, 1] = 1  # the opponent's three: block at column 1 or 5 (either end)
    obs[1, 5, 1, 0] = 1
    moves = connect_four_heuristic(obs, np.ones((2, 7), dtype=bool), rng)
    assert moves[0] == 3 and moves[1] == 5
    vertical = np.zeros((1, 6, 7, 2), dtype=np.float32)
    vertical[0, 3:6, 6, 1] = 1  # three stacked: block on top
    assert connect_four_heuristic(vertical, None, rng)[0] == 6


def test_connect_four_drops_that_make_four_match_one_board_at_a_time():
    """``completes_four`` checks every column's drop at once: the same answers as dropping each stone on its own board
    and looking for four, on random positions that obey gravity (full columns included), for the cell a stone lands on
    and the one above it."""
    rng = np.random.default_rng(0)
    heights = rng.integers(0, 7, (400, 7))
    occupied = np.arange(6)[None, :, None] >= 6 - heights[:, None, :]
    own = occupied & (rng.random(occupied.shape) < 0.5)
    landing = landing_rows(occupied)
    for rows in (landing, np.where(landing >= 1, landing - 1, -1)):
        expected = np.zeros((len(own), 7), dtype=bool)
        for i in range(len(own)):
            for column in np.flatnonzero(rows[i] >= 0):
                board = own[i].copy()
                board[rows[i, column], column] = True
                expected[i, column] = four_in_a_row(board[None])[0]
        assert expected.any() and (completes_four(own, rows) == expected).all()


@pytest.mark.parametrize("illegal", [False, True], ids=["legal", "unmasked"])
def test_distrl_connect_four_plays_pettingzoos_game_move_for_move(illegal):
    # The same moves in both games, 24 copies restarted as they finish: every observation, mask, mover, reward,
    # end, score and move record equal. Unmasked, a full column is drawn at times: the mover loses, as in PettingZoo.
    n, rng = 24, np.random.default_rng(int(illegal))
    ours, theirs = make_game("distrl/ConnectFour-v0", n), make_game(CONNECT4, n)
    assert (ours.observation_space, ours.action_space) == (theirs.observation_space, theirs.action_space)
    every = np.ones(n, dtype=bool)
    for game in (ours, theirs):
        game.reset(every, seed=0)
    finished, illegal_moves = {0.0: 0, 0.5: 0, 1.0: 0}, 0
    for _ in range(300):
        moving = theirs.to_move()
        np.testing.assert_array_equal(ours.to_move(), moving)
        actions = np.zeros((n, 2, 1), dtype=np.int64)
        for seat in (0, 1):
            obs, mask = theirs.observe(seat, every)
            mine, my_mask = ours.observe(seat, every)
            assert mine.dtype == np.float32
            np.testing.assert_array_equal(mine, obs)
            np.testing.assert_array_equal(my_mask, mask)
            allowed = np.ones_like(mask) if illegal else mask | ~moving[:, seat : seat + 1]
            actions[:, seat, 0] = rng.choice(7, n) if illegal else [rng.choice(np.flatnonzero(m)) for m in allowed]
            illegal_moves += int((moving[:, seat] & ~mask[np.arange(n), actions[:, seat, 0]]).sum())
        theirs_result, ours_result = theirs.step(actions, moving), ours.step(actions, moving)
        np.testing.assert_array_equal(ours_result.rewards, theirs_result.rewards)
        np.testing.assert_array_equal(ours_result.done, theirs_result.done)
        np.testing.assert_array_equal(ours_result.score, theirs_result.score)
        for i in np.flatnonzero(theirs_result.done):
            assert ours.record(i) == theirs.record(i)
            finished[float(theirs_result.score[i])] += 1
        for game in (ours, theirs):
            game.reset(theirs_result.done)
    assert finished[0.0] > 5 and finished[1.0] > 5  # both seats won games
    assert sum(finished.values()) > 100 and (illegal_moves > 10 if illegal else illegal_moves == 0)


def test_duel_pushes_out_and_scores():
    game = make_game("distrl/Duel-v0", 3)
    game.reset(np.ones(3, dtype=bool), seed=0)
    game.pos[:, :, 0] = [[0.0, 0.0], [0.95, 0.0]]
    game.vel[:] = 0.0
    game.vel[:, 1, 0] = [0.2, 0.0]  # seat 1 drifts out: seat 0 wins
    result = game.step(np.zeros((3, 2, 1), dtype=np.int64), np.ones((3, 2), dtype=bool))
    assert result.done.all() and (result.score == 1.0).all() and not result.out.any()
    np.testing.assert_array_equal(result.rewards, [[[1], [-1]]] * 3)
    obs0, _ = game.observe(0, np.ones(3, dtype=bool))
    obs1, _ = game.observe(1, np.ones(3, dtype=bool))
    assert obs0.shape == (3, 9)  # 1v1: own position and velocity, the other's, time left
    np.testing.assert_allclose(obs0[:, :4], obs1[:, 4:8])  # each seat sees itself first


def test_duel_teams_play_on_until_a_side_is_out():
    """2v2 laid out for 3v3: a disc out while the game goes on has lost (-1) and stays out; the side with discs left
    wins when the other has none; every row sees itself first, its teammate, then the opponents, with flags."""
    game = make_game("distrl/Duel-v0", 2, {"team_size": 2, "max_team_size": 3})
    assert game.observation_space.shape == (4 + 2 * 5 + 3 * 5 + 1,)
    game.reset(np.ones(2, dtype=bool), seed=0)
    game.pos[:] = [[[0.0, 0.3], [0.0, -0.3]], [[0.5, 0.0], [0.95, 0.0]]]
    game.vel[:] = 0.0
    game.vel[:, 1, 1] = [0.2, 0.0]  # seat 1's second disc drifts out
    still = np.zeros((2, 2, 2), dtype=np.int64)
    result = game.step(still, np.ones((2, 2), dtype=bool))
    assert not result.done.any()
    np.testing.assert_array_equal(result.out[:, 1], [[False, True]] * 2)
    np.testing.assert_array_equal(result.rewards[:, 1], [[0, -1]] * 2)
    obs0, _ = game.observe(0, np.ones(2, dtype=bool))  # [copies * 2, 30]
    assert obs0.shape == (4, 30)
    np.testing.assert_allclose(obs0[0, 4:9], [1, 0.0, -0.3, 0, 0])  # its teammate, in play
    np.testing.assert_allclose(obs0[0, 9:14], 0)  # no third teammate
    np.testing.assert_allclose(obs0[0, 14:24], [1, 0.5, 0, 0, 0, 0, 0, 0, 0, 0])  # one opponent in play, one out
    game.vel[:, 1, 0] = [0.6, 0.0]  # the last of seat 1 follows: seat 0 wins, both its discs in play get +1
    result = game.step(still, np.ones((2, 2), dtype=bool))
    assert result.done.all() and (result.score == 1.0).all() and not result.out.any()
    np.testing.assert_array_equal(result.rewards[:, 0], [[1, 1]] * 2)
    np.testing.assert_array_equal(result.rewards[:, 1], [[-1, 0]] * 2)  # the disc out earlier got its -1 then
    with pytest.raises(GameError, match="team_size=4, max_team_size=3: need 1 <= team_size"):
        probe_game(league_config(env={"id": "distrl/Duel-v0", "kwargs": {"team_size": 4, "max_team_size": 3}}))


def test_duel_team_curriculum_is_checked_before_ray():
    stages = [
        {"name": "1v1", "env_kwargs": {"team_size": 1}, "promote": {"win_rate": 0.8, "min_games": 10}},
        {"name": "3v3", "env_kwargs": {"team_size": 3}},
    ]
    env = {"id": "distrl/Duel-v0", "num_envs_per_worker": 12}
    with pytest.raises(GameError, match="stage '3v3' plays with observations Box.*max_team_size"):
        probe_game(league_config(env=env, curriculum=stages))
    env["kwargs"] = {"max_team_size": 3}
    assert probe_game(league_config(env=env, curriculum=stages))[0].shape == (30,)
    with pytest.raises(GameError, match="env.num_envs_per_worker=16: stage '3v3' plays teams of 3"):
        probe_game(league_config(env={**env, "num_envs_per_worker": 16}, curriculum=stages))


def test_games_refused_with_one_line():
    with pytest.raises(GameError, match="has 4 agents"):
        make_game("pettingzoo/butterfly/knights_archers_zombies-v11", 1)
    with pytest.raises(GameError, match="not a PettingZoo registry id"):
        make_game("pettingzoo/classic/nope-v0", 1)
    with pytest.raises(GameError, match="offers no term bogus"):
        probe_game(league_config(reward={"sparse": False, "shaping": {"bogus": 1.0}}))
    with pytest.raises(GameError, match="heuristic=.'strength': 2."):
        probe_game(league_config(curriculum=[{"name": "weak", "heuristic": {"strength": 2}}]))
    assert probe_game(league_config(curriculum=[{"name": "weak", "heuristic": {"noise": 0.5}}]))[1].n == 7


def test_a_game_that_needs_masks_and_has_none_is_refused():
    """A PettingZoo game whose illegal moves end it (TerminateIllegalWrapper) but whose observations carry no mask."""
    import gymnasium as gym
    import pettingzoo
    from pettingzoo.classic import tictactoe_v3
    from pettingzoo.utils import BaseWrapper, wrappers

    class NoMask(BaseWrapper):
        def observation_space(self, agent):
            return self.env.observation_space(agent)["observation"]

        def observe(self, agent):
            return self.env.observe(agent)["observation"]

    def unmasked(**kwargs):
        return wrappers.OrderEnforcingWrapper(
            NoMask(wrappers.TerminateIllegalWrapper(tictactoe_v3.raw_env(**kwargs), -1))
        )

    pettingzoo.register("aec", "test/unmasked_tictactoe-v0", entry_point=unmasked)
    assert isinstance(unmasked().observation_space("player_1"), gym.spaces.Box)
    with pytest.raises(GameError, match="carry no action_mask"):
        make_game("pettingzoo/test/unmasked_tictactoe-v0", 1)


def test_config_refuses_leagues_on_single_agent_envs_and_games_without_a_league():
    with pytest.raises(ConfigError, match="a league needs a two-player game"):
        load_config({"env": {"id": "CartPole-v1"}, "league": {}})
    with pytest.raises(ConfigError, match="add a league section"):
        load_config({"env": {"id": "distrl/Duel-v0"}})
    # A PettingZoo id without a league is the agents kind's (parallel envs); a turn-based game is refused by its probe.
    from distrl.envs import EnvSpecError, probe_run_spaces

    with pytest.raises(EnvSpecError, match="a turn-based \\(AEC\\) game; train it by self-play with a league section"):
        probe_run_spaces(load_config({"env": {"id": CONNECT4, "num_envs_per_worker": 16}}))
    with pytest.raises(ConfigError, match="recurrent state"):
        load_config({"env": {"id": CONNECT4}, "league": {}, "model": {"lstm_size": 16, "shared_trunk": True}})


# --- the learner's seat ------------------------------------------------------------------------
def _worker(config):
    from distrl.rollout.worker import RolloutWorker

    return RolloutWorker(config)


def test_training_games_never_see_an_illegal_move_and_cover_both_seats(monkeypatch):
    checked = _checking_legality(monkeypatch)
    worker = _worker(league_config())
    weights = {k: v.detach().numpy().copy() for k, v in worker.model.state_dict().items()}
    plan = {
        "shares": {"latest": 0.25, "main@0": 0.25, "random": 0.25, "heuristic": 0.25},
        "weights": {"main@0": weights},
    }
    results = []
    for _ in range(3):
        info, batch = worker.sample(None, plan)
        results += info.league_results
        # Every recorded observation is one where the learner is to move: it has as many stones as the opponent
        # (first seat) or one fewer (second seat), and legal moves.
        own, other = batch.obs[:-1, ..., 0].sum((2, 3)), batch.obs[:-1, ..., 1].sum((2, 3))
        valid = batch.valid
        assert np.isin((other - own)[valid], [0, 1]).all()
        assert batch.action_mask[valid].any(axis=1).all()
        taken = batch.action_mask[np.arange(32)[:, None], np.arange(16)[None], batch.actions]
        assert taken[valid].all()
    assert checked["moves"] > 1000
    assert {r["opponent"] for r in results} == {"latest", "main@0", "random", "heuristic"}
    seats = [r["seat"] for r in results]
    assert abs(seats.count(0) - seats.count(1)) <= 16  # alternating, copy by copy
    assert worker.env_side.game_env.learned.backends() == {
        worker.policy.backend
    }  # snapshots act on the worker's backend


def _checking_legality(monkeypatch) -> dict:
    """Make every PettingZoo game step assert that each acting seat's move is legal; returns the move count."""
    from distrl.envs.games.pettingzoo_game import PettingZooGame

    real_step = PettingZooGame.step
    checked = {"moves": 0}

    def step(self, actions, acting):
        for i in np.flatnonzero(acting.any(axis=1)):
            seat = int(np.flatnonzero(acting[i])[0])
            assert self.obs[i][self.agents[seat]]["action_mask"][int(actions[i, seat, 0])], "illegal move"
            checked["moves"] += 1
        return real_step(self, actions, acting)

    monkeypatch.setattr(PettingZooGame, "step", step)
    return checked


def test_eval_and_tournament_games_never_see_an_illegal_move(monkeypatch):
    from distrl.league.matches import baseline_player, model_player, play
    from distrl.models import build_model

    checked = _checking_legality(monkeypatch)
    config = league_config()
    obs_space, action_space = probe_game(config)
    game = make_game(CONNECT4, 1)
    model = build_model(obs_space, action_space, config.model)
    with torch.no_grad():  # a policy that prefers the first column, which fills up: only its mask keeps it legal
        model.policy_head.bias[:] = torch.tensor([20.0, 0, 0, 0, 0, 0, 0])
    rng = np.random.default_rng(0)
    for greedy in (True, False):
        for opponent in ("random", "heuristic"):
            matches = play(CONNECT4, {}, model_player(model, greedy), baseline_player(game, opponent), 20, rng)
            assert len(matches) == 20 and {m.seat for m in matches} == {0, 1}
    assert checked["moves"] > 400


def test_a_snapshot_keeps_playing_its_games_after_a_plan_drops_it():
    worker = _worker(league_config())
    weights = {k: v.detach().numpy().copy() for k, v in worker.model.state_dict().items()}
    worker.sample(None, {"shares": {"main@0": 1.0}, "weights": {"main@0": weights}})
    assert (
        worker.env_side.game_env.opponent[~worker.env_side.game_env.done] == "main@0"
    ).any()  # games against it go on
    info, _ = worker.sample(None, {"shares": {"random": 1.0}, "weights": {}})  # a plan without it
    assert {r["opponent"] for r in info.league_results} == {"main@0", "random"}
    for _ in range(3):
        worker.sample(None, {"shares": {"random": 1.0}, "weights": {}})
    assert (
        "main@0" not in worker.env_side.game_env.learned.policies and worker.env_side.game_env.learned.spare
    )  # released once its games ended


def _failing_game_steps(monkeypatch, fail_at) -> dict:
    """PettingZoo game steps raise at the step calls in ``fail_at`` (counted across the process)."""
    from distrl.envs.games.pettingzoo_game import PettingZooGame

    real_step, calls = PettingZooGame.step, {"n": 0}

    def step(self, actions, acting):
        calls["n"] += 1
        if calls["n"] in fail_at:
            raise RuntimeError(f"simulated game crash at call {calls['n']}")
        return real_step(self, actions, acting)

    monkeypatch.setattr(PettingZooGame, "step", step)
    return calls


def test_a_game_that_raises_is_reset_masked_and_counted_and_its_games_are_not_scored(monkeypatch):
    worker = _worker(league_config())
    _failing_game_steps(monkeypatch, {40})
    plan = {"shares": {"random": 1.0}, "weights": {}}
    info, batch = worker.sample(None, plan)
    assert info.env_errors >= 1 and "simulated game crash at call 40" in info.env_error_messages[0]
    failed = np.flatnonzero(batch.truncated.all(axis=1))
    assert len(failed) == 1 and not batch.valid[failed[0]].any()  # every copy reset, none of it trained on
    # A result is reported for each game that ended, and for no game the crash cut short.
    assert len(info.league_results) == int(batch.terminated.sum()) > 0
    info, batch = worker.sample(None, plan)  # the run goes on
    assert info.env_errors == 0 and len(info.league_results) == int(batch.terminated.sum()) > 0


def test_a_game_that_keeps_raising_stops_the_run_with_its_message(monkeypatch):
    from distrl.common.errors import EnvFailure

    config = league_config()
    worker = _worker(config.model_copy(update={"env": config.env.model_copy(update={"max_consecutive_errors": 3})}))
    _failing_game_steps(monkeypatch, set(range(1, 10_000)))
    with pytest.raises(EnvFailure, match="failed 3 times in a row.*simulated game crash"):
        worker.sample(None, {"shares": {"random": 1.0}, "weights": {}})


def test_an_opponent_that_cannot_move_stops_the_run_rather_than_counting_as_env_errors(monkeypatch):
    from distrl.common.errors import OwnCodeError
    from distrl.envs.games.opponents import LearnedOpponents

    worker = _worker(league_config())
    weights = {k: v.detach().numpy().copy() for k, v in worker.model.state_dict().items()}

    def act(self, names, obs, mask, rng):
        raise KeyError(str(names[0]))

    monkeypatch.setattr(LearnedOpponents, "act", act)
    with pytest.raises(OwnCodeError, match=r"league opponents? ('(latest|main@0)'(, )?)+ could not move: KeyError"):
        worker.sample(None, {"shares": {"main@0": 1.0}, "weights": {"main@0": weights}})


def test_learner_reproduces_the_workers_masked_log_probs():
    from distrl.learner.learner import Learner

    config = league_config()
    worker = _worker(config)
    info, batch = worker.sample()
    learner = Learner(config, worker.envs.single_observation_space, worker.envs.single_action_space)
    obs = torch.from_numpy(batch.obs[:-1].reshape(-1, *batch.obs.shape[2:]))
    with torch.no_grad():
        pd_params, _ = learner.model(obs)
        logp, _ = learner.model.dist.log_prob_entropy(
            pd_params, torch.from_numpy(batch.actions.reshape(-1)), torch.from_numpy(batch.action_mask.reshape(-1, 7))
        )
    valid = batch.valid.reshape(-1)
    np.testing.assert_allclose(logp.numpy()[valid], batch.logp.reshape(-1)[valid], rtol=1e-4, atol=1e-4)
    metrics = learner.update((info, batch))
    assert metrics["gradient_steps"] > 0 and metrics["skipped_steps"] == 0


def test_load_policy_plays_one_seat_with_masks(tmp_path):
    from distrl.common.checkpoint import save_checkpoint
    from distrl.deploy.policy import Policy
    from distrl.league.league import League
    from distrl.learner.learner import Learner

    config = league_config()
    spaces = probe_game(config)
    learner = Learner(config, *spaces)
    save_checkpoint(
        tmp_path,
        1,
        {
            "counters": {"iteration": 1},
            "learner": learner.state(),
            "config": config.model_dump(mode="json"),
            "league": League(config.league).state(),
        },
        1,
    )
    policy = Policy.from_checkpoint(tmp_path)
    rng = np.random.default_rng(0)
    obs = np.zeros((200, 6, 7, 2), dtype=np.float32)
    mask = rng.random((200, 7)) < 0.3
    mask[:, 6] = True
    for deterministic in (True, False):
        actions, _ = policy.predict(obs, deterministic=deterministic, action_mask=mask)
        assert mask[np.arange(200), actions].all()


def test_diagnose_measures_a_league_config():
    from distrl import diagnose

    report = diagnose.run(league_config(), quick=True)
    measured = report["measured"]
    assert measured["env_steps_per_s"] > 0 and measured["learner_update_s"] > 0
    assert measured["policy_latency"]["onnxrt"]["available"]


def test_a_league_workers_games_are_the_same_in_every_process():
    """Opponents act in a fixed order (each draws from the env's seeded generator), not in a set's order, which
    Python's string hashing makes differ from process to process: the same seed plays the same games."""
    code = (
        "import hashlib; from distrl.config import load_config; from distrl.rollout.worker import RolloutWorker\n"
        "w = RolloutWorker(load_config('configs/league_duel.yaml', ['rollout.compile.backend=eager',"
        " 'env.num_envs_per_worker=16', 'rollout.rollout_length=64', 'ppo.minibatch_size=256']))\n"
        "info, b = w.sample(None, {'shares': {'latest': 0.4, 'random': 0.3, 'heuristic': 0.3}, 'weights': {}})\n"
        "print(hashlib.sha256(b.obs.tobytes() + b.actions.tobytes() + b.rewards.tobytes()).hexdigest(),"
        " [r['opponent'] for r in info.league_results])"
    )
    outputs = set()
    for hash_seed in ("1", "2", "3"):
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.add(done.stdout.strip().splitlines()[-1])
    assert len(outputs) == 1, outputs


# --- teams ---------------------------------------------------------------------------------
def _duel_teams_config(**league):
    env = {"id": "distrl/Duel-v0", "num_envs_per_worker": 12, "kwargs": {"max_team_size": 3, "max_steps": 60}}
    return league_config(env=env, **league)


def test_a_team_seat_gives_each_member_a_slot_and_dead_steps_after_it_is_out():
    """2v2 Duel from the learner's seat: 12 slots are 6 games of 2; a member pushed out ends its episode and its slot
    gives dead steps until its game's next one starts; each game ends every member's episode once."""
    from distrl.envs.games.seat import LeagueVecEnv

    env = LeagueVecEnv(_duel_teams_config(curriculum=[{"name": "2v2", "env_kwargs": {"team_size": 2}}]))
    assert env.games == 6 and env.num_envs == 12
    env.set_plan({"shares": {"random": 0.5, "heuristic": 0.5}, "env_kwargs": {"team_size": 2}})
    obs, _ = env.reset(seed=0)
    assert obs.shape == (12, 30)
    rng = np.random.default_rng(0)
    episodes = np.zeros(12, dtype=int)
    after_end = np.zeros(12, dtype=bool)  # the slot's episode ended: its next steps are dead until a restart
    dead_steps = games = 0
    for _ in range(400):
        restarting = env.done.copy()
        obs, rewards, terminated, truncated, info = env.step(rng.integers(0, 9, 12))
        dead = info.get("_env_reset", np.zeros(12, dtype=bool))
        restarted = np.repeat(restarting, 2)
        assert not (dead & restarted).any() and not truncated.any()
        np.testing.assert_array_equal(dead, after_end & ~restarted)  # dead exactly while its game goes on
        assert (terminated[dead]).all() and (rewards[dead] == 0).all()
        ended_now = terminated & ~dead
        episodes += ended_now
        after_end = (after_end & ~restarted) | ended_now
        dead_steps += int(dead.sum())
        games += len(env.pop_results())
    assert dead_steps > 0 and games > 20
    # every game ended both members' episodes once (games still going on: at most one of its members has ended)
    per_game = episodes.reshape(6, 2)
    assert (np.abs(per_game[:, 0] - per_game[:, 1]) <= 1).all()


def test_a_curriculum_stage_changes_the_team_size_in_the_worker():
    """A worker whose plan moves the league from 1v1 to 3v3: the games are rebuilt (12 slots: 12 games, then 4),
    games report their team size, every opponent member acts (random and the scripted team), and dead steps stay
    out of the batch's valid steps."""
    stages = [
        {"name": "1v1", "env_kwargs": {"team_size": 1}, "promote": {"win_rate": 0.8, "min_games": 10}},
        {"name": "3v3", "env_kwargs": {"team_size": 3}},
    ]
    worker = _worker(_duel_teams_config(curriculum=stages))
    game_env = worker.env_side.game_env
    info, _ = worker.sample(None, {"shares": {"random": 0.5, "heuristic": 0.5}, "weights": {}})
    assert game_env.games == 12 and {(r["team_size"], r["stage"]) for r in info.league_results} <= {(1, 0)}
    plan = {"shares": {"random": 0.5, "heuristic": 0.5}, "weights": {}, "env_kwargs": {"team_size": 3}, "stage": 1}
    results, invalid = [], 0
    for _ in range(4):
        info, batch = worker.sample(None, plan)
        results += info.league_results
        invalid += int((~batch.valid).sum())
    assert game_env.games == 4 and game_env.team_size == 3
    assert results and {(r["team_size"], r["stage"]) for r in results} == {(3, 1)}
    assert {r["opponent"] for r in results} == {"random", "heuristic"}
    assert invalid > 0  # the switch's truncation, restarts and the dead steps of members out
