"""Learning with the learner's hardware defaults on and off: the same returns at the same env steps, seed by seed.

The learner's ``auto`` settings (its kernels, precision, memory layout, minibatch step and CPU threads: what it
settles on its first update) change how fast an update runs, not what it computes, beyond float rounding. This runs
``distrl train CONFIG`` per seed twice, as shipped and with every one of those settings off (eager kernels, fp32,
contiguous, the plain loop, the learner's own CPUs), and reports each run's return at the same env steps:

- where the defaults leave the learner as it was (a small MLP on a CPU: nothing to settle), the metrics rows must be
  identical, timings aside;
- elsewhere (a CNN on a CPU takes inductor kernels and channels-last, bf16 where the CPU has it; an MLP with wide
  layers bf16), the defaults must learn no worse: their median return at least the lowest of the runs with them off.

    python benchmarks/learner/learner_defaults.py  # CartPole and Breakout, seeds 0-2
    python benchmarks/learner/learner_defaults.py --configs configs/breakout.yaml --env-steps 30000
    python benchmarks/learner/learner_defaults.py --configs configs/minatar.yaml --env-steps 491520  # bf16 (wide MLP)
    python benchmarks/learner/learner_defaults.py --quick  # CartPole, one seed, a short run
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, start_study, study_parser
from benchmarks.training import TIMING_KEYS, train

OFF = [
    "learner.compile.backend=eager",
    "learner.amp=off",
    "learner.memory_format=contiguous",
    "learner.step=loop",
    "learner.num_threads=1",
]


def timeless(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in TIMING_KEYS}


def main(argv=None) -> int:
    parser = study_parser(__doc__, quick="CartPole, seed 0, 16k env steps", seeds=[0, 1, 2])
    parser.add_argument("--configs", nargs="+", default=["configs/cartpole.yaml", "configs/breakout.yaml"])
    parser.add_argument("--env-steps", type=int, default=None, help="per run (default: 60k CartPole, 30k otherwise)")
    args, info = start_study(parser, argv)
    if args.quick:
        args.configs, args.seeds, args.env_steps = ["configs/cartpole.yaml"], [0], 16384
    rows, failures = [], []
    for config in args.configs:
        steps = args.env_steps or (61440 if "cartpole" in config else 30720)
        runs = {}
        for seed in args.seeds:
            for variant, overrides in (("defaults", []), ("off", OFF)):  # in turns: a slow spell hits both
                items = [f"seed={seed}", f"stop.env_steps={steps}", "stop.episode_return_mean=null"]
                run = train(config, [*items, *overrides, *args.overrides], what=f"{config} {variant} seed {seed}")
                last = run.rows[-1]
                runs[(variant, seed)] = run
                row = {
                    "config": Path(config).stem,
                    "variant": variant,
                    "seed": seed,
                    "env_steps": last["env_steps"],
                    "return": last.get("episode_return_mean"),
                    "wall_s": run.wall_s,
                    "learn_s": statistics.median(r["learn_s"] for r in run.rows[2:] or run.rows),
                }
                rows.append(row)
                print(
                    f"{row['config']:9s} {variant:8s} seed {seed}: {row['env_steps']:7,d} env steps, return "
                    f"{row['return']}, learner {row['learn_s']:.3f} s/update, {row['wall_s']:.0f} s",
                    flush=True,
                )
        identical = all(
            [timeless(r) for r in runs[("defaults", s)].rows] == [timeless(r) for r in runs[("off", s)].rows]
            for s in args.seeds
        )
        returns = {
            v: [r["return"] for r in rows if r["config"] == Path(config).stem and r["variant"] == v]
            for v in ("defaults", "off")
        }
        median, lowest = statistics.median(returns["defaults"]), min(returns["off"])
        no_worse = median >= lowest
        verdict = (
            "metrics rows identical"
            if identical
            else f"defaults' median return {median:.3g} {'at least' if no_worse else 'BELOW'} the off runs' lowest "
            f"{lowest:.3g} (they reach {lowest:.3g} to {max(returns['off']):.3g})"
        )
        print(f"{Path(config).stem}: {verdict}", flush=True)
        rows.append({"config": Path(config).stem, "variant": "verdict", "return": median, "verdict": verdict})
        if not (identical or no_worse):
            failures.append(f"{config}: {verdict}")
    columns = (
        "config | variant: learner settings | seed | env_steps: env steps | "
        "return: return (last row) | learn_s: learner s/update | wall_s: run s | verdict"
    )
    return finish("learner_defaults", args, info, rows, columns, failures=failures, off=OFF)


if __name__ == "__main__":
    sys.exit(main())
