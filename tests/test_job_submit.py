"""`ray job submit` for real: a local multi-node cluster (head + a rollout raylet) with token auth."""

import json
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

EXCLUDES = [".venv", ".venv-ipex", ".venv-*", "runs", ".git", "benchmarks/results", "**/__pycache__"]


@pytest.mark.slow
def test_job_submit_places_workers_and_learner_on_their_nodes(tmp_path):
    sys.path.insert(0, str(ROOT))
    from clusters import local_dev_cluster

    dev = local_dev_cluster.start(rollout_nodes=1, rollout_cpus=2, learner_cpus=1)
    try:
        run_dir = tmp_path / "run"
        env = dev.env
        entrypoint = (
            f"python -m distrl train configs/cartpole.yaml --run-dir {run_dir} "
            "--set stop.env_steps=40000 --set stop.episode_return_mean=null "
            "--set 'rollout.resources={rollout: 1}' --set 'rollout.node_labels={distrl-role: rollout}' "
            "--set 'learner.resources={learner: 1}' --set 'learner.node_labels={distrl-role: learner}'"
        )
        start = time.time()
        for _attempt in range(5):  # the job server answers "try again later" until its agent has registered
            result = subprocess.run(
                [local_dev_cluster.ray_command(), "job", "submit", "--address", dev.dashboard_url, "--working-dir", str(ROOT),
                 "--runtime-env-json", json.dumps({"excludes": EXCLUDES}), "--", *["bash", "-c", entrypoint]],
                capture_output=True, text=True, env=env, timeout=600, cwd=ROOT,
            )  # fmt: skip
            if "No available agent" not in result.stderr:
                break
            time.sleep(5)
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
        no_token = {k: v for k, v in env.items() if k != "RAY_AUTH_TOKEN"}
        refused = subprocess.run([local_dev_cluster.ray_command(), "job", "list", "--address", dev.dashboard_url], capture_output=True, text=True,
                                 env={**no_token, "HOME": str(tmp_path)}, timeout=120)  # fmt: skip
        assert refused.returncode != 0
    finally:
        dev.shutdown()
    # Exactly what this test started is stopped, and nothing of it is left.
    assert dev.processes() == []
