"""MinAtar Breakout: the shipped convolutional policy beside a flattened MLP and beside the same network written as a
user's module (``model.encoder``), at the same env step budget.

``configs/minatar_breakout.yaml`` as shipped (one 3 x 3 convolution of 16 channels, then 128 units: the MinAtar
paper's network) against the same config with ``model.type=mlp`` over the flattened 10 x 10 x 4 frame (two layers
of 128, the same activation). Each run is a fresh ``distrl train`` to the step budget; the seeds go in turns, the
order reversed on odd seeds. Reported: the mean return of the last 100 episodes at the end (the run's own figure)
and over the last 10 % of its reports, the wall time, and the curve. Needs ``pip install -e ".[minatar]"``.

    python benchmarks/learning/minatar.py  # 2M env steps, seeds 0-2, both models
    python benchmarks/learning/minatar.py --seeds 3 4 --steps 1000000
    python benchmarks/learning/minatar.py --quick  # 16k steps, seed 0: both CNNs run (the learner eager, fp32)
    python benchmarks/learning/minatar.py --models "cnn (shipped)" "cnn, user module" --name minatar_user_cnn
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, start_study, study_parser
from benchmarks.training import train

CONFIG = "configs/minatar_breakout.yaml"
MODELS = {  # name -> overrides of the shipped config
    "cnn (shipped)": [],
    "mlp, flattened": ["model.type=mlp", "model.conv_layers=null", "model.hidden=[128,128]"],
    # the shipped network written as a user's module (model.encoder, docs/models.md)
    "cnn, user module": [
        "model.encoder=distrl.models.examples:minatar_cnn",
        "model.type=mlp",
        "model.conv_layers=null",
    ],
}


def run(model: str, seed: int, steps: int, overrides: list[str]) -> dict:
    items = [*MODELS[model], f"seed={seed}", f"stop.env_steps={steps}", *overrides]
    rows = train(CONFIG, items, what=f"{model} seed {seed}", checkpoints=True).rows
    reported = [r for r in rows if r.get("episode_return_mean") is not None]
    tail = reported[-max(1, len(reported) // 10) :]
    return {
        "model": model,
        "seed": seed,
        "env_steps": rows[-1]["env_steps"],
        "wall_s": rows[-1]["time_s"],
        "return_end": reported[-1]["episode_return_mean"],
        "return_last_10pct": statistics.mean(r["episode_return_mean"] for r in tail),
        "curve": [[r["env_steps"], r["episode_return_mean"]] for r in reported],
    }


def main() -> int:
    parser = study_parser(__doc__, quick="16k steps, seed 0, the two CNNs, the learner eager fp32", seeds=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=2_000_000, help="env steps a run")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS), help="the models to run")
    parser.add_argument("--name", default="minatar_breakout", help="the results' file name")
    args, machine = start_study(parser)
    if args.quick:  # the two ways to one network, each a short run; the learner pinned (no trial of its kernels)
        args.seeds, args.steps = [0], 16_384
        args.models = [m for m in args.models if m != "mlp, flattened"] or args.models
        args.overrides = ["learner.compile.backend=eager", "learner.amp=off", *args.overrides]
    runs = []
    for seed in args.seeds:
        for model in args.models if seed % 2 == 0 else args.models[::-1]:
            r = run(model, seed, args.steps, args.overrides)
            runs.append(r)
            print(
                f"{model:16s} seed {seed}: return {r['return_end']:.2f} at {r['env_steps']:,} steps "
                f"(last 10 %: {r['return_last_10pct']:.2f}), {r['wall_s']:.0f} s",
                flush=True,
            )
    rows = []
    for model in args.models:
        mine = [r for r in runs if r["model"] == model]
        rows.append(
            {
                "model": model,
                "seeds": len(mine),
                "return_end": statistics.median(r["return_end"] for r in mine),
                "each": ", ".join(f"{r['return_end']:.2f}" for r in sorted(mine, key=lambda r: r["seed"])),
                "return_last_10pct": statistics.median(r["return_last_10pct"] for r in mine),
                "wall_s": statistics.median(r["wall_s"] for r in mine),
            }
        )
    columns = (
        "model | seeds | return_end: return at the end (median) | each: each seed | "
        "return_last_10pct: last 10 % of reports (median) | wall_s: wall s (median)"
    )
    return finish(args.name, args, machine, rows, columns, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
