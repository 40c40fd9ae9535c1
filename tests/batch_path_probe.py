"""Run by tests/test_nodes.py in a process of its own, joined to a dev cluster whose head has no CPUs, one rollout node
(index 1) and a learner node: a real worker samples a round on the rollout node, the coordinator on the head hands it
over, and the probe prints where its shards are; then the rollout node is killed and a real learner on the learner
node trains on the round. Prints one JSON line.

    python -m tests.batch_path_probe GCS_ADDRESS CLUSTER_TEMP_DIR
"""

import json
import sys

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from clusters.local_dev_cluster import DevCluster, kill_rollout_node
from distrl.config import load_config
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.rollout import SampleCoordinator, remote_worker_class


def main(address: str, temp_dir: str) -> None:
    ray.init(address=address, configure_logging=False, log_to_driver=False)
    nodes = {node["NodeID"]: node for node in ray.nodes() if node["Alive"]}
    head = ray.get_runtime_context().get_node_id()
    learner_node = next(n for n, node in nodes.items() if "learner" in node["Resources"])
    rollout_node = next(n for n, node in nodes.items() if "rollout" in node["Resources"])
    # 64 envs x 256 steps: each shard well over Ray's 100 KiB inline size, so it lives in an object store
    config = load_config(
        "configs/cartpole.yaml",
        ["env.num_envs_per_worker=64", "rollout.rollout_length=256", "rollout.compile.backend=eager"],
    )
    worker = remote_worker_class().options(num_cpus=1, resources={"rollout": 1}).remote(config, 0)
    here = NodeAffinitySchedulingStrategy(head, soft=False)
    coordinator = (
        ray.remote(SampleCoordinator)
        .options(num_cpus=0, max_concurrency=4, scheduling_strategy=here)
        .remote(1, config.env.id, 0, None, [learner_node])
    )
    ray.get(coordinator.attach.remote([worker]))
    ray.get(coordinator.start_stream.remote([None], None, 120.0, 1, None, "sync"))
    report, shards = ray.get(coordinator.gather.options(num_returns=2).remote(1, 0, 120.0))
    where = ray.experimental.get_object_locations(list(shards))
    located = [sorted(where[ref]["node_ids"]) for ref in shards]
    sizes = [where[ref]["object_size"] for ref in shards]
    killed = kill_rollout_node(DevCluster(temp_dir, 0, 0, "", {}), 1)
    learner = (
        ray.remote(Learner).options(num_cpus=1, resources={"learner": 1}).remote(config, *probe_spaces(config.env))
    )
    result = ray.get(learner.update_refs.remote(report, shards), timeout=300)
    print(
        json.dumps(
            {
                "head": head,
                "learner_node": learner_node,
                "rollout_node": rollout_node,
                "locations": located,
                "sizes": sizes,
                "killed": killed,
                "batches": len(report.infos),
                "lost": result.lost_batches,
                "version": result.version,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
