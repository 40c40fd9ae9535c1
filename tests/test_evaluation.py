"""Evaluation during training, the best checkpoint it chooses, and the numbers an env reports (env.info_metrics)."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

from tests.conftest import ROOT, run_cli


def test_the_tracker_reads_info_where_episodes_end():
    """Vector info as gymnasium gives it (an array per key, ``_key`` marking the rows that have it): read only where
    an episode ended, a row without the key counted as missing, a string refused in one line."""
    from distrl.envs.episodes import EpisodeTracker, InfoMetricError

    tracker = EpisodeTracker(3, info_keys=("success", "distance"))
    no = np.zeros(3, dtype=bool)
    info = {
        "success": np.array([True, False, True]),
        "_success": np.array([True, True, False]),
        "distance": np.array([1.5, 2.5, 3.5]),
        "_distance": np.array([True, True, True]),
    }
    tracker.step(np.ones(3), np.array([True, True, True]), no, None, info)  # all three end
    tracker.step(np.ones(3), no, no, None, info)  # reset steps: nothing read
    tracker.step(np.ones(3), no, np.array([False, True, False]), None, info)  # copy 1 ends again
    values, missing = tracker.pop_info()
    assert values == {"success": [1.0, 0.0, 0.0], "distance": [1.5, 2.5, 3.5, 2.5]}
    assert missing == {"success": 1, "distance": 0}
    assert tracker.pop_info() == ({"success": [], "distance": []}, {"success": 0, "distance": 0})
    with pytest.raises(InfoMetricError, match=r"info\['success'\] at an episode's end is a str \('yes'\)"):
        tracker.step(np.ones(3), np.array([True, False, False]), no, None, {"success": np.array(["yes"] * 3)})


def test_the_eval_section_and_its_rules():
    from distrl.config import ConfigError, load_config

    plain = load_config(None, [])
    assert not plain.eval.enabled(False) and plain.eval.best_by(False) == "episode_return_mean"
    league = load_config("configs/league_connect4.yaml", [])
    assert league.eval.interval(True) == 10 and league.eval.count(True) == 100 and league.eval.best_by(True) == "eval"
    on = load_config(None, ["eval.every_iterations=5", "stop.eval_return_mean=450"])
    assert on.eval.best_by(False) == "eval" and on.eval.count(False) == 10
    for overrides, message in [
        (["eval.best=eval"], "eval.best=eval: evaluation is off"),
        (["stop.eval_return_mean=400"], "stop.eval_return_mean=400: evaluation is off"),
        (["eval.every_s=-1"], "eval.every_s"),
    ]:
        with pytest.raises(ConfigError, match=message):
            load_config(None, overrides)
    with pytest.raises(ConfigError, match="a league's training return is against ever stronger opponents"):
        load_config("configs/league_connect4.yaml", ["eval.best=episode_return_mean"])


def test_the_eval_metrics_are_grouped():
    from distrl.driver.metrics import tag

    assert tag("eval_return_mean") == "eval/return_mean" and tag("eval_failures") == "faults/eval_failures"
    assert tag("info_success_mean") == "info/success_mean" and tag("league_elo") == "league/elo"


def test_the_evaluator_plays_greedily_on_its_own_envs_and_reads_the_envs_numbers():
    """In-process: the same weights play the same episodes (its envs start from the same seeds every time); the
    env's ``success`` (an episode of 50 steps or more, CartPole's return being its length) matches a count by hand."""
    from distrl.config import load_config
    from distrl.driver.evaluation import Evaluator, policy_weights
    from distrl.envs import probe_run_spaces
    from distrl.models import build_model

    config = load_config(
        None,
        [
            "env.id=distrl.envs.testing:reporting_cartpole",
            "env.vectorization=sync",
            "env.info_metrics=[success, steps]",
            "eval.every_iterations=1",
            "eval.episodes=12",
            "eval.num_envs=5",
            "eval.env_kwargs={success_at: 20}",
        ],
    )
    model = build_model(*probe_run_spaces(config), config.model)
    state = {"model": model.state_dict(), "obs_norm": None, "optimizer": {"ignored": True}}
    evaluator = Evaluator(config)
    try:
        first = evaluator.evaluate(3, policy_weights(state))
        again = evaluator.evaluate(4, policy_weights(state))
    finally:
        evaluator.close()
    assert first.iteration == 3 and len(first.returns) == 12 and first.returns == again.returns
    by_hand = [float(r >= 20) for r in first.returns]
    assert sorted(first.episode_info["success"][:12]) == sorted(by_hand)
    row = first.metrics()
    assert row["eval_return_mean"] == pytest.approx(np.mean(first.returns))
    assert row["eval_length_mean"] == pytest.approx(np.mean(first.returns))  # a reward of 1 a step
    assert row["eval_info_steps_max"] == max(first.returns) and row["eval_iteration"] == 3


def test_a_league_evaluation_plays_the_fixed_players_in_both_seats():
    from distrl.config import load_config
    from distrl.driver.evaluation import Evaluator
    from distrl.envs import probe_run_spaces
    from distrl.models import build_model

    config = load_config("configs/league_connect4.yaml", ["eval.episodes=20", "eval.opponents=[heuristic, random]"])
    model = build_model(*probe_run_spaces(config), config.model)
    result = Evaluator(config).evaluate(7, {"model": model.state_dict()})
    assert len(result.returns) == 40 and set(result.returns) <= {-1.0, 0.0, 1.0}
    assert set(result.scores) == {"heuristic", "random"} and all(0 <= s <= 1 for s in result.scores.values())
    assert result.return_mean == pytest.approx(2 * np.mean(list(result.scores.values())) - 1)
    assert 7 <= min(result.lengths) and max(result.lengths) <= 42  # connect four: a game's moves


def _rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _evaluator_pids(parent: int) -> list[int]:
    return [
        p.pid
        for p in psutil.Process(parent).children(recursive=True)
        if "ray::Evaluator" in " ".join(p.cmdline() or [])
    ]


@pytest.mark.slow
def test_evaluation_beside_training_chooses_the_best_across_a_resume_and_outlives_its_actor(tmp_path):
    """A real run whose evaluation envs are slow (their steps sleep): results land iterations after their
    checkpoints while the workers go on sampling, evaluation's steps are not the run's, the env's own numbers reach
    the rows. Resumed with one checkpoint kept, the eval actor killed in the resumed command: the run goes on,
    counts it and evaluates again with a new one, and the best by evaluation stays on disk and named."""
    run_dir = tmp_path / "run"
    common = [
        "--set",
        "env.id=distrl.envs.testing:reporting_cartpole",
        "--set",
        "env.vectorization=sync",
        "--set",
        "env.info_metrics=[success]",
        "--set",
        "env.kwargs={step_s: 0.0001}",  # an iteration of about a second: evaluations land within each command
        "--set",
        "eval.every_iterations=1",
        "--set",
        "eval.episodes=4",
        "--set",
        "eval.env_kwargs={step_s: 0.0005}",
        "--set",
        "checkpoint.every_iterations=0",
        "--set",
        "checkpoint.keep=1",
        "--set",
        "stop.episode_return_mean=null",
    ]
    scores: dict[int, float] = {}  # every evaluation's result, by the iteration of its checkpoint

    def final_evaluation() -> dict:
        summary = json.loads((run_dir / "summary.json").read_text())
        scores[summary["final_eval"]["eval_iteration"]] = summary["final_eval"]["eval_return_mean"]
        return summary

    first = run_cli(
        "train", "configs/cartpole.yaml", "--run-dir", str(run_dir), *common, "--set", "stop.env_steps=98304"
    )
    assert first.returncode == 0, first.stderr[-3000:]
    final_evaluation()

    # Resumed: its eval actor killed while the run trains; the run goes on and evaluates again.
    proc = subprocess.Popen(
        [sys.executable, "-m", "distrl", "train", "--resume", str(run_dir), *common, "--set", "stop.env_steps=196608"],
        cwd=ROOT,
        env={**os.environ, "RAY_ADDRESS": "local", "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        killed = 0
        deadline = time.monotonic() + 240
        while not killed and time.monotonic() < deadline and proc.poll() is None:
            newer = [r["iteration"] for r in _rows(run_dir) if 13 < r["iteration"] <= 20]
            pids = _evaluator_pids(proc.pid)
            if newer and pids:
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                killed = newer[-1]
            time.sleep(0.2)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed and proc.returncode == 0, err[-3000:]
    summary = final_evaluation()
    assert summary["eval_failures"] >= 1 and "evaluation of iteration" in err + out
    assert summary["stop_reason"] == "env_steps" and summary["env_steps"] == 196608

    rows = _rows(run_dir)
    evaluated = [r for r in rows if "eval_return_mean" in r]
    assert evaluated and all(r["eval_iteration"] < r["iteration"] for r in evaluated)
    assert any(r["iteration"] - r["eval_iteration"] >= 2 for r in evaluated)  # training went on meanwhile
    assert [r["env_steps"] for r in rows] == [8192 * r["iteration"] for r in rows]  # eval's steps are not the run's
    later = [r["eval_iteration"] for r in evaluated if r["iteration"] > killed] + [
        summary["final_eval"]["eval_iteration"]
    ]
    assert max(later) > killed  # a new actor evaluated (the final checkpoint, at least)
    assert all(0 <= r["info_success_mean"] <= 1 and "info_success_max" in r for r in rows if "info_success_mean" in r)
    assert all("eval_info_success_mean" in r for r in evaluated)
    scores.update({r["eval_iteration"]: r["eval_return_mean"] for r in evaluated})
    # The final round: the newest and the best so far, each on four times the episodes; the better is the best.
    final = summary["final_eval"]
    assert final["eval_episodes"] == 16 and final["eval_iteration"] == 24
    rounds = {24: final["eval_return_mean"]}
    if "eval_best_again" in final:
        again = final["eval_best_again"]
        assert again["eval_iteration"] < 24 and again["eval_episodes"] == 16  # the best before the final round
        rounds[again["eval_iteration"]] = again["eval_return_mean"]
    best_score = max(rounds.values())
    best_iteration = min(i for i, s in rounds.items() if s == best_score)  # a tie keeps the earlier
    best_file = run_dir / "checkpoints" / f"ckpt_{best_iteration:07d}.pt"
    assert summary["best_checkpoint_metric"] == "eval_return_mean" and summary["best_checkpoint_score"] == best_score
    assert summary["best_checkpoint"] == str(best_file) and best_file.is_file()
    on_disk = sorted(p.name for p in (run_dir / "checkpoints").glob("ckpt_*.pt"))
    assert on_disk == sorted({best_file.name, "ckpt_0000024.pt"})
    played = run_cli("eval", str(run_dir), "--episodes", "2")
    assert f"checkpoint {best_file} (the run's best, by its evaluation's mean return" in played.stdout, played.stdout
