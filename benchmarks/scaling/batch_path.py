"""Where a run's batches travel: the bytes each node of a three-node cluster on 127.0.0.1 receives, from Ray's own
object-transfer counters, and the run's rate, for this tree and a baseline commit in the same invocation.

The cluster (clusters/local_dev_cluster.py): the driver's head with no CPUs (the driver and the coordinator run
there), one rollout node, the learner's node. Each run trains the config for a fixed number of env steps; before and
after it, each node's object-manager counters are read (``Received``: bytes pulled into its object store from other
nodes; ``PushedFromLocalPlasma``: bytes sent). The rollout node's objects are batches, pulled by the learner's node
(which receives nothing else: its config and spaces travel inline) or by the head, so

    batch bytes that reach the head = rollout node sent - learner node received

and the head's whole intake (the learner's snapshots too: ``learner.snapshot_every_s`` keeps them rare) bounds it from
above. The baseline runs from a git worktree of ``--baseline`` with every process
of its cluster importing it (``PYTHONPATH``); runs alternate between the trees, ``--repeats`` each.

    python benchmarks/scaling/batch_path.py --baseline 5af845e --results-dir benchmarks/results/batch_path
    python benchmarks/scaling/batch_path.py --quick
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, markdown_table, metrics_rows, start_study, study_parser
from benchmarks.training import command
from clusters import local_dev_cluster

# Each case: its config and settings. MinAtar Breakout as shipped (1.7 KB a step); CartPole with many small batches,
# each shard under Ray's 100 KiB inline size (it travels through its owner), for the coordinator's CPU per batch at a
# high batch rate; CartPole's shards are over the inline size only with long rollouts (the quick case).
CASES = {
    "MinAtar Breakout": ("configs/minatar_breakout.yaml", ["stop.env_steps=200000"]),
    "CartPole, small batches": (
        "configs/cartpole.yaml",
        [
            "rollout.pipeline=async",
            "env.num_envs_per_worker=8",
            "rollout.rollout_length=32",
            "ppo.minibatch_size=256",
            "stop.env_steps=300000",
        ],
    ),
}
QUICK = {
    "CartPole, long rollouts": (
        "configs/cartpole.yaml",
        ["env.num_envs_per_worker=64", "rollout.rollout_length=256", "ppo.minibatch_size=4096", "stop.env_steps=40000"],
    )
}
COORDINATION = ["ray::SampleCoordinator", "ray::ShardPuller"]  # the batch path's own processes
PLACE = [
    "rollout.resources={rollout: 1}",
    "learner.resources={learner: 1}",
    "cluster.placement_timeout_s=180",
    "eval.every_iterations=0",
    "learner.snapshot_every_s=600",  # snapshots (to the head) at the start and the end only
]


class CpuWatch:
    """The CPU seconds of the processes whose command line names one of ``markers`` (Ray titles an actor's process
    ``ray::Class``) from the run's first metrics row to its end, read every half second while the run lives (an
    actor's process ends with it): the start-up, imports and all, left out."""

    def __init__(self, markers: list[str], metrics: Path):
        self.markers, self.metrics = markers, metrics
        self.first: dict[int, float] = {}  # pid -> its CPU seconds when the first row was written
        self.last: dict[int, tuple[str, float]] = {}  # pid -> (marker, its CPU seconds when last read)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stop.wait(0.5):
            begun = self.metrics.exists()
            for proc in psutil.process_iter(["cmdline"]):
                line = " ".join(proc.info["cmdline"] or [])
                marker = next((m for m in self.markers if m in line), None)
                if marker is None:
                    continue
                try:
                    times = proc.cpu_times()
                except psutil.Error:
                    continue
                self.last[proc.pid] = (marker, times.user + times.system)
                if begun:
                    self.first.setdefault(proc.pid, times.user + times.system)

    def totals(self) -> dict[str, float]:
        """CPU seconds by marker since the first row."""
        self.stop.set()
        self.thread.join()
        out = dict.fromkeys(self.markers, 0.0)
        for pid, (marker, seconds) in self.last.items():
            out[marker] += seconds - self.first.get(pid, seconds)
        return out


