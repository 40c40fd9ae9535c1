"""MuJoCo at 1M env steps: distrl's shipped configs beside the published PPO scores and Stable-Baselines3 on this
machine.

Each run trains ``configs/mujoco/ENV.yaml`` for 1M env steps (one seed), then plays 10 greedy episodes with the
final checkpoint. Its score is the mean return of the last 100 training episodes (as CleanRL and RL Zoo report)
and the greedy mean; its time is the wall time from launch. Beside it, in the same invocation, Stable-Baselines3's
PPO with RL Zoo's settings for the env (VecNormalize included) at the same budget and the same two cores, on the
env as distrl's config makes it (its ``env.kwargs``).
Published PPO at 1M steps: CleanRL (ppo_continuous_action, v4 envs, 3 seeds) and SB3 RL Zoo (v3/v4 envs).
Target: median of 3 seeds >= CleanRL's score, each run <= 10 minutes on the 2-core machine.

Every run is written as it ends (``results/mujoco_runs/ENV-SYSTEM-sSEED.json``), so runs can be made over
several invocations; the table, curves and summary come from all of them (``--report`` alone rewrites them).

    python benchmarks/learning/mujoco_scores.py  # 3 envs x 3 seeds x (distrl, sb3): hours
    python benchmarks/learning/mujoco_scores.py --envs Hopper-v5 --seeds 0 --systems distrl
    python benchmarks/learning/mujoco_scores.py --report  # table and plot from the runs on disk
    # a study: the shipped config changed, kept apart
    python benchmarks/learning/mujoco_scores.py --envs Hopper-v5 --systems distrl --variant sync \
        --set rollout.pipeline=sync
    python benchmarks/learning/mujoco_scores.py --quick  # Hopper, 8k steps, seed 0, both systems
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import figure, markdown_table, study_machine, study_parser, write_results
from benchmarks.training import play, train

ENVS = ["Hopper-v5", "Walker2d-v5", "HalfCheetah-v5", "Ant-v5"]
PUBLISHED = {  # PPO at 1M env steps
    "Hopper-v5": {"cleanrl": 2383, "rl_zoo": 2410},
    "Walker2d-v5": {"cleanrl": 2288, "rl_zoo": 3479},
    "HalfCheetah-v5": {"cleanrl": 1443, "rl_zoo": 5819},
    "Ant-v5": {"cleanrl": None, "rl_zoo": 1327},
}
_ZOO_POLICY = (
    "dict(log_std_init=-2, ortho_init=False, activation_fn=nn.ReLU, net_arch=dict(pi=[256, 256], vf=[256, 256]))"
)
# rl-baselines3-zoo hyperparams/ppo.yml (the v4 entries), a row an env; every one with VecNormalize and 1 env
_ZOO_KEYS = "batch_size n_steps gamma learning_rate ent_coef clip_range n_epochs gae_lambda max_grad_norm vf_coef"
_ZOO_ROWS = {
    "Hopper-v5": (32, 512, 0.999, 9.80828e-05, 0.00229519, 0.2, 5, 0.99, 0.7, 0.835671),
    "Walker2d-v5": (32, 512, 0.99, 5.05041e-05, 0.000585045, 0.1, 20, 0.95, 1.0, 0.871923),
    "HalfCheetah-v5": (64, 512, 0.98, 2.0633e-05, 0.000401762, 0.1, 20, 0.92, 0.8, 0.58096),
}
RL_ZOO = {env: dict(zip(_ZOO_KEYS.split(), row), policy_kwargs=_ZOO_POLICY) for env, row in _ZOO_ROWS.items()}
RL_ZOO["Ant-v5"] = {}  # RL Zoo's MuJoCo defaults: SB3's PPO defaults with VecNormalize
GREEDY_EPISODES = 10


def config_path(env: str) -> Path:
    return ROOT / "configs" / "mujoco" / f"{env.split('-')[0].lower()}.yaml"


def config_env_kwargs(env: str) -> dict:
    """``env.kwargs`` of distrl's shipped config for ``env``, as distrl loads it: SB3 runs the same env."""
    from distrl.config import load_config

    return dict(load_config(config_path(env)).env.kwargs)


def run_distrl(env: str, seed: int, steps: int, overrides: list[str]) -> dict:
    items = [f"seed={seed}", f"stop.env_steps={steps}", "logging.progress=lines", *overrides]
    with tempfile.TemporaryDirectory() as tmp:  # the run, kept while its newest checkpoint plays
        run = train(
            str(config_path(env)),
            items,
            what=f"distrl {env} seed {seed}",
            keep=Path(tmp) / "run",
            checkpoints=True,
            timeout=4 * 3600,
        )
        summary, rows = run.summary, run.rows
        curve = [(r["env_steps"], r["episode_return_mean"]) for r in rows if r.get("episode_return_mean") is not None]
        greedy = play(summary["checkpoint"], GREEDY_EPISODES)
    policy_share = statistics.median(r["policy_s"] / r["sample_s"] for r in rows[1:] if r.get("sample_s"))
    return {
        "env": env,
        "system": "distrl",
        "seed": seed,
        "env_steps": summary["env_steps"],
        "wall_s": summary["wall_s"],
        "train_return": summary["episode_return_mean"],
        "greedy_return": greedy,
        "curve": curve,
        "policy_backend": summary["policy_backend"],
        "policy_share_of_sample": policy_share,
    }


