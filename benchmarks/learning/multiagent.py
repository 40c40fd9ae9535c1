"""Many agents: independent critics beside a central critic (``agents.critic``), per-agent policies
(``agents.policies``) and RLlib's multi-agent PPO, on one cooperative task, same budget, same settings, in one
invocation.

Each run trains ``distrl train`` on the task for its budget of agent steps (one seed each), and reports the mean return
of the last 100 agent episodes (the metrics row's ``episode_return_mean``) at the end, its mean over the reports of
the last 10 % of the steps (steadier: one report moves by a return point from the next), its best over the run, and
the wall time from launch. On the spread tasks the summary also gives the last 10 % in MAPPO's scale (the return its
code reports: ``benchmarks/learning/spread_reference.py``, which also places scripted teams on both scales). Tasks:

- ``spread``: MPE ``simple_spread`` (3 agents, 25 steps an episode, discrete actions; the ``mpe2`` package, installed
  with ``pip install --no-deps mpe2``: its pygame-ce dependency would overwrite pygame's files). Settings (``SETTINGS``,
  which RLlib's runs take too): entropy 0.01 (MAPPO's), lr 3e-4, 4 epochs of 4 minibatches, gamma 0.9, a tanh MLP;
  distrl's runs add return normalisation and the paper's clip (``ppo.proximal: behaviour``, as these runs were
  measured; ``configs/cartpole.yaml``, their base, has ``learner``);
- ``spread_relu``: the same with MAPPO's gamma 0.99 and its ReLU activation. With tanh at gamma 0.99 distrl's policies
  drifted off the map once the critic fitted: a tanh critic saturates on the far positions a drifting agent reaches
  and values them as it values nearer ones (docs/multiagent.md);
- ``spread_mappo``: ``spread_relu`` with every MAPPO optimiser setting both systems have (128 copies x 25 steps an
  update, lr 7e-4, 10 epochs of one minibatch, gradient norm 10), and MAPPO's budget of 20M env steps (60M agent
  steps: about 75 minutes of distrl on a 2-core box; ``--steps`` for a part of it);
- ``spread_mappo_world``: ``spread_mappo`` in MAPPO's world (landmarks in [-0.8, 0.8] as its MPE places them:
  ``benchmarks.spread.mappo_world``), where its users' figures come from, with MAPPO's value normaliser and Huber value
  loss (``ppo.normalize_value``, ``ppo.value_loss: huber``); with ``--variants central_obs``, MAPPO's critic on every
  agent's observation, and with ``--variants central_obs_lstm`` its recurrent policy and critic too (``rmappo``). About
  110 minutes a seed alone on a 2-core box (``central_obs``), 150 (``central_obs_lstm``);
- ``cartpole_team``: distrl's team of three CartPoles (``distrl.envs.testing:cartpole_team``), where the agents do not
  interact: a central critic has nothing to add there (what --quick runs).

    python benchmarks/learning/multiagent.py  # spread, every variant (RLlib's too), seeds 0-1
    python benchmarks/learning/multiagent.py --variants independent rllib  # distrl beside RLlib's multi-agent PPO
    python benchmarks/learning/multiagent.py --tasks spread_relu --variants independent rllib --seeds 0 1 2 3
    python benchmarks/learning/multiagent.py --tasks spread_mappo --variants independent rllib --seeds 0 \
        --steps 12000000
    python benchmarks/learning/multiagent.py --variants independent central_obs --seeds 0 1 2
    python benchmarks/learning/multiagent.py --tasks spread_mappo_world --variants central_obs --seeds 0 \
        --runs-dir runs/spread
    # distrl's runs with a setting
    python benchmarks/learning/multiagent.py --variants independent --set ppo.anneal_lr=true
    python benchmarks/learning/multiagent.py --quick  # cartpole_team, 20k agent steps, 2 variants
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, markdown_table, study_machine, study_name, study_parser
from benchmarks.spread import AGENTS, STEPS, mappo_return, spread
from benchmarks.training import train

# The world mappo_return converts returns of (benchmarks/spread.py): AGENTS agents, STEPS steps an episode.
SPREAD_ENV = [
    "env.id=mpe2.simple_spread_v3:parallel_env",
    f"env.kwargs={{N: {AGENTS}, max_cycles: {STEPS}, continuous_actions: false}}",
    "env.normalize_reward=true",
    "stop.episode_return_mean=null",
]
# The learning settings both systems take (RLlib's runs read them too, rllib_run): distrl's --set items are built from
# them. ``spread`` is the round measured first (tanh, gamma 0.9); ``spread_relu`` takes MAPPO's gamma and activation;
# ``spread_mappo`` every MAPPO setting both systems have (its train_mpe_spread.sh: 128 copies x 25 steps an update,
# lr 7e-4, 10 epochs of one minibatch, gradient norm 10), at its budget of 20M env steps. Each update is
# copies x agents x rollout agent steps: 9,600 in all three.
SPREAD = {
    "gamma": 0.9,
    "lr": 3e-4,
    "epochs": 4,
    "minibatches": 4,
    "ent_coef": 0.01,
    "activation": "tanh",
    "copies": 64,
    "rollout": 50,
    "max_grad_norm": 0.5,
}
SPREAD_RELU = SPREAD | {"gamma": 0.99, "activation": "relu"}
SETTINGS = {
    "spread": SPREAD,
    "spread_relu": SPREAD_RELU,
    "spread_mappo": SPREAD_RELU
    | {"lr": 7e-4, "epochs": 10, "minibatches": 1, "copies": 128, "rollout": 25, "max_grad_norm": 10.0},
}
SETTINGS["spread_mappo_world"] = SETTINGS["spread_mappo"]
MAPPO_BUDGET = 20_000_000 * AGENTS  # agent steps: MAPPO's 20M env steps of simple_spread
# MAPPO's world (landmarks in [-0.8, 0.8], benchmarks.spread.mappo_world), where its users' figures were measured.
MAPPO_WORLD_ENV = [
    "env.id=benchmarks.spread:mappo_world" if item.startswith("env.id=") else item for item in SPREAD_ENV
]
# What MAPPO's critic does beyond the optimiser settings (its ValueNorm and Huber loss, on by default in its code).
MAPPO_VALUE = ["ppo.normalize_value=true", "ppo.value_loss=huber"]


def distrl_settings(settings: dict) -> list[str]:
    """``--set`` items for a task's shared settings (each agent of each env copy is a slot of the batch)."""
    slots = settings["copies"] * AGENTS
    return [
        f"env.num_envs_per_worker={settings['copies']}",
        f"rollout.rollout_length={settings['rollout']}",
        f"ppo.gamma={settings['gamma']}",
        f"ppo.lr={settings['lr']}",
        f"ppo.epochs={settings['epochs']}",
        f"ppo.minibatch_size={slots * settings['rollout'] // settings['minibatches']}",
        f"ppo.ent_coef={settings['ent_coef']}",
        f"ppo.max_grad_norm={settings['max_grad_norm']}",
        f"model.activation={settings['activation']}",
        "ppo.proximal=behaviour",
    ]


