"""What a trained critic says about states past those it was trained on: MPE ``simple_spread`` agents that all walk
one way for many steps (off the map), the critic's value of each state on the way beside the reward there.

A tanh critic saturates on positions past its training range and values far states like near ones, so walking away
looks no worse than staying (docs/multiagent.md: why a tanh policy drifted off the map at gamma 0.99); a ReLU critic
keeps falling with the reward. Each checkpoint is data: the env is the one named here, not the one it records.

    python benchmarks/learning/critic_extrapolation.py RUN_DIR [RUN_DIR ...]           # each run's newest checkpoint
    python benchmarks/learning/critic_extrapolation.py RUN_DIR --action 2 --steps 200  # walking right, for longer
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import add_results_dir_argument, markdown_table, study_machine, write_results

ENV_ID = "mpe2.simple_spread_v3:parallel_env"
MARKS = (0, 10, 24, 40, 60, 90, 119, 149, 199)  # steps whose values the table shows (those within --steps)


def walk(checkpoint: str, action: int, steps: int, episodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The critic's value of the first agent's observation and its reward at each step of ``episodes`` walks where
    every agent takes ``action`` each step (means over the walks)."""
    import torch
    from mpe2 import simple_spread_v3

    import distrl

    policy = distrl.load_policy(checkpoint, env_id=ENV_ID)
    env = simple_spread_v3.parallel_env(N=3, max_cycles=steps + 1, continuous_actions=False)
    values, rewards = np.zeros((episodes, steps)), np.zeros((episodes, steps))
    for episode in range(episodes):
        observations, _ = env.reset(seed=episode)
        for t in range(steps):
            names = list(env.agents)
            obs = torch.as_tensor(np.stack([observations[name] for name in names]).astype(np.float32))
            with torch.no_grad():
                _, value, *_ = policy.model(obs)
            values[episode, t] = float(value[0])
            observations, reward, *_ = env.step({name: action for name in names})
            rewards[episode, t] = reward[names[0]]
    env.close()
    return values.mean(axis=0), rewards.mean(axis=0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run directories (their newest checkpoint) or checkpoint files")
    parser.add_argument("--action", type=int, default=1, help="the action every agent takes (1: move left)")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--labels", nargs="+", help="a name for each run in the table (default: its path)")
    add_results_dir_argument(parser)
    args = parser.parse_args(argv)
    if args.labels and len(args.labels) != len(args.runs):
        parser.error(f"--labels: {len(args.labels)} names for {len(args.runs)} runs")
    info = study_machine()
    marks = [t for t in MARKS if t < args.steps]
    rows = []
    for run, label in zip(args.runs, args.labels or args.runs):
        values, rewards = walk(run, args.action, args.steps, args.episodes)
        row = {"run": label, "path": run, "values": values.round(3).tolist(), "rewards": rewards.round(3).tolist()}
        row |= {f"v{t}": round(float(values[t]), 2) for t in marks}
        row |= {f"r{t}": round(float(rewards[t]), 2) for t in marks}
        rows.append(row)
        print(f"{label}: value " + ", ".join(f"t{t} {values[t]:.2f}" for t in marks), flush=True)
        print(f"{' ' * len(label)}  reward " + ", ".join(f"t{t} {rewards[t]:.2f}" for t in marks), flush=True)
    columns = [("run", "run")] + [(f"v{t}", f"value at step {t}") for t in marks]
    reward_row = {"run": "the reward there (every run's walk is the same)"} | {f"v{t}": rows[0][f"r{t}"] for t in marks}
    payload = {"machine": info, "args": vars(args) | {"results_dir": str(args.results_dir)}, "rows": rows}
    write_results(
        "critic_extrapolation", payload, markdown_table(rows + [reward_row], columns), None, [], False, args.results_dir
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
