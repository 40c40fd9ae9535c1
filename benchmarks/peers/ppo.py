"""End-to-end PPO with worker compile off vs on: env steps/s and time to a return threshold.

Runs ``distrl train`` as a user would (a fresh process and a local Ray per run), once with
the eager worker policy and once per compiled backend, same config and seed, and reads
each run's summary.json and metrics.jsonl. A run whose workers fell back from the
requested backend, recompiled, or skipped the eager check at weight syncs fails the script.

    python benchmarks/peers/ppo.py --backend onnxrt
    python benchmarks/peers/ppo.py --all --repeats 3
    python benchmarks/peers/ppo.py --breakout         # Breakout, backend x mode, beside RLlib's published table
    python benchmarks/peers/ppo.py --quick

``--breakout`` measures what RLlib's torch.compile guide measured (PPO on Breakout with compiled
sampling): configs/breakout.yaml with the learner made cheap so that sampling is the limit on a
CPU-only machine (one epoch, the whole batch as one minibatch, bf16 autocast: about 0.5 s per
update against about 0.8 s of sampling on a CPU with AVX512-BF16; in fp32 the update alone takes
1.3 s and hides the workers), each backend and mode for the same number of steps. On a machine
with CUDA the learner runs there instead with one worker per spare core; the shipped 4 epochs of
minibatch 256 keep even an H100 busy for longer than the workers sample (each minibatch is
launch-bound), so the backend table runs the GPU learner with CUDA graphs (reduce-overhead) on
minibatches of 1024, and a second table varies the GPU learner at the shipped settings (inductor
modes incl. CUDA graphs, AMP bf16/fp16).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import figure, finish, start_study, study_parser
from benchmarks.training import train
from distrl.compile import available_backends

ROOT = Path(__file__).resolve().parents[2]
# RLlib's torch.compile guide, "PPO with inference" on Atari Breakout (speed-up of the training loop vs no compile,
# in %): docs/source/rllib/rllib-torch2x.rst. Its cluster: 2 x 64 CPUs for sampling and 2 GPUs; inductor not run on CPU.
RLLIB_PUBLISHED = [
    ("onnxrt", "default", -72.34),
    ("onnxrt", "reduce-overhead", -72.72),
    ("ipex", "default", 11.71),
    ("ipex", "reduce-overhead", 11.31),
    ("ipex", "max-autotune", 12.88),
]
BREAKOUT_LEARNER_CHEAP = [
    "ppo.epochs=1",
    "ppo.minibatch_size=1024",
    "learner.amp=bf16",
    "stop.env_steps=20480",
    "checkpoint.every_iterations=0",
]


# With a GPU: the learner on CUDA, many workers; for the backend table a learner that keeps up with them.
BREAKOUT_GPU = [
    "learner.device=cuda",
    "learner.num_gpus_per_learner=1",
    "stop.env_steps=61440",
    "checkpoint.every_iterations=0",
]
BREAKOUT_GPU_SAMPLING_BOUND = ["learner.compile=reduce-overhead", "ppo.minibatch_size=1024"]
GPU_LEARNER_VARIANTS = [
    ("eager fp32", ["learner.compile=eager", "learner.amp=off"]),
    ("auto", []),
    ("inductor default", ["learner.compile=true"]),
    ("inductor reduce-overhead", ["learner.compile=reduce-overhead"]),
    ("eager bf16", ["learner.compile=eager", "learner.amp=bf16"]),
    ("inductor default bf16", ["learner.compile=true", "learner.amp=bf16"]),
    ("eager fp16", ["learner.compile=eager", "learner.amp=fp16"]),
    ("inductor default fp16", ["learner.compile=true", "learner.amp=fp16"]),
    ("reduce-overhead, minibatch 1024", BREAKOUT_GPU_SAMPLING_BOUND),
]


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def first_update(row: dict) -> str:
    """When the run's first update was done, in s from launch (the start-up's end)."""
    at = row["startup"].get("first_update")
    return "-" if at is None else f"{at:.1f} s"


def run_training(config: str, backend: str, mode: str, overrides: list[str], seed: int) -> dict:
    items = [f"rollout.compile.backend={backend}", f"rollout.compile.mode={mode}", f"seed={seed}", *overrides]
    run = train(config, items, what=f"{backend} {mode} seed {seed}")
    summary, rows = run.summary, run.rows
    policy_share = sum(r["policy_s"] for r in rows) / max(1e-9, sum(r["sample_s"] for r in rows))
    return {
        "backend": backend,
        "mode": mode,
        "seed": seed,
        "backend_used": summary["policy_backend"],
        "env_steps": summary["env_steps"],
        "wall_s": summary["wall_s"],
        "sps": summary["sps"],
        "train_sps": summary["train_sps"],
        # Iterations after the first two (the first batch; the learner's first, compiling update): the steady rate.
        "steady_sps": statistics.median(r["sps"] for r in rows[2:]) if len(rows) > 2 else summary["train_sps"],
        "startup": summary.get("startup", {}),
        "solved_at_s": summary["solved_at_s"],
        "stop_reason": summary["stop_reason"],
        "sample_s": statistics.median(r["sample_s"] for r in rows),
        "learn_s": statistics.median(r["learn_s"] for r in rows),
        "policy_share_of_sampling": policy_share,
        "recompiles": max(r["worker_recompiles"] for r in rows),
        "weight_sync_checks": rows[-1]["weight_sync_checks"],
        "iterations": len(rows),
    }


def main(argv=None) -> int:
    parser = study_parser(__doc__, quick="a 20k-step run each of eager and onnxrt")
    parser.add_argument("--backend", default="onnxrt", choices=["inductor", "onnxrt", "ipex", "auto"])
    parser.add_argument("--mode", default="default")
    parser.add_argument("--all", action="store_true", help="every available compiled backend")
    parser.add_argument("--config", default="configs/cartpole.yaml")
    parser.add_argument("--repeats", type=int, default=1, help="runs per backend (seeds 0..N-1)")
    parser.add_argument("--breakout", action="store_true", help="Breakout, every backend x mode, sampling-bound")
    parser.add_argument(
        "--learner-table-only",
        action="store_true",
        help="with --breakout on CUDA: only the GPU learner settings (onnxrt workers)",
    )
    parser.add_argument(
        "--no-learner-table", action="store_true", help="with --breakout on CUDA: only the backend table"
    )
    args, info = start_study(parser, argv)
    overrides = list(args.overrides)
    backends = [(args.backend, args.mode)]
    if args.all:
        backends = [
            (row["name"], "default") for row in available_backends() if row["available"] and row["name"] != "eager"
        ]
    if args.breakout:
        args.config = "configs/breakout.yaml"
        if cuda_available():
            import os

            overrides += BREAKOUT_GPU + [f"rollout.num_workers={max(1, (os.cpu_count() or 4) - 4)}"]
            learner_overrides = list(overrides)
            overrides += BREAKOUT_GPU_SAMPLING_BOUND
        else:
            overrides += BREAKOUT_LEARNER_CHEAP
        available = {row["name"] for row in available_backends() if row["available"]}
        modes = {
            "inductor": ["default", "max-autotune-no-cudagraphs"],
            "ipex": ["default"],
            "onnxrt": ["default"],
            "auto": ["default"],
        }
        if cuda_available():  # one inductor row: every worker compiles its own copy, minutes each at this scale
            modes["inductor"] = ["default"]
        backends = [(b, m) for b, ms in modes.items() if b in available for m in ms]
    if args.quick:
        backends, args.repeats = [("onnxrt", "default")], 1
        overrides += ["stop.env_steps=20000", "stop.episode_return_mean=null"]
    rows, failures, learner_rows = [], [], []
    runs = [] if args.learner_table_only else [("eager", "default"), *backends]
    for backend, mode in runs:
        for seed in range(args.repeats):
            row = run_training(args.config, backend, mode, overrides, seed)
            rows.append(row)
            print(
                f"{backend:8s} seed {seed}: {row['steady_sps']:9,.0f} env steps/s steady, {row['train_sps']:9,.0f} in "
                "the loop, "
                f"{row['sps']:9,.0f} from launch (first update at {first_update(row)}); "
                + (
                    f"solved at {row['solved_at_s']:.1f} s after {row['env_steps']:,} steps; "
                    if row["solved_at_s"] is not None
                    else f"not solved in {row['env_steps']:,} steps ({row['stop_reason']}); "
                )
                + f"sample {row['sample_s'] * 1e3:.1f} ms (policy {row['policy_share_of_sampling']:.0%}), learn "
                f"{row['learn_s'] * 1e3:.1f} ms",
                flush=True,
            )
            if row["backend_used"] != backend and backend != "auto":  # auto reports the backend it chose
                failures.append(f"{backend} seed {seed}: workers ran {row['backend_used']}")
            if row["recompiles"]:
                failures.append(f"{backend} seed {seed}: {row['recompiles']} recompiles after warm-up")
            # Every sync after the first batches (sampled with the initial weights) is checked.
            if backend != "eager" and row["weight_sync_checks"] < row["iterations"] - 2:
                failures.append(f"{backend} seed {seed}: weight syncs not all checked against eager")
    if args.breakout and cuda_available() and not args.no_learner_table:  # the GPU learner's settings, onnxrt workers
        for name, extra in GPU_LEARNER_VARIANTS:
            row = run_training(args.config, "onnxrt", "default", learner_overrides + extra, 0)
            row["learner"] = name
            learner_rows.append(row)
            print(
                f"GPU learner {name:26s}: {row['steady_sps']:9,.0f} env steps/s steady, learn "
                f"{row['learn_s'] * 1e3:.1f} ms, "
                f"sample {row['sample_s'] * 1e3:.1f} ms",
                flush=True,
            )
    if not rows:  # the GPU learner table alone
        for row in learner_rows:
            row["speedup_vs_first"] = row["steady_sps"] / learner_rows[0]["steady_sps"]
        columns = (
            "learner: GPU learner | steady_sps: env steps/s (steady) | train_sps: env steps/s (loop) | "
            "speedup_vs_first: x eager fp32 | learn_s: learn s | sample_s: sample s"
        )
        return finish(
            "ppo_breakout_gpu_learner",
            args,
            info,
            learner_rows,
            columns,
            failures=failures,
            overrides=learner_overrides,
        )
    eager_sps = statistics.median(r["steady_sps"] for r in rows if r["backend"] == "eager")
    for row in rows:
        row["speedup_vs_eager"] = row["steady_sps"] / eager_sps
    if args.breakout:
        for backend, mode, pct in RLLIB_PUBLISHED:
            print(f"RLlib (published, its cluster) {backend:8s} {mode:16s}: {pct:+.1f} % vs no compile")
        for row in rows:
            row["speedup_pct"] = (row["speedup_vs_eager"] - 1) * 100
            print(
                f"distrl (this machine)          {row['backend']:8s} {row['mode']:16s}: {row['speedup_pct']:+.1f} % vs "
                "eager workers"
            )
    columns = (
        "backend: worker backend | mode | seed | steady_sps: env steps/s (steady) | "
        "train_sps: env steps/s (loop) | sps: env steps/s (from launch) | "
        "speedup_vs_eager: x eager | solved_at_s: solved at s | env_steps: env steps | "
        "sample_s: sample s | learn_s: learn s | policy_share_of_sampling: policy share"
    )

    def chart(path: Path) -> None:
        with figure(path, (6, 3.5)) as ax:
            names = [
                f"{r['backend']} {r['mode'].replace('max-autotune-no-cudagraphs', 'max-autotune')} s{r['seed']}"
                for r in rows
            ]
            ax.bar(names, [r["steady_sps"] for r in rows])
            ax.set_ylabel("env steps/s (steady iterations)")
            ax.set_title(f"distrl PPO, {args.config}")

    name = (
        ("ppo_breakout_gpu" if cuda_available() else "ppo_breakout")
        if args.breakout
        else "ppo"
        if args.all
        else f"ppo_{args.backend}"
    )
    published = [{"backend": b, "mode": m, "speedup_pct": pct} for b, m, pct in RLLIB_PUBLISHED]
    return finish(
        name,
        args,
        info,
        rows,
        columns,
        chart=chart,
        failures=failures,
        overrides=overrides,
        gpu_learner_rows=learner_rows,
        **({"rllib_published": published} if args.breakout else {}),
    )


if __name__ == "__main__":
    sys.exit(main())