TASKS = {
    # name: (overrides on configs/cartpole.yaml, agent steps)
    "spread": (SPREAD_ENV + distrl_settings(SETTINGS["spread"]), 1_000_000),
    "spread_relu": (SPREAD_ENV + distrl_settings(SETTINGS["spread_relu"]), 1_000_000),
    "spread_mappo": (SPREAD_ENV + distrl_settings(SETTINGS["spread_mappo"]), MAPPO_BUDGET),
    "spread_mappo_world": (
        MAPPO_WORLD_ENV + distrl_settings(SETTINGS["spread_mappo_world"]) + MAPPO_VALUE,
        MAPPO_BUDGET,
    ),
    "cartpole_team": (
        [
            "env.id=distrl.envs.testing:cartpole_team",
            "env.num_envs_per_worker=16",
            "ppo.proximal=behaviour",
            "stop.episode_return_mean=null",
        ],
        300_000,
    ),
}
# The team of CartPoles has no global state; RLlib's runs and the 25-step unroll are for the spread tasks.
SKIPPED = {(variant, "cartpole_team") for variant in ("central_state", "rllib", "central_obs_lstm")}
TAIL = 0.1  # the share of a run's steps its "last steps" return averages over
VARIANTS = {
    "independent": ["agents.critic=local"],  # parameter sharing, each agent's critic on its own observation
    "central_obs": ["agents.critic=observations"],  # MAPPO's concatenated local observations
    # MAPPO's recurrent policy and critic (rmappo): an LSTM core in each tower, unrolled over a whole 25-step episode
    "central_obs_lstm": ["agents.critic=observations", "model.lstm_size=64", f"ppo.seq_len={STEPS}"],
    "central_state": ["agents.critic=state"],  # the env's global state (cartpole_team has none)
    "per_agent": ["agents.policies=per_agent"],  # a policy (and critic) per agent, no sharing
    "rllib": None,  # RLlib's multi-agent PPO, one shared policy, the same settings (rllib_run below)
}


