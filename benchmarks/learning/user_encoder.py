"""Your own encoder against distrl's own: CartPole to 475 with a user's module (``model.encoder``) on each worker
backend, beside the built-in MLP, in one run.

The user's module is ``distrl.models.examples:residual_mlp`` (two residual LayerNorm-GELU blocks of 64, as
``configs/cartpole_residual.yaml`` has it); the built-in is ``configs/cartpole.yaml``'s MLP [64, 64] tanh. Each case
is one ``distrl train`` per seed to the config's stop (mean return 475, or its step budget). Start-up is the time from
Ray started to the first update (Ray's own start differs by machine and is left out).

    python benchmarks/learning/user_encoder.py          # seeds 0-2, five cases
    python benchmarks/learning/user_encoder.py --cases "built-in mlp, inductor" "residual_mlp, inductor"
    python benchmarks/learning/user_encoder.py --quick  # seed 0, 20k env steps a run, the user's module on each backend
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, markdown_table, start_study, study_parser
from benchmarks.training import train

CASES = {  # name -> (config, worker backend)
    "built-in mlp, onnxrt": ("configs/cartpole.yaml", "onnxrt"),
    "residual_mlp, onnxrt": ("configs/cartpole_residual.yaml", "onnxrt"),
    "residual_mlp, inductor": ("configs/cartpole_residual.yaml", "inductor"),
    "built-in mlp, inductor": ("configs/cartpole.yaml", "inductor"),  # inductor's own start-up, like for like
    "residual_mlp, eager": ("configs/cartpole_residual.yaml", "eager"),
}


def one(case: str, seed: int, quick: bool, overrides: list[str]) -> dict:
    config, backend = CASES[case]
    items = [f"rollout.compile.backend={backend}", "rollout.compile.strict=true", f"seed={seed}"]
    if quick:
        items += ["stop.env_steps=20000", "stop.episode_return_mean=null"]
    summary = train(config, [*items, *overrides], what=f"{case} seed {seed}").summary
    marks = summary["startup"]
    return {
        "case": case,
        "seed": seed,
        "backend": ",".join(sorted(set(summary["worker_backends"]))),
        "solved": summary["stop_reason"] == "episode_return_mean",
        "time_to_475_s": summary.get("solved_at_s"),
        "env_steps": summary["env_steps"],
        "return": summary["episode_return_mean"],
        "startup_after_ray_s": round(marks["first_update"] - marks["ray_start"], 2),
        "wall_s": summary["wall_s"],
    }


def main() -> int:
    parser = study_parser(__doc__, quick="seed 0, 20k env steps, the user's module on each backend", seeds=[0, 1, 2])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES), help="the cases to run")
    args, machine = start_study(parser)
    seeds = args.seeds[:1] if args.quick else args.seeds
    if args.quick:
        args.cases = [case for case in args.cases if case.startswith("residual_mlp")]
    runs = []
    for seed in seeds:  # seed by seed, every case in turn: a machine's drift falls on all of them alike
        for case in args.cases:
            runs.append(one(case, seed, args.quick, args.overrides))
            print(runs[-1], flush=True)
    rows, failures = [], []
    for case in args.cases:
        mine = [r for r in runs if r["case"] == case]
        if any(r["backend"] != CASES[case][1] for r in mine):
            failures.append(f"{case}: the workers acted with {[r['backend'] for r in mine]}")
        solved = [r["time_to_475_s"] for r in mine if r["solved"]]
        rows.append(
            {
                "case": case,
                "solved": f"{len(solved)}/{len(mine)}",
                "median_s": round(statistics.median(solved), 1) if solved else None,
                "each_s": ", ".join(f"{t:.1f}" for t in solved),
                "startup_s": round(statistics.median(r["startup_after_ray_s"] for r in mine), 2),
                "env_steps": int(statistics.median(r["env_steps"] for r in mine)),
            }
        )
    columns = (
        "case | solved: reached 475 | median_s: median s to 475 | "
        "each_s: each seed (s) | startup_s: start-up after Ray (s) | "
        "env_steps: median env steps"
    )
    table = markdown_table(rows, columns)
    print(table)
    return finish("user_encoder", args, machine, rows, table=table, failures=failures, seeds=seeds, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