SB3_RUN = """
import json, sys, time
import gymnasium as gym
import numpy as np
import torch.nn as nn
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

env_id, seed, steps, settings = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
greedy_episodes = int(sys.argv[5])
env_kwargs = json.loads(sys.argv[6])  # the env as distrl's config makes it
launch = time.perf_counter()
settings = eval(settings, {"nn": nn})  # the RL Zoo entry, written by benchmarks/learning/mujoco_scores.py itself
policy_kwargs = eval(settings.pop("policy_kwargs", "dict()"), {"nn": nn})
venv = VecNormalize(make_vec_env(env_id, n_envs=1, seed=seed, env_kwargs=env_kwargs), gamma=settings.get("gamma", 0.99))
returns, curve = [], []


class Curve(BaseCallback):
    def _on_step(self):
        for info in self.locals["infos"]:
            if "episode" in info:
                returns.append(info["episode"]["r"])
        if self.num_timesteps % 2048 == 0 and returns:
            curve.append((self.num_timesteps, float(np.mean(returns[-100:]))))
        return True


model = PPO("MlpPolicy", venv, seed=seed, verbose=0, policy_kwargs=policy_kwargs, **settings)
model.learn(steps, callback=Curve())
wall = time.perf_counter() - launch
venv.training, venv.norm_reward = False, False
eval_env = gym.make(env_id, **env_kwargs)
greedy = []
for episode in range(greedy_episodes):
    obs, _ = eval_env.reset(seed=10_000 + episode)
    done, total = False, 0.0
    while not done:
        action, _ = model.predict(venv.normalize_obs(obs[None]), deterministic=True)
        obs, reward, terminated, truncated, _ = eval_env.step(action[0])
        total += reward
        done = terminated or truncated
    greedy.append(total)
train_return = float(np.mean(returns[-100:]))
print(json.dumps({"wall_s": wall, "train_return": train_return, "greedy_return": float(np.mean(greedy)),
                  "curve": curve}))
"""


def run_sb3(env: str, seed: int, steps: int, overrides: list[str]) -> dict:
    if overrides:
        raise SystemExit("--set changes distrl's config; SB3 runs RL Zoo's settings as they are")
    env_kwargs = config_env_kwargs(env)
    start = time.perf_counter()
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            SB3_RUN,
            env,
            str(seed),
            str(steps),
            repr(RL_ZOO[env]),
            str(GREEDY_EPISODES),
            json.dumps(env_kwargs),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=6 * 3600,
    )
    if result.returncode != 0:
        raise RuntimeError(f"sb3 {env} seed {seed} failed:\n{result.stderr[-3000:]}")
    out = json.loads(result.stdout.strip().splitlines()[-1])
    out["wall_s"] = time.perf_counter() - start  # from launch, as distrl's (imports included)
    return {"env": env, "system": "sb3", "seed": seed, "env_steps": steps, "env_kwargs": env_kwargs, **out}


