"""One way for a study to run a training: ``distrl train`` in a process of its own, to its end, returning what the
run wrote (its summary, its metrics rows, its setup.txt) and the command's wall time from launch to exit.

A run gets a private Ray of its own (``RAY_ADDRESS=local``) unless it joins a cluster on 127.0.0.1
(``clusters/local_dev_cluster.py``), and it writes no TensorBoard files. It writes no checkpoints unless the study
asks for them (``checkpoints=True``), and trains in a temporary directory that goes with it unless the study keeps
one (``keep=``). Settings are ``--set`` items: the study's come after these defaults, so a study can change any.

    from benchmarks.training import train
    run = train("configs/cartpole.yaml", ["seed=1", "stop.env_steps=50000"], what="CartPole seed 1")
    run.summary["episode_return_mean"], run.rows[-1]["sps"], run.wall_s
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import ROOT, metrics_rows

NO_CHECKPOINTS = "checkpoint.every_iterations=0"
DEFAULTS = ("logging.tensorboard=false",)
# A metrics row's timings: the keys two runs of the same learning may differ in
TIMING_KEYS = {
    "time_s",
    "sps",
    "sps_avg",
    "sample_s",
    "policy_s",
    "env_s",
    "learn_s",
    "driver_cpu_s",
    "eta_s",
    "eval_s",
}


@dataclass(frozen=True)
class Training:
    summary: dict
    rows: list[dict]
    setup: str  # setup.txt: the start-up summary with every auto choice
    wall_s: float  # the command's launch to its exit, Ray's start and shutdown included


def command(
    config: str,
    items: list[str] | tuple[str, ...] = (),
    run_dir: Path | str = "run",
    *,
    checkpoints: bool = False,
    cluster=None,
    cores: str | None = None,
) -> tuple[list[str], dict]:
    """The ``distrl train`` command line and its environment: a private Ray, or a driver joining ``cluster`` (a
    ``DevCluster``) on ``cores`` (``taskset``) where given."""
    settings = [*DEFAULTS, *([] if checkpoints else [NO_CHECKPOINTS]), *items]
    cmd = [sys.executable, "-m", "distrl", "train", config, "--run-dir", str(run_dir)]
    for item in settings:
        cmd += ["--set", item]
    if cluster is None:
        return cmd, {**os.environ, "RAY_ADDRESS": "local", "PYTHONUNBUFFERED": "1"}
    from clusters import local_dev_cluster

    cmd = local_dev_cluster.on_cores([*cmd, "--address", cluster.gcs_address], cores)
    return cmd, {**cluster.env, "PYTHONUNBUFFERED": "1"}


@contextmanager
def running(config: str, items=(), run_dirs: list[Path] = (), **how):
    """A ``distrl train`` in each of ``run_dirs``, left running through the block (trainings beside the study's
    measurement, their output discarded) and stopped as Ctrl-C stops them at its end. ``how``: as ``command``'s."""
    procs = []
    try:
        for run_dir in run_dirs:
            cmd, env = command(config, items, run_dir, **how)
            procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield procs
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        for proc in procs:
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()


def train(
    config: str,
    items: list[str] | tuple[str, ...] = (),
    *,
    what: str | None = None,
    keep: Path | None = None,
    timeout: float = 7200,
    **how,
) -> Training:
    """``distrl train CONFIG --set ITEM...`` to its end; ``RuntimeError`` naming ``what`` (the config by default)
    with the end of its stderr where it fails. ``keep``: train into that directory and leave it there. ``how``:
    ``checkpoints``, ``cluster``, ``cores``, as ``command`` takes them."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = keep or Path(tmp) / "run"
        cmd, env = command(config, items, run_dir, **how)
        began = time.perf_counter()
        result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        wall_s = time.perf_counter() - began
        if result.returncode != 0:
            raise RuntimeError(f"{what or config} failed ({result.returncode}):\n{result.stderr[-3000:]}")
        return Training(
            summary=json.loads((run_dir / "summary.json").read_text()),
            rows=metrics_rows(run_dir),
            setup=(run_dir / "setup.txt").read_text(),
            wall_s=wall_s,
        )


def train_and_play(
    config: str, items: list[str], episodes: int, seed: int | None = None, what: str | None = None
) -> tuple[Training, float]:
    """A training to its end with checkpoints, then its best checkpoint (chosen by the run's evaluation) played
    greedily for ``episodes`` episodes (``play``, with ``seed``): the training and the mean return."""
    with tempfile.TemporaryDirectory() as tmp:  # the run, kept while its best checkpoint plays
        run_dir = Path(tmp) / "run"
        done = train(config, items, what=what, keep=run_dir, checkpoints=True)
        return done, play(run_dir, episodes, seed=seed)


def play(path: Path | str, episodes: int, seed: int | None = None, timeout: float = 1800) -> float:
    """``distrl eval PATH`` (a run directory: its best checkpoint; or a checkpoint): the mean return of ``episodes``
    greedy episodes."""
    cmd = [sys.executable, "-m", "distrl", "eval", str(path), "--episodes", str(episodes)]
    cmd += [] if seed is None else ["--seed", str(seed)]
    env = {**os.environ, "RAY_ADDRESS": "local"}
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    found = re.search(r"return mean (-?[\d.]+)", result.stdout)
    if result.returncode != 0 or found is None:
        raise RuntimeError(f"distrl eval {path} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return float(found.group(1))
