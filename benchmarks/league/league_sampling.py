"""A league worker's sample against many opponents: the seconds of one ``RolloutWorker.sample`` on the shipped
connect-four config, in this process (no Ray), pinned to one core as a worker of a 2-core run shares them.

The plan holds ``--snapshots`` learned opponents (the worker's own weights, each perturbed by its own noise, so every
one is a policy of its own) beside ``latest``, ``random`` and ``heuristic``, in the config's shares; every snapshot is
synced (built and checked) before the timing starts. Medians of ``--samples`` samples, and the env steps a second.

    python benchmarks/league/league_sampling.py                     # 20 snapshots, the config's 64 copies x 64 steps
    python benchmarks/league/league_sampling.py --snapshots 0 5 20
    python benchmarks/league/league_sampling.py --quick             # 2 snapshots, 3 samples
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, markdown_table, start_study, study_parser


def plan_with(worker, snapshots: int, seed: int = 0) -> dict:
    """``snapshots`` perturbed copies of the worker's weights, with the matchmaking's group shares."""
    import numpy as np

    rng = np.random.default_rng(seed)
    weights = {k: v.detach().numpy().copy() for k, v in worker.model.state_dict().items()}
    names = [f"main@{i}" for i in range(snapshots)]

    def perturbed() -> dict:
        return {
            k: v + 0.05 * rng.standard_normal(v.shape).astype(v.dtype) if v.dtype.kind == "f" else v
            for k, v in weights.items()
        }

    held = {name: perturbed() for name in names}
    cfg = worker.config.league.matchmaking
    shares = {"latest": cfg.latest, "random": cfg.baselines / 2, "heuristic": cfg.baselines / 2}
    shares.update({name: cfg.snapshots / snapshots for name in names})
    return {"shares": shares, "weights": held}


def measure(config_path: str, snapshots: int, samples: int) -> dict:
    from distrl.config import load_config
    from distrl.rollout.worker import RolloutWorker

    worker = RolloutWorker(load_config(config_path))
    plan = plan_with(worker, snapshots)
    worker.sample(None, plan)  # every snapshot synced and checked before the clock starts
    seconds = []
    for _ in range(samples):
        start = time.perf_counter()
        _, batch = worker.sample(None, plan)
        seconds.append(time.perf_counter() - start)
    steps = int(batch.valid.size)
    median = statistics.median(seconds)
    return {
        "snapshots": snapshots,
        "env_steps": steps,
        "sample_s": round(median, 4),
        "min_s": round(min(seconds), 4),
        "max_s": round(max(seconds), 4),
        "steps_per_s": round(steps / median),
    }


def main() -> int:
    parser = study_parser(__doc__, quick="2 snapshots, 3 samples", overrides=False)
    parser.add_argument("--config", default="configs/league_connect4.yaml")
    parser.add_argument("--snapshots", nargs="+", type=int, default=[20])
    parser.add_argument("--samples", type=int, default=8)
    args, machine = start_study(parser)
    if args.quick:
        args.snapshots, args.samples = [2], 3
    if hasattr(os, "sched_setaffinity"):  # one core, as each of a 2-core run's workers has about one
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    rows = []
    for snapshots in args.snapshots:
        rows.append(measure(args.config, snapshots, args.samples))
        row = rows[-1]
        print(
            f"{snapshots} snapshots: a sample of {row['env_steps']:,} env steps in {row['sample_s']:.3f} s "
            f"({row['min_s']:.3f}-{row['max_s']:.3f}), {row['steps_per_s']:,} env steps/s",
            flush=True,
        )
    md = markdown_table(
        rows,
        (
            "snapshots: snapshot opponents | env_steps: env steps a sample | "
            "sample_s: s a sample (median) | min_s: min | max_s: max | "
            "steps_per_s: env steps/s"
        ),
    )
    return finish("league_sampling", args, machine, rows, table=md)


if __name__ == "__main__":
    sys.exit(main())
