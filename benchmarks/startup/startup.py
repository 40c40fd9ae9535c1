"""Start-up, phase by phase: where the seconds from launch to the first update go on this machine, beside Ray's
own start (import ray, ``ray.init``, one task's round trip, in a fresh process: the floor no Ray program is under).

Each run is ``distrl train CONFIG`` in a fresh process with a private Ray, stopped after two updates; its
``summary.json`` ``startup`` holds the seconds from launch at which each milestone was reached (imports, env probe,
Ray, the shared policy export or compile, workers, learners, first batch, first update) and how long the export took
while Ray started. The runs and Ray's floor alternate, so a drift of the machine reaches both. Medians.

Target (2-core machine, idle): launch to first update <= Ray's floor + 2 s.

    python benchmarks/startup/startup.py  # CartPole as shipped, 5 runs
    python benchmarks/startup/startup.py --config configs/breakout.yaml --set rollout.num_workers=14
    python benchmarks/startup/startup.py --quick                                                      # one run
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import RAY_FLOOR_CHILD, child, finish, start_study, study_name, study_parser
from benchmarks.training import train
from distrl.driver.report import STARTUP_MILESTONES


def distrl_startup(config: str, overrides: list[str]) -> dict:
    """One ``distrl train`` to its second update: its start-up milestones (s from launch) and its process's wall."""
    from distrl.config import load_config

    base = load_config(config, overrides)
    steps = 2 * base.update_size * base.env.action_repeat
    stop = [f"stop.env_steps={steps}", "stop.episode_return_mean=null", "stop.time_s=null"]
    run = train(config, [*stop, *overrides], what="distrl train", timeout=900)
    return {**run.summary["startup"], "process_s": run.wall_s}


def main() -> int:
    parser = study_parser(__doc__, quick="one run")
    parser.add_argument("--config", default="configs/cartpole.yaml")
    parser.add_argument("--runs", type=int, default=5)
    args, machine = start_study(parser)
    if args.quick:
        args.runs = 1
    floors, runs = [], []
    for i in range(args.runs):  # in turns
        floors.append(child(RAY_FLOOR_CHILD))
        runs.append(distrl_startup(args.config, args.overrides))
        line = ", ".join(f"{STARTUP_MILESTONES[k]} {runs[-1][k]:.2f}" for k in STARTUP_MILESTONES if k in runs[-1])
        print(
            f"run {i}: Ray's floor {floors[-1]['floor_s']:.2f} s; distrl (s from launch): {line}; export took "
            f"{runs[-1].get('export_s', 0):.2f} s while Ray started",
            flush=True,
        )
    floor = statistics.median(f["floor_s"] for f in floors)
    keys = [k for k in [*STARTUP_MILESTONES, "export_s", "process_s"] if all(k in r for r in runs)]
    medians = {k: statistics.median(r[k] for r in runs) for k in keys}
    over = medians.get("first_update", float("nan")) - floor
    print(
        f"medians: Ray's floor {floor:.2f} s (import {statistics.median(f['import_s'] for f in floors):.2f}, "
        f"ray.init {statistics.median(f['init_s'] for f in floors):.2f}); first update "
        f"{medians.get('first_update', 0):.2f} "
        f"s from launch: {over:+.2f} s past the floor (target <= +2 s on 2 idle cores)"
    )
    rows = [
        {
            "phase": STARTUP_MILESTONES.get(
                k, {"export_s": "export/compile took (overlapped)", "process_s": "process, launch to exit"}.get(k, k)
            ),
            "s": medians[k],
            "min": min(r[k] for r in runs),
            "max": max(r[k] for r in runs),
        }
        for k in keys
    ]
    rows.append(
        {
            "phase": "Ray's floor (import ray, ray.init, one task)",
            "s": floor,
            "min": min(f["floor_s"] for f in floors),
            "max": max(f["floor_s"] for f in floors),
        }
    )
    rows.append({"phase": "first update past Ray's floor", "s": over, "min": None, "max": None})
    # Within each run, past the Ray it started: free of the floor's own spread between runs (Ray's start varies by a
    # second from run to run on a small machine).
    own = [r["first_update"] - r["ray_start"] for r in runs if "first_update" in r and "ray_start" in r]
    over_own = statistics.median(own) if own else None
    if own:
        rows.append(
            {"phase": "first update past the run's own Ray start", "s": over_own, "min": min(own), "max": max(own)}
        )
        print(f"first update past the run's own Ray start: median {over_own:.2f} s ({min(own):.2f}-{max(own):.2f})")
    columns = "phase: milestone (s from launch) | s: median | min | max"
    name = study_name("startup_" + Path(args.config).stem, args.overrides)
    return finish(
        name,
        args,
        machine,
        rows,
        columns,
        floors=floors,
        runs=runs,
        medians=medians,
        ray_floor_s=floor,
        first_update_over_floor_s=over,
        first_update_over_own_ray_s=over_own,
    )


if __name__ == "__main__":
    sys.exit(main())