def one_run(tree: Path, config: str, items: list[str], work: Path) -> dict:
    """A cluster started with every process importing ``tree``; a training on it; the nodes' counters around it."""
    os.environ["PYTHONPATH"] = str(tree)  # the cluster's environment is this process's: its raylets and workers
    base = Path(tempfile.mkdtemp(prefix="bp_", dir="/tmp"))  # short: Ray's socket paths must fit 107 characters
    dev = local_dev_cluster.start(
        rollout_nodes=1, rollout_cpus=1, learner_cpus=1, temp_dir=str(base / "ray"), learner_node=True
    )
    try:
        roles = node_roles(dev)
        before = local_dev_cluster.object_transfers(dev)
        run_dir = work / f"run-{time.monotonic_ns()}"
        cmd, env = command(config, items, run_dir, cluster=dev)
        began, watch = time.perf_counter(), CpuWatch(COORDINATION, run_dir / "metrics.jsonl")
        result = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=3600)
        wall_s, cpu = time.perf_counter() - began, watch.totals()
        if result.returncode != 0:
            raise RuntimeError(f"the run from {tree} failed:\n{result.stderr[-3000:]}")
        time.sleep(2.5)  # the raylets report their counters every second
        after = local_dev_cluster.object_transfers(dev)
    finally:
        dev.shutdown()
        shutil.rmtree(base, ignore_errors=True)
    moved = {
        role: {kind: after[node].get(kind, 0.0) - before.get(node, {}).get(kind, 0.0) for kind in after[node]}
        for node, role in roles.items()
    }
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = metrics_rows(run_dir)
    ran = yaml.safe_load((run_dir / "config.yaml").read_text())
    # the batches after the first row (the watch's window)
    batches = (summary["env_steps"] - rows[0]["env_steps"]) // (
        ran["env"]["num_envs_per_worker"] * ran["rollout"]["rollout_length"]
    )
    learner_received = moved["learner"]["Received"]
    to_head = max(moved["rollout"]["PushedFromLocalPlasma"] - learner_received, 0.0)
    return {
        "env_steps": summary["env_steps"],
        "sps": summary["train_sps"],  # from the first update on: the cluster's start left out
        "wall_s": wall_s,
        "learner_received_mb": learner_received / 1e6,
        "head_received_mb": moved["head"]["Received"] / 1e6,
        "batches_to_head_mb": to_head / 1e6,
        "batches_to_head_share": to_head / learner_received if learner_received else None,
        "batches": batches,
        "batch_bytes_per_step": sum(row["batch_bytes"] for row in rows) / summary["env_steps"],
        "coordinator_ms_per_batch": 1e3 * cpu["ray::SampleCoordinator"] / batches if batches else None,
        "pullers_ms_per_batch": 1e3 * cpu["ray::ShardPuller"] / batches if batches else None,
        "driver_ms_per_update": 1e3 * statistics.median(row["driver_cpu_s"] for row in rows[1:] or rows),
        "moved": moved,
    }


def node_roles(dev) -> dict[str, str]:
    """Node id -> head, rollout or learner, from each node's resources (asked in a process of its own)."""
    code = (
        f"import json, ray; ray.init(address={dev.gcs_address!r}, configure_logging=False, log_to_driver=False); "
        "print(json.dumps({n['NodeID']: n['Resources'] for n in ray.nodes() if n['Alive']}))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=dev.env, capture_output=True, text=True, timeout=120)
    resources = json.loads(out.stdout.strip().splitlines()[-1])
    return {
        node: "learner" if "learner" in res else "rollout" if "rollout" in res else "head"
        for node, res in resources.items()
    }


def baseline_tree(commit: str, work: Path) -> Path:
    tree = work / "baseline"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, check=True, capture_output=True)
    return tree


def main() -> int:
    parser = study_parser(__doc__, "CartPole with long rollouts, 40k env steps, one run a tree")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), help="the cases to run (default: all)")
    parser.add_argument("--baseline", help="a commit to compare with (default: this tree alone)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each tree, alternating")
    args, info = start_study(parser)
    cases = QUICK if args.quick else {case: CASES[case] for case in args.cases or CASES}
    repeats = 1 if args.quick else args.repeats
    work = Path(tempfile.mkdtemp(prefix="batch_path_"))
    trees = {"this tree": ROOT}
    runs: dict[str, dict[str, list[dict]]] = {case: {} for case in cases}
    try:
        if args.baseline:
            trees[f"baseline {args.baseline}"] = baseline_tree(args.baseline, work)
        for case, (config, settings) in cases.items():
            items = [*PLACE, *settings, "stop.episode_return_mean=null", *args.overrides]
            for _ in range(repeats):
                for name, tree in trees.items():
                    run = one_run(tree, config, items, work)
                    print(
                        f"{case}, {name}: {run['env_steps']:,} env steps, {run['sps']:,.0f} steps/s; learner's node "
                        f"received {run['learner_received_mb']:.1f} MB, batches to the head "
                        f"{run['batches_to_head_mb']:.2f} MB",
                        flush=True,
                    )
                    runs[case].setdefault(name, []).append(run)
    finally:
        os.environ.pop("PYTHONPATH", None)
        if args.baseline:
            subprocess.run(["git", "worktree", "remove", "--force", str(work / "baseline")], cwd=ROOT, check=False)
        shutil.rmtree(work, ignore_errors=True)
    rows = [
        {
            "case": case,
            "tree": name,
            "runs": len(done),
            "sps": statistics.median(r["sps"] for r in done),
            "learner_mb": statistics.median(r["learner_received_mb"] for r in done),
            "head_mb": statistics.median(r["batches_to_head_mb"] for r in done),
            "head_all_mb": statistics.median(r["head_received_mb"] for r in done),
            "share": f"{100 * statistics.median(r['batches_to_head_share'] or 0 for r in done):.2f} %",
            "coordinator_ms": statistics.median(r["coordinator_ms_per_batch"] or 0 for r in done),
            "pullers_ms": statistics.median(r["pullers_ms_per_batch"] or 0 for r in done),
            "driver_ms": statistics.median(r["driver_ms_per_update"] for r in done),
            "bytes_per_step": statistics.median(r["batch_bytes_per_step"] for r in done),
        }
        for case, by_tree in runs.items()
        for name, done in by_tree.items()
    ]
    failures = [f"{row['case']}, {row['tree']}: no batch trained" for row in rows if not row["sps"]]
    columns = (
        "case | tree | runs | sps: env steps/s (median) | "
        "learner_mb: MB into the learner's node | head_mb: batch MB into the head | "
        "head_all_mb: all MB into the head | share: head / learner | "
        "coordinator_ms: coordinator CPU ms / batch | "
        "pullers_ms: pullers CPU ms / batch | driver_ms: driver CPU ms / update | "
        "bytes_per_step: batch bytes / env step"
    )
    table = markdown_table(rows, columns)
    print(table)
    return finish("batch_path", args, info, rows, table=table, failures=failures, cases=cases, place=PLACE, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
