"""The attention policy beside the LSTM on the velocity-hidden CartPole, and its worker forward per backend.

In one run: ``configs/cartpole_attention.yaml`` and ``configs/cartpole_lstm.yaml`` (both stopping at mean
return 475), seeds interleaved, time from launch to mean return 475 and the env steps it took; then the
attention model's forward at batch 64 in each worker backend, checked against eager, beside eager.
Targets: attention within 1.5x of the LSTM's time (median of 3 seeds);
onnxrt >= 2x eager at batch 64.

    python benchmarks/learning/attention.py          # seeds 0 1 2
    python benchmarks/learning/attention.py --quick  # the forward table only
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, markdown_table, spread, start_study, study_parser, time_calls
from benchmarks.training import train

CONFIGS = {"attention": "configs/cartpole_attention.yaml", "lstm": "configs/cartpole_lstm.yaml"}


def time_to_solve(config: str, seed: int, overrides: list[str]) -> dict:
    # a user's run: checkpoints as the config ships them (their writing is part of the time to 475)
    items = [f"seed={seed}", "stop.episode_return_mean=475", "stop.env_steps=1500000", *overrides]
    summary = train(config, items, what=f"{config} seed {seed}", checkpoints=True).summary
    return {
        "solved_at_s": summary["solved_at_s"],
        "env_steps": summary["env_steps"],
        "wall_s": summary["wall_s"],
        "return": summary["episode_return_mean"],
    }


def forward_rows(batch: int, repeats: int) -> list[dict]:
    import numpy as np
    import torch

    from distrl.compile import available_backends, compile_policy
    from distrl.config import load_config
    from distrl.envs import probe_spaces
    from distrl.models import build_model

    torch.set_num_threads(1)
    config = load_config(ROOT / CONFIGS["attention"], [])
    obs_space, action_space = probe_spaces(config.env)
    torch.manual_seed(0)
    model = build_model(obs_space, action_space, config.model).eval()
    x = torch.from_numpy(
        np.random.default_rng(0).uniform(-1, 1, (batch, config.model.window, *obs_space.shape)).astype(np.float32)
    )
    arrays = x.numpy()
    calls = {}
    for row in available_backends():
        if not row["available"] or row["chooses"]:
            continue
        policy = compile_policy(model, row["name"], example_inputs=(x,), strict=True)
        calls[row["name"]] = lambda policy=policy: policy._checked(arrays)  # numpy in, numpy out: what a worker calls
    # Repeats interleaved across backends: this machine's speed drifts within a run, and timing one backend after
    # another would hand the drift to whichever came last.
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            times[name] += [t * 1e6 for t in time_calls(call, 0.25, 1)]
    rows = [
        {"backend": name, "batch": batch, "us_per_call": spread(samples)["median"]} for name, samples in times.items()
    ]
    for row in rows:
        row["speedup_vs_eager"] = spread(times["eager"])["median"] / row["us_per_call"]
    return rows


def main() -> int:
    parser = study_parser(__doc__, quick="the forward table only", seeds=[0, 1, 2])
    args, machine = start_study(parser)
    forward = forward_rows(64, 3 if args.quick else 7)
    for row in forward:
        print(
            f"forward batch 64 {row['backend']:9s} {row['us_per_call']:9.1f} us  x{row['speedup_vs_eager']:.2f} eager",
            flush=True,
        )
    runs = []
    for seed in [] if args.quick else args.seeds:
        for model, config in CONFIGS.items():
            run = {"model": model, "seed": seed, **time_to_solve(config, seed, args.overrides)}
            runs.append(run)
            print(
                f"{model:9s} seed {seed}: mean return 475 at {run['solved_at_s']} s, {run['env_steps']:,} env steps",
                flush=True,
            )
    summary = {}
    for model in CONFIGS:
        times = [r["solved_at_s"] for r in runs if r["model"] == model and r["solved_at_s"] is not None]
        summary[model] = statistics.median(times) if len(times) == len(args.seeds) and times else None
    if summary.get("attention") and summary.get("lstm"):
        summary["attention_over_lstm"] = summary["attention"] / summary["lstm"]
        print(
            f"median time to 475: attention {summary['attention']:.1f} s, LSTM {summary['lstm']:.1f} s "
            f"({summary['attention_over_lstm']:.2f}x)"
        )
    table = markdown_table(forward, "backend | batch | us_per_call: us per call | speedup_vs_eager: x eager")
    if runs:
        table += "\n\n" + markdown_table(
            runs, "model | seed | solved_at_s: s to 475 | env_steps: env steps | wall_s: wall s"
        )
    return finish("attention", args, machine, forward + runs, table=table, forward=forward, runs=runs, summary=summary)


if __name__ == "__main__":
    sys.exit(main())
