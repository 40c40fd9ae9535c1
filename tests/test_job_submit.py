"""`ray job submit` for real: a local multi-node cluster (head + a rollout raylet) with token auth."""

import json
import shutil
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, run_cli

EXCLUDES = [".venv", ".venv-ipex", ".venv-*", "runs", ".git", "benchmarks/results", "**/__pycache__"]
PLACED = (
    "--set 'rollout.resources={rollout: 1}' --set 'rollout.node_labels={distrl-role: rollout}' "
    "--set 'learner.resources={learner: 1}' --set 'learner.node_labels={distrl-role: learner}'"
)


@pytest.fixture(scope="module")
def dev():
    sys.path.insert(0, str(ROOT))
    from clusters import local_dev_cluster

    cluster = local_dev_cluster.start(rollout_nodes=1, rollout_cpus=2, learner_cpus=1)
    yield cluster
    cluster.shutdown()
    # Exactly what this module started is stopped, and nothing of it is left.
    assert cluster.processes() == []
    shutil.rmtree(cluster.temp_dir, ignore_errors=True)  # the temp dir start() made, logs and all


def job(dev, *args, timeout=600):
    from clusters import local_dev_cluster

    for _attempt in range(5):  # the job server answers "try again later" until its agent has registered
        result = subprocess.run(
            [local_dev_cluster.ray_command(), "job", *args],
            capture_output=True,
            text=True,
            env=dev.env,
            timeout=timeout,
            cwd=ROOT,
        )
        if "No available agent" not in result.stderr:
            return result
        time.sleep(5)
    return result


def submit(dev, entrypoint, *flags):
    return job(
        dev,
        "submit",
        "--address",
        dev.dashboard_url,
        "--working-dir",
        str(ROOT),
        *flags,
        "--runtime-env-json",
        json.dumps({"excludes": EXCLUDES}),
        "--",
        "bash",
        "-c",
        entrypoint,
    )


@pytest.mark.slow
def test_job_submit_places_workers_and_learner_on_their_nodes(dev, tmp_path):
    run_dir = tmp_path / "run"
    entrypoint = (
        f"python -m distrl train configs/cartpole.yaml --run-dir {run_dir} "
        f"--set stop.env_steps=40000 --set stop.episode_return_mean=null {PLACED}"
    )
    start = time.time()
    result = submit(dev, entrypoint)
    took = time.time() - start
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "succeeded" in result.stdout.lower()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "env_steps" and summary["env_steps"] >= 40000
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["env_steps"] == summary["env_steps"]
    placement = json.loads((run_dir / "placement.json").read_text())
    # The learner sits on the head ('learner' node), the worker on the rollout raylet: two different nodes.
    assert placement["learner-0"]["node_id"] != placement["worker-0"]["node_id"]
    assert placement["worker-0"]["actor"].startswith("distrl-") and placement["worker-0"]["actor"].endswith("-worker-0")
    print(f"job submit test: {took:.1f} s; placement {json.dumps(placement)}")
    # Token auth is really on: the job API refuses a client without the token.
    from clusters import local_dev_cluster

    no_token = {k: v for k, v in dev.env.items() if k != "RAY_AUTH_TOKEN"}
    refused = subprocess.run(
        [local_dev_cluster.ray_command(), "job", "list", "--address", dev.dashboard_url],
        capture_output=True,
        text=True,
        env={**no_token, "HOME": str(tmp_path)},
        timeout=120,
    )
    assert refused.returncode != 0


@pytest.mark.slow
def test_ray_job_stop_leaves_a_final_checkpoint_that_resume_continues(dev, tmp_path):
    """`ray job stop` sends SIGTERM and, with Ray's default grace of 3 s, SIGKILL: the checkpoint must fit in it."""
    run_dir = tmp_path / "run"
    entrypoint = (
        f"python -m distrl train configs/cartpole.yaml --run-dir {run_dir} --set checkpoint.every_iterations=0 "
        f"--set stop.env_steps=50000000 --set stop.episode_return_mean=null {PLACED}"
    )
    submitted = submit(dev, entrypoint, "--no-wait", "--submission-id", f"distrl-stop-{int(time.time())}")
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    job_id = submitted.stdout.split("Job '")[1].split("'")[0]
    deadline = time.time() + 300
    metrics = run_dir / "metrics.jsonl"
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 4):
        assert time.time() < deadline, job(dev, "logs", "--address", dev.dashboard_url, job_id).stdout[-3000:]
        time.sleep(0.5)
    stopped = job(dev, "stop", "--address", dev.dashboard_url, job_id)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    status = job(dev, "status", "--address", dev.dashboard_url, job_id).stdout
    assert "was stopped" in status, status
    logs = job(dev, "logs", "--address", dev.dashboard_url, job_id).stdout
    summary = json.loads((run_dir / "summary.json").read_text())  # written by the stopped job, not killed first
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert summary["stop_reason"] == "interrupted" and summary["iterations"] == rows[-1]["iteration"] >= 4, logs[-3000:]
    assert summary["checkpoint"].endswith(f"ckpt_{rows[-1]['iteration']:07d}.pt")
    # Another machine (here: a private Ray) continues it.
    more = summary["env_steps"] + 16384
    resumed = run_cli(
        "train",
        "--resume",
        str(run_dir),
        "--set",
        f"stop.env_steps={more}",
        "--set",
        "rollout.resources={}",
        "--set",
        "rollout.node_labels={}",
        "--set",
        "learner.resources={}",
        "--set",
        "learner.node_labels={}",
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming at iteration {summary['iterations']}" in resumed.stdout
    final = json.loads((run_dir / "summary.json").read_text())
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert final["stop_reason"] == "env_steps" and final["env_steps"] >= more
    assert [r["iteration"] for r in rows] == list(range(1, len(rows) + 1))
