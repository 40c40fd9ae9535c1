"""The starting configs on envs no one tuned them for: ``configs/start_discrete.yaml`` and
``configs/start_continuous.yaml`` with only ``env.id`` changed, each run to its budget and then its best checkpoint
(chosen by the run's own greedy evaluation) played greedily for ``--episodes`` episodes, beside RL Zoo's published PPO
scores where there are some. ``--shipped`` also runs the shipped config tuned to that env (where there is one) with
the same seed, budget and greedy play, its own stop rule lifted: the starting config is "within the seed spread" of
it where its median is at least the shipped config's lowest seed.

    python benchmarks/learning/start_configs.py                              # every env below, seeds 0-2, 1M env steps
    python benchmarks/learning/start_configs.py --envs Acrobot-v1 --seeds 0
    python benchmarks/learning/start_configs.py --envs Pendulum-v1 Hopper-v5 --shipped
    python benchmarks/learning/start_configs.py --quick  # Acrobot and Pendulum, 20k env steps, seed 0
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, start_study, study_parser
from benchmarks.training import train_and_play

# env id -> (starting config, RL Zoo's PPO score at 1M env steps (greedy, rl-baselines3-zoo benchmark.md), or None)
ENVS = {
    "Acrobot-v1": ("configs/start_discrete.yaml", -73.5),
    "MountainCar-v0": ("configs/start_discrete.yaml", -110.4),
    "CartPole-v1": ("configs/start_discrete.yaml", 500.0),
    "Pendulum-v1": ("configs/start_continuous.yaml", None),
    "Hopper-v5": ("configs/start_continuous.yaml", None),
}
# env id -> the shipped config tuned to it, which --shipped runs beside the starting config
SHIPPED = {
    "CartPole-v1": "configs/cartpole.yaml",
    "Pendulum-v1": "configs/pendulum.yaml",
    "Hopper-v5": "configs/mujoco/hopper.yaml",
}
QUICK = ["Acrobot-v1", "Pendulum-v1"]


def one(env_id: str, seed: int, steps: int, episodes: int, overrides: list[str], shipped: bool = False) -> dict:
    config = SHIPPED[env_id] if shipped else ENVS[env_id][0]
    items = [f"env.id={env_id}", f"seed={seed}", f"stop.env_steps={steps}", *overrides]
    items += ["stop.episode_return_mean=null"] if shipped else []  # the same budget as the starting config's
    done, greedy = train_and_play(config, items, episodes, seed=1000 + seed, what=f"{config} {env_id} seed {seed}")
    summary = done.summary
    return {
        "env": env_id,
        "config": Path(config).name,
        "seed": seed,
        "env_steps": summary["env_steps"],
        "wall_s": summary["wall_s"],
        "return_last_100": summary["episode_return_mean"],
        "greedy": greedy,
        "best_metric": summary["best_checkpoint_metric"],
    }


def main() -> int:
    parser = study_parser(__doc__, quick="Acrobot and Pendulum, 20k env steps, seed 0", seeds=[0, 1, 2])
    parser.add_argument("--envs", nargs="+", choices=list(ENVS), default=list(ENVS))
    parser.add_argument("--steps", type=int, default=1_000_000, help="env steps a run")
    parser.add_argument("--episodes", type=int, default=100, help="greedy episodes the best checkpoint plays after")
    parser.add_argument("--shipped", action="store_true", help="also run the shipped config tuned to each env")
    args, machine = start_study(parser)
    if args.quick:
        args.envs, args.seeds, args.steps, args.episodes = QUICK, [0], 20_000, 5
    runs = []
    for seed in args.seeds:
        for env_id in args.envs:
            for shipped in (False, True) if args.shipped and env_id in SHIPPED else (False,):
                runs.append(one(env_id, seed, args.steps, args.episodes, args.overrides, shipped))
                print(runs[-1], flush=True)
    rows = [summarise(env_id, runs) for env_id in args.envs]
    columns = (
        "env | config | "
        f"greedy_median: greedy return, {args.episodes} episodes (median) | "
        "each: each seed | rl_zoo: RL Zoo PPO | reached: at RL Zoo's | "
        "shipped: shipped config: each seed | within: within its spread | "
        "wall_s: wall s (median)"
    )
    return finish("start_configs", args, machine, rows, columns, runs=runs)


def summarise(env_id: str, runs: list[dict]) -> dict:
    """An env's row: the starting config's greedy returns beside RL Zoo's score and the shipped config's seeds."""
    config, zoo = ENVS[env_id]
    mine = sorted((r for r in runs if r["env"] == env_id and r["config"] == Path(config).name), key=lambda r: r["seed"])
    theirs = sorted((r for r in runs if r["env"] == env_id and r not in mine), key=lambda r: r["seed"])
    median = statistics.median(r["greedy"] for r in mine)
    return {
        "env": env_id,
        "config": Path(config).name,
        "greedy_median": round(median, 1),
        "each": ", ".join(f"{r['greedy']:.1f}" for r in mine),
        "rl_zoo": zoo if zoo is not None else "",
        "reached": ("yes" if median >= zoo else "no") if zoo is not None else "",
        "shipped": ", ".join(f"{r['greedy']:.1f}" for r in theirs),
        "within": ("yes" if median >= min(r["greedy"] for r in theirs) else "no") if theirs else "",
        "wall_s": round(statistics.median(r["wall_s"] for r in mine)),
    }


if __name__ == "__main__":
    sys.exit(main())
