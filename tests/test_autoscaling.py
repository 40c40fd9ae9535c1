"""Autoscaling from the shipped cluster file, on one machine: Ray's fake multi-node provider launches the
`cpu_rollout` and `gpu_learner` node types of clusters/aws.yaml when a `ray job submit` of
configs/cartpole_cluster.yaml asks for them, and every actor lands on the node type its config names."""

import json
import shutil
import subprocess
import sys
import threading
import time

import pytest
import yaml

from tests.conftest import ROOT

SIZES = [
    "rollout.num_workers=2",
    "env.num_envs_per_worker=16",
    "learner.num_cpus_per_learner=1",
    "ppo.minibatch_size=1024",
    "stop.env_steps=8192",
    "stop.episode_return_mean=null",
]


def test_fake_node_types_keep_the_files_names_resources_and_labels():
    sys.path.insert(0, str(ROOT))
    from clusters.fake_autoscaling_cluster import fake_node_types

    shipped = yaml.safe_load((ROOT / "clusters" / "aws.yaml").read_text())["available_node_types"]
    fake = fake_node_types(ROOT / "clusters" / "aws.yaml", cpu_scale=1 / 8)
    assert set(fake) == set(shipped) - {"head"}
    assert fake["cpu_rollout"]["resources"] == {"CPU": 2, "rollout": 2}  # 16 CPUs and 16 `rollout`, scaled together
    assert fake["gpu_learner"]["resources"] == {
        "CPU": 1,
        "GPU": 1,
        "learner": 1,
    }  # a fake GPU: a resource to schedule on
    for name, spec in fake.items():
        assert spec["labels"] == shipped[name]["labels"] and spec["min_workers"] == 0


@pytest.mark.slow
def test_autoscaler_launches_the_node_types_the_job_asks_for(tmp_path):
    sys.path.insert(0, str(ROOT))
    from clusters import fake_autoscaling_cluster as fake
    from clusters.local_dev_cluster import ray_command

    start = time.monotonic()
    cluster = fake.start(ROOT / "clusters" / "aws.yaml", cpu_scale=1 / 8, max_workers=2)
    launched: dict[str, tuple[float, dict]] = {}
    done = threading.Event()

    def watch():  # when each node appeared, and with which labels
        while not done.is_set():
            for node in fake.list_nodes(cluster):
                launched.setdefault(node["node_id"], (time.monotonic() - start, node.get("labels") or {}))
            time.sleep(1)

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        head_up = time.monotonic() - start
        nodes = fake.list_nodes(cluster)
        assert len(nodes) == 1  # min_workers 0: only the head until something asks
        watcher.start()
        run_dir = tmp_path / "run"
        entrypoint = f"python -m distrl train {ROOT}/configs/cartpole_cluster.yaml --run-dir {run_dir} " + " ".join(
            f"--set {item}" for item in SIZES
        )
        # No --working-dir: as on the launcher's clusters, the code is installed on the nodes already.
        submitted = time.monotonic() - start
        result = subprocess.run(
            [ray_command(), "job", "submit", "--address", cluster.dashboard_url, "--", "bash", "-c", entrypoint],
            capture_output=True,
            text=True,
            env=cluster.env,
            timeout=600,
        )
        finished = time.monotonic() - start
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
        assert (
            "the cluster at" in result.stdout
            and "requests wait for its autoscaler" in (run_dir / "setup.txt").read_text()
        )
    finally:
        done.set()
        cluster.shutdown()
        shutil.rmtree(cluster.temp_dir, ignore_errors=True)  # the temp dir start() made, logs and all
    assert cluster.processes() == []
    roles = {node_id: labels.get("distrl-role") for node_id, (_, labels) in launched.items()}
    assert sorted(r for r in roles.values() if r) == ["learner", "rollout"]  # one node of each type, on demand
    placement = json.loads((run_dir / "placement.json").read_text())
    assert roles[placement["learner-0"]["node_id"]] == "learner" and placement["learner-0"]["gpu_ids"] == ["0"]
    assert {roles[placement[f"worker-{i}"]["node_id"]] for i in range(2)} == {"rollout"}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "env_steps" and summary["env_steps"] >= 8192
    timeline = sorted((round(t, 1), labels.get("distrl-role", "head")) for t, labels in launched.values())
    print(
        f"autoscaling timeline (s from start): head up {head_up:.1f}, job submitted {submitted:.1f}, "
        f"nodes {timeline}, job done {finished:.1f}"
    )
