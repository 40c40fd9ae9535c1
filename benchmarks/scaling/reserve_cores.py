"""Env steps per second past the first update, with and without ``learner.reserve_cores``.

The settings of ``async_learning.py`` (four workers at 0.25 CPU, so they share a 2-core machine with the learner),
each run to a fixed env step budget with no return target: sync, async, and async with the learner's cores left to
it while it updates. The runs of a seed go one after the other, in turns (the order reversed on odd seeds). Also
the learner's update time (median ``learn_s``) and the policy lag. Writes JSON and Markdown.

    python benchmarks/scaling/reserve_cores.py          # CartPole, Acrobot, Pendulum, seeds 0-2
    python benchmarks/scaling/reserve_cores.py --quick  # CartPole, seed 0, a short budget
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish
from benchmarks.tasks import TASKS, WORKERS, parse_task_arguments, task_parser
from benchmarks.training import train

BUDGETS = {"CartPole-v1": 200_000, "Acrobot-v1": 120_000, "Pendulum-v1": 100_000}
VARIANTS = {  # name -> overrides
    "sync": ["rollout.pipeline=sync"],
    "async": ["rollout.pipeline=async", "ppo.proximal=learner"],
    "async, reserve_cores": ["rollout.pipeline=async", "ppo.proximal=learner", "learner.reserve_cores=true"],
}


def run(task: str, variant: str, seed: int, budget: int, extra: list[str]) -> dict:
    config, overrides, _, _ = TASKS[task]
    items = [
        *overrides,
        *WORKERS,
        *VARIANTS[variant],
        f"seed={seed}",
        f"stop.env_steps={budget}",
        "stop.episode_return_mean=null",
        *extra,
    ]
    rows = train(config, items, what=f"{task} {variant} seed {seed}", timeout=1800).rows
    first, last = rows[0], rows[-1]
    return {
        "task": task,
        "variant": variant,
        "seed": seed,
        "sps": (last["env_steps"] - first["env_steps"]) / (last["time_s"] - first["time_s"]),
        "learn_s": statistics.median(r["learn_s"] for r in rows[1:]),
        "policy_lag": statistics.mean(r.get("policy_lag_mean", 0.0) for r in rows[1:]),
    }


def main() -> int:
    parser = task_parser(__doc__, quick="CartPole, seed 0, 16,000 env steps")
    args, machine = parse_task_arguments(parser)
    runs, rows = [], []
    for task in args.tasks:
        budget = 16_000 if args.quick else BUDGETS[task]
        for seed in args.seeds:
            for variant in list(VARIANTS) if seed % 2 == 0 else list(VARIANTS)[::-1]:
                r = run(task, variant, seed, budget, args.overrides)
                runs.append(r)
                print(
                    f"{task:12s} {variant:21s} seed {seed}: {r['sps']:,.0f} env steps/s, update {r['learn_s']:.3f} s, "
                    f"policy lag {r['policy_lag']:.2f}",
                    flush=True,
                )
        sync = statistics.median(r["sps"] for r in runs if r["task"] == task and r["variant"] == "sync")
        for variant in VARIANTS:
            mine = [r for r in runs if r["task"] == task and r["variant"] == variant]
            sps = statistics.median(r["sps"] for r in mine)
            rows.append(
                {
                    "task": task,
                    "variant": variant,
                    "seeds": len(mine),
                    "sps": round(sps),
                    "vs sync": round(sps / sync, 3),
                    "learn_s": round(statistics.median(r["learn_s"] for r in mine), 3),
                    "policy lag": round(statistics.median(r["policy_lag"] for r in mine), 2),
                }
            )
    columns = (
        "task | variant: pipeline | seeds | "
        "sps: env steps/s past the first update (median) | vs sync: / sync | "
        "learn_s: update s (median) | policy lag"
    )
    return finish("reserve_cores", args, machine, rows, columns, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
