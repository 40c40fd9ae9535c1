"""The run's counters and stop rules, in-process: one definition of "solved" for the stop rule and the summary."""

import pytest

from distrl.config import load_config
from distrl.driver.run_state import RETURN_WINDOW, RunState, stop_reason


def stop(**kwargs):
    return load_config(None, [f"stop.{k}={'null' if v is None else v}" for k, v in kwargs.items()]).stop


def test_return_target_needs_a_full_window_for_both_solving_and_stopping():
    run = RunState()
    run.add_iteration(1000, [500.0] * (RETURN_WINDOW - 1), [500] * (RETURN_WINDOW - 1), elapsed_s=3.0, target=475)
    assert run.return_mean() == 500.0 and run.solved_at_s is None
    assert stop_reason(stop(episode_return_mean=475, env_steps=None), run, 3.0) is None
    run.add_iteration(1000, [100.0], [100], elapsed_s=4.25, target=475)
    assert run.return_mean() == pytest.approx((500 * 99 + 100) / 100) and run.reached(475)
    assert run.solved_at_s == 4.25
    assert stop_reason(stop(episode_return_mean=475, env_steps=None), run, 4.25) == "episode_return_mean"
    run.add_iteration(1000, [0.0] * 50, [1] * 50, elapsed_s=9.0, target=475)  # solved once stays solved
    assert run.solved_at_s == 4.25 and not run.reached(475)


def test_window_keeps_the_last_episodes_and_counters_add_up():
    run = RunState()
    for i in range(3):
        run.add_iteration(4096, [float(i)] * 80, [10] * 80, elapsed_s=i, target=None)
    assert (run.iteration, run.env_steps, run.episodes) == (3, 3 * 4096, 240)
    assert list(run.recent_returns) == [1.0] * 20 + [2.0] * 80 and run.solved_at_s is None


def test_budgets_stop_in_order_and_none_means_go_on():
    run = RunState(env_steps=999)
    assert stop_reason(stop(env_steps=1000, time_s=10), run, elapsed_s=9.9) is None
    assert stop_reason(stop(env_steps=1000, time_s=10), run, elapsed_s=10.0) == "time_s"
    run.env_steps = 1000
    assert stop_reason(stop(env_steps=1000, time_s=10), run, elapsed_s=10.0) == "env_steps"
    # An evaluation's target: the newest evaluation's mean return (none yet: go on), 0 a value like any other.
    from distrl.config.schema import StopConfig

    at_zero = StopConfig(env_steps=None, eval_return_mean=0.0)
    run = RunState()
    assert stop_reason(at_zero, run, elapsed_s=1.0) is None
    run.eval_return_mean = -0.5
    assert stop_reason(at_zero, run, elapsed_s=1.0) is None
    run.eval_return_mean = 0.0
    assert stop_reason(at_zero, run, elapsed_s=1.0) == "eval_return_mean"


def test_state_round_trips_and_reads_checkpoints_without_fault_counters():
    run = RunState(
        iteration=7,
        env_steps=70,
        time_s=1.5,
        episodes=3,
        solved_at_s=1.2,
        worker_restarts=1,
        learner_restarts=2,
        env_errors=4,
    )
    run.recent_returns.extend([1.0, 2.0])
    run.recent_lengths.extend([5, 6])
    again = RunState.from_state(run.state())
    assert again.state() == run.state()
    old = {k: v for k, v in run.state().items() if k not in ("worker_restarts", "learner_restarts", "env_errors")}
    assert RunState.from_state(old).learner_restarts == 0


def sample_info():
    """A worker's report of one batch of 10 env steps (worker 0, onnxrt, one checked weight sync)."""
    from distrl.data.messages import SampleInfo

    return SampleInfo(
        worker_index=0,
        incarnation="a",
        seed=0,
        policy_version=0,
        policy_version_mean=0.0,
        env_steps=10,
        batch_bytes=100,
        episode_returns=[],
        episode_lengths=[],
        sample_s=0.1,
        policy_s=0.01,
        env_s=0.05,
        finished_at=0.0,
        obs_stats=None,
        policy_backend="onnxrt",
        recompiles=0,
        graph_breaks=0,
        weight_sync_checks=1,
    )


