"""What evaluation during training costs: CartPole's time to a mean return of 475 with and without it, same seeds.

Each seed runs twice, in turns: the shipped ``configs/cartpole.yaml`` as it is, and with ``eval.every_iterations``
(10 greedy episodes on the eval actor's own envs). With one worker and the overlap pipeline a seed trains the same
steps whatever else the machine does, so the two runs of a seed reach 475 at the same env step and differ in wall
time only by what evaluation takes from training. The target: the median time to 475 with evaluation within 5 % of
the median without.

    python benchmarks/eval_overhead.py                  # seeds 0-4, evaluation every 5 iterations
    python benchmarks/eval_overhead.py --quick          # seed 0 only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import add_results_dir_argument, machine_info, markdown_table, print_machine, write_results


def solve(seed: int, overrides: list[str], run_dir: Path) -> dict:
    """One ``distrl train configs/cartpole.yaml`` to 475; its summary."""
    args = [sys.executable, "-m", "distrl", "train", "configs/cartpole.yaml", "--run-dir", str(run_dir)]
    for item in [f"seed={seed}", "logging.tensorboard=false", *overrides]:
        args += ["--set", item]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "RAY_ADDRESS": "local"})
    if done.returncode != 0:
        raise RuntimeError(f"training failed:\n{done.stderr[-3000:]}")
    return json.loads((run_dir / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--every", type=int, default=5, help="iterations between evaluations")
    parser.add_argument("--quick", action="store_true", help="seed 0 only")
    add_results_dir_argument(parser)
    args = parser.parse_args()
    seeds = [0] if args.quick else args.seeds
    machine = machine_info()
    print_machine(machine)
    cases = {
        "without evaluation": [],
        f"evaluation every {args.every} iterations": [f"eval.every_iterations={args.every}"],
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for name, overrides in cases.items():
                summary = solve(seed, overrides, Path(tmp) / f"{seed}-{len(rows)}")
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
        [
            ("case", "case"),
            ("seed", "seed"),
            ("solved_at_s", "to 475 from launch (s)"),
            ("env_steps", "env steps"),
            ("best_by", "best chosen by"),
            ("best_score", "its score"),
        ],
    )
    table += f"\nMedian time to 475: {without} s without evaluation, {with_eval} s with it; ratio {ratio:.3f}.\n"
    payload = {"machine": machine, "rows": rows, "medians": medians, "ratio": ratio, "every": args.every}
    write_results("eval_overhead", payload, table, quick=args.quick, results_dir=args.results_dir)


if __name__ == "__main__":
    main()