def run_rllib(task: str, seed: int, steps: int) -> dict:
    """RLlib's PPO on ``task`` (the spread tasks), in a process of its own (``--rllib-run``): its own Ray."""
    if task not in SETTINGS:
        raise RuntimeError(f"{task} rllib seed {seed}: the RLlib variant runs {', '.join(SETTINGS)} only")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--rllib-run", task, str(seed), str(steps)]
    start = time.perf_counter()
    result = subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=4 * 3600,
        env={**os.environ, "RAY_ADDRESS": "local", "PYTHONUNBUFFERED": "1"},
    )
    if result.returncode != 0:
        raise RuntimeError(f"{task} rllib seed {seed}: exit {result.returncode}: {result.stderr.strip()[-600:]}")
    row = json.loads(result.stdout.strip().splitlines()[-1])
    return {
        "task": task,
        "variant": "rllib",
        "seed": seed,
        "env_steps": row["env_steps"],
        "final_return": row["final_return"],
        "best_return": row["best_return"],
        "wall_s": time.perf_counter() - start,
        "curve": row["curve"],
    }


def spread_env(config=None):
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

    return ParallelPettingZooEnv(spread("mappo" if (config or {}).get("mappo_world") else "mpe2"))


def rllib_run(task: str, seed: int, steps: int) -> None:
    """The ``rllib`` variant, in a process of its own (its own Ray): RLlib's PPO (the new API stack of RLlib 2.60) on
    spread through RLlib's PettingZoo wrapper (``ParallelPettingZooEnv``), every agent mapped to one shared policy
    (parameter sharing, as the ``independent`` variant), with distrl's settings where RLlib has them: the same batch of
    agent steps and the task's ``SETTINGS`` (env copies, steps per copy, gamma, lr, epochs, minibatches, entropy,
    activation, gradient norm), GAE lambda 0.95, clip 0.2, value loss 0.5, no KL penalty, a [64, 64] MLP with a value
    network of its own, one env runner. RLlib has no return normalisation (distrl's variants normalise
    returns).
    Prints one JSON row: the per-agent return of the last episodes (``agent_episode_returns_mean`` averaged over the
    agents; distrl's ``episode_return_mean`` is per agent too), its best, the agent steps, the wall time."""
    start = time.perf_counter()
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.registry import register_env

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    register_env("spread", spread_env)
    settings = SETTINGS[task]
    env_steps_per_batch = settings["copies"] * settings["rollout"]  # distrl's batch: x AGENTS agent steps an update
    minibatch = env_steps_per_batch * AGENTS // settings["minibatches"]  # rows of the shared module: agent steps
    config = (
        PPOConfig()
        .environment("spread", env_config={"mappo_world": task == "spread_mappo_world"})
        .multi_agent(policies={"shared"}, policy_mapping_fn=lambda agent_id, *a, **k: "shared")
        .env_runners(
            num_env_runners=1, num_envs_per_env_runner=settings["copies"], rollout_fragment_length=settings["rollout"]
        )
        .training(
            lr=settings["lr"],
            gamma=settings["gamma"],
            lambda_=0.95,
            clip_param=0.2,
            entropy_coeff=settings["ent_coef"],
            vf_loss_coeff=0.5,
            grad_clip=settings["max_grad_norm"],
            grad_clip_by="global_norm",
            use_kl_loss=False,
            kl_coeff=0.0,
            num_epochs=settings["epochs"],
            train_batch_size_per_learner=env_steps_per_batch,
            minibatch_size=minibatch,
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[64, 64], fcnet_activation=settings["activation"], vf_share_layers=False
            )
        )
        .debugging(seed=seed)
    )
    if minibatch > env_steps_per_batch:
        # RLlib's check holds minibatch_size (rows of the shared module: agent steps) against the train batch counted
        # in env steps, so it refuses one minibatch of every agent step; its learner takes it (one slice an epoch).
        config.experimental(_validate_config=False)
    algo = config.build_algo()
    curve, agent_steps, returns = [], 0, []
    while agent_steps < steps:
        result = algo.train()
        runners = result.get("env_runners", {})
        agent_steps = int(
            runners.get("num_agent_steps_sampled_lifetime", {}).get("__all_agents__", 0)
            or sum(runners.get("num_agent_steps_sampled_lifetime", {}).values())
        )
        per_agent = runners.get("agent_episode_returns_mean", {})
        if per_agent:
            returns.append(sum(per_agent.values()) / len(per_agent))
            curve.append((agent_steps, returns[-1]))
    wall = time.perf_counter() - start
    algo.stop()
    ray.shutdown()
    print(
        json.dumps(
            {
                "system": "rllib",
                "seed": seed,
                "env_steps": agent_steps,
                "final_return": returns[-1],
                "best_return": max(returns),
                "wall_s": wall,
                "curve": curve,
            }
        )
    )


