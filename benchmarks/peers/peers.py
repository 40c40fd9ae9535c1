"""distrl beside its peers on CartPole-v1, same machine, same run: time from launch to mean return 475.

Every run is a fresh process (each Ray its own, private), timed from its own start:
  1. distrl with configs/cartpole.yaml;
  2. Stable-Baselines3 PPO with RL Zoo's tuned CartPole-v1 settings (hyperparams/ppo.yml: 8 envs,
     n_steps 32, batch 256, 20 epochs, gamma 0.98, GAE lambda 0.8, linear lr 1e-3 and clip 0.2
     over 1e5 steps), one process;
  3. RLlib PPO with distrl's settings (env, model size, workers, envs, rollout, batch, minibatch,
     epochs, learning rate);
  4. RLlib PPO with its own tuned CartPole example (1 env runner x 8 envs, a 32-unit linear net
     with shared value layers, batch 4000, 6 epochs).
Each system runs once per seed; the table reports every run and the medians. Also measured here,
in the same run: Ray's own start-up floor (import ray, ray.init, one task round trip), against
which distrl's launch-to-first-batch is read.

Peers are optional extras: pip install 'distrl[peers]' (stable-baselines3, ray[rllib]).

    python benchmarks/peers/peers.py                                                    # 3 seeds, every system
    python benchmarks/peers/peers.py --systems distrl sb3 --seeds 0 1 2 3 4
    python benchmarks/peers/peers.py --quick
    python benchmarks/peers/peers.py --systems distrl sb3 --set rollout.pipeline=async  # a variant of distrl's config
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import (
    RAY_FLOOR_CHILD,
    child,
    finish,
    markdown_table,
    study_machine,
    study_name,
    study_parser,
)
from benchmarks.training import train

ROOT = Path(__file__).resolve().parents[2]
TARGET = 475.0


SB3_CHILD = r"""
import json, sys, time
launch = time.perf_counter()
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import Logger
spec = json.loads(sys.argv[1])

def linear(start):
    return lambda progress_remaining: progress_remaining * start

class StopAtTarget(BaseCallback):
    solved_at = None
    def _init_callback(self):
        self.curve = []  # [s from launch, env steps, mean return of the last 100 episodes] at each rollout's end
    def _on_rollout_end(self):
        returns = [info["r"] for info in self.model.ep_info_buffer]  # the last 100 episodes, as SB3 logs them
        if returns:
            self.curve.append([time.perf_counter() - launch, self.num_timesteps, sum(returns) / len(returns)])
        if len(returns) >= 100 and sum(returns) / len(returns) >= spec["target"] and self.solved_at is None:
            self.solved_at = time.perf_counter() - launch
    def _on_step(self):
        elapsed = time.perf_counter() - launch
        return self.solved_at is None and self.num_timesteps < spec["max_steps"] and elapsed < spec["max_wall_s"]

env = make_vec_env("CartPole-v1", n_envs=8, seed=spec["seed"])
model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
            learning_rate=linear(1e-3), clip_range=linear(0.2), seed=spec["seed"], device="cpu", verbose=0)
model.set_logger(Logger(folder=None, output_formats=[]))  # SB3's own would make an empty /tmp/SB3-* dir per run
callback = StopAtTarget()
model.learn(total_timesteps=min(100_000, spec["max_steps"]), callback=callback)
returns = [info["r"] for info in model.ep_info_buffer]
print("RESULT " + json.dumps({"env_steps": model.num_timesteps, "wall_s": time.perf_counter() - launch,
                              "solved_at_s": callback.solved_at, "curve": callback.curve,
                              "episode_return_mean": sum(returns) / len(returns) if returns else None}))
"""

RLLIB_CHILD = r"""
import json, sys, time
launch = time.perf_counter()
import ray
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
spec = json.loads(sys.argv[1])
ray.init(address="local", include_dashboard=False, _node_ip_address="127.0.0.1", configure_logging=False,
         log_to_driver=False)
config = (
    PPOConfig()
    .environment("CartPole-v1")
    .env_runners(num_env_runners=spec["workers"], num_envs_per_env_runner=spec["envs"],
                 rollout_fragment_length=spec["fragment"])
    .learners(num_learners=0)
    .training(lr=spec["lr"], num_epochs=spec["epochs"], minibatch_size=spec["minibatch"],
              train_batch_size_per_learner=spec["batch"], vf_loss_coeff=spec["vf_coef"],
              **spec.get("extra", {}))
    .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=spec["hidden"], fcnet_activation=spec["activation"],
                                               vf_share_layers=spec["shared"]))
    .reporting(metrics_num_episodes_for_smoothing=100)
    .debugging(seed=spec["seed"])
)
algo = config.build_algo()
solved_at, steps, ret, iterations, curve = None, 0, None, 0, []
while True:
    result = algo.train()
    iterations += 1
    steps = result["num_env_steps_sampled_lifetime"]
    ret = result["env_runners"].get("episode_return_mean")
    elapsed = time.perf_counter() - launch
    if ret is not None:
        curve.append([elapsed, steps, ret])
    if ret is not None and ret >= spec["target"] and solved_at is None:
        solved_at = elapsed
        break
    if steps >= spec["max_steps"] or elapsed >= spec["max_wall_s"]:
        break
