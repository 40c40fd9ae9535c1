"""A league run through the command line as a user runs it: it learns, resumes with its league, plays a tournament."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow

SMALL = [
    "--set",
    "env.num_envs_per_worker=32",
    "--set",
    "rollout.rollout_length=32",
    "--set",
    "ppo.minibatch_size=256",
    "--set",
    "model.hidden=[64,64]",
    "--set",
    "league.snapshot_every=4",
    "--set",
    "checkpoint.every_iterations=5",
    "--set",
    "league.curriculum=[{name: random, opponents: [random], promote: {win_rate: 0.85, min_games: 200}}, "
    "{name: league}]",
]


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def league_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("league") / "c4"
    done = run_cli(
        "train",
        "configs/league_connect4.yaml",
        "--run-dir",
        str(run),
        *SMALL,
        "--set",
        "stop.env_steps=120000",
        "--set",
        "stop.time_s=null",
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return run


def test_a_league_run_learns_against_random_and_rates_itself(league_run):
    rows = _rows(league_run)
    played = [(r["league_win_random"], r["league_games_random"]) for r in rows if "league_win_random" in r]

    def win_rate(part):  # over the games of these rows (later stages play few games against random per iteration)
        return sum(rate * games for rate, games in part) / sum(games for _, games in part)

    first, last = win_rate(played[:2]), win_rate(played[len(played) // 2 :])
    assert sum(games for _, games in played[len(played) // 2 :]) >= 50
    assert last > first + 0.15 and last > 0.75, (first, last)  # an untrained policy wins about half
    assert rows[-1]["league_size"] >= 3 and rows[-1]["league_elo"] > 1000
    summary = json.loads((league_run / "summary.json").read_text())
    league = summary["league"]
    assert league["elo"] == pytest.approx(rows[-1]["league_elo"], abs=0.1)
    assert league["members"]["random"]["elo"] == 1000  # the anchor
    assert any(e["event"] == "stage" for e in league["events"])  # the curriculum left its first stage
    assert sum(league["record"]["random"]["by_seat"]["1"]) > 0 and sum(league["record"]["random"]["by_seat"]["0"]) > 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(league_run)).Reload()
    assert {"league/elo", "league/size", "league/stage", "league/win_random"} <= set(events.Tags()["scalars"])


def test_resume_keeps_the_league(league_run):
    import torch

    newest = sorted((league_run / "checkpoints").glob("ckpt_*.pt"))[-1]
    saved = torch.load(newest, weights_only=True)["league"]
    done = run_cli("train", "--resume", str(league_run), "--set", "stop.env_steps=150000", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    league = json.loads((league_run / "summary.json").read_text())["league"]
    assert league["events"][: len(saved["events"])] == saved["events"]  # the same league, continued
    assert league["games"] > saved["games"]
    names = {m["name"] for m in saved["members"]}
    assert names - {"random", "heuristic"} <= set(league["members"]) | {
        e["name"] for e in league["events"] if "name" in e
    }
    resumed = [r for r in _rows(league_run) if r["iteration"] > int(newest.stem.split("_")[1])]
    assert resumed and resumed[0]["league_size"] >= len([m for m in saved["members"] if m["kind"] == "snapshot"])
    assert abs(resumed[0]["league_elo"] - saved["rating"]) < 200  # continues from the saved rating, not from 1000


def test_tournament_and_eval(league_run, tmp_path):
    done = run_cli("league", str(league_run), "--games", "6", "--replays", str(tmp_path / "replays"))
    assert done.returncode == 0, done.stderr[-3000:]
    table = json.loads((league_run / "league" / "tournament.json").read_text())
    players = {row["player"]: row for row in table["players"]}
    assert {"random", "heuristic", "main", "main@0"} <= set(players)
    assert players["random"]["elo"] == 1000
    assert players["main"]["elo"] > players["main@0"]["elo"]  # the trained learner beats its initial self
    assert (league_run / "league" / "tournament.md").read_text().count("\n| ") == len(players) + 2  # header, rule, rows
    assert (league_run / "league" / "elo.png").stat().st_size > 1000
    replay = json.loads((tmp_path / "replays" / "replay_0.json").read_text())
    assert replay["moves"] and {replay["seat_0"], replay["seat_1"]} == {r["player"] for r in table["players"][:2]}
    done = run_cli("eval", str(league_run), "--opponent", "random", "--episodes", "40", "--checkpoint", "latest")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "seat 0 (first): 20 games against random" in done.stdout and "seat 1 (second)" in done.stdout
    newest = sorted((league_run / "checkpoints").glob("ckpt_*.pt"))[-1]
    assert done.stdout.startswith(f"checkpoint {newest} (the run's newest")


def test_the_best_is_chosen_by_evaluation_against_the_scripted_player(league_run):
    """A league evaluates by default (every 10 iterations, 100 games against the scripted player, both seats): its
    best checkpoint is the one that scored highest there, never the one with the highest training return, and
    ``distrl eval RUN`` with no flags plays it against the scripted player."""
    rows = _rows(league_run)
    summary = json.loads((league_run / "summary.json").read_text())
    evaluated = [r for r in rows if "eval_return_mean" in r]
    assert evaluated and all(r["eval_episodes"] == 100 and 0 <= r["eval_score_heuristic"] <= 1 for r in evaluated)
    final = summary["final_eval"]  # the final round: the newest and the best so far, 400 games each
    rounds = {final["eval_iteration"]: final["eval_return_mean"]}
    if "eval_best_again" in final:
        rounds[final["eval_best_again"]["eval_iteration"]] = final["eval_best_again"]["eval_return_mean"]
    assert final["eval_episodes"] == 400 and summary["best_checkpoint_metric"] == "eval_return_mean"
    assert summary["best_checkpoint_score"] == max(rounds.values())
    best = Path(summary["best_checkpoint"])
    assert best.is_file() and int(best.stem.split("_")[1]) in rounds
    done = run_cli("eval", str(league_run), "--episodes", "20")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("a league run: its learner plays the game's scripted player")
    assert f"checkpoint {best} (the run's best, by its evaluation's mean return" in done.stdout, done.stdout
    assert "seat 0 (first): 10 games against heuristic" in done.stdout


def test_duel_teams_league_steps_through_team_sizes_rates_and_replays_as_video(tmp_path):
    """configs/league_duel_teams.yaml through Ray with promotions made easy: 1v1, then 2v2, then 3v3 (the worker's
    96 slots rebuilt as 96, 48 and 32 games), each stage's games rated; then a tournament of 3v3 teams with videos.
    Under the async pipeline (the connect-four run above is the shipped overlap): stage changes, snapshots and
    ratings reach a worker whose sampling never waits for an update."""
    run = tmp_path / "duel"
    stages = (
        "league.curriculum=[{name: 1v1, env_kwargs: {team_size: 1}, promote: {win_rate: 0.0, min_games: 20}}, "
        "{name: 2v2, env_kwargs: {team_size: 2}, promote: {win_rate: 0.0, min_games: 20}}, "
        "{name: 3v3, env_kwargs: {team_size: 3}}]"
    )
    done = run_cli(
        "train",
        "configs/league_duel_teams.yaml",
        "--run-dir",
        str(run),
        "--set",
        "stop.env_steps=100000",
        "--set",
        "stop.time_s=null",
        "--set",
        "league.snapshot_every=2",
        "--set",
        stages,
        "--set",
        "rollout.rollout_length=64",
        "--set",
        "rollout.pipeline=async",
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "curriculum: stage '1v1' -> '2v2'" in done.stdout + done.stderr
    rows = _rows(run)
    sizes = [r["league_team_size"] for r in rows if "league_team_size" in r]
    assert sizes[0] == 1 and 2 in sizes and sizes[-1] == 3, sizes
    assert rows[-1]["league_stage"] == 2 and rows[-1]["league_size"] >= 2
    assert "league_win_heuristic" in {k for r in rows for k in r}
    summary = json.loads((run / "summary.json").read_text())
    assert [e["to"] for e in summary["league"]["events"] if e["event"] == "stage"] == ["2v2", "3v3"]
    done = run_cli("league", str(run), "--games", "4", "--replays", str(tmp_path / "replays"))
    assert done.returncode == 0, done.stderr[-3000:]
    replay = json.loads((tmp_path / "replays" / "replay_0.json").read_text())
    assert replay["team_size"] == 3 and len(replay["positions"][0][0]) == 3  # three discs a side
    assert list((tmp_path / "replays").glob("replay_*.mp4"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["--set", "env.id=CartPole-v1"], "a league needs a two-player game"),
        (["--set", "env.id=pettingzoo/butterfly/knights_archers_zombies-v11"], "has 4 agents"),
        (["--set", "league.reward.sparse=false", "--set", "league.reward.shaping={bogus: 1}"], "offers no term bogus"),
    ],
)
def test_bad_league_input_is_one_line_before_ray(tmp_path, overrides, message):
    done = run_cli("train", "configs/league_connect4.yaml", "--run-dir", str(tmp_path / "run"), *overrides, timeout=120)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()
