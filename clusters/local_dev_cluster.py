"""A real multi-node Ray cluster on one machine, for development: a head plus extra raylets on 127.0.0.1.

Each raylet is its own node with its own resources and labels, so placement behaves as on
a cluster (workers on 'rollout' nodes, learners on 'learner' nodes). Token authentication
is on; the token is generated here unless RAY_AUTH_TOKEN is set, and never written to disk.

    python clusters/local_dev_cluster.py            # prints the addresses and the token, runs until Ctrl-C
    export RAY_AUTH_MODE=token RAY_AUTH_TOKEN=...    # as printed
    ray job submit --address http://127.0.0.1:PORT --working-dir . -- distrl train configs/cartpole.yaml

Ctrl-C stops exactly the processes this script started.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import sys
from dataclasses import dataclass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class DevCluster:
    cluster: object  # ray.cluster_utils.Cluster
    gcs_address: str
    dashboard_url: str
    token: str

    def shutdown(self) -> None:
        self.cluster.shutdown()


def start(rollout_nodes: int = 1, rollout_cpus: int = 2, learner_cpus: int = 1, learner_gpus: int = 0) -> DevCluster:
    """Head node (the learner node, 'learner' resource and label) plus ``rollout_nodes`` rollout raylets."""
    token = os.environ.get("RAY_AUTH_TOKEN") or secrets.token_hex(32)
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = token  # inherited by every process of the cluster
    from ray.cluster_utils import Cluster

    dashboard_port = free_port()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "node_ip_address": "127.0.0.1",
            "num_cpus": learner_cpus,
            "num_gpus": learner_gpus,
            "resources": {"learner": 1},
            "labels": {"distrl-role": "learner"},
            "include_dashboard": True,
            "dashboard_host": "127.0.0.1",
            "dashboard_port": dashboard_port,
        },
    )
    for _ in range(rollout_nodes):
        cluster.add_node(
            node_ip_address="127.0.0.1",
            num_cpus=rollout_cpus,
            resources={"rollout": rollout_cpus},
            labels={"distrl-role": "rollout"},
        )
    cluster.wait_for_nodes()
    return DevCluster(cluster, cluster.address, f"http://127.0.0.1:{dashboard_port}", token)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollout-nodes", type=int, default=1)
    parser.add_argument("--rollout-cpus", type=int, default=2)
    parser.add_argument("--learner-cpus", type=int, default=1)
    args = parser.parse_args(argv)
    dev = start(args.rollout_nodes, args.rollout_cpus, args.learner_cpus)
    print(f"GCS address:   {dev.gcs_address}")
    print(f"dashboard/job: {dev.dashboard_url}")
    print(f"export RAY_AUTH_MODE=token RAY_AUTH_TOKEN={dev.token}")
    print("Ctrl-C stops the cluster.", flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        dev.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
