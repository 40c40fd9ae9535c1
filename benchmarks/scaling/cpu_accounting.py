"""Where the CPU goes in a training run: each Ray actor class's CPU seconds per update, sync beside async.

Runs a task of ``benchmarks/tasks.py`` (as the async learning study runs it: four workers at 0.25 CPU) in each pipeline,
lets it pass its first ``--skip`` updates (start-up, compile checks), then reads the CPU time of every process the run
started (``ray::Learner``, ``ray::RolloutWorker``, the coordinator, the driver, Ray's own) and the machine's busy time
(/proc/stat) over ``--window-s`` seconds, and stops the run. It answers what the learning benchmark's wall times cannot:
which process is the critical path, and how many of the machine's cores the pipeline keeps busy. Writes JSON and
Markdown.

    python benchmarks/scaling/cpu_accounting.py          # Pendulum and CartPole, sync and async
    python benchmarks/scaling/cpu_accounting.py --quick  # Pendulum, a 3 s window
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, metrics_rows, start_study, study_parser
from benchmarks.tasks import PROXIMAL, TASKS, WORKERS
from benchmarks.training import command


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat's first line."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks) - idle) / hz, sum(ticks) / hz


ROLES = {"RolloutWorkerActor": "RolloutWorker"}  # the class Ray runs for a worker (distrl/rollout/worker_actor.py)


def role(proc: psutil.Process, driver_pid: int) -> str:
    """The process's part in the run: its Ray actor class (``ray::Learner.update_refs`` -> Learner), the driver, or
    Ray."""
    if proc.pid == driver_pid:
        return "driver"
    cmdline = proc.cmdline()
    title = cmdline[0] if cmdline else proc.name()
    if title.startswith("ray::"):
        name = title[5:].split()[0].split(".")[0]
        name = ROLES.get(name, name)
        return name if name not in ("IDLE", "DashboardAgent", "RuntimeEnvAgent") else "ray (other)"
    return "ray (other)"


def cpu_by_role(driver: psutil.Process) -> dict[str, float]:
    """CPU seconds (user + system) of the driver and every process under it, summed per role."""
    totals: dict[str, float] = defaultdict(float)
    for proc in [driver, *driver.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            totals[role(proc, driver.pid)] += times.user + times.system
        except psutil.Error:
            continue  # gone between the listing and the read
    return totals


def measure(task: str, pipeline: str, seed: int, skip: int, window_s: float, extra: list[str]) -> dict:
    config, overrides, _target, _budget = TASKS[task]
    proximal = PROXIMAL[pipeline]
    items = [
        *overrides,
        *WORKERS,
        f"rollout.pipeline={pipeline}",
        f"seed={seed}",
        "stop.episode_return_mean=null",
        "stop.env_steps=100000000",
        f"ppo.proximal={proximal}",
        *extra,
    ]
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd, env = command(config, items, run_dir)
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        driver = psutil.Process(proc.pid)
        try:
            deadline = time.monotonic() + 600
            while len(metrics_rows(run_dir)) < skip:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{task} {pipeline}: the run ended or stalled before {skip} updates:\n"
                        f"{proc.stderr.read()[-3000:] if proc.poll() is not None else ''}"
                    )
                time.sleep(0.05)
            rows0, cpu0, busy0, wall0 = metrics_rows(run_dir), cpu_by_role(driver), machine_busy(), time.monotonic()
            time.sleep(window_s)
            rows1, cpu1, busy1, wall1 = metrics_rows(run_dir), cpu_by_role(driver), machine_busy(), time.monotonic()
        finally:
            proc.send_signal(signal.SIGINT)  # a clean stop: the run's own Ray goes with it
            try:
                proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    updates = rows1[-1]["iteration"] - rows0[-1]["iteration"]
    if updates < 2:
        raise RuntimeError(f"{task} {pipeline}: {updates} updates in {window_s:g} s; give it a longer --window-s")
    seconds = wall1 - wall0
    per_update = {name: (cpu1[name] - cpu0.get(name, 0.0)) / updates for name in cpu1}
    return {
        "task": task,
        "pipeline": pipeline,
        "seed": seed,
        "window_s": round(seconds, 2),
        "updates": updates,
        "updates_per_s": updates / seconds,
        "env_steps_per_s": (rows1[-1]["env_steps"] - rows0[-1]["env_steps"]) / seconds,
        "cpu_s_per_update": per_update,
        "cores_busy": {name: v * updates / seconds for name, v in per_update.items()},
        "machine_busy_cores": (busy1[0] - busy0[0]) / seconds,
        "machine_cores": (busy1[1] - busy0[1]) / seconds,
        "learn_s_reported": sum(r["learn_s"] for r in rows1[len(rows0) :] if "learn_s" in r)
        / max(1, len(rows1) - len(rows0)),
    }


def main() -> int:
    parser = study_parser(__doc__, quick="Pendulum, 3 updates skipped, a 3 s window", seeds=[0])
    parser.add_argument("--tasks", nargs="+", default=["Pendulum-v1", "CartPole-v1"], choices=list(TASKS))
    parser.add_argument("--pipelines", nargs="+", default=["sync", "async"], choices=["sync", "overlap", "async"])
    parser.add_argument(
        "--skip", type=int, default=10, help="updates before the window (start-up, first compile checks)"
    )
    parser.add_argument("--window-s", type=float, default=8.0)
    args, machine = start_study(parser)
    if args.quick:
        args.tasks, args.skip, args.window_s = ["Pendulum-v1"], 3, 3.0
    runs, rows = [], []
    for task in args.tasks:
        for seed in args.seeds:
            for pipeline in args.pipelines:
                r = measure(task, pipeline, seed, args.skip, args.window_s, args.overrides)
                runs.append(r)
                cpu = r["cpu_s_per_update"]
                workers, learner = cpu.get("RolloutWorker", 0.0), cpu.get("Learner", 0.0)
                rest = sum(cpu.values()) - workers - learner
                print(
                    f"{task:12s} {pipeline:7s} seed {seed}: {r['updates_per_s']:.2f} updates/s, "
                    f"{r['env_steps_per_s']:,.0f} env steps/s; CPU s per update: learner {learner:.3f}, "
                    f"workers {workers:.3f}, the rest {rest:.3f}; machine {r['machine_busy_cores']:.2f} of "
                    f"{r['machine_cores']:.1f} cores busy",
                    flush=True,
                )
                rows.append(
                    {
                        "task": task,
                        "pipeline": pipeline,
                        "seed": seed,
                        "updates/s": r["updates_per_s"],
                        "env steps/s": r["env_steps_per_s"],
                        "s per update": 1 / r["updates_per_s"],
                        "learner CPU s": learner,
                        "learner cores": r["cores_busy"].get("Learner", 0.0),
                        "workers CPU s": workers,
                        "rest CPU s": rest,
                        "machine busy cores": r["machine_busy_cores"],
                        "machine cores": r["machine_cores"],
                    }
                )
    columns = (
        "task | pipeline | seed | updates/s: updates / s | env steps/s: env steps / s | "
        "s per update | learner CPU s: learner: CPU s per update | "
        "learner cores: learner: cores busy | workers CPU s: workers: CPU s per update | "
        "rest CPU s: driver, coordinator, Ray: CPU s per update | "
        "machine busy cores: machine: cores busy | machine cores: machine: cores"
    )
    return finish("cpu_accounting", args, machine, rows, columns, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
