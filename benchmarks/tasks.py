"""The small control tasks several studies train (the async pipeline's learning, where the CPU goes, reserved
cores): CartPole, Acrobot and Pendulum with four workers at a quarter of a CPU each, and their parser."""

from __future__ import annotations

import argparse

from benchmarks.common import start_study, study_parser

WORKERS = ["rollout.num_workers=4", "rollout.num_cpus_per_worker=0.25", "logging.progress=lines"]
TASKS = {  # name -> (config, overrides, target, env step budget)
    "CartPole-v1": ("configs/cartpole.yaml", ["env.num_envs_per_worker=16"], 475.0, 1_500_000),
    # Acrobot's entropy bonus (CleanRL's for classic control): a policy that reaches the goal by chance first must
    # keep exploring until it does. Without it 3 of 20 async runs' entropy fell before the first success, and they
    # never solved (docs/performance.md).
    "Acrobot-v1": (
        "configs/cartpole.yaml",
        [
            "env.id=Acrobot-v1",
            "env.vectorization=sync",
            "env.num_envs_per_worker=16",
            "ppo.lr=1e-3",
            "ppo.ent_coef=0.01",
        ],
        -100.0,
        600_000,
    ),
    "Pendulum-v1": ("configs/pendulum.yaml", ["env.num_envs_per_worker=8"], -250.0, 600_000),
}

# Each pipeline's ppo.proximal: sync the paper's ratio, async decoupled PPO (the async configs'); --async-proximal
# changes the async runs'. At lag 0 the two are the same policy. (auto, the default, chooses the same.)
PROXIMAL = {"sync": "behaviour", "async": "learner"}


def task_parser(doc: str, quick: str = "CartPole, seed 0") -> argparse.ArgumentParser:
    """A study's parser (``study_parser``, seeds 0-2) with ``--tasks``, for the benchmarks that run these tasks."""
    parser = study_parser(doc, quick=quick, seeds=[0, 1, 2])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    return parser


def parse_task_arguments(parser: argparse.ArgumentParser) -> tuple[argparse.Namespace, dict]:
    """The arguments (``--quick``: CartPole, seed 0) and this machine, printed."""
    args, machine = start_study(parser)
    if args.quick:
        args.tasks, args.seeds = ["CartPole-v1"], [0]
    return args, machine
