"""distrl vs RLlib PPO on CartPole-v1, same machine, same run: env steps/s and wall time to mean return 475.

Three runs, each in a fresh process with its own local Ray:
  1. distrl with configs/cartpole.yaml;
  2. RLlib with the same env, model size, worker and env counts, rollout, batch, minibatch,
     epochs and learning rate;
  3. RLlib with its own tuned CartPole example settings (1 env runner x 8 envs, a 32-unit
     linear net with shared value layers, batch 4000, 6 epochs).
Wall time counts from the process start (Ray start-up included) for every run alike.

RLlib is an optional extra: pip install 'distrl[rllib]'.

    python benchmarks/vs_rllib.py
    python benchmarks/vs_rllib.py --quick
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import add_results_dir_argument, machine_info, markdown_table, print_machine, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TARGET = 475.0

RLLIB_CHILD = r'''
import json, sys, time
launch = time.perf_counter()
import ray
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
spec = json.loads(sys.argv[1])
ray.init(include_dashboard=False, _node_ip_address="127.0.0.1", configure_logging=False, log_to_driver=False)
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
    .debugging(seed=0)
)
algo = config.build_algo()
solved_at, steps, ret, iterations = None, 0, None, 0
while True:
    result = algo.train()
    iterations += 1
    steps = result["num_env_steps_sampled_lifetime"]
    ret = result["env_runners"].get("episode_return_mean")
    elapsed = time.perf_counter() - launch
    if ret is not None and ret >= spec["target"] and solved_at is None:
        solved_at = elapsed
        break
    if steps >= spec["max_steps"] or elapsed >= spec["max_wall_s"]:
        break
wall = time.perf_counter() - launch
algo.stop()
ray.shutdown()
print("RESULT " + json.dumps({"env_steps": steps, "wall_s": wall, "solved_at_s": solved_at,
                              "episode_return_mean": ret, "iterations": iterations}))
'''


def run_distrl(max_steps: int, max_wall_s: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        proc = subprocess.run(
            [sys.executable, "-m", "distrl", "train", "configs/cartpole.yaml", "--run-dir", str(run_dir),
             "--set", f"stop.env_steps={max_steps}", "--set", f"stop.time_s={max_wall_s}",
             "--set", f"stop.episode_return_mean={TARGET}", "--set", "logging.tensorboard=false"],
            capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"distrl train failed: {proc.stderr[-2000:]}")
        summary = json.loads((run_dir / "summary.json").read_text())
    return {"system": "distrl (configs/cartpole.yaml)", "env_steps": summary["env_steps"], "wall_s": summary["wall_s"],
            "solved_at_s": summary["solved_at_s"], "episode_return_mean": summary["episode_return_mean"]}  # fmt: skip


def run_rllib(name: str, spec: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", RLLIB_CHILD, json.dumps(spec)], capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"RLlib run failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return {"system": name, **json.loads(lines[-1][len("RESULT ") :])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-steps", type=int, default=1_000_000)
    parser.add_argument("--max-wall-s", type=float, default=300.0)
    parser.add_argument("--quick", action="store_true", help="a few iterations each, no return target")
    add_results_dir_argument(parser)
    args = parser.parse_args(argv)
    try:
        import ray.rllib  # noqa: F401
    except ImportError:
        print("RLlib is not installed: pip install 'distrl[rllib]'  (or: pip install 'ray[rllib]')", file=sys.stderr)
        return 2
    if args.quick:
        args.max_steps, args.max_wall_s = 16_000, 60.0
    from distrl.config import load_config

    ours = load_config(ROOT / "configs" / "cartpole.yaml")
    same = {
        "workers": ours.rollout.num_workers, "envs": ours.env.num_envs_per_worker, "fragment": ours.rollout.rollout_length,
        "batch": ours.batch_size, "minibatch": ours.ppo.minibatch_size, "epochs": ours.ppo.epochs, "lr": ours.ppo.lr,
        "hidden": ours.model.hidden, "activation": ours.model.activation, "shared": ours.model.shared_trunk,
        "vf_coef": ours.ppo.vf_coef,
        "extra": {"gamma": ours.ppo.gamma, "lambda_": ours.ppo.gae_lambda, "clip_param": ours.ppo.clip_coef,
                  "entropy_coeff": ours.ppo.ent_coef, "grad_clip": ours.ppo.max_grad_norm},
    }  # fmt: skip
    # RLlib's tuned_examples/ppo/cartpole_ppo.py: everything else stays at RLlib's defaults.
    tuned = {"workers": 1, "envs": 8, "fragment": "auto", "batch": 4000, "minibatch": 128, "epochs": 6, "lr": 3e-4,
             "hidden": [32], "activation": "linear", "shared": True, "vf_coef": 0.01}  # fmt: skip
    limits = {"target": TARGET if not args.quick else 1e9, "max_steps": args.max_steps, "max_wall_s": args.max_wall_s}
    info = machine_info()
    print_machine(info)
    rows = []
    for name, runner in [
        ("distrl", lambda: run_distrl(args.max_steps, args.max_wall_s)),
        ("rllib same settings", lambda: run_rllib("RLlib PPO (distrl's settings)", {**same, **limits})),
        ("rllib tuned example", lambda: run_rllib("RLlib PPO (its tuned CartPole example)", {**tuned, **limits})),
    ]:
        start = time.perf_counter()
        row = runner()
        row["sps"] = row["env_steps"] / row["wall_s"]
        rows.append(row)
        print(f"{row['system']:42s} {row['sps']:10,.0f} env steps/s, {row['env_steps']:,} steps in {row['wall_s']:.1f} s, "
              f"solved at {row['solved_at_s']}, return {row['episode_return_mean']}  ({time.perf_counter() - start:.0f} s)", flush=True)  # fmt: skip
    best_rllib = max(r["sps"] for r in rows[1:])
    rows[0]["x_rllib_best_sps"] = rows[0]["sps"] / best_rllib
    columns = [("system", "system"), ("sps", "env steps/s (from launch)"), ("solved_at_s", "time to 475 (s)"),
               ("env_steps", "env steps"), ("wall_s", "wall s"), ("episode_return_mean", "final return")]  # fmt: skip

    def chart(path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
        names = [r["system"].replace(" (", "\n(") for r in rows]
        axes[0].bar(names, [r["sps"] for r in rows])
        axes[0].set_title("env steps/s")
        axes[1].bar(names, [r["solved_at_s"] or 0 for r in rows])
        axes[1].set_title("seconds to mean return 475 (0 = not reached)")
        for ax in axes:
            ax.tick_params(axis="x", labelsize=6)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)

    failures = [] if args.quick else [f"{r['system']} did not finish" for r in rows if r["env_steps"] == 0]
    ok = write_results("vs_rllib", {"machine": info, "args": vars(args), "rllib_same": same, "rllib_tuned": tuned, "rows": rows},
                       markdown_table(rows, columns), chart, failures, args.quick, args.results_dir)  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
