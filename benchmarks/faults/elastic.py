"""A node lost and a node added mid-run: throughput over time on a real multi-node Ray cluster on 127.0.0.1.

The cluster (``clusters/local_dev_cluster.py``): a head (the learner's node, where the driver runs)
and two rollout nodes of ``--node-cpus`` CPUs; ``distrl train`` with ``rollout.pipeline: async`` and a
worker range ``{min: 2, max: 2 x node CPUs}``, one CPU per worker. After ``--lose-at`` seconds of
training, rollout node 1 is killed whole (every process of its raylet, as a spot preemption does);
after ``--add-at`` seconds, a new rollout node joins (``ray start``). Recorded per update: time,
env steps/s, workers answering. Targets: after the loss, throughput back to >= 90 % of the
surviving workers' share within 30 s with no round waiting on the lost workers; after the join,
the full worker count within 60 s; nothing counted twice. Writes JSON, Markdown and a PNG.

    python benchmarks/faults/elastic.py          # 2 + 2 CPUs of rollout nodes, node lost at 20 s, added at 45 s
    python benchmarks/faults/elastic.py --quick  # shorter
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, metrics_rows, pyplot, start_study, study_parser
from benchmarks.training import command
from clusters import local_dev_cluster


def main() -> int:
    parser = study_parser(__doc__, quick="lose at 6 s, add at 12 s, 22 s in all")
    parser.add_argument("--node-cpus", type=int, default=2)
    parser.add_argument("--lose-at", type=float, default=20.0, help="seconds after the first update")
    parser.add_argument("--add-at", type=float, default=45.0, help="seconds after the first update")
    parser.add_argument("--seconds", type=float, default=80.0, help="training time after the first update")
    parser.add_argument("--updates-ahead", type=float, default=1.0, help="the runs' rollout.updates_ahead")
    args, machine = start_study(parser)
    if args.quick:
        args.lose_at, args.add_at, args.seconds = 6.0, 12.0, 22.0
    base = tempfile.mkdtemp(prefix="rel_", dir="/tmp")
    most = 2 * args.node_cpus
    events: dict[str, float] = {}
    dev = proc = None
    try:
        dev = local_dev_cluster.start(
            rollout_nodes=2, rollout_cpus=args.node_cpus, learner_cpus=2, temp_dir=os.path.join(base, "ray")
        )
        run_dir = Path(base) / "run"
        overrides = [
            "rollout.pipeline=async",
            f"rollout.num_workers={{min: 2, max: {most}}}",
            "rollout.num_cpus_per_worker=1",
            "rollout.resources={rollout: 1}",
            "learner.resources={learner: 1}",
            "env.num_envs_per_worker=32",
            "rollout.samples_per_update=8192",
            "ppo.minibatch_size=1024",
            "stop.env_steps=null",
            "stop.episode_return_mean=null",
            f"stop.time_s={args.seconds + 40}",
            "rollout.compile.backend=eager",
            "logging.progress=lines",
            f"rollout.updates_ahead={args.updates_ahead}",
        ]
        cmd, env = command("configs/cartpole.yaml", [*overrides, *args.overrides], run_dir, cluster=dev)
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        while not metrics_rows(run_dir):
            if proc.poll() is not None:
                raise RuntimeError(proc.communicate()[1][-3000:])
            time.sleep(0.2)
        first = metrics_rows(run_dir)[0]["time_s"]
        start = time.monotonic()
        time.sleep(args.lose_at)
        local_dev_cluster.kill_rollout_node(dev, 1)
        events["node lost"] = first + (time.monotonic() - start)
        time.sleep(max(0.0, args.add_at - (time.monotonic() - start)))
        local_dev_cluster.add_rollout_node(dev, 3, args.node_cpus)
        events["node added"] = first + (time.monotonic() - start)
        stdout, stderr = proc.communicate(timeout=args.seconds + 600)
        if proc.returncode != 0:
            raise RuntimeError(stderr[-3000:])
        rows = metrics_rows(run_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
    finally:
        if proc is not None and proc.poll() is None:  # stopped early: the run goes with its cluster
            proc.kill()
            proc.communicate()
        if dev is not None:
            dev.shutdown()
        shutil.rmtree(base, ignore_errors=True)  # the cluster's temp dir and the run's (read above)
    series = [
        {"time_s": r["time_s"], "sps": r["sps"], "workers": r.get("workers_active"), "env_steps": r["env_steps"]}
        for r in rows
    ]

    def rate(a: float, b: float) -> float:
        inside = [r for r in rows if a <= r["time_s"] <= b]
        if len(inside) < 2:
            return float("nan")
        return (inside[-1]["env_steps"] - inside[0]["env_steps"]) / (inside[-1]["time_s"] - inside[0]["time_s"])

    lost, added = events["node lost"], events["node added"]
    before = rate(first + 3, lost)
    survivors = [r["workers"] for r in series if lost + 2 < r["time_s"] < added]
    share = (min(survivors) / most) if survivors else float("nan")
    after_loss = rate(lost + 5, lost + 30)  # the window the target speaks of
    full = next((r["time_s"] for r in series if r["time_s"] > added and r["workers"] == most), None)
    # How long the learner went without an update around the loss (a wait on a batch that lived on the lost node).
    times = [first] + [r["time_s"] for r in series]
    gaps = [b - a for a, b in zip(times, times[1:]) if b > lost and a < lost + 30]
    usual = sorted(b - a for a, b in zip(times, times[1:]) if b < lost)
    result = {
        "steady_sps_before": before,
        "workers_before": most,
        "workers_after_loss": min(survivors) if survivors else None,
        "median_gap_before_loss_s": usual[len(usual) // 2] if usual else None,
        "longest_gap_after_loss_s": max(gaps) if gaps else None,
        "sps_5_to_30_s_after_loss": after_loss,
        "share_of_survivors_share": after_loss / (before * share),
        "full_count_s_after_join": None if full is None else full - added,
        "sps_after_join": rate((full or added) + 2, rows[-1]["time_s"]),
        "batches_lost": summary["batches_lost"],
        "workers_lost": summary["workers_lost"],
        "stop_reason": summary["stop_reason"],
    }
    for key, value in result.items():
        print(f"{key}: {value:,.2f}" if isinstance(value, float) else f"{key}: {value}")

    def chart(path: Path) -> None:
        plt = pyplot()

        fig, ax = plt.subplots(figsize=(8, 4))
        ax.plot([r["time_s"] for r in series], [r["sps"] for r in series], "b.-", label="env steps/s per update")
        ax.set_xlabel("seconds from launch")
        ax.set_ylabel("env steps/s")
        ax2 = ax.twinx()
        ax2.step([r["time_s"] for r in series], [r["workers"] for r in series], "g-", where="post", label="workers")
        ax2.set_ylabel("workers answering")
        ax2.set_ylim(0, most + 1)
        for name, at in events.items():
            ax.axvline(at, color="r" if "lost" in name else "k", linestyle="--")
            ax.text(at, ax.get_ylim()[1] * 0.95, f" {name}", fontsize=8)
        ax.set_title(f"async, {{min: 2, max: {most}}} workers: a rollout node lost, then one added")
        fig.legend(loc="lower right")
        fig.tight_layout()
        fig.savefig(path, dpi=120)

    columns = [(k, k) for k in result]
    return finish("elastic", args, machine, [result], columns, chart=chart, events=events, series=series)


if __name__ == "__main__":
    sys.exit(main())
