"""Faults, each injected for real into a running `distrl train`, with nothing lost."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import ROOT, run_cli
from tests.test_train_e2e import check_run_dir, read_metrics


def start_train(run_dir, *overrides):
    args = [sys.executable, "-m", "distrl", "train", "configs/cartpole.yaml", "--run-dir", str(run_dir)]
    for item in overrides:
        args += ["--set", item]
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_rows(run_dir, count, proc, timeout=180, restarts=0):
    """Until the run has ``count`` metrics rows, the newest counting ``restarts`` worker restarts or more (a restarted
    worker has sampled again: its process is the one running now)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        path = run_dir / "metrics.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        try:
            if len(lines) >= count and json.loads(lines[-1])["worker_restarts"] >= restarts:
                return
        except json.JSONDecodeError:  # a row being written
            pass
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    raise AssertionError(f"no {count} metrics rows within {timeout} s")


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:  # gone already
        return ""


def actor_processes(root_pid, title, timeout: float = 30.0):
    """The processes under ``root_pid`` whose title has ``title``, waited for (a restarted actor takes a moment)."""
    deadline = time.time() + timeout
    while True:
        found = [p for p in psutil.Process(root_pid).children(recursive=True) if title in " ".join(_cmdline(p))]
        if found or time.time() > deadline:
            return found
        time.sleep(0.2)


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:  # gone already
        return []


