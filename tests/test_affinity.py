"""learner.reserve_cores: a learner's claim on its machine's cores, and the workers that leave them to it.

Each claim is made by a child process (pinning the test's own process would pin every test after it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from distrl.common import affinity
from tests.test_faults import actor_processes, start_train, wait_for_rows
from tests.test_train_e2e import check_run_dir

pytestmark = [
    pytest.mark.skipif(
        not affinity.SUPPORTED or len(os.sched_getaffinity(0)) < 2, reason="CPU affinity (Linux, 2 or more cores)"
    ),
    pytest.mark.alone,  # which cores a process may run on, and what it ran
]
ROOT = Path(__file__).resolve().parents[1]


def _child(code: str, directory: Path) -> subprocess.Popen:
    """A process that runs ``code`` (``directory``: the claims' folder), prints one JSON line, then waits for a line on
    its stdin before it exits: its claim is live until then."""
    script = (
        textwrap.dedent(f"""
        import json, os, sys, threading
        from pathlib import Path
        from distrl.common import affinity
        directory = Path({str(directory)!r})
    """)
        + textwrap.dedent(code)
        + "\nsys.stdout.flush(); sys.stdin.readline()\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _answer(child: subprocess.Popen):
    return json.loads(child.stdout.readline())


def _end(child: subprocess.Popen) -> None:
    child.communicate("\n", timeout=30)


CLAIM = """
    worker_thread = threading.Thread(target=threading.Event().wait, daemon=True); worker_thread.start()
    claim = affinity.LearnerCores(1, directory)
    threads = {tid: sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")}
    print(json.dumps({"cores": claim.cores, "threads": threads}))
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


def _tell(child: subprocess.Popen, line: str = ""):
    child.stdin.write(line + "\n")
    child.stdin.flush()
    return _answer(child)


def test_workers_leave_a_learners_cores_while_it_updates_and_take_them_back_after(tmp_path):
    everything = set(os.sched_getaffinity(0))
    learner = _child(
        """
        claim = affinity.LearnerCores(1, directory)
        print(json.dumps(claim.cores)); sys.stdout.flush(); sys.stdin.readline()
        with claim.updating():
            print(json.dumps(claim.cores)); sys.stdout.flush(); sys.stdin.readline()
        print(json.dumps(claim.cores))
    """,
        tmp_path,
    )
    learner_cores = set(_answer(learner))
    # The worker's env process (env.vectorization: async) was started before the claim was read.
    worker = _child(
        """
        import subprocess
        env = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        cores = affinity.WorkerCores(directory)
        for line in sys.stdin:
            if not line.strip():
                break
            mine = cores.refresh() if line.strip() == "refresh" else cores.follow()
            print(json.dumps([sorted(mine), sorted(os.sched_getaffinity(env.pid))])); sys.stdout.flush()
        env.kill()
        print("[]")
    """,
        tmp_path,
    )
    try:
        assert _tell(worker, "refresh") == [sorted(everything)] * 2  # the learner is not updating
        _tell(learner)  # it is now
        assert _tell(worker, "follow") == [sorted(everything - learner_cores)] * 2
        _tell(learner)  # its update is over
        assert _tell(worker, "follow") == [sorted(everything)] * 2
        _end(learner)  # gone: a claim of no live process is dropped at the next refresh
        assert _tell(worker, "refresh") == [sorted(everything)] * 2 and affinity.claimed_cores(tmp_path) == set()
    finally:
        _end(worker)


def _affinities(process) -> set[frozenset[int]]:
    """The cores each thread of ``process`` may run on."""
    found = set()
    for thread in process.threads():
        try:
            found.add(frozenset(os.sched_getaffinity(thread.id)))
        except OSError:  # ended meanwhile
            pass
    return found


@pytest.mark.slow
def test_an_async_runs_workers_leave_the_learners_core_while_it_updates(tmp_path):
    everything = frozenset(os.sched_getaffinity(0))
    run_dir = tmp_path / "run"
    proc = start_train(
        run_dir,
        "rollout.pipeline=async",
        "rollout.num_workers=2",
        "rollout.num_cpus_per_worker=0.5",
        "env.num_envs_per_worker=16",
        "learner.reserve_cores=true",
        "stop.env_steps=150000",
        "stop.episode_return_mean=null",
        "checkpoint.every_iterations=0",
    )
    try:
        wait_for_rows(run_dir, 2, proc)
        learner_cores = frozenset(json.loads((run_dir / "placement.json").read_text())["learner-0"]["cores"])
        assert len(learner_cores) == 1
        (learner,) = actor_processes(proc.pid, "ray::Learner")
        workers = actor_processes(proc.pid, "ray::RolloutWorker")
        assert len(workers) == 2
        assert _affinities(learner) == {learner_cores}  # every thread of the learner, all the time
        apart = set()
        deadline = time.monotonic() + 20
        while len(apart) < 2 and time.monotonic() < deadline and proc.poll() is None:
            for worker in workers:
                if _affinities(worker) == {everything - learner_cores}:
                    apart.add(worker.pid)
            time.sleep(0.002)
        assert len(apart) == 2, "a worker was never seen off the learner's core"
    finally:
        _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    check_run_dir(run_dir)
