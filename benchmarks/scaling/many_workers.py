"""Many workers on one machine: the asynchronous pipeline's throughput at 48 workers against what they produce alone.

The env is CartPole behind a step that sleeps (``distrl.envs.testing:sleepy_cartpole``: a simulator bound by IO or
another machine, not by this CPU), 8 sync envs per worker at a fraction of a CPU each (``--cpus-per-worker``), so
48 workers fit a 2-core machine beside the learner. Two runs of ``distrl train`` (pipeline async, eager workers):

- one worker alone: its steady env steps/s, times the worker count, is the sum of what the workers produce alone;
- ``--workers`` workers together: the run's steady env steps/s, once every worker answers.

Steady: env steps over wall time between the first metrics row after warm-up (every worker answering, two more
updates) and the last. An update takes one batch per worker (``rollout.samples_per_update``'s default, a round's
worth), so a batch is about one policy version old when it lands. Target: at 48 workers, >= 90 % of
the workers' summed solo throughput. The driver's CPU per update is recorded beside it (it must not grow with
the worker count). Writes JSON, Markdown and a PNG.

    python benchmarks/scaling/many_workers.py          # 1 and 48 workers
    python benchmarks/scaling/many_workers.py --quick  # 1 and 3 workers, 12 batches each, a faster env
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import figure, finish, start_study, study_parser
from benchmarks.training import train

WARMUP_ROWS = 2  # updates after every worker answers, left out of the steady figure


def run(workers: int, args) -> dict:
    per_batch = 8 * args.rollout_length
    overrides = [
        "env.id=distrl.envs.testing:sleepy_cartpole",
        f"env.kwargs={{step_s: {args.step_s}}}",
        "env.vectorization=sync",
        "env.num_envs_per_worker=8",
        f"rollout.rollout_length={args.rollout_length}",
        f"rollout.num_workers={workers}",
        f"rollout.num_cpus_per_worker={args.cpus_per_worker}",
        "rollout.pipeline=async",
        f"rollout.samples_per_update={per_batch * min(workers, args.batches_per_update or workers)}",
        "ppo.minibatch_size=512",
        "ppo.epochs=2",
        "rollout.compile.backend=eager",
        f"stop.time_s={(args.startup_s if workers > 1 else min(40.0, args.startup_s)) + args.seconds}",
        # --updates: a budget of that many rounds of every worker's batch (the time limit stays as a bound)
        f"stop.env_steps={per_batch * workers * args.updates if args.updates else 'null'}",
        "stop.episode_return_mean=null",
        "logging.progress=lines",
        *args.overrides,
    ]
    run = train(
        "configs/cartpole.yaml", overrides, what=f"{workers} workers", timeout=args.startup_s + args.seconds + 600
    )
    rows, summary = run.rows, run.summary
    full = [i for i, r in enumerate(rows) if r.get("workers_active") == workers]
    if not full or len(rows) - full[0] < WARMUP_ROWS + 3:
        raise RuntimeError(
            f"{workers} workers: {len(rows)} updates, {len(full)} with every worker; raise --seconds or --startup-s"
        )
    steady = rows[full[0] + WARMUP_ROWS :]
    first, last = steady[0], steady[-1]
    return {
        "workers": workers,
        "sps": (last["env_steps"] - first["env_steps"]) / (last["time_s"] - first["time_s"]),
        "updates": len(steady),
        "seconds": last["time_s"] - first["time_s"],
        "all_answering_at_s": rows[full[0]]["time_s"],
        "driver_cpu_s_per_update": sum(r["driver_cpu_s"] for r in steady[1:]) / max(1, len(steady) - 1),
        "policy_lag_mean": sum(r["policy_lag_mean"] for r in steady) / len(steady),
        "stale_batches": summary.get("stale_batches", 0),
    }


def main() -> int:
    parser = study_parser(__doc__, quick="3 workers, 12 batches a worker, a 2 ms step")
    parser.add_argument("--workers", type=int, default=48)
    parser.add_argument("--cpus-per-worker", type=float, default=0.02)
    parser.add_argument("--step-s", type=float, default=0.02, help="each env copy's sleep per step (IO-bound)")
    parser.add_argument("--rollout-length", type=int, default=64)
    parser.add_argument("--batches-per-update", type=int, default=0, help="samples_per_update (0: one a worker)")
    parser.add_argument("--seconds", type=float, default=120.0, help="training time past --startup-s")
    parser.add_argument("--startup-s", type=float, default=150.0, help="launch to every worker answering, allowed")
    parser.add_argument(
        "--updates", type=int, default=0, help="stop each run after this many batches a worker (0: at --seconds)"
    )
    args, machine = start_study(parser)
    if args.quick:
        args.workers, args.seconds, args.startup_s, args.step_s, args.updates = 3, 8.0, 30.0, 0.002, 12
    solo = run(1, args)
    print(f"1 worker alone: {solo['sps']:,.0f} env steps/s", flush=True)
    many = run(args.workers, args)
    summed = solo["sps"] * args.workers
    ratio = many["sps"] / summed
    print(
        f"{args.workers} workers: {many['sps']:,.0f} env steps/s = {ratio:.2f}x the {summed:,.0f} they produce alone "
        f"(every worker answering {many['all_answering_at_s']:.0f} s after launch)"
    )
    rows = [{**solo, "share": solo["sps"] / solo["sps"]}, {**many, "share": ratio}]
    columns = (
        "workers | sps: env steps/s | "
        "share: of the summed solo throughput (target >= 0.9) | "
        "driver_cpu_s_per_update: driver CPU s / update | policy_lag_mean: policy lag | "
        "stale_batches: stale batches | all_answering_at_s: every worker answering at (s)"
    )

    def chart(path: Path) -> None:
        with figure(path, (6, 4), dpi=120) as ax:
            ax.bar(["summed solo", f"{args.workers} together"], [summed, many["sps"]], color=["grey", "tab:blue"])
            ax.set_ylabel("env steps/s")
            ax.set_title(f"{args.workers} workers x a sleeping env, {machine['cores']} cores: {ratio:.2f}x")
            ax.grid(alpha=0.3, axis="y")

    return finish("many_workers", args, machine, rows, columns, chart=chart, summed_solo_sps=summed, ratio=ratio)


if __name__ == "__main__":
    sys.exit(main())