def test_rows_report_every_workers_backend_not_worker_zeros():
    from dataclasses import replace

    from distrl.data.messages import UpdateResult
    from distrl.driver.report import iteration_row

    info = sample_info()
    infos = [info, replace(info, worker_index=1, policy_backend="eager")]  # worker 1 fell back
    row = iteration_row(
        RunState(iteration=1, env_steps=20), infos, UpdateResult(version=1, learn_s=0.2), 0.3, 1.0, 66.0
    )
    assert row["policy_backend"] == "eager+onnxrt" and row["batch_bytes"] == 200 and row["weight_sync_checks"] == 2
    assert row["workers_in_update"] == 2
    assert (
        iteration_row(
            RunState(iteration=1, env_steps=20), [info, info], UpdateResult(version=1, learn_s=0.2), 0.3, 1.0, 66.0
        )["workers_in_update"]
        == 1
    )


def test_the_final_report_says_why_where_and_what_next_and_a_met_target_only_where_there_was_one():
    from pathlib import Path
    from types import SimpleNamespace

    from distrl.api import final_report
    from distrl.config import load_config

    config = load_config(None, ["stop.env_steps=253952", "stop.episode_return_mean=475"])
    run = dict(
        stop_reason="env_steps",
        env_steps=253952,
        wall_s=43.0,
        sps=5906.0,
        episode_return_mean=500.0,
        run_dir=Path("runs/x"),
        checkpoint=Path("runs/x/checkpoints/ckpt_0000031.pt"),
        best_checkpoint=Path("runs/x/checkpoints/ckpt_0000030.pt"),
        config=config,
        summary={"best_checkpoint_score": 478.44, "best_checkpoint_metric": "episode_return_mean"},
    )
    lines = final_report(SimpleNamespace(**run, solved_at_s=None)).splitlines()
    assert lines == [
        "done: the step budget (253,952 env steps) reached",
        "  steps    253,952 env steps in 43.0 s (5,906 steps/s)",
        "  return   500.0 (mean of the last 100 episodes)",
        "  best     runs/x/checkpoints/ckpt_0000030.pt (return 478.4)",
        "  run      runs/x",
        "next:",
        "  distrl eval runs/x",
        "  distrl export runs/x policy.onnx",
        "  distrl plot runs/x --out curve.png",
        "  distrl train --resume runs/x --set stop.env_steps=507904",
    ]
    assert "None" not in final_report(SimpleNamespace(**{**run, "episode_return_mean": None}, solved_at_s=None))
    met = final_report(SimpleNamespace(**{**run, "stop_reason": "episode_return_mean"}, solved_at_s=14.42))
    assert met.startswith("done: the return target (475) met at 14.4 s\n")
    assert met.endswith("distrl train --resume runs/x --set stop.episode_return_mean=null")
    # A resumed run: this command's steps, time and rate first, the run's totals on a line of their own.
    command = {"env_steps": 81920, "wall_s": 21.0, "sps": 3900.9, "resumed_at_env_steps": 172032}
    resumed = final_report(SimpleNamespace(**{**run, "summary": {"this_command": command}}, solved_at_s=None))
    assert "  steps    81,920 env steps in 21.0 s (3,901 steps/s)\n  total    253,952 env steps in 43.0 s" in resumed
    # Nothing trained: no checkpoint, so no next commands.
    empty = final_report(SimpleNamespace(**{**run, "checkpoint": None, "best_checkpoint": None}, solved_at_s=None))
    assert "next:" not in empty and "best" not in empty


def test_the_short_screen_places_actors_node_by_node():
    from distrl.driver.report import _placed

    spots = {
        "learner-0": {"node_ip": "10.0.0.1"},
        "worker-0": {"node_ip": "10.0.0.1"},
        "worker-1": {"node_ip": "10.0.0.2"},
        "worker-2": {"node_ip": "10.0.0.2"},
    }
    assert _placed(spots) == "learner-0, worker-0 on 10.0.0.1; 2 workers on 10.0.0.2"
    assert _placed({"learner-0": {"node_ip": "192.0.2.2"}}, private=True) == "learner-0 on this machine"