def tail_mean(curve: list, fraction: float = TAIL) -> float:
    """The mean return over the last ``fraction`` of a run's steps (every report from there on): the last report alone
    averages a few hundred episodes of one policy version, and moves by a return point from one report to the next."""
    reported = [(steps, ret) for steps, ret in curve if ret is not None]
    last = reported[-1][0]
    return statistics.fmean(ret for steps, ret in reported if steps >= (1 - fraction) * last)


def run_name(task: str, variant: str, seed: int) -> str:
    """A kept run directory's name under ``--runs-dir``."""
    return f"{task}_{variant}_seed{seed}"


def planned(tasks: list[str], variants: list[str], seeds: list[int]):
    """The ``(task, variant, seed)`` runs an invocation makes, in order (the pairs in ``SKIPPED`` left out)."""
    for task in tasks:
        for variant in variants:
            if (variant, task) not in SKIPPED:
                yield from ((task, variant, seed) for seed in seeds)


def run(task: str, variant: str, seed: int, steps: int, extra: list[str], runs_dir: Path | None = None) -> dict:
    """One run of ``variant`` on ``task``; ``extra``: ``--set`` items after the task's and the variant's (distrl
    only); ``runs_dir``: keep distrl's run directory there (checkpoints, metrics) instead of a temporary one."""
    if variant == "rllib":
        return run_rllib(task, seed, steps)
    overrides, _ = TASKS[task]
    items = [f"seed={seed}", f"stop.env_steps={steps}", "logging.progress=lines", *overrides, *VARIANTS[variant]]
    keep = runs_dir / run_name(task, variant, seed) if runs_dir else None
    config = str(ROOT / "configs" / "cartpole.yaml")
    run = train(config, [*items, *extra], what=f"{task} {variant} seed {seed}", keep=keep, checkpoints=True)
    rows, wall = run.rows, run.wall_s
    returns = [row["episode_return_mean"] for row in rows if row.get("episode_return_mean") is not None]
    return {
        "task": task,
        "variant": variant,
        "seed": seed,
        "env_steps": rows[-1]["env_steps"],
        "final_return": returns[-1],
        "best_return": max(returns),
        "wall_s": wall,
        "curve": [(row["env_steps"], row["episode_return_mean"]) for row in rows],
    }


