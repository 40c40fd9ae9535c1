"""End-to-end runs through the CLI, as a user types them: train, resume, interrupt, eval, export."""

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import ROOT, run_cli, under_a_terminal

METRIC_KEYS = {
    "iteration",
    "env_steps",
    "time_s",
    "sps",
    "sample_s",
    "learn_s",
    "episode_return_mean",
    "episode_len_mean",
    "policy_lag_mean",
    "loss_policy",
    "loss_value",
    "entropy",
    "approx_kl",
    "grad_norm",
}


def read_metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def check_run_dir(run_dir):
    assert (run_dir / "config.yaml").is_file()
    rows = read_metrics(run_dir)
    assert rows and METRIC_KEYS <= rows[-1].keys()
    assert [r["iteration"] for r in rows] == list(range(1, len(rows) + 1))
    assert list(run_dir.glob("events.out.tfevents.*")), "TensorBoard event file"
    assert list((run_dir / "checkpoints").glob("ckpt_*.pt"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert {"env_steps", "wall_s", "sps", "episode_return_mean", "solved_at_s", "stop_reason"} <= summary.keys()
    # The start-up timeline, seconds from launch: set-up in order; a new run's first batch is sampled once the
    # workers are up (the learners may still be starting); the first update needs both.
    t = summary["startup"]
    milestones = [t[k] for k in ("imports", "env_probe", "ray_start", "artifacts", "workers_ready", "actors_ready")]
    assert 0 < milestones[0] and milestones == sorted(milestones)
    assert t["workers_ready"] < t["first_batch"] < t["first_update"] and t["actors_ready"] < t["first_update"]
    assert t["first_update"] < summary["wall_s"] + 1
    return rows, summary


@pytest.mark.slow
def test_cartpole_solves_then_eval_and_export(tmp_path):
    run_dir = tmp_path / "cartpole"
    result = run_cli("train", "configs/cartpole.yaml", "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "env      CartPole-v1: 1 worker x 64 envs" in result.stdout  # the start-up summary
    assert "started: first update at" in result.stdout
    setup = (run_dir / "setup.txt").read_text()  # the summary in full, with where the start-up went
    assert "start-up (s from launch): imports" in setup and "first batch" in setup and "kernels: eager" in setup
    assert f"  distrl eval {run_dir}" in result.stdout and f"  distrl train --resume {run_dir}" in result.stdout
    rows, summary = check_run_dir(run_dir)
    assert summary["stop_reason"] == "episode_return_mean", summary
    assert summary["episode_return_mean"] >= 475
    assert summary["env_steps"] <= 600_000 and summary["solved_at_s"] is not None
    assert all(r["policy_lag_mean"] == 1 for r in rows[1:])  # overlap pipeline

    result = run_cli("eval", str(run_dir), "--episodes", "5")
    assert result.returncode == 0, result.stderr[-3000:]
    mean = float(result.stdout.split("return mean")[1].split()[0])
    assert mean >= 400

    onnx_path = tmp_path / "policy.onnx"
    result = run_cli("export", str(run_dir), str(onnx_path))
    assert result.returncode == 0, result.stderr[-3000:]
    import onnxruntime as ort

    from distrl.compile import Float64Reference
    from distrl.deploy import policy_from_checkpoint

    _, model, _, _, _, _ = policy_from_checkpoint(run_dir)
    obs = np.random.default_rng(1).normal(size=(16, 4)).astype(np.float32)
    exported = tuple(ort.InferenceSession(str(onnx_path)).run(None, {"obs": obs}))
    problem = Float64Reference(model).mismatch(exported, obs)
    assert problem is None, problem


@pytest.mark.slow
def test_resume_continues_counters_the_best_checkpoint_and_the_learning_rate(tmp_path):
    """Trained to 40,960 env steps, resumed twice with a larger budget each time and one checkpoint kept: the counters
    go on, the best checkpoint survives every prune and is named in summary.json, eval plays it and says so, the
    annealed rate never rises, and a resumed command's end line gives its own time beside the run's."""
    run_dir = tmp_path / "run"
    common = [
        "--set",
        "stop.episode_return_mean=null",
        "--set",
        "checkpoint.every_iterations=2",
        "--set",
        "checkpoint.keep=1",
        "--set",
        "ppo.anneal_lr=true",
    ]
    first = run_cli(
        "train", "configs/cartpole.yaml", "--run-dir", str(run_dir), "--set", "stop.env_steps=40000", *common
    )
    assert first.returncode == 0, first.stderr[-3000:]
    rows1, summary1 = check_run_dir(run_dir)
    assert summary1["stop_reason"] == "env_steps" and summary1["env_steps"] == 40960
    commands = []
    for budget in (80000, 120000):
        started = time.monotonic()
        resumed = run_cli("train", "--resume", str(run_dir), "--set", f"stop.env_steps={budget}", *common)
        commands.append((resumed, time.monotonic() - started))
        assert resumed.returncode == 0, resumed.stderr[-3000:]
    second, third = commands[0][0], commands[1][0]
    rows, summary = check_run_dir(run_dir)
    assert "resuming at iteration 5" in second.stdout and "resuming at iteration 10" in third.stdout
    assert [r["iteration"] for r in rows] == list(range(1, 16))
    assert rows[5]["env_steps"] == 49152 and rows[5]["time_s"] > rows[4]["time_s"]
    assert rows[5]["learner_version"] == 6
    assert summary["env_steps"] == 122880
    # The best checkpoint: the highest return any checkpoint was written at (every 2nd iteration and each command's
    # last), still on disk beside the one newest kept, and named.
    written = [r for r in rows if r["iteration"] % 2 == 0 or r["iteration"] in (5, 10, 15)]
    best = max(written, key=lambda r: r["episode_return_mean"])
    best_file = run_dir / "checkpoints" / f"ckpt_{best['iteration']:07d}.pt"
    assert summary["best_checkpoint"] == str(best_file) and best_file.is_file()
    assert summary["best_checkpoint_score"] == pytest.approx(best["episode_return_mean"])
    assert summary["best_checkpoint_metric"] == "episode_return_mean"
    on_disk = sorted(p.name for p in (run_dir / "checkpoints").glob("ckpt_*.pt"))
    assert on_disk == sorted({best_file.name, "ckpt_0000015.pt"})
    # The rate: annealed to 0 at the first budget, it goes on from there under the larger ones, never up.
    rates = [r["lr"] for r in rows]
    assert all(later <= earlier for earlier, later in zip(rates, rates[1:])), rates
    assert "lr       continues at 0, annealed to 0 already" in second.stdout
    assert "stop.env_steps 40,000 -> 80,000: on from the rate reached" in " ".join(second.stdout.split())  # wrapped
    # A resumed command's end lines: this command's steps and time (its start-up included), then the run's on a line
    # of its own, whose clock went on from where it stopped (the command's start-up left out).
    run_before = summary1["wall_s"]
    for (result, took), steps in zip(commands, ("40,960", "40,960")):
        out = result.stdout.splitlines()
        line = next(line for line in out if line.startswith("  steps    "))
        total = next(line for line in out if line.startswith("  total    "))
        own_s = float(line.split(f"{steps} env steps in ")[1].split(" s")[0])
        run_s = float(total.split(" env steps in ")[1].split(" s")[0])
        assert own_s <= took and run_before < run_s < run_before + own_s, (line, total, run_before)
        run_before = run_s
    assert summary["this_command"]["env_steps"] == 40960 and summary["this_command"]["resumed_at_env_steps"] == 81920
    # eval plays the best, and says which file; --checkpoint latest plays the newest.
    played = run_cli("eval", str(run_dir), "--episodes", "2")
    assert played.returncode == 0, played.stderr[-3000:]
    how = f"(the run's best, by its mean training return {best['episode_return_mean']:.4g}"
    assert f"checkpoint {best_file} {how}" in played.stdout, played.stdout
    latest = run_cli("eval", str(run_dir), "--episodes", "2", "--checkpoint", "latest")
    assert f"checkpoint {run_dir / 'checkpoints' / 'ckpt_0000015.pt'} (the run's " in latest.stdout, latest.stdout
    # Starting a new run on top of an old one is refused rather than mixing them.
    again = run_cli("train", "configs/cartpole.yaml", "--run-dir", str(run_dir))
    assert again.returncode == 2 and "already holds a run" in again.stderr


@pytest.mark.slow
def test_ctrl_c_writes_final_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distrl",
            "train",
            "configs/cartpole.yaml",
            "--run-dir",
            str(run_dir),
            "--set",
            "stop.episode_return_mean=null",
            "--set",
            "stop.env_steps=100000000",
            "--set",
            "checkpoint.every_iterations=0",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (run_dir / "metrics.jsonl").exists():
        time.sleep(0.5)
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # a hang: keep what the driver printed
        proc.kill()
        stdout, stderr = proc.communicate()
        (tmp_path / "stderr.txt").write_text(stderr)
        pytest.fail(f"no exit 120 s after SIGINT; the driver's output ends:\n{stdout[-1500:]}\n{stderr[-5000:]}")
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr
    rows, summary = check_run_dir(run_dir)
    assert summary["stop_reason"] == "interrupted"
    assert summary["env_steps"] == rows[-1]["env_steps"] > 0
    (ckpt,) = (run_dir / "checkpoints").glob("ckpt_*.pt")
    assert ckpt.name == f"ckpt_{rows[-1]['iteration']:07d}.pt"


@pytest.mark.slow
def test_pendulum_learns(tmp_path):
    run_dir = tmp_path / "pendulum"
    result = run_cli(
        "train", "configs/pendulum.yaml", "--run-dir", str(run_dir), "--set", "stop.episode_return_mean=-400"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    _, summary = check_run_dir(run_dir)
    assert summary["stop_reason"] == "episode_return_mean" and summary["episode_return_mean"] >= -400


@pytest.mark.slow
def test_lstm_without_velocities_learns(tmp_path):
    run_dir = tmp_path / "lstm"
    result = run_cli(
        "train", "configs/cartpole_lstm.yaml", "--run-dir", str(run_dir), "--set", "stop.episode_return_mean=150"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    _, summary = check_run_dir(run_dir)
    assert summary["stop_reason"] == "episode_return_mean" and summary["episode_return_mean"] >= 150


def _ipex_param():
    from distrl.compile import available_backends

    row = next(r for r in available_backends() if r["name"] == "ipex")
    return pytest.param(
        "ipex", marks=[pytest.mark.ipex, pytest.mark.skipif(not row["available"], reason=row["reason"])]
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["onnxrt", "inductor", _ipex_param()])
def test_training_with_compiled_workers_and_learner(tmp_path, backend):
    run_dir = tmp_path / backend
    result = run_cli(
        "train",
        "configs/cartpole.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        f"rollout.compile.backend={backend}",
        "--set",
        "rollout.compile.strict=true",
        "--set",
        "learner.compile=true",
        "--set",
        "stop.env_steps=60000",
        "--set",
        "stop.episode_return_mean=null",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    setup = (run_dir / "setup.txt").read_text()
    assert f"policy backend {backend} (ready in" in setup and f"policy backend {backend}" in result.stdout
    assert "learner  1 x cpu, 0 GPU/learner" in setup
    assert "kernels: inductor, mode default (learner.compile=inductor)" in setup
    rows, summary = check_run_dir(run_dir)
    assert summary["policy_backend"] == backend
    assert all(r["policy_backend"] == backend for r in rows)
    # After warm-up neither side compiles again.
    assert all(r["worker_recompiles"] == 0 and r["learner_recompiles"] == 0 for r in rows)
    # Every weight sync was checked against eager: one per update, except the first two batches of the overlap
    # pipeline, sampled with the initial weights the workers already hold (version 0, no sync).
    assert rows[-1]["weight_sync_checks"] >= len(rows) - 2
    assert rows[-1]["episode_return_mean"] > rows[0]["episode_return_mean"]


@pytest.mark.slow
def test_the_device_steps_first_update_is_checked_and_reported(tmp_path):
    """On CPU the device step runs uncaptured: its first update is held to the loop's, said in the log and
    summary.json."""
    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "configs/cartpole.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "learner.step=device",
        "--set",
        "stop.env_steps=24576",
        "--set",
        "stop.episode_return_mean=null",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "minibatch step: the whole step at once (learner.step device): learner.step=device (uncaptured on CPU)"
        in (run_dir / "setup.txt").read_text()
    )  # the start-up summary in full
    assert "learner step device, eager kernels, fp32: its first update matched the loop's" in result.stdout
    step = json.loads((run_dir / "summary.json").read_text())["learner_step"]
    assert step["step"] == "device" and step["step_check"]["ok"] is True


SHORT_RUN = [
    "--set",
    "stop.env_steps=40000",
    "--set",
    "stop.episode_return_mean=null",
    "--set",
    "checkpoint.every_iterations=0",
    "--set",
    "logging.tensorboard=false",
    "--set",
    "rollout.compile.backend=eager",
]


@pytest.mark.slow
def test_the_python_api_shows_progress_where_a_person_watches_and_nothing_when_told_not_to(tmp_path):
    """``distrl.train`` in a terminal prints what ``distrl train`` prints (the banner, the bar, the final line) with
    no argument, and nothing at all with ``progress=False``."""
    code = (
        "import sys, distrl; distrl.train('configs/cartpole.yaml', run_dir=sys.argv[1], progress=eval(sys.argv[2]), "
        f"overrides={SHORT_RUN[1::2]!r})"
    )
    shown = under_a_terminal([sys.executable, "-c", code, str(tmp_path / "shown"), "None"])
    assert "distrl run " in shown and "started: first update at " in shown, shown[-3000:]
    assert "the first batch and update" in shown and "done: the step budget" in shown, shown[-3000:]
    silent = under_a_terminal([sys.executable, "-c", code, str(tmp_path / "silent"), "False"])
    assert "distrl" not in silent and "train " not in silent and "done:" not in silent, silent[-3000:]
    assert (tmp_path / "silent" / "summary.json").exists()