def kill_actor_mid_run(run_dir, title, *overrides):
    """Start a 200k-step run, kill -9 the one actor whose process title has ``title`` after 3 iterations, let it
    finish."""
    proc = start_train(run_dir, "stop.episode_return_mean=null", "stop.env_steps=200000", *overrides)
    wait_for_rows(run_dir, 3, proc)
    (actor,) = actor_processes(proc.pid, title)
    actor.send_signal(signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    return stdout


@pytest.mark.slow
def test_killed_worker_is_restarted_with_current_weights_and_batch_is_full(tmp_path):
    run_dir = tmp_path / "run"
    stdout = kill_actor_mid_run(run_dir, "ray::RolloutWorker", "rollout.pipeline=sync")
    assert "worker-0 was restarted (restart 1)" in stdout
    new_seed, old_seed = stdout.split("new random stream (seed ")[1].split(")")[0].split(", was ")
    assert int(new_seed) != int(old_seed)  # not a replay of the first incarnation's random stream
    rows, summary = check_run_dir(run_dir)
    assert summary["worker_restarts"] == 1 and rows[-1]["worker_restarts"] == 1
    assert [r["env_steps"] for r in rows] == [8192 * (i + 1) for i in range(len(rows))]  # every batch full
    assert all(r["policy_lag_mean"] == 0 for r in rows)  # the restarted worker acted with the current weights
    assert summary["stop_reason"] == "env_steps"


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", ["sync", "overlap", "async"])
def test_a_worker_process_that_keeps_dying_spends_its_restarts_then_ends_the_run(tmp_path, pipeline):
    """Crashes spend rollout.max_restarts (kept by distrl: Ray restarts workers without limit, so that a lost node
    spends nothing, tests/test_nodes.py): the first kill is restarted, the second gives the worker up, and with no
    worker left the run ends with one line, the same in every pipeline."""
    run_dir = tmp_path / "run"
    proc = start_train(
        run_dir,
        "stop.episode_return_mean=null",
        "stop.env_steps=2000000",
        f"rollout.pipeline={pipeline}",
        "rollout.max_restarts=1",
    )
    for kill in (1, 2):
        wait_for_rows(run_dir, 3 * kill, proc, restarts=kill - 1)
        (actor,) = actor_processes(proc.pid, "ray::RolloutWorker")
        actor.send_signal(signal.SIGKILL)
        psutil.wait_procs([actor], timeout=30)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 2, stderr[-3000:]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert lines[0].startswith(
        "distrl: error: worker-0 (CartPole-v1) cannot go on: it is not restarted again "
        "(rollout.max_restarts=1); its process died 2 times"
    ), lines[0]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "worker_failure" and summary["worker_restarts"] == 1


@pytest.mark.slow
def test_killed_learner_between_snapshots_is_rebuilt_from_the_newest_held_and_the_run_finishes(tmp_path):
    """Snapshots on a budget that only the first update meets (``learner.snapshot_every_s``): the learner killed
    after three updates is rebuilt from the first's state, says how much learning is lost, and versions go on from
    its last (never backwards). The final checkpoint still holds the state of its last update. (A snapshot after
    every update, the default: tests/test_async.py's killed learner, tests/test_nodes.py's lost learner node.)"""
    from distrl.common.checkpoint import load_checkpoint

    run_dir = tmp_path / "run"
    stdout = kill_actor_mid_run(
        run_dir, "ray::Learner", "checkpoint.every_iterations=0", "learner.snapshot_every_s=1000"
    )
    assert "a learner died" in stdout and "(restart 1 of 3)" in stdout
    assert re.search(
        r"newest state the driver holds, \d+ updates older than the learner's last: their learning is "
        r"lost \(learner.snapshot_every_s=1000\)",
        stdout,
    ), stdout[-3000:]
    rows, summary = check_run_dir(run_dir)
    assert summary["learner_restarts"] == 1 and rows[-1]["learner_restarts"] == 1 and rows[0]["learner_restarts"] == 0
    assert summary["stop_reason"] == "env_steps" and summary["env_steps"] >= 200000
    assert [r["env_steps"] for r in rows] == [8192 * (i + 1) for i in range(len(rows))]  # no batch lost or repeated
    assert [r["learner_version"] for r in rows] == list(range(1, len(rows) + 1))
    assert all(r["policy_lag_mean"] == 1 for r in rows[1:])  # overlap pipeline, as before the kill
    final = load_checkpoint(run_dir)
    assert final["counters"]["iteration"] == len(rows) and final["learner"]["version"] == len(rows)


@pytest.mark.slow
def test_killed_driver_resumes_from_last_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    proc = start_train(
        run_dir, "stop.episode_return_mean=null", "stop.env_steps=150000", "checkpoint.every_iterations=1"
    )
    wait_for_rows(run_dir, 6, proc)
    descendants = psutil.Process(proc.pid).children(recursive=True)
    core = [
        p
        for p in descendants
        if _name(p) in ("gcs_server", "raylet") or _name(p).startswith(("ray::RolloutWorker", "ray::Learner"))
    ]
    assert core, [_name(p) for p in descendants]
    proc.send_signal(signal.SIGKILL)  # possibly mid-checkpoint
    proc.wait(timeout=30)
    _, alive = psutil.wait_procs(core, timeout=60)  # Ray's core goes with its driver by itself
    lingering = [_name(p) for p in alive]
    _, others = psutil.wait_procs(descendants, timeout=1)
    for p in others:  # Ray's side agents notice a dead raylet only slowly; stop what this test started
        p.kill()
    assert not lingering, f"Ray processes of the killed run still running: {lingering}"
    written = len(read_metrics(run_dir))
    result = run_cli("train", "--resume", str(run_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    rows, summary = check_run_dir(run_dir)
    resumed_at = int(result.stdout.split("resuming at iteration ")[1].split(",")[0])
    assert written - 2 <= resumed_at <= written  # at most the iteration being checkpointed is lost
    assert [r["iteration"] for r in rows] == list(range(1, len(rows) + 1))  # no duplicates after the resume
    assert [r["env_steps"] for r in rows] == [8192 * (i + 1) for i in range(len(rows))]
    assert summary["env_steps"] == rows[-1]["env_steps"] >= 150000


@pytest.mark.slow
def test_env_raising_in_step_is_reset_counted_and_training_goes_on(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "configs/cartpole.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "env.id=distrl.envs.testing:flaky_cartpole",
        "--set",
        "env.vectorization=sync",
        "--set",
        "env.kwargs={fail_every: 300}",
        "--set",
        "stop.env_steps=40000",
        "--set",
        "stop.episode_return_mean=null",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "env error (reset and masked): RuntimeError: simulated env crash at step call 300" in result.stdout
    rows, summary = check_run_dir(run_dir)
    # 64 copies each failing every 300th step call over ~40k steps
    assert summary["env_errors"] >= 64 and summary["stop_reason"] == "env_steps"
    assert all(r["loss_value"] is not None for r in rows)


@pytest.mark.slow
def test_env_failing_persistently_stops_the_run_with_a_clear_error(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "configs/cartpole.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "env.id=distrl.envs.testing:broken_cartpole",
        "--set",
        "env.vectorization=sync",
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [lines[-1]]  # only distrl's line: no "Unhandled error" dumps from Ray ahead of it
    assert lines[-1].startswith("distrl: error: env step failed 3 times in a row (env.max_consecutive_errors=3)")
    assert "simulated env crash" in lines[-1] and "Traceback" not in result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "env_failure" and summary["env_errors"] == 3
    assert summary["checkpoint"] is None and not (run_dir / "checkpoints").exists()  # nothing trained: no run to resume


@pytest.mark.slow
@pytest.mark.parametrize("factory,array", [("nan_reward_cartpole", "reward"), ("nan_obs_cartpole", "observation")])
def test_nonfinite_steps_are_caught_in_the_worker_counted_and_warned(tmp_path, factory, array):
    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "configs/cartpole.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        f"env.id=distrl.envs.testing:{factory}",
        "--set",
        "env.vectorization=sync",
        "--set",
        "env.kwargs={every: 200}",
        "--set",
        "stop.env_steps=60000",
        "--set",
        "stop.episode_return_mean=null",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # One warning, naming the worker, the env copy and the array; the rest are counted.
    warnings = [line for line in result.stdout.splitlines() if "not finite" in line]
    assert len(warnings) == 1 and f"worker-0 (distrl.envs.testing:{factory}), env " in warnings[0], result.stdout
    assert f"{array} not finite" in warnings[0] and "counted as env_nonfinite" in warnings[0]
    rows, summary = check_run_dir(run_dir)
    # 64 copies each returning a NaN every 200th step over ~60k steps: about 300; the learner never saw one.
    assert summary["env_nonfinite"] >= 200 and rows[-1]["env_nonfinite_total"] == summary["env_nonfinite"]
    assert summary["skipped_steps"] == 0 and rows[-1]["skipped_updates"] == 0
    assert summary["gradient_steps"] > 0 and all(r["loss_value"] is not None for r in rows)
    assert summary["env_errors"] == 0 and summary["stop_reason"] == "env_steps"


@pytest.mark.slow
@pytest.mark.alone  # a sample's deadline of a few seconds
def test_stuck_env_worker_is_killed_restarted_and_the_run_finishes(tmp_path):
    """A step that blocks forever (a deadlocked simulator) once: the worker is killed and restarted at the timeout,
    the iteration goes on without its batch, the run finishes its budget. The envs step in two groups, each on a
    thread of its own (rollout.env_groups), so the step that blocks is not the worker's own thread's."""
    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "configs/cartpole.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "env.id=distrl.envs.testing:stuck_cartpole",
        "--set",
        "env.vectorization=sync",
        "--set",
        "rollout.env_groups=2",
        "--set",
        f"env.kwargs={{stuck_at: 300, once_marker: {tmp_path / 'stuck'}}}",
        "--set",
        "rollout.num_workers=2",
        "--set",
        "rollout.num_cpus_per_worker=0.5",
        "--set",
        "env.num_envs_per_worker=16",
        "--set",
        "rollout.sample_timeout_s=5",
        "--set",
        "stop.env_steps=60000",
        "--set",
        "stop.episode_return_mean=null",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "returned no sample within 5 s (rollout.sample_timeout_s): killed for a restart" in result.stdout
    assert "(distrl.envs.testing:stuck_cartpole)" in result.stdout
    rows, summary = check_run_dir(run_dir)
    assert summary["worker_timeouts"] == 1 and summary["worker_restarts"] == 1 and rows[-1]["worker_timeouts"] == 1
    assert summary["stop_reason"] == "env_steps" and summary["env_steps"] >= 60000
    # The iteration that lost the stuck worker's batch trained on the other one's.
    assert sorted({r["env_steps"] - p["env_steps"] for p, r in zip([{"env_steps": 0}] + rows, rows)}) == [2048, 4096]


@pytest.mark.slow
@pytest.mark.alone  # a sample's deadline of a few seconds
@pytest.mark.parametrize("pipeline", ["overlap", "async"])
def test_env_stuck_again_and_again_ends_the_run_with_one_line(tmp_path, pipeline):
    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "configs/cartpole.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        f"rollout.pipeline={pipeline}",
        "--set",
        "env.id=distrl.envs.testing:stuck_cartpole",
        "--set",
        "env.vectorization=sync",
        "--set",
        "env.kwargs={stuck_at: 300}",
        "--set",
        "env.num_envs_per_worker=16",
        "--set",
        "rollout.sample_timeout_s=4",
        "--set",
        "rollout.max_restarts=1",
        "--set",
        "stop.env_steps=60000",
        "--set",
        "stop.episode_return_mean=null",
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert lines[0].startswith(
        "distrl: error: worker-0 (distrl.envs.testing:stuck_cartpole) cannot go on: it is "
        "not restarted again (rollout.max_restarts=1); it timed out 2 times"
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "worker_failure" and summary["worker_timeouts"] == 2


def test_corrupt_or_foreign_checkpoint_is_a_clear_error(tmp_path):
    bad = tmp_path / "ckpt.pt"
    bad.write_bytes(os.urandom(4096))
    for args in (["eval", str(bad)], ["export", str(bad), str(tmp_path / "x.onnx")]):
        result = run_cli(*args)
        assert result.returncode == 2
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(
            f"distrl: error: checkpoint='{bad}': not a loadable distrl checkpoint (corrupt, truncated"
        )
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "ckpt_0000005.pt").write_bytes(b"not a checkpoint")
    (run_dir / "config.yaml").write_text((ROOT / "configs" / "cartpole.yaml").read_text())
    result = run_cli("train", "--resume", str(run_dir))
    assert result.returncode == 2 and "not a loadable distrl checkpoint" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "x.onnx").exists()


def test_impossible_placement_in_local_mode_is_immediate_and_clear(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        "train", "configs/cartpole.yaml", "--run-dir", str(run_dir), "--set", "learner.num_gpus_per_learner=1"
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()  # a private Ray on a machine without CUDA: refused before it starts
    assert "learner.num_gpus_per_learner=1: this machine has no CUDA GPU" in line and "allowed: 0, or --address" in line
    assert not run_dir.exists()
    result = run_cli(
        "train",
        "configs/cartpole.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "rollout.node_labels={distrl-role: rollout}",
    )
    assert (
        result.returncode == 2
        and "rollout.node_labels={'distrl-role': 'rollout'}: no node with these labels" in result.stderr
    )


@pytest.mark.slow
def test_an_error_of_ours_mid_run_still_writes_the_final_checkpoint_and_tears_everything_down(
    tmp_path, ray_local, monkeypatch
):
    """Driven in-process on the session's Ray: an exception in the driver's own loop (here, the metrics row at
    iteration 3) must leave a final checkpoint and summary, and no actor or placement group behind."""
    from distrl.common.checkpoint import load_checkpoint
    from distrl.config import load_config
    from distrl.driver import Driver, report

    real_row = report.iteration_row

    def failing_row(run, *args, **kwargs):
        if run.iteration == 3:
            raise ZeroDivisionError("a bug of ours")
        return real_row(run, *args, **kwargs)

    monkeypatch.setattr(report, "iteration_row", failing_row)
    config = load_config(
        None,
        [
            "env.num_envs_per_worker=8",
            "rollout.rollout_length=32",
            "ppo.minibatch_size=64",
            "stop.env_steps=100000",
            "checkpoint.every_iterations=0",
            "logging.tensorboard=false",
        ],
    )
    driver = Driver(config, tmp_path / "run")
    with pytest.raises(ZeroDivisionError, match="a bug of ours"):
        driver.run()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["stop_reason"] == "error" and summary["iterations"] == 3
    assert load_checkpoint(tmp_path / "run")["counters"]["iteration"] == 3
    ray = ray_local

    def alive_named(names):
        found = set()
        for name in names:
            try:
                ray.get_actor(name)  # a dead named actor can no longer be looked up
                found.add(name)
            except ValueError:
                pass
        return found

    names = {f"distrl-{driver.run_id}-{n}" for n in ("learner-0", "worker-0", "coordinator")}
    deadline = time.time() + 30
    while time.time() < deadline:
        alive = alive_named(names)
        groups = [g for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]
        if not alive and not groups:
            break
        time.sleep(0.5)
    assert not alive and not groups, (alive, groups)


def _in_process_run(tmp_path, monkeypatch, at_row):
    """A CartPole driver in this process (the main thread: it installs its signal handlers), ``at_row(iteration)``
    called as each metrics row is made."""
    from distrl.config import load_config
    from distrl.driver import Driver, report

    real_row = report.iteration_row

    def row(run, *args, **kwargs):
        at_row(run.iteration)
        return real_row(run, *args, **kwargs)

    monkeypatch.setattr(report, "iteration_row", row)
    config = load_config(
        None,
        [
            "env.num_envs_per_worker=8",
            "rollout.rollout_length=32",
            "ppo.minibatch_size=64",
            "stop.env_steps=20000",
            "stop.episode_return_mean=null",
            "checkpoint.every_iterations=0",
            "logging.tensorboard=false",
        ],
    )
    return Driver(config, tmp_path / "run")


def test_an_interrupt_swallowed_where_it_landed_still_stops_the_run_at_the_next_update(
    tmp_path, ray_local, monkeypatch
):
    """Ctrl-C raises KeyboardInterrupt wherever the main thread is; code that swallows it there (an object's __del__,
    a weakref callback: Python prints "Exception ignored" and goes on) used to leave the run training on. The handler
    also raises a flag the loop reads after each update: the run stops there, as interrupted, checkpoint written."""

    def swallow(iteration):
        if iteration == 3:
            try:
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                pass

    driver = _in_process_run(tmp_path, monkeypatch, swallow)
    found = signal.getsignal(signal.SIGINT)  # Python's default; SIG_IGN where a shell ran pytest in the background
    summary = driver.run()
    assert summary["stop_reason"] == "interrupted" and summary["iterations"] == 3, summary  # not 20000 env steps'
    (checkpoint,) = (tmp_path / "run" / "checkpoints").glob("ckpt_*.pt")
    assert checkpoint.name == "ckpt_0000003.pt"
    assert signal.getsignal(signal.SIGINT) is found  # the handlers the run found are back


def test_an_interrupt_swallowed_while_ray_starts_stops_the_run_before_its_workers(tmp_path, ray_local, monkeypatch):
    """Ray's start checks for signals from its C++ side and keeps the KeyboardInterrupt to itself (its _raylet's
    ``check_signals`` catches it and returns a status), so a Ctrl-C that landed there was lost and the run trained to
    its end. The handlers are in from before Ray starts: their flag stops the run before any worker starts."""
    from distrl.driver import driver as driver_module

    real = driver_module.connect_ray

    def connect_and_swallow(target):
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass  # as Ray's check_signals does
        return real(target)

    monkeypatch.setattr(driver_module, "connect_ray", connect_and_swallow)
    driver = _in_process_run(tmp_path, monkeypatch, lambda iteration: None)
    found = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        driver.run()
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no update ran
    assert signal.getsignal(signal.SIGINT) is found  # the handlers the run found are back


def test_a_second_interrupt_while_the_run_finishes_stops_it_at_once(tmp_path, ray_local, monkeypatch):
    """Ctrl-C, and Ctrl-C again while the final checkpoint is being written: the run stops at once, without it (a
    checkpoint that waits on a stuck learner or a slow storage upload never holds the terminal), and still tears its
    actors down."""
    from distrl.driver import driver as driver_module

    def interrupt(iteration):
        if iteration == 3:
            signal.raise_signal(signal.SIGINT)

    def second_interrupt(*args, **kwargs):
        signal.raise_signal(signal.SIGINT)
        raise AssertionError("the second interrupt did not stop the checkpoint")

    monkeypatch.setattr(driver_module, "save_checkpoint", second_interrupt)
    driver = _in_process_run(tmp_path, monkeypatch, interrupt)
    found = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        driver.run()
    assert (
        not list((tmp_path / "run").glob("checkpoints/ckpt_*.pt")) and not (tmp_path / "run" / "summary.json").exists()
    )
    assert signal.getsignal(signal.SIGINT) is found
    ray = ray_local
    deadline = time.time() + 30
    while time.time() < deadline and [g for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]:
        time.sleep(0.5)
    assert not [g for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]


@pytest.mark.slow
def test_learner_update_past_its_bound_is_rebuilt_then_ends_the_run_with_one_line(tmp_path):
    """Every update takes longer than learner.update_timeout_s: the learner is rebuilt (counted), then the run
    stops with one line once learner.max_restarts is spent, with its checkpoint and summary written."""
    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "configs/cartpole.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "learner.update_timeout_s=0.001",
        "--set",
        "learner.max_restarts=1",
        "--set",
        "stop.episode_return_mean=null",
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "a learner stalled (no update within 0 s (learner.update_timeout_s))" in result.stdout
    lines = result.stderr.strip().splitlines()
    assert lines == [
        "distrl: error: learner: no update within 0 s (learner.update_timeout_s), and learner.max_restarts=1 is spent"
    ], result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["learner_restarts"] == 1 and summary["stop_reason"] == "error"


def clean_output_lines(result):
    """Lines of a run's output that a user would read as faults."""
    return [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if "core_worker" in line or "(raylet)" in line or "ERROR" in line or "Unhandled error" in line
    ]


@pytest.mark.slow
def test_clean_cartpole_and_breakout_runs_print_only_distrls_lines(tmp_path):
    cartpole = run_cli(
        "train",
        "configs/cartpole.yaml",
        "--run-dir",
        str(tmp_path / "cartpole"),
        "--set",
        "stop.env_steps=60000",
        "--set",
        "stop.episode_return_mean=null",
    )
    assert cartpole.returncode == 0 and clean_output_lines(cartpole) == [], cartpole.stdout + cartpole.stderr
    breakout = run_cli(
        "train",
        "configs/breakout.yaml",
        "--run-dir",
        str(tmp_path / "breakout"),
        "--set",
        "rollout.compile.backend=onnxrt",
        "--set",
        "stop.env_steps=3072",
    )
    assert breakout.returncode == 0 and clean_output_lines(breakout) == [], breakout.stdout + breakout.stderr
    assert "policy backend onnxrt" in breakout.stdout and "model    cnn [512] relu" in breakout.stdout
    rows, summary = check_run_dir(tmp_path / "breakout")  # the CNN end to end: every row has its value loss
    assert summary["env_steps"] >= 3072 and all(r["loss_value"] is not None for r in rows)
    assert "artifacts shared" in (tmp_path / "breakout" / "setup.txt").read_text()  # the start-up summary in full


@pytest.mark.slow
def test_killed_breakout_worker_gets_the_shared_artifacts_again(tmp_path):
    """The CNN's ONNX export (megabytes) reaches workers through the coordinator: a restarted worker gets it too."""
    run_dir = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "distrl",
        "train",
        "configs/breakout.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "rollout.compile.backend=onnxrt",
        "--set",
        "rollout.compile.strict=true",
        "--set",
        "rollout.pipeline=sync",
        "--set",
        "stop.env_steps=6144",
    ]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_rows(run_dir, 2, proc)
    (actor,) = actor_processes(proc.pid, "ray::RolloutWorker")
    actor.send_signal(signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    assert "worker-0 was restarted (restart 1)" in stdout
    rows, summary = check_run_dir(run_dir)
    assert summary["worker_restarts"] == 1 and summary["env_steps"] == 6144  # the interrupted sample was run again
    assert all(r["policy_backend"] == "onnxrt" for r in rows)  # strict: the restarted worker built onnxrt again