def main(argv=None) -> int:
    # --set: distrl's runs only, after the task's and the variant's settings (RLlib's keep theirs); the results are
    # written apart from the plain run's
    parser = study_parser(__doc__, quick="cartpole_team, 20k agent steps, independent and central_obs", seeds=[0, 1])
    parser.add_argument("--tasks", nargs="+", default=["spread"], choices=list(TASKS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--steps", type=int, help="agent steps per run (default: the task's)")
    parser.add_argument(
        "--runs-dir",
        type=Path,
        help="keep distrl's run directories here (TASK_VARIANT_seedN: checkpoints and metrics, for distrl eval and "
        "distrl plot), not in a temporary directory; an existing run directory is refused",
    )
    parser.add_argument("--rllib-run", nargs=3, metavar=("TASK", "SEED", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rllib_run:
        task, seed, steps = args.rllib_run
        rllib_run(task, int(seed), int(steps))
        return 0
    if args.quick:
        args.tasks, args.variants, args.seeds, args.steps = (
            ["cartpole_team"],
            ["independent", "central_obs"],
            [0],
            20_000,
        )
    if args.runs_dir:
        names = [run_name(*planned_run) for planned_run in planned(args.tasks, args.variants, args.seeds)]
        taken = [name for name in names if (args.runs_dir / name).exists()]
        if taken:
            parser.error(f"--runs-dir {args.runs_dir}: {', '.join(taken)} already there; choose another directory")
    info = study_machine()
    rows, failures = [], []
    for task, variant, seed in planned(args.tasks, args.variants, args.seeds):
        try:
            row = run(task, variant, seed, args.steps or TASKS[task][1], args.overrides, args.runs_dir)
        except Exception as exc:
            failures.append(str(exc))
            print(f"FAILED {exc}", flush=True)
            continue
        row["tail_return"] = tail_mean(row["curve"])
        rows.append(row)
        print(
            f"{task:14s} {variant:14s} seed {seed}: return {row['final_return']:8.2f} (best "
            f"{row['best_return']:8.2f}) "
            f"at {row['env_steps']:,} agent steps in {row['wall_s']:.0f} s",
            flush=True,
        )
    summary = []
    for task in args.tasks:
        for variant in args.variants:
            runs = [r for r in rows if r["task"] == task and r["variant"] == variant]
            if runs:
                summary.append(
                    {
                        "task": task,
                        "variant": variant,
                        "seeds": len(runs),
                        "final_return": statistics.median(r["final_return"] for r in runs),
                        "tail_return": statistics.median(r["tail_return"] for r in runs),
                        "tails": " ".join(f"{r['tail_return']:.1f}" for r in runs),
                        "tail_mappo": mappo_return(statistics.median(r["tail_return"] for r in runs))
                        if task in SETTINGS
                        else None,  # MAPPO's own MPE reward (spread_reference.py)
                        "best_return": statistics.median(r["best_return"] for r in runs),
                        "wall_s": statistics.median(r["wall_s"] for r in runs),
                        "finals": " ".join(f"{r['final_return']:.1f}" for r in runs),
                    }
                )
    columns = (
        "task | variant | seeds | final_return: final return (median) | "
        f"finals: per seed | tail_return: last {TAIL:.0%} of steps (median) | "
        "tails: per seed | tail_mappo: the same in MAPPO's scale | "
        "best_return: best (median) | wall_s: wall s (median)"
    )
    tasks = "" if args.tasks == ["spread"] else "_" + "_".join(args.tasks)  # the first task's results keep their name
    print(json.dumps(summary, indent=1))
    return finish(
        study_name("multiagent" + tasks, args.overrides),
        args,
        info,
        rows,
        table=markdown_table(summary, columns),
        failures=failures,
        summary=summary,
    )


if __name__ == "__main__":
    sys.exit(main())