def report(machine: dict, quick: bool, results_dir: Path) -> None:
    runs_dir = results_dir / "mujoco_runs"
    runs = [json.loads(p.read_text()) for p in sorted(runs_dir.glob("*.json"))] if runs_dir.is_dir() else []
    runs = [r for r in runs if r.get("quick", False) == quick]
    study = [r for r in runs if r.get("variant")]
    runs = [r for r in runs if not r.get("variant")]
    rows = []
    for env in ENVS:
        mine = {s: [r for r in runs if r["env"] == env and r["system"] == s] for s in ("distrl", "sb3")}
        if not mine["distrl"] and not mine["sb3"]:
            continue
        med = lambda rs, k: statistics.median(r[k] for r in rs) if rs else None  # noqa: E731
        cleanrl = PUBLISHED[env]["cleanrl"]
        rows.append(
            {
                "env": env,
                "distrl seeds": len(mine["distrl"]),
                "distrl last-100": med(mine["distrl"], "train_return"),
                "distrl greedy": med(mine["distrl"], "greedy_return"),
                "distrl wall s": med(mine["distrl"], "wall_s"),
                "vs CleanRL": (med(mine["distrl"], "train_return") / cleanrl) if mine["distrl"] and cleanrl else None,
                "sb3 seeds": len(mine["sb3"]),
                "sb3 last-100": med(mine["sb3"], "train_return"),
                "sb3 greedy": med(mine["sb3"], "greedy_return"),
                "sb3 wall s": med(mine["sb3"], "wall_s"),
                "CleanRL": cleanrl,
                "RL Zoo": PUBLISHED[env]["rl_zoo"],
                "policy share": med(mine["distrl"], "policy_share_of_sample"),
            }
        )
    columns = (
        "env | distrl seeds | distrl last-100: distrl: last 100 episodes (median) | "
        "distrl greedy: distrl: greedy | distrl wall s: distrl: wall s | "
        "vs CleanRL: distrl / CleanRL (target >= 1) | sb3 seeds: SB3 seeds | "
        "sb3 last-100: SB3 (RL Zoo settings): last 100 | sb3 greedy: SB3: greedy | "
        "sb3 wall s: SB3: wall s | CleanRL: CleanRL published | "
        "RL Zoo: RL Zoo published | policy share: distrl: policy share of sample time"
    )

    def chart(path: Path) -> None:
        envs = [row["env"] for row in rows]
        with figure(path, (5 * len(envs), 4), ncols=len(envs), squeeze=False) as axes:
            for ax, env in zip(axes[0], envs):
                for r in (r for r in runs if r["env"] == env):
                    steps, values = zip(*r["curve"]) if r["curve"] else ((), ())
                    style = ("-", "--", ":")[r["seed"] % 3]
                    ax.plot(
                        steps,
                        values,
                        style,
                        color="tab:blue" if r["system"] == "distrl" else "tab:green",
                        label=f"{r['system']} seed {r['seed']}",
                    )
                for name, score in PUBLISHED[env].items():
                    if score:
                        ax.axhline(
                            score, color="k" if name == "cleanrl" else "gray", linestyle="--", label=f"{name} published"
                        )
                ax.set_title(env)
                ax.set_xlabel("env steps")
                ax.set_ylabel("mean return (last 100 episodes)")
                ax.legend(fontsize=7)

    table = markdown_table(rows, columns)
    if study:  # the shipped config beside the same config changed, seed by seed (scores: a seed's run is deterministic)
        lines = [
            "",
            "Study (the shipped config changed; `--variant NAME --set ...`):",
            "",
            "| env | variant | changes | seed | last 100 | greedy | wall s |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in sorted(study, key=lambda r: (r["env"], r["variant"], r["seed"])):
            lines.append(
                f"| {r['env']} | {r['variant']} | {' '.join(r['overrides'])} | {r['seed']} | "
                f"{r['train_return']:.0f} | {r['greedy_return']:.0f} | {r['wall_s']:.0f} |"
            )
        table += "\n" + "\n".join(lines)
    write_results(
        "mujoco",
        {"machine": machine, "rows": rows, "runs": runs, "study": study},
        table,
        chart=chart if rows else None,
        quick=quick,
        results_dir=results_dir,
    )


def main() -> None:
    parser = study_parser(__doc__, quick="Hopper, 8k steps, seed 0", seeds=[0, 1, 2])
    parser.add_argument("--envs", nargs="+", default=ENVS[:3], choices=ENVS)
    parser.add_argument("--systems", nargs="+", default=["distrl", "sb3"], choices=["distrl", "sb3"])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--report", action="store_true", help="only rewrite the table and plot from the runs on disk")
    parser.add_argument(
        "--variant", help="name a study run: the shipped config with --set changes (both or neither), reported apart"
    )
    args = parser.parse_args()
    runs_dir = args.results_dir / "mujoco_runs"
    if bool(args.variant) != bool(args.overrides):
        parser.error("--variant and --set go together: a changed config is a study run, named")
    if args.quick:
        args.envs, args.seeds, args.steps = (
            ["Hopper-v5"],
            [0],
            8_000,
        )  # a check that it runs: 50k took 194 s on 2 cores
    machine = study_machine()
    if not args.report:
        runs_dir.mkdir(parents=True, exist_ok=True)
        for env in args.envs:
            for seed in args.seeds:  # the systems of one seed side by side: the machine's speed drifts
                for system in args.systems:
                    r = (run_distrl if system == "distrl" else run_sb3)(env, seed, args.steps, args.overrides)
                    r.update(machine=machine, quick=args.quick, variant=args.variant, overrides=args.overrides)
                    suffix = "_quick" if args.quick else ""
                    variant = f"-{args.variant}" if args.variant else ""
                    (runs_dir / f"{env}-{system}{variant}-s{seed}{suffix}.json").write_text(
                        json.dumps(r, default=str) + "\n"
                    )
                    print(
                        f"{env:15s} {system:6s} seed {seed}: last-100 {r['train_return']:8.1f}, greedy "
                        f"{r['greedy_return']:8.1f}, {r['wall_s']:6.1f} s",
                        flush=True,
                    )
    report(machine, args.quick, args.results_dir)


if __name__ == "__main__":
    main()
