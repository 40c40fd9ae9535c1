"""Which checkpoint is best: the one evaluation chose against the one with the highest training return, same run.

Each seed trains the config once with evaluation on (``eval.every_iterations``, greedy) and a checkpoint at every
evaluation, all kept. Then two of its checkpoints play ``--episodes`` greedy episodes each, on the same seeds: the
run's best by evaluation (what ``distrl eval``, ``export`` and ``load_policy`` play) and the one with the highest
mean training return when it was written (what they played before evaluation chose). The newest plays too.

    python benchmarks/evaluation/best_checkpoint.py  # Hopper-v5 at 1M env steps, seeds 0-2
    python benchmarks/evaluation/best_checkpoint.py --config configs/pendulum.yaml --seeds 0
    python benchmarks/evaluation/best_checkpoint.py --quick  # CartPole, 60k env steps, one seed
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, markdown_table, start_study, study_parser
from benchmarks.training import train


def by_training_return(run_dir: Path) -> Path:
    """The checkpoint written at the highest mean training return (the earliest of equals)."""
    written = {int(p.stem.split("_")[1]): p for p in (run_dir / "checkpoints").glob("ckpt_*.pt")}
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    scored = [(r["episode_return_mean"], -r["iteration"]) for r in rows if r["iteration"] in written]
    return written[-max(s for s in scored if s[0] is not None)[1]]


def main() -> int:
    parser = study_parser(__doc__, quick="CartPole, 60k env steps, one seed, 10 episodes", seeds=[0, 1, 2])
    parser.add_argument("--config", default="configs/mujoco/hopper.yaml")
    parser.add_argument("--every", type=int, default=25, help="iterations between evaluations (and checkpoints)")
    parser.add_argument("--episodes", type=int, default=100, help="greedy episodes each checkpoint plays after")
    args, machine = start_study(parser)
    if args.quick:
        args.config, args.seeds, args.every, args.episodes = "configs/cartpole.yaml", [0], 2, 10
        args.overrides += ["stop.env_steps=60000", "stop.episode_return_mean=null"]

    from distrl.deploy.evaluate import evaluate

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            run_dir = Path(tmp) / f"seed{seed}"
            items = [f"eval.every_iterations={args.every}", f"checkpoint.every_iterations={args.every}"]
            items += ["checkpoint.keep=100000", f"seed={seed}", *args.overrides]
            summary = train(args.config, items, keep=run_dir, checkpoints=True).summary
            chosen = {
                "best by evaluation": Path(summary["best_checkpoint"]),
                "best by training return": by_training_return(run_dir),
                "newest": Path(summary["checkpoint"]),
            }
            for name, path in chosen.items():
                returns = evaluate(path, episodes=args.episodes, deterministic=True, seed=54321)
                row = {
                    "seed": seed,
                    "checkpoint": name,
                    "iteration": int(path.stem.split("_")[1]),
                    "greedy_return": round(float(returns.mean()), 1),
                    "greedy_std": round(float(returns.std()), 1),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    medians = {
        name: statistics.median(r["greedy_return"] for r in rows if r["checkpoint"] == name)
        for name in ("best by evaluation", "best by training return", "newest")
    }
    print("medians over seeds:", json.dumps(medians))
    table = (
        f"`{args.config}` {' '.join('--set ' + o for o in args.overrides)}, evaluation (greedy, the eval section's "
        f"episodes) every {args.every} iterations; each checkpoint then plays {args.episodes} greedy episodes.\n\n"
        + markdown_table(
            rows,
            (
                "seed | checkpoint | iteration | "
                f"greedy_return: greedy return ({args.episodes} episodes) | greedy_std: std"
            ),
        )
        + "\nMedians over seeds: "
        + ", ".join(f"{name} {value:g}" for name, value in medians.items())
        + ".\n"
    )
    name = "best_checkpoint_" + Path(args.config).stem
    return finish(name, args, machine, rows, table=table, medians=medians)


if __name__ == "__main__":
    sys.exit(main())
