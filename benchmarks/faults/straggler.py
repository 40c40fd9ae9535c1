"""One slow worker among fast ones: throughput of each pipeline (sync, overlap, async) beside three fast workers alone.

The env is CartPole behind a step that sleeps (``distrl.envs.testing:sleepy_cartpole``: a simulator
bound by IO or another machine, not by this CPU), 8 sync envs per worker and 0.25 CPU each, so
four workers fit a 2-core machine beside the learner. One worker's env sleeps ``--slow-factor``
times longer. For each pipeline, in one run of this script:

- four fast workers;
- four workers, one of them slow;
- three fast workers alone (what the slow worker's three neighbours produce without it).

The figure is the run's steady env steps/s trained on: env steps over wall time between its third metrics
row and its last (start-up and warm-up left out), less the steps async left out as too old (``stale_steps``);
each run trains ``--seconds`` past its start-up (``--updates``: a number of updates instead, whatever the start-up took;
``--quick`` does that). Target: with async, four workers with one slow one
give at least the throughput of three fast workers alone. Writes JSON, Markdown and a PNG.

    python benchmarks/faults/straggler.py                                # 3 pipelines x 3 cases, about 30 s each
    python benchmarks/faults/straggler.py --quick                        # async only, short runs
    python benchmarks/faults/straggler.py --pipelines async --repeats 3  # medians of three runs a case, in turns
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import figure, finish, start_study, study_parser
from benchmarks.training import train

STARTUP_S = 25.0  # launch to first update on a 2-core machine is 15-20 s: stop.time_s counts from launch
WARMUP_ROWS = 2
ENVS_PER_WORKER, ROLLOUT_LENGTH = 8, 64
ASYNC_SAMPLES_PER_UPDATE = 2048  # async: an update per four fast workers' batches, whoever delivered them
CASES = {  # name -> (workers, slow worker index or None)
    "4 fast": (4, None),
    "4, one slow": (4, 3),
    "3 fast": (3, None),
}


def time_cap_s(args) -> float:
    """With ``--updates``, the ``stop.time_s`` that ends a run that hangs."""
    return STARTUP_S + 10 * args.seconds


def stop_settings(pipeline: str, workers: int, args) -> list[str]:
    """``--seconds`` past start-up (``stop.time_s`` counts from launch, so a start-up past ``STARTUP_S`` eats into it),
    or with ``--updates`` that many updates' env steps, capped by ``time_cap_s``."""
    if args.updates is None:
        return [f"stop.time_s={STARTUP_S + args.seconds}", "stop.env_steps=null"]
    per_update = ASYNC_SAMPLES_PER_UPDATE if pipeline == "async" else workers * ENVS_PER_WORKER * ROLLOUT_LENGTH
    return [f"stop.env_steps={args.updates * per_update}", f"stop.time_s={time_cap_s(args)}"]


def run(pipeline: str, workers: int, slow: int | None, args) -> dict:
    kwargs = f"{{step_s: {args.step_s}, slow_factor: {args.slow_factor}" + (
        f", slow_worker: {slow}}}" if slow is not None else "}"
    )
    overrides = [
        "env.id=distrl.envs.testing:sleepy_cartpole",
        f"env.kwargs={kwargs}",
        "env.vectorization=sync",
        f"env.num_envs_per_worker={ENVS_PER_WORKER}",
        f"rollout.rollout_length={ROLLOUT_LENGTH}",
        f"rollout.num_workers={workers}",
        "rollout.num_cpus_per_worker=0.25",
        f"rollout.pipeline={pipeline}",
        "ppo.minibatch_size=512",
        "ppo.epochs=2",
        "rollout.compile.backend=eager",
        *stop_settings(pipeline, workers, args),
        "stop.episode_return_mean=null",
        "logging.progress=lines",
    ]
    if pipeline == "async":
        overrides.append(f"rollout.samples_per_update={ASYNC_SAMPLES_PER_UPDATE}")
    overrides += args.overrides
    what = f"{pipeline} with {workers} workers"
    rows = train("configs/cartpole.yaml", overrides, what=what, timeout=time_cap_s(args) + 300).rows
    if len(rows) < WARMUP_ROWS + 2:
        raise RuntimeError(f"{pipeline} with {workers} workers: only {len(rows)} updates; raise --seconds")
    first, last = rows[WARMUP_ROWS], rows[-1]
    steady = rows[WARMUP_ROWS + 1 :]
    seconds = last["time_s"] - first["time_s"]
    # Async leaves out the steps of a batch that acted with weights older than rollout.max_policy_lag allows (the start
    # of the slow worker's long rollouts): counted as sampled, not as trained. The target reads the trained steps.
    left_out = last["stale_steps"] - first["stale_steps"]
    return {
        "sps": (last["env_steps"] - first["env_steps"] - left_out) / seconds,
        "sampled_sps": (last["env_steps"] - first["env_steps"]) / seconds,
        "updates": len(rows),
        "policy_lag_mean": sum(r["policy_lag_mean"] for r in steady) / len(steady),
        "stale_batches": last["stale_batches"],
        "stale_steps": last["stale_steps"],
    }


