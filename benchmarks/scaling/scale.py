"""Scaling out rollout workers on a real multi-node Ray cluster (clusters/local_dev_cluster.py, 127.0.0.1).

For 1, 2, 4 and 8 small rollout workers (on two rollout nodes) and two DDP learners (on the
head), `distrl train` joins the cluster and runs the same number of iterations. Per run,
from its metrics rows (warm-up iterations dropped):

- driver CPU seconds per iteration (the driver process, Ray's core-worker threads included):
  the target is flat in the worker count (max / min <= 1.5); the driver moves refs and reads
  small infos, never batches, but it owns every sample task's return objects;
- bytes each learner fetches per iteration, against the whole batch: batch / learners;
- sampling efficiency per worker: env steps/s of one worker's sample, relative to one worker
  alone (on a small machine the workers share its cores, so this falls with the count).

    python benchmarks/scaling/scale.py          # workers 1 2 4 8
    python benchmarks/scaling/scale.py --quick  # workers 1 2, few iterations
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, start_study, study_parser
from benchmarks.training import train

ENVS_PER_WORKER, ROLLOUT_LENGTH, LEARNERS, WARMUP = 16, 64, 2, 2


def run(cluster, workers: int, iterations: int, run_dir: Path, extra: list[str]) -> dict:
    steps = workers * ENVS_PER_WORKER * ROLLOUT_LENGTH
    overrides = [
        f"rollout.num_workers={workers}",
        f"env.num_envs_per_worker={ENVS_PER_WORKER}",
        f"rollout.rollout_length={ROLLOUT_LENGTH}",
        "rollout.pipeline=sync",
        "rollout.compile.backend=eager",
        "rollout.resources={rollout: 1}",
        "rollout.node_labels={distrl-role: rollout}",
        f"learner.num_learners={LEARNERS}",
        "learner.num_cpus_per_learner=1",
        "learner.node_labels={distrl-role: learner}",
        "cluster.placement_timeout_s=120",
        f"ppo.minibatch_size={steps // 4}",
        "ppo.epochs=1",
        f"stop.env_steps={steps * iterations}",
        "stop.episode_return_mean=null",
        *extra,
    ]
    config = str(ROOT / "configs" / "cartpole.yaml")
    rows = train(config, overrides, what=f"{workers} workers", keep=run_dir, cluster=cluster, timeout=900).rows
    rows = rows[WARMUP:]
    per_worker_sps = statistics.median(ENVS_PER_WORKER * ROLLOUT_LENGTH / r["sample_s"] for r in rows)
    return {
        "workers": workers,
        "learners": LEARNERS,
        "iterations": len(rows),
        "driver_cpu_ms_per_iter": statistics.median(r["driver_cpu_s"] for r in rows) * 1e3,
        "batch_bytes": rows[-1]["batch_bytes"],
        "learner_fetch_bytes": rows[-1]["learner_batch_bytes"],
        "fetch_share": rows[-1]["learner_batch_bytes"] / rows[-1]["batch_bytes"],
        "worker_sample_sps": per_worker_sps,
        "iteration_s": statistics.median(r["sample_s"] + r["learn_s"] for r in rows),
    }


def main(argv=None) -> int:
    parser = study_parser(__doc__, quick="workers 1 and 2, 4 iterations")
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--iterations", type=int, default=12)
    args, info = start_study(parser, argv)
    if args.quick:
        args.workers, args.iterations = [1, 2], WARMUP + 3
    from clusters import local_dev_cluster

    # Two rollout nodes with 4 logical CPUs each hold up to 8 one-CPU workers; the head (label learner) the learners.
    temp_base = tempfile.mkdtemp(prefix="rsc_", dir="/tmp")  # short: Ray's socket paths must fit 107 chars
    rows, failures, cluster = [], [], None
    try:
        cluster = local_dev_cluster.start(
            rollout_nodes=2, rollout_cpus=4, learner_cpus=LEARNERS, temp_dir=os.path.join(temp_base, "ray")
        )
        with tempfile.TemporaryDirectory() as tmp:
            for workers in args.workers:
                started = time.perf_counter()
                row = run(cluster, workers, args.iterations, Path(tmp) / f"w{workers}", args.overrides)
                rows.append(row)
                print(
                    f"{workers} workers: driver CPU {row['driver_cpu_ms_per_iter']:.1f} ms/iter, each learner fetches "
                    f"{row['learner_fetch_bytes']:,} of {row['batch_bytes']:,} bytes ({row['fetch_share']:.2f}), "
                    f"{row['worker_sample_sps']:,.0f} env steps/s per worker; run {time.perf_counter() - started:.0f} "
                    "s",
                    flush=True,
                )
    finally:
        if cluster is not None:
            cluster.shutdown()
        shutil.rmtree(temp_base, ignore_errors=True)  # the cluster's temp dir, logs and all
    base = rows[0]["worker_sample_sps"]
    for row in rows:
        row["sampling_efficiency"] = row["worker_sample_sps"] / base
        if abs(row["fetch_share"] - 1 / LEARNERS) > 1e-9:
            failures.append(f"{row['workers']} workers: a learner fetched {row['fetch_share']:.3f} of the batch")
    cpu = [r["driver_cpu_ms_per_iter"] for r in rows]
    flatness = max(cpu) / max(min(cpu), 1e-9)
    print(f"driver CPU per iteration max/min over worker counts: {flatness:.2f} (target <= 1.5)")
    columns = (
        "workers | driver_cpu_ms_per_iter: driver CPU ms/iter | "
        "batch_bytes: batch bytes | learner_fetch_bytes: bytes per learner | "
        "fetch_share: share | worker_sample_sps: env steps/s per worker | "
        "sampling_efficiency: vs 1 worker | iteration_s: iteration s"
    )
    return finish("scale", args, info, rows, columns, failures=failures, driver_cpu_max_over_min=flatness)


if __name__ == "__main__":
    sys.exit(main())
