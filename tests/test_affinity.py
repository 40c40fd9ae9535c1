"""learner.reserve_cores: a learner's claim on its machine's cores, and the workers that leave them to it.

Each claim is made by a child process (pinning the test's own process would pin every test after it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from distrl.common import affinity
from tests.conftest import run_cli
from tests.test_train_e2e import check_run_dir

pytestmark = pytest.mark.skipif(not affinity.SUPPORTED or len(os.sched_getaffinity(0)) < 2,
                                reason="CPU affinity (Linux, 2 or more cores)")  # fmt: skip
ROOT = Path(__file__).resolve().parents[1]


def _child(code: str, directory: Path) -> subprocess.Popen:
    """A process that runs ``code`` (``directory``: the claims' folder), prints one JSON line, then waits for a line on
    its stdin before it exits: its claim is live until then."""
    script = textwrap.dedent(f"""
        import json, os, sys, threading
        from pathlib import Path
        from distrl.common import affinity
        directory = Path({str(directory)!r})
    """) + textwrap.dedent(code) + "\nsys.stdout.flush(); sys.stdin.readline()\n"
    return subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _answer(child: subprocess.Popen):
    return json.loads(child.stdout.readline())


def _end(child: subprocess.Popen) -> None:
    child.communicate("\n", timeout=30)


CLAIM = """
    worker_thread = threading.Thread(target=threading.Event().wait, daemon=True); worker_thread.start()
    cores = affinity.claim_cores(1, directory)
    threads = {tid: sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")}
    print(json.dumps({"cores": cores, "threads": threads}))
"""


def test_a_learner_claims_a_core_for_every_thread_and_the_claim_ends_with_its_process(tmp_path):
    learner = _child(CLAIM, tmp_path)
    try:
        answer = _answer(learner)
        assert len(answer["cores"]) == 1
        assert len(answer["threads"]) >= 2 and all(cores == answer["cores"] for cores in answer["threads"].values())
        assert affinity.claimed_cores(tmp_path) == set(answer["cores"])
    finally:
        _end(learner)
    assert affinity.claimed_cores(tmp_path) == set()  # its process is gone: the file names no live process


def test_a_claim_names_one_process_not_a_later_one_with_its_pid(tmp_path):
    pid = os.getpid()
    start = affinity._start_time(pid)
    (tmp_path / f"{pid}.claim").write_text(f"{pid} {int(start) + 1} 0\n")  # this pid, another start: a reused pid
    assert affinity.claimed_cores(tmp_path) == set()
    (tmp_path / f"{pid}.claim").write_text(f"{pid} {start} 0\n")
    assert affinity.claimed_cores(tmp_path) == {0}
    (tmp_path / f"{pid}.claim").write_text(f"{pid}")  # half-written
    assert affinity.claimed_cores(tmp_path) == set()


def test_learners_on_one_machine_claim_different_cores_and_always_leave_the_workers_one(tmp_path):
    cores = len(os.sched_getaffinity(0))
    learners, claims = [], []
    try:
        for _ in range(cores):  # one after another: each answers once its claim is made
            learners.append(_child(CLAIM, tmp_path))
            claims.append(_answer(learners[-1])["cores"])
        claimed = [core for claim in claims for core in claim]
        assert len(claimed) == cores - 1 and len(set(claimed)) == cores - 1
        assert claims[-1] == []  # the last found one core unclaimed: that one is the workers'
    finally:
        for learner in learners:
            _end(learner)


def test_workers_leave_a_learners_cores_to_it_and_take_them_back_when_it_is_gone(tmp_path):
    learner = _child(CLAIM, tmp_path)
    learner_cores = set(_answer(learner)["cores"])
    worker = _child("""
        cores = affinity.WorkerCores(directory)
        print(json.dumps(sorted(cores.settle()))); sys.stdout.flush(); sys.stdin.readline()
        print(json.dumps(sorted(cores.settle())))
    """, tmp_path)  # fmt: skip
    try:
        with_learner = set(_answer(worker))
        assert with_learner == set(os.sched_getaffinity(0)) - learner_cores
        _end(learner)
        worker.stdin.write("\n")
        worker.stdin.flush()
        assert set(_answer(worker)) == set(os.sched_getaffinity(0))
    finally:
        _end(worker)


def test_an_async_run_keeps_the_learners_core_apart_from_its_workers(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli("train", "configs/cartpole.yaml", "--run-dir", str(run_dir), "--set", "rollout.pipeline=async",
                     "--set", "rollout.num_workers=2", "--set", "rollout.num_cpus_per_worker=0.5",
                     "--set", "env.num_envs_per_worker=16", "--set", "learner.reserve_cores=true",
                     "--set", "stop.env_steps=16384", "--set", "stop.episode_return_mean=null")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    check_run_dir(run_dir)
    placement = json.loads((run_dir / "placement.json").read_text())
    learner = set(placement["learner-0"]["cores"])
    assert len(learner) == 1
    for name in ("worker-0", "worker-1"):
        assert set(placement[name]["cores"]) == set(os.sched_getaffinity(0)) - learner, placement
