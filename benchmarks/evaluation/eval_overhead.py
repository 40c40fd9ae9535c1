"""What evaluation during training costs: CartPole's time to a mean return of 475 with and without it, same seeds.

Each seed runs twice, in turns: the shipped ``configs/cartpole.yaml`` as it is, and with ``eval.every_iterations``
(10 greedy episodes on the eval actor's own envs). With one worker and the overlap pipeline a seed trains the same
steps whatever else the machine does, so the two runs of a seed reach 475 at the same env step and differ in wall
time only by what evaluation takes from training. The target: the median time to 475 with evaluation within 5 % of
the median without.

    python benchmarks/evaluation/eval_overhead.py          # seeds 0-4, evaluation every 5 iterations
    python benchmarks/evaluation/eval_overhead.py --quick  # seed 0 only
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, markdown_table, start_study, study_parser
from benchmarks.training import train


def main() -> int:
    parser = study_parser(__doc__, quick="seed 0 only", seeds=[0, 1, 2, 3, 4])
    parser.add_argument("--every", type=int, default=5, help="iterations between evaluations")
    args, machine = start_study(parser)
    seeds = [0] if args.quick else args.seeds
    cases = {
        "without evaluation": [],
        f"evaluation every {args.every} iterations": [f"eval.every_iterations={args.every}"],
    }
    rows = []
    for seed in seeds:
        for name, overrides in cases.items():
            # a user's run to 475: checkpoints as shipped (the best is chosen among them)
            items = [f"seed={seed}", *overrides, *args.overrides]
            summary = train("configs/cartpole.yaml", items, what=f"{name}, seed {seed}", checkpoints=True).summary
            row = {
                "case": name,
                "seed": seed,
                "solved_at_s": summary["solved_at_s"],
                "env_steps": summary["env_steps"],
                "best_by": summary["best_checkpoint_metric"],
                "best_score": summary["best_checkpoint_score"],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    medians = {}
    for name in cases:
        times = [r["solved_at_s"] for r in rows if r["case"] == name and r["solved_at_s"] is not None]
        medians[name] = statistics.median(times) if times else None
    without, with_eval = medians.values()
    ratio = with_eval / without if without and with_eval else None
    print(f"median time to 475: {without} s without, {with_eval} s with evaluation (ratio {ratio})")
    table = markdown_table(
        rows,
        (
            "case | seed | solved_at_s: to 475 from launch (s) | env_steps: env steps | "
            "best_by: best chosen by | best_score: its score"
        ),
    )
    table += f"\nMedian time to 475: {without} s without evaluation, {with_eval} s with it; ratio {ratio:.3f}.\n"
    return finish("eval_overhead", args, machine, rows, table=table, medians=medians, ratio=ratio)


if __name__ == "__main__":
    sys.exit(main())
