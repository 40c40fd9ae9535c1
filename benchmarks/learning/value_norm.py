"""Value normalisation on the shipped single-agent configs: ``ppo.normalize_value`` off and on, seed by seed.

Each shipped config runs as a user runs it (``distrl train CONFIG``, a fresh process and a local Ray per run), once
as shipped and once with ``--set ppo.normalize_value=true``, seeds 0-2 (``--seeds``). A task with a return target
(CartPole 475, Pendulum -250) reports the env steps and the wall time to it (a run that misses it counts at its
budget); Hopper, which has none, the mean return of its last 100 episodes at its 1M steps. The rule for "no worse",
the one the async pipeline was held to: the median of the seeds needs at most 1.2x the env steps of the runs without
(targets), or reaches at least the lowest of their returns (Hopper). Writes JSON and Markdown.

    python benchmarks/learning/value_norm.py                                  # CartPole, Pendulum, Hopper: seeds 0-2
    python benchmarks/learning/value_norm.py --tasks CartPole-v1 Pendulum-v1  # the quick ones (minutes)
    python benchmarks/learning/value_norm.py --quick                          # CartPole, seed 0, 16k env steps
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, markdown_table, start_study, study_parser
from benchmarks.training import train

TASKS = {  # name -> (config, target or None: the return at the budget)
    "CartPole-v1": ("configs/cartpole.yaml", 475.0),
    "Pendulum-v1": ("configs/pendulum.yaml", -250.0),
    "Hopper-v5": ("configs/mujoco/hopper.yaml", None),
}
BOUND = 1.2  # the async pipeline's: at most this many times the env steps to the target


def run(task: str, seed: int, normalize: bool, extra: list[str]) -> dict:
    config, target = TASKS[task]
    items = [f"seed={seed}", f"ppo.normalize_value={str(normalize).lower()}", *extra]
    what = f"{task} seed {seed} normalize_value={normalize}"
    summary = train(config, items, what=what, checkpoints=True).summary
    row = {
        "task": task,
        "seed": seed,
        "normalize_value": normalize,
        "env_steps": summary["env_steps"],
        "wall_s": summary["wall_s"],
        "solved": summary["stop_reason"] == "episode_return_mean" if target is not None else None,
        "return": summary["episode_return_mean"],  # the mean of the last 100 episodes
    }
    print(
        f"{what}: {row['env_steps']:,} env steps, {row['wall_s']:.1f} s, return {row['return']:.1f}"
        + ("" if target is None else f", solved {row['solved']}"),
        flush=True,
    )
    return row


def verdicts(rows: list[dict]) -> list[dict]:
    """Per task: each setting's median (env steps to the target, or the final return) and whether "on" is no worse."""
    out = []
    for task, (_, target) in TASKS.items():
        off = [r for r in rows if r["task"] == task and not r["normalize_value"]]
        on = [r for r in rows if r["task"] == task and r["normalize_value"]]
        if not off or not on:
            continue
        if target is not None:
            off_median, on_median = (statistics.median(r["env_steps"] for r in side) for side in (off, on))
            ok = on_median <= BOUND * off_median
            ratio = on_median / off_median
        else:
            off_median, on_median = (statistics.median(r["return"] for r in side) for side in (off, on))
            ok = on_median >= min(r["return"] for r in off)
            ratio = None
        out.append(
            {
                "task": task,
                "measure": "env steps to target" if target is not None else "last-100 return",
                "off_median": off_median,
                "on_median": on_median,
                "ratio": ratio,
                "no_worse": ok,
                "seeds": len(on),
            }
        )
    return out


def main() -> int:
    parser = study_parser(__doc__, quick="CartPole, seed 0, 16k env steps (a smoke run)", seeds=[0, 1, 2])
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    args, machine = start_study(parser)
    extra = list(args.overrides)
    if args.quick:
        args.tasks, args.seeds = ["CartPole-v1"], [0]
        extra = ["stop.env_steps=16384", "stop.episode_return_mean=null", *extra]
    rows = [
        run(task, seed, normalize, extra) for task in args.tasks for seed in args.seeds for normalize in (False, True)
    ]
    table = verdicts(rows)
    for v in table:
        print(
            f"{v['task']}: {v['measure']}, median off {v['off_median']:.6g}, on {v['on_median']:.6g}; "
            f"no worse: {v['no_worse']}"
        )
    md = markdown_table(
        table,
        (
            "task | measure | off_median: off, median | on_median: on, median | "
            "ratio: on / off | no_worse: no worse | seeds"
        ),
    )
    md += "\n\n" + markdown_table(
        rows, "task | seed | normalize_value | env_steps: env steps | wall_s: s | solved | return"
    )
    return finish("value_norm", args, machine, rows, table=md, verdicts=table)


if __name__ == "__main__":
    sys.exit(main())
