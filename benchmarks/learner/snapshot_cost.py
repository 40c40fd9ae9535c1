"""What learner-0's snapshot costs each update it is sent (``learner.snapshot_every_s`` 0: every update).

For each model: the snapshot's bytes (weights, Adam's moments, the normalisers); the learner's time to send it (its
state as arrays, stored in the object store: what Ray does with the update's third return); the driver's time and
CPU to take it (``SnapshotKeeper``'s ``ray.get``) from the same node and from another node of a two-node Ray on this
machine (``clusters/local_dev_cluster.py``: the object crosses between two raylets' object stores over loopback);
and the learner's own update on the same machine, for the share. The state is the learner's after real updates on a
real sample.

    python benchmarks/learner/snapshot_cost.py          # CartPole's MLP and Breakout's Nature CNN
    python benchmarks/learner/snapshot_cost.py --quick  # seconds: CartPole only, fewer repeats
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import finish, spread, study_machine, study_parser

ROOT = Path(__file__).resolve().parents[2]
MODELS = {"mlp": "configs/cartpole.yaml", "cnn": "configs/breakout.yaml"}


def wire_bytes(tree) -> int:
    from distrl.common.wire import TensorArray

    if isinstance(tree, TensorArray):
        return tree.array.nbytes
    if isinstance(tree, dict):
        return sum(wire_bytes(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(wire_bytes(v) for v in tree)
    if hasattr(tree, "element_size"):
        return tree.numel() * tree.element_size()
    return 0


def trained_learner(path: str, updates: int):
    """A CPU learner after ``updates`` real updates on one real sample; the median seconds of those after the first."""
    from distrl.config import load_config
    from distrl.envs import probe_spaces
    from distrl.learner import Learner
    from distrl.rollout import RolloutWorker

    config = load_config(ROOT / path, ["learner.device=cpu"])
    sample = RolloutWorker(config).sample()
    learner = Learner(config, *probe_spaces(config.env))
    learner.update(sample)  # the first: Adam's moments exist from here; a trial compiles here
    times = []
    for _ in range(updates):
        start = time.perf_counter()
        learner.update(sample)
        times.append(time.perf_counter() - start)
    return learner, spread(times)["median"]


def timed(fn, repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds of ``fn`` (this process's CPU)."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return spread(walls)["median"], spread(cpus)["median"]


def measure(model: str, updates: int, repeats: int) -> dict:
    import ray

    learner, update_s = trained_learner(MODELS[model], updates)
    snapshot = learner.snapshot()
    send_s, _ = timed(lambda: ray.put(learner.snapshot()), repeats)
    local = ray.put(snapshot)
    local_s, local_cpu = timed(lambda: ray.get(local), repeats)

    @ray.remote(num_cpus=0, resources={"rollout": 1})  # the rollout node: not the driver's
    def stored_there(state):
        return state  # returned: a new object in the far node's store

    far_s, far_cpu = [], []
    for _ in range(repeats):  # a new object each time: a second get of one object reads the local copy
        ref = stored_there.remote(snapshot)
        ray.wait([ref], fetch_local=False)
        wall, cpu = time.perf_counter(), time.process_time()
        ray.get(ref)
        far_s.append(time.perf_counter() - wall)
        far_cpu.append(time.process_time() - cpu)
        del ref
    return {
        "model": model,
        "config": MODELS[model],
        "bytes": wire_bytes(snapshot),
        "update_ms": update_s * 1e3,
        "send_ms": send_s * 1e3,
        "send_share": send_s / update_s,
        "get_local_ms": local_s * 1e3,
        "get_local_cpu_ms": local_cpu * 1e3,
        "get_far_ms": spread(far_s)["median"] * 1e3,
        "get_far_cpu_ms": spread(far_cpu)["median"] * 1e3,
    }


def main(argv=None) -> int:
    parser = study_parser(__doc__, quick="seconds: CartPole only, fewer repeats", overrides=False)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--updates", type=int, default=3, help="timed updates after the first, for the share")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.updates, args.repeats = ["mlp"], 1, 3
    from clusters import local_dev_cluster

    cluster = local_dev_cluster.start(rollout_nodes=1, rollout_cpus=1, learner_cpus=1)
    try:
        for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_USAGE_STATS_ENABLED"):
            os.environ[key] = cluster.env[key]  # before Ray's import, which reads them
        import ray

        info = study_machine()
        ray.init(address=cluster.gcs_address, _node_ip_address="127.0.0.1", configure_logging=False)
        rows = [measure(model, args.updates, args.repeats) for model in args.models]
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(cluster.temp_dir, ignore_errors=True)
    for row in rows:
        print(
            f"{row['model']}: {row['bytes'] / 1e6:.2f} MB; learner sends it in {row['send_ms']:.1f} ms "
            f"({100 * row['send_share']:.1f} % of its {row['update_ms']:.0f} ms update); the driver takes it in "
            f"{row['get_local_ms']:.2f} ms from its node, {row['get_far_ms']:.1f} ms ({row['get_far_cpu_ms']:.1f} ms "
            "CPU) from another"
        )
    columns = (
        "model | bytes | update_ms: CPU update ms | send_ms: learner sends, ms | "
        "send_share: share of its update | get_local_ms: driver takes, same node, ms | "
        "get_local_cpu_ms: its CPU ms | get_far_ms: driver takes, other node, ms | "
        "get_far_cpu_ms: its CPU ms"
    )
    return finish("snapshot_cost", args, info, rows, columns)


if __name__ == "__main__":
    sys.exit(main())