wall = time.perf_counter() - launch
algo.stop()
ray.shutdown()
print("RESULT " + json.dumps({"env_steps": steps, "wall_s": wall, "solved_at_s": solved_at,
                              "episode_return_mean": ret, "iterations": iterations, "curve": curve}))
"""


def run_distrl(seed: int, limits: dict, overrides: list[str]) -> dict:
    """``configs/cartpole.yaml`` with ``overrides`` (``--set``) to the target or a limit."""
    stop = [f"stop.env_steps={limits['max_steps']}", f"stop.time_s={limits['max_wall_s']}"]
    stop += [f"stop.episode_return_mean={limits['target']}"]
    # a user's run: checkpoints as shipped
    done = train("configs/cartpole.yaml", [f"seed={seed}", *stop, *overrides], what="distrl train", checkpoints=True)
    summary, rows = done.summary, done.rows
    return {
        # [s from launch, env steps, mean return], as the peers' children record it: the learning-curve figure's data
        "curve": [
            [row["time_s"], row["env_steps"], row["episode_return_mean"]]
            for row in rows
            if row.get("episode_return_mean") is not None
        ],
        "env_steps": summary["env_steps"],
        "wall_s": summary["wall_s"],
        "solved_at_s": summary["solved_at_s"],
        "episode_return_mean": summary["episode_return_mean"],
        "first_batch_s": summary["startup"]["first_batch"],
        "startup": summary["startup"],
    }


def median_or_none(values: list) -> float | None:
    """The median of the runs that reached the target; None unless every run did."""
    return statistics.median(values) if values and all(v is not None for v in values) else None


def main(argv=None) -> int:
    # --set: distrl's run (configs/cartpole.yaml with the setting); RLlib's same-settings run follows it
    parser = study_parser(__doc__, quick="one short run each, no return target", seeds=[0, 1, 2])
    systems = ["distrl", "sb3", "rllib_same", "rllib_tuned"]
    parser.add_argument("--systems", nargs="+", default=systems, choices=systems)
    parser.add_argument("--max-steps", type=int, default=1_000_000)
    parser.add_argument("--max-wall-s", type=float, default=300.0)
    args = parser.parse_args(argv)
    if args.quick:
        args.max_steps, args.max_wall_s, args.seeds = 8_000, 60.0, [0]
    missing = []
    if "sb3" in args.systems and not _importable("stable_baselines3"):
        missing.append("stable-baselines3")
    if {"rllib_same", "rllib_tuned"} & set(args.systems) and not _importable("ray.rllib"):
        missing.append("ray[rllib]")
    if missing:
        print(f"not installed: {', '.join(missing)}: pip install 'distrl[peers]'", file=sys.stderr)
        return 2
    from distrl.config import load_config

    ours = load_config(ROOT / "configs" / "cartpole.yaml", args.overrides)
    same = {
        "workers": ours.rollout.num_workers,
        "envs": ours.env.num_envs_per_worker,
        "fragment": ours.rollout.rollout_length,
        "batch": ours.batch_size,
        "minibatch": ours.ppo.minibatch_size,
        "epochs": ours.ppo.epochs,
        "lr": ours.ppo.lr,
        "hidden": ours.model.hidden,
        "activation": ours.model.activation,
        "shared": ours.model.shared_trunk,
        "vf_coef": ours.ppo.vf_coef,
        "extra": {
            "gamma": ours.ppo.gamma,
            "lambda_": ours.ppo.gae_lambda,
            "clip_param": ours.ppo.clip_coef,
            "entropy_coeff": ours.ppo.ent_coef,
            "grad_clip": ours.ppo.max_grad_norm,
        },
    }
    # RLlib's tuned_examples/ppo/cartpole_ppo.py: everything else stays at RLlib's defaults.
    tuned = {
        "workers": 1,
        "envs": 8,
        "fragment": "auto",
        "batch": 4000,
        "minibatch": 128,
        "epochs": 6,
        "lr": 3e-4,
        "hidden": [32],
        "activation": "linear",
        "shared": True,
        "vf_coef": 0.01,
    }
    limits = {"target": TARGET if not args.quick else 1e9, "max_steps": args.max_steps, "max_wall_s": args.max_wall_s}
    variant = "".join(f", {item}" for item in args.overrides)
    names = {
        "distrl": f"distrl (configs/cartpole.yaml{variant})",
        "sb3": "SB3 PPO (RL Zoo CartPole settings)",
        "rllib_same": "RLlib PPO (distrl's settings)",
        "rllib_tuned": "RLlib PPO (its tuned CartPole example)",
    }
    runners = {
        "distrl": lambda seed: run_distrl(seed, limits, args.overrides),
        "sb3": lambda seed: child(SB3_CHILD, {"seed": seed, **limits}),
        "rllib_same": lambda seed: child(RLLIB_CHILD, {**same, **limits, "seed": seed}),
        "rllib_tuned": lambda seed: child(RLLIB_CHILD, {**tuned, **limits, "seed": seed}),
    }
    info = study_machine()
    floors = [child(RAY_FLOOR_CHILD) for _ in range(2 if not args.quick else 1)]
    floor = min(f["floor_s"] for f in floors)
    runs = ", ".join(f"{f['floor_s']:.1f}" for f in floors)
    print(f"Ray's floor (import ray + ray.init + one task): {floor:.1f} s (runs: {runs})")
    rows = []
    for seed in args.seeds:  # seeds interleaved across systems, so machine drift hits them alike
        for system in args.systems:
            start = time.perf_counter()
            row = {"system": names[system], "key": system, "seed": seed, **runners[system](seed)}
            row["env_steps"] = int(row["env_steps"])  # RLlib counts in floats
            row["sps"] = row["env_steps"] / row["wall_s"]
            rows.append(row)
            print(
                f"{row['system']:40s} seed {seed}: {row['sps']:9,.0f} env steps/s, {row['env_steps']:,} steps in "
                f"{row['wall_s']:.1f} s, {_solved(row['solved_at_s'])}, return {row['episode_return_mean']:.1f}"
                f"  ({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
    medians = {}
    for system in args.systems:
        mine = [r for r in rows if r["key"] == system]
        medians[system] = {
            "system": names[system],
            "solved_at_s": median_or_none([r["solved_at_s"] for r in mine]),
            "env_steps": statistics.median(r["env_steps"] for r in mine),
            "sps": statistics.median(r["sps"] for r in mine),
            "runs": len(mine),
            "solved_runs": sum(r["solved_at_s"] is not None for r in mine),
        }
    targets = {"ray_floor_s": floor}
    if "distrl" in medians:
        first_batches = [r["first_batch_s"] for r in rows if r["key"] == "distrl"]
        targets["distrl_first_batch_s"] = statistics.median(first_batches)
        targets["first_batch_over_floor_s"] = targets["distrl_first_batch_s"] - floor
        ours_s = medians["distrl"]["solved_at_s"]
        for peer in ("sb3", "rllib_same", "rllib_tuned"):
            theirs = medians.get(peer, {}).get("solved_at_s")
            targets[f"time_to_475_vs_{peer}"] = ours_s / theirs if ours_s and theirs else None
    print(
        "medians: "
        + "; ".join(
            f"{m['system']} {_solved(m['solved_at_s'])} ({m['solved_runs']}/{m['runs']} solved)"
            for m in medians.values()
        )
    )
    print("targets: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in targets.items()))
    failures = (
        [] if args.quick else [f"{r['system']} seed {r['seed']} did not run" for r in rows if r["env_steps"] == 0]
    )
    return finish(
        study_name("peers", args.overrides),
        args,
        info,
        rows,
        table=report(rows, medians, targets),
        failures=failures,
        rllib_same=same,
        rllib_tuned=tuned,
        ray_floor=floors,
        medians=medians,
        targets=targets,
    )


def _solved(seconds: float | None) -> str:
    return "not solved" if seconds is None else f"solved at {seconds:.1f} s"


def report(rows: list[dict], medians: dict, targets: dict) -> str:
    """The results file's tables: every run, then each system's medians and distrl's time as a share of each peer's."""
    runs = markdown_table(
        rows,
        (
            "system | seed | sps: env steps/s (from launch) | solved_at_s: time to 475 (s) | "
            "env_steps: env steps | wall_s: wall s | episode_return_mean: final return"
        ),
    )
    ratios = {"distrl": 1.0} | {k: targets.get(f"time_to_475_vs_{k}") for k in ("sb3", "rllib_same", "rllib_tuned")}
    summary = markdown_table(
        [m | {"solved": f"{m['solved_runs']}/{m['runs']}", "ratio": ratios.get(key)} for key, m in medians.items()],
        (
            "system | solved_at_s: median time to 475 (s) | solved | "
            "env_steps: median env steps | ratio: distrl's time as a share of its"
        ),
    )
    floor = f"Ray's own start (import, init, one task) in the same run: {targets['ray_floor_s']:.2f} s"
    if "distrl_first_batch_s" in targets:
        floor += f"; distrl's launch to first batch {targets['distrl_first_batch_s']:.2f} s"
    return f"{runs}\n\nMedians over seeds:\n\n{summary}\n\n{floor}."


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


if __name__ == "__main__":
    sys.exit(main())
