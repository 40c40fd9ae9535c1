"""The node types of a shipped cluster file, autoscaled on one machine by Ray's own ``fake_multinode`` provider.

Ray's autoscaler (v2) runs on a head started here and launches "nodes" (extra raylets on
this machine) of the file's ``available_node_types`` on demand: the same type names,
custom resources and labels, CPU counts scaled down to fit a small machine, a fake ``GPU``
on GPU types, ``min_workers`` 0. Loopback, token authentication and a private temp dir, as
``local_dev_cluster``; stopping kills exactly this cluster's processes (never ``ray stop``).

    python clusters/fake_autoscaling_cluster.py clusters/aws.yaml   # prints the job address and token
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

try:  # imported as clusters.fake_autoscaling_cluster (tests) or run as a script
    from clusters.local_dev_cluster import (
        DevCluster,
        cluster_env,
        free_port,
        ray_command,
        start_retrying,
        stopped_on_failure,
        wait_for_agent,
    )
except ImportError:
    from local_dev_cluster import (
        DevCluster,
        cluster_env,
        free_port,
        ray_command,
        start_retrying,
        stopped_on_failure,
        wait_for_agent,
    )

# What Ray's fake provider expects of the head (ray.autoscaler._private.fake_multi_node.node_provider).
FAKE_HEAD_NODE_ID = "fffffffffffffffffffffffffffffffffffffffffffffffffff00000"
FAKE_HEAD_NODE_TYPE = "ray.head.default"


def fake_node_types(cluster_file: Path, cpu_scale: float, max_workers: int | None = None) -> dict:
    """The file's worker node types for the fake provider: same names, resources, labels; CPUs scaled."""
    config = yaml.safe_load(Path(cluster_file).read_text())
    head = config["head_node_type"]
    types = {}
    for name, spec in config["available_node_types"].items():
        if name == head:
            continue
        resources = dict(spec["resources"])
        for key in list(resources):  # CPU and the per-core custom resources (e.g. `rollout: 16`) scale together
            if key == "CPU" or resources[key] == spec["resources"]["CPU"]:
                resources[key] = max(1, math.floor(resources[key] * cpu_scale))
        types[name] = {
            "resources": resources,
            "labels": dict(spec.get("labels", {})),
            "node_config": {},
            "min_workers": 0,
            "max_workers": min(spec.get("max_workers", 1), max_workers or spec.get("max_workers", 1)),
        }
    return types


def start(cluster_file: Path, cpu_scale: float = 1 / 8, max_workers: int | None = 2, head_cpus: int = 0) -> DevCluster:
    """Start the head with the autoscaler; nodes appear only when something asks for their resources."""
    temp_dir = tempfile.mkdtemp(prefix="rfake_", dir="/tmp")  # short: Ray's socket paths must fit 107 chars
    env, token = cluster_env(temp_dir)
    env.update(
        {  # Ray's fake multi-node provider, autoscaler v2 (as AutoscalingCluster sets them).
            "RAY_FAKE_CLUSTER": "1",
            "RAY_enable_autoscaler_v2": "1",
            "RAY_CLOUD_INSTANCE_ID": FAKE_HEAD_NODE_ID,
            "RAY_OVERRIDE_NODE_ID_FOR_TESTING": FAKE_HEAD_NODE_ID,
            "AUTOSCALER_UPDATE_INTERVAL_S": "1",
        }
    )
    types = fake_node_types(cluster_file, cpu_scale, max_workers)
    types[FAKE_HEAD_NODE_TYPE] = {"resources": {"CPU": head_cpus}, "node_config": {}, "max_workers": 0}
    cluster = start_retrying("fake autoscaling cluster", lambda: _start_once(env, token, temp_dir, types, head_cpus))
    cluster.node_types = types
    return cluster


def _start_once(env: dict, token: str, temp_dir: str, types: dict, head_cpus: int) -> DevCluster:
    gcs_port, dashboard_port, agent_port = free_port(), free_port(), free_port()
    autoscaling = {
        "cluster_name": "distrl-fake",
        "max_workers": sum(t["max_workers"] for t in types.values()),
        "provider": {
            # Ray's FakeMultiNodeProvider, loaded as an "external" provider: the wheel lacks the example.yaml that
            # type "fake_multinode" reads its defaults from, so the autoscaler would fail to start.
            "type": "external",
            "module": "ray.autoscaler._private.fake_multi_node.node_provider.FakeMultiNodeProvider",
            "use_node_id_as_ip": True,
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
            "launch_multiple": True,
            "head_node_id": FAKE_HEAD_NODE_ID,
            "gcs_address": f"127.0.0.1:{gcs_port}",
        },
        "available_node_types": types,
        "head_node_type": FAKE_HEAD_NODE_TYPE,
        "auth": {},
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": 1.0,
        "docker": {},
        **{
            key: []
            for key in (
                "initialization_commands",
                "setup_commands",
                "head_setup_commands",
                "worker_setup_commands",
                "head_start_ray_commands",
                "worker_start_ray_commands",
                "cluster_synced_files",
                "rsync_exclude",
                "rsync_filter",
            )
        },
        "file_mounts": {},
        "file_mounts_sync_continuously": False,
    }
    config_path = Path(temp_dir) / "autoscaling.json"
    config_path.write_text(json.dumps(autoscaling))
    cluster = DevCluster(temp_dir, gcs_port, dashboard_port, token, env)
    head = [
        ray_command(),
        "start",
        "--head",
        f"--port={gcs_port}",
        f"--temp-dir={temp_dir}",
        f"--autoscaling-config={config_path}",
        f"--num-cpus={head_cpus}",
        "--node-ip-address=127.0.0.1",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}",
        f"--dashboard-agent-listen-port={agent_port}",
        "--disable-usage-stats",
    ]
    with stopped_on_failure(cluster, "fake autoscaling cluster"):
        subprocess.run(head, env=env, check=True, capture_output=True, text=True)
        wait_for_agent(cluster, agent_port)
    return cluster


def list_nodes(cluster: DevCluster) -> list[dict]:
    """Alive nodes as Ray's state API reports them (node id, resources, labels)."""
    result = subprocess.run(
        [
            ray_command(),
            "list",
            "nodes",
            "--address",
            cluster.dashboard_url,
            "--format",
            "json",
            "--filter",
            "state=ALIVE",
            "--detail",
        ],
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=60,
    )
    if result.returncode != 0:
        return []
    return json.loads(result.stdout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cluster_file", type=Path, nargs="?", default=Path(__file__).with_name("aws.yaml"))
    parser.add_argument("--cpu-scale", type=float, default=1 / 8)
    args = parser.parse_args(argv)
    cluster = start(args.cluster_file, args.cpu_scale)
    print(f"node types:      {json.dumps(cluster.node_types)}")
    print(f"dashboard / job: {cluster.dashboard_url}")
    print(f"export RAY_AUTH_MODE=token RAY_AUTH_TOKEN={cluster.token}")
    print("Ctrl-C stops the cluster.", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.exit(main())