def median_run(results: list[dict]) -> dict:
    """The run whose trained env steps/s is the median (the lower middle one of an even count)."""
    ordered = sorted(results, key=lambda r: r["sps"])
    return ordered[(len(ordered) - 1) // 2]


def main() -> int:
    parser = study_parser(__doc__, quick="async only, 8 updates a run")
    parser.add_argument("--pipelines", nargs="+", default=["sync", "overlap", "async"])
    parser.add_argument("--seconds", type=float, default=30.0, help="each run's stop.time_s")
    parser.add_argument("--step-s", type=float, default=0.0005, help="a fast env copy's sleep per step")
    parser.add_argument("--slow-factor", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each case, in turns; the table: medians")
    parser.add_argument("--updates", type=int, help="stop each run after this many updates instead of --seconds")
    args, machine = start_study(parser)
    if args.quick:
        # by updates, not by time from launch: on a loaded box a long start-up left 15 s runs two updates
        args.pipelines, args.seconds, args.updates = ["async"], 15.0, 8
    rows = []
    runs = []
    for pipeline in args.pipelines:
        tries: dict[str, list[dict]] = {case: [] for case in CASES}
        for _repeat in range(args.repeats):  # in turns, so that a drift of the machine reaches every case alike
            for case, (workers, slow) in CASES.items():
                result = run(pipeline, workers, slow, args)
                tries[case].append(result)
                runs.append({"pipeline": pipeline, "case": case, **result})
                print(
                    f"{pipeline:8s} {case:12s} {result['sps']:8,.0f} env steps/s trained, {result['sampled_sps']:,.0f} "
                    f"sampled  (policy lag {result['policy_lag_mean']:.1f}, stale batches {result['stale_batches']}, "
                    f"steps {result['stale_steps']})",
                    flush=True,
                )
        figures = {case: median_run(results) for case, results in tries.items()}
        rows.append(
            {
                "pipeline": pipeline,
                **{f"sps {case}": f["sps"] for case, f in figures.items()},
                "one slow / 3 fast": figures["4, one slow"]["sps"] / figures["3 fast"]["sps"],
                "one slow / 4 fast": figures["4, one slow"]["sps"] / figures["4 fast"]["sps"],
                "sampled sps 4, one slow": figures["4, one slow"]["sampled_sps"],
                "policy_lag_mean (one slow)": figures["4, one slow"]["policy_lag_mean"],
                "stale (one slow)": f"{figures['4, one slow']['stale_batches']} / "
                f"{figures['4, one slow']['stale_steps']:,}",
            }
        )
    columns = (
        "pipeline | sps 4 fast: 4 fast | sps 4, one slow: 4, one 10x slower | "
        "sps 3 fast: 3 fast alone | "
        "one slow / 3 fast: one slow / 3 fast (target >= 1 with async) | "
        "one slow / 4 fast | sampled sps 4, one slow: sampled (one slow) | "
        "policy_lag_mean (one slow): policy lag (one slow) | "
        "stale (one slow): stale batches / steps left out (one slow)"
    )

    def chart(path: Path) -> None:
        with figure(path, (7, 4), dpi=120) as ax:
            width = 0.25
            for i, case in enumerate(CASES):
                ax.bar([x + i * width for x in range(len(rows))], [r[f"sps {case}"] for r in rows], width, label=case)
            ax.set_xticks([x + width for x in range(len(rows))], [r["pipeline"] for r in rows])
            ax.set_ylabel("env steps/s")
            ax.set_title(f"one worker {args.slow_factor:g}x slower, {machine['cores']} cores")
            ax.legend()
            ax.grid(alpha=0.3, axis="y")

    return finish("straggler", args, machine, rows, columns, chart=chart, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
