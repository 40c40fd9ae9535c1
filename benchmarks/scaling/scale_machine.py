"""Scaling on one machine: distrl's throughput against the env-alone ceiling as rollout workers are added.

For each worker count, in the same run:

- the env-alone aggregate: that many processes, each stepping the config's vector env (its
  ``num_envs_per_worker`` copies, one thread, random actions) as fast as it can, summed;
- for an Atari game on ale-py's native vector env, the env's own best way too: one process with all the
  workers' env copies in ale-py's async mode (``batch_size`` half of them: it returns the first half that
  finish, while the others step) on a thread pool of the workers' CPUs;
- distrl itself (``distrl train CONFIG`` with that many workers): steady env steps/s (median of
  the iterations after the second), learner seconds per update, sample seconds per iteration,
  and the threads each rollout worker process runs (read while it trains).

Each worker gets ``(cores - learner CPUs) / count`` CPUs, at most one, so every count fits the
machine. Writes JSON, Markdown and a PNG (throughput and the env-alone ceiling against workers).

    python benchmarks/scaling/scale_machine.py --config configs/breakout.yaml --workers 1 4 8 14 \\
        --set learner.num_gpus_per_learner=1                  # a 16-core GPU machine
    python benchmarks/scaling/scale_machine.py --quick  # CartPole, 1 and 2 workers (2 cores)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import figure, finish, metrics_rows, study_machine, study_name, study_parser
from benchmarks.env_alone import ale_async, env_alone_aggregate
from benchmarks.training import command

WARMUP_ITERATIONS = 2


def worker_threads(root_pid: int) -> list[int]:
    """Threads of each rollout worker process under ``root_pid`` (Ray's actors are its children)."""
    import psutil

    counts = []
    for proc in psutil.Process(root_pid).children(recursive=True):
        try:
            if "ray::RolloutWorker" in " ".join(proc.cmdline()):
                counts.append(proc.num_threads())
        except psutil.Error:
            pass
    return counts


def run_distrl(config_path: str, overrides: list[str], workers: int, cpus_per_worker: float, iterations: int) -> dict:
    """``distrl train`` with ``workers`` workers for ``iterations`` iterations; its steady figures."""
    from distrl.config import load_config

    base = load_config(config_path, overrides)
    steps = workers * base.env.num_envs_per_worker * base.rollout.rollout_length * iterations
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        items = [f"rollout.num_workers={workers}", f"rollout.num_cpus_per_worker={cpus_per_worker:g}"]
        items += [f"stop.env_steps={steps}", "stop.episode_return_mean=null", *overrides]
        args, env = command(config_path, items, run_dir)
        proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        threads: list[int] = []
        while proc.poll() is None:
            time.sleep(0.25)
            if (run_dir / "metrics.jsonl").exists() and not threads:
                threads = worker_threads(proc.pid)
        _, stderr = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"distrl train with {workers} workers failed:\n{stderr[-3000:]}")
        rows = metrics_rows(run_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
        setup = (run_dir / "setup.txt").read_text().splitlines()  # the start-up summary in full
    steady = rows[WARMUP_ITERATIONS:] or rows[-1:]
    return {
        "sps": statistics.median(r["sps"] for r in steady),
        "learn_s": statistics.median(r["learn_s"] for r in steady),
        "sample_s": statistics.median(r["sample_s"] for r in steady),
        "iterations": len(rows),
        "worker_threads": threads,
        "policy_backend": rows[-1]["policy_backend"],
        "startup": summary["startup"],
        "learner_line": next((line.strip() for line in setup if line.strip().startswith("learner ")), ""),
        "step_line": next((line.strip() for line in setup if line.strip().startswith("minibatch step")), ""),
    }


def main() -> int:
    parser = study_parser(__doc__, quick="1 and 2 workers, 5 iterations, 3 s env-alone")
    parser.add_argument("--config", default="configs/cartpole.yaml")
    parser.add_argument("--workers", nargs="+", type=int, default=None, help="worker counts (default: 1 2)")
    parser.add_argument("--iterations", type=int, default=10, help="iterations per distrl run")
    parser.add_argument("--env-seconds", type=float, default=10.0, help="seconds of each env-alone measurement")
    args = parser.parse_args()
    if args.quick:
        args.workers, args.iterations, args.env_seconds = args.workers or [1, 2], 5, 3.0
    counts = args.workers or [1, 2]
    from distrl.config import load_config

    base = load_config(args.config, args.overrides)
    cores = os.cpu_count() or 1
    spare = max(cores - base.learner.num_cpus_per_learner, 0.5)
    machine = study_machine()
    rows = []
    for count in counts:
        cpus = min(1.0, spare / count)
        alone = env_alone_aggregate(args.config, args.overrides, count, args.env_seconds)
        threads = max(1, round(cpus * count))
        ale = ale_async(args.config, args.overrides, count * base.env.num_envs_per_worker, threads, args.env_seconds)
        run = run_distrl(args.config, args.overrides, count, round(cpus, 3), args.iterations)
        # A worker's own sampling rate: its batch over its sample_s, against one process of the env alone.
        per_worker = base.env.num_envs_per_worker * base.rollout.rollout_length * base.env.action_repeat
        sampling = per_worker / max(run["sample_s"], 1e-9)
        row = {
            "workers": count,
            "cpus_per_worker": round(cpus, 3),
            "env_alone_sps": alone,
            **run,
            "share_of_env_alone": run["sps"] / alone,
            "learn_over_sample": run["learn_s"] / max(run["sample_s"], 1e-9),
            "worker_sampling_sps": sampling,
            "sampling_share": sampling / (alone / count),
            "ale_async_sps": ale,
            "ale_async_threads": threads if ale is not None else None,
        }
        rows.append(row)
        print(
            f"{count:3d} workers x {cpus:.2f} CPU: distrl {run['sps']:10,.0f} env steps/s "
            f"({row['share_of_env_alone']:.0%} of env alone {alone:,.0f}); learner {run['learn_s']:.3f} s/update, "
            f"sample {run['sample_s']:.3f} s/iteration ({sampling:,.0f} env steps/s a worker while it samples, "
            f"{row['sampling_share']:.2f} of one env-alone process); worker threads {run['worker_threads']}",
            flush=True,
        )
        if ale is not None:
            print(
                f"    ale-py's own async mode, {count * base.env.num_envs_per_worker} env copies on {threads} "
                f"thread{'s' if threads > 1 else ''}: {ale:,.0f} env steps/s"
            )
    print(rows[0]["learner_line"])
    print(rows[0]["step_line"])
    columns = (
        "workers | cpus_per_worker: CPU/worker | sps: distrl env steps/s | "
        "env_alone_sps: env alone, same processes | "
        + ("ale_async_sps: ale-py async, one process | " if any(r["ale_async_sps"] is not None for r in rows) else "")
        + "share_of_env_alone: share | "
        "learn_s: learner s/update | sample_s: sample s/iteration | "
        "learn_over_sample: learn / sample | "
        "worker_sampling_sps: a worker's env steps/s while sampling | "
        "sampling_share: of one env-alone process"
    )

    def chart(path: Path) -> None:
        with figure(path, (6, 4), dpi=120) as ax:
            ax.plot(counts, [r["env_alone_sps"] for r in rows], "k--o", label="env alone (ceiling)")
            if rows[0]["ale_async_sps"] is not None:
                ax.plot(counts, [r["ale_async_sps"] for r in rows], "g:o", label="ale-py async, one process")
            ax.plot(counts, [r["sps"] for r in rows], "b-o", label="distrl")
            ax.set_xlabel("rollout workers")
            ax.set_ylabel("env steps/s")
            ax.set_title(
                f"{Path(args.config).name} on {machine['cores']} cores"
                + (f", {machine['gpu']}" if machine["gpu"] else "")
            )
            ax.legend()
            ax.grid(alpha=0.3)

    name = study_name("scale_machine_" + Path(args.config).stem, args.overrides)
    return finish(name, args, machine, rows, columns, chart=chart)


if __name__ == "__main__":
    sys.exit(main())
