"""A node lost mid-run on a real multi-node Ray cluster on 127.0.0.1 (clusters/local_dev_cluster.py): head plus two
rollout nodes, each a raylet with a private temp dir; a node is killed whole (every process of its raylet), as a
spot preemption does. Only this cluster's processes are stopped."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from tests.conftest import ROOT
from tests.test_faults import wait_for_rows
from tests.test_train_e2e import check_run_dir


def node_index(dev, node_id: str) -> int:
    """Which rollout node (1, 2) ``node_id`` is, from the raylets' session dirs; 0 for the head. Asked in a process
    of its own: this test process may hold a Ray of its own already (another test's)."""
    code = (
        f"import json, ray; ray.init(address={dev.gcs_address!r}, configure_logging=False, log_to_driver=False); "
        "print(json.dumps({n['NodeID']: json.dumps(n) for n in ray.nodes()}))"
    )
    result = subprocess.run([sys.executable, "-c", code], env=dev.env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    nodes = json.loads(result.stdout.strip().splitlines()[-1])
    assert node_id in nodes, f"node {node_id} not in the cluster"
    return next((index for index in (1, 2) if f"{dev.temp_dir}/n{index}" in nodes[node_id]), 0)


def start_run(tmp_path, rollout_nodes: int, rollout_cpus: int, overrides: list[str], pipeline: str = "async"):
    """A dev cluster (head: learner 2 CPUs; ``rollout_nodes`` of ``rollout_cpus``) and ``distrl train`` on it."""
    from clusters import local_dev_cluster

    base = tempfile.mkdtemp(prefix="rn_", dir="/tmp")  # short: Ray's socket paths must fit 107 characters
    dev = local_dev_cluster.start(
        rollout_nodes=rollout_nodes, rollout_cpus=rollout_cpus, learner_cpus=2, temp_dir=os.path.join(base, "ray")
    )
    run_dir = tmp_path / "run"
    common = [
        f"rollout.pipeline={pipeline}",
        "rollout.num_cpus_per_worker=1",
        "rollout.resources={rollout: 1}",
        "env.num_envs_per_worker=32",
        "ppo.minibatch_size=1024",
        "stop.episode_return_mean=null",
        "checkpoint.every_iterations=0",
        "rollout.compile.backend=eager",
    ]
    args = [
        sys.executable,
        "-m",
        "distrl",
        "train",
        "configs/cartpole.yaml",
        "--run-dir",
        str(run_dir),
        "--address",
        dev.gcs_address,
    ]
    for item in common + overrides:
        args += ["--set", item]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dev.env)
    return dev, proc, run_dir


def finish(dev, proc, tmp_path, returncode: int = 0) -> tuple[str, str]:
    """The run's output once it ends (with ``returncode``); the cluster stopped (only its own processes)."""
    try:
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        dev.shutdown()
        shutil.rmtree(os.path.dirname(dev.temp_dir), ignore_errors=True)  # start_run's base: logs and all
    (tmp_path / "stdout.txt").write_text(stdout)
    (tmp_path / "stderr.txt").write_text(stderr)  # the whole of it: the assertion shows only its end
    assert proc.returncode == returncode, (stdout[-2000:], stderr[-3000:])
    return stdout, stderr


@pytest.mark.slow
# Every pipeline is a setting of the one sampler and shares its fault path: a lost worker node once (sync, where
# a round waits on every worker), a lost learner node with the batch in flight that overlap and async each keep.
@pytest.mark.parametrize(
    "victim, pipeline", [("worker node", "sync"), ("learner node", "overlap"), ("learner node", "async")]
)
def test_a_run_rides_out_a_lost_node(tmp_path, victim, pipeline):
    from clusters import local_dev_cluster

    # Three CPUs a rollout node. A lost worker node: three workers, the learner on the head. A lost learner node:
    # the learner (1 CPU) and four workers in the rollout nodes' six CPUs, so at least one worker shares the
    # learner's node whichever way Ray places them (three could all land on the other node); the learner is
    # rebuilt on the other node, in its free CPU or in one a worker is evicted from.
    if victim == "learner node":
        where, workers = "learner.node_labels={distrl-role: rollout}", 4
    else:
        where, workers = "learner.resources={learner: 1}", 3
    # rollout.max_restarts=0: a lost node spends no worker's restarts (only crashes and timeouts do).
    dev, proc, run_dir = start_run(
        tmp_path,
        2,
        3,
        [f"rollout.num_workers={workers}", "stop.env_steps=250000", where, "rollout.max_restarts=0"],
        pipeline,
    )
    try:
        wait_for_rows(run_dir, 3, proc, timeout=240)
        placement = json.loads((run_dir / "placement.json").read_text())
        index = node_index(dev, placement["learner-0" if victim == "learner node" else "worker-0"]["node_id"])
        assert index in (1, 2), placement  # the head, which holds the GCS, is never the one lost
        local_dev_cluster.kill_rollout_node(dev, index)
    finally:
        stdout, stderr = finish(dev, proc, tmp_path)
    assert "Traceback" not in stderr
    rows, summary = check_run_dir(run_dir)
    assert summary["stop_reason"] == "env_steps" and summary["env_steps"] >= 250000
    assert "stopped answering (its process or node is gone)" in stdout and summary["workers_lost"] >= 1, stdout[-3000:]
    if victim == "learner node":
        assert "a learner died" in stdout and summary["learner_restarts"] == 1, stdout[-3000:]
        assert [r["learner_version"] for r in rows] == list(range(1, len(rows) + 1))  # rebuilt from the newest state


@pytest.mark.slow
def test_a_rebuilt_learner_evicts_a_worker_that_took_its_room(tmp_path):
    """The learners come first. One rollout node of 2 CPUs holds the learner and worker-0; worker-1 (a range's max)
    waits for room. The learner is killed: its group is released, worker-1 takes the CPU it held at once, and the
    learner's new group finds none. worker-1 is evicted for it and replaced by a new actor that waits for room; the
    run goes on with worker-0 and ends normally. (A lockstep run meets the same when a lost node's workers are
    restarted where its learner was to go, when they win that race: test_a_run_rides_out_a_lost_node; the rounds
    around an eviction: tests/test_eviction.py.)"""
    import signal

    dev, proc, run_dir = start_run(
        tmp_path,
        1,
        2,
        ["rollout.num_workers={min: 1, max: 2}", "stop.env_steps=150000", "learner.node_labels={distrl-role: rollout}"],
    )
    try:
        wait_for_rows(run_dir, 3, proc, timeout=240)
        (learner,) = [p for p in dev.processes() if "ray::Learner" in " ".join(p.cmdline())]
        learner.send_signal(signal.SIGKILL)
    finally:
        stdout, stderr = finish(dev, proc, tmp_path)
    assert "Traceback" not in stderr
    assert "a learner died" in stdout, stdout[-3000:]
    assert "worker-1 evicted to make room (the learners come first)" in stdout, stdout[-3000:]
    assert "worker-1 is out (evicted for the learners); the run goes on with 1 workers" in stdout, stdout[-3000:]
    rows, summary = check_run_dir(run_dir)
    assert summary["stop_reason"] == "env_steps" and summary["learner_restarts"] == 1
    assert [r["learner_version"] for r in rows] == list(range(1, len(rows) + 1))  # rebuilt from the newest state
    assert rows[-1]["workers_active"] == 1  # the replacement waits for room that never comes here


@pytest.mark.slow
def test_a_worker_range_grows_onto_a_node_that_joins_mid_run(tmp_path):
    from clusters import local_dev_cluster

    dev, proc, run_dir = start_run(
        tmp_path,
        1,
        2,
        ["rollout.num_workers={min: 2, max: 4}", "stop.env_steps=300000", "learner.resources={learner: 1}"],
    )
    try:
        wait_for_rows(run_dir, 3, proc, timeout=240)  # two workers fit the one rollout node; two wait for room
        rows_before = len((run_dir / "metrics.jsonl").read_text().splitlines())
        local_dev_cluster.add_rollout_node(dev, 2, cpus=2)
    finally:
        stdout, _ = finish(dev, proc, tmp_path)
    assert "env      CartPole-v1: 2-4 workers" in stdout
    assert stdout.count(" joined on node ") == 2, stdout[-3000:]
    rows, summary = check_run_dir(run_dir)
    assert all(r["workers_active"] == 2 for r in rows[:rows_before])
    full = [r for r in rows if r["workers_active"] == 4]
    assert full and full[-1] is rows[-1]  # the run ends with its full worker count
    placement = json.loads((run_dir / "placement.json").read_text())
    assert {f"worker-{i}" for i in range(4)} <= set(placement)  # rewritten as the workers joined


@pytest.mark.slow
def test_a_drain_notice_on_the_learners_node_checkpoints_at_once(tmp_path):
    """``ray drain-node`` (what the autoscaler and KubeRay send before a preemption) on the node the learner runs on:
    a checkpoint within 5 s of the notice; that node's workers restarted at once on the other node (spending none of
    their restarts: max_restarts 0), before the node goes; the run goes on, with every worker, until Ctrl-C."""
    import signal

    from clusters import local_dev_cluster

    # A budget the run cannot finish before the moved workers answer on the other node (at 50k env steps/s, 30 s);
    # it is stopped with Ctrl-C once they do.
    dev, proc, run_dir = start_run(
        tmp_path,
        2,
        3,
        [
            "rollout.num_workers=3",
            "stop.env_steps=1500000",
            "learner.node_labels={distrl-role: rollout}",
            "rollout.max_restarts=0",
        ],
    )
    try:
        wait_for_rows(run_dir, 3, proc, timeout=240)
        placement = json.loads((run_dir / "placement.json").read_text())
        node_id = placement["learner-0"]["node_id"]
        moved = [name for name, spot in placement.items() if name.startswith("worker-") and spot["node_id"] == node_id]
        assert not list((run_dir / "checkpoints").glob("ckpt_*.pt"))  # no periodic checkpoints in this run
        drain = [
            local_dev_cluster.ray_command(),
            "drain-node",
            "--address",
            dev.gcs_address,
            "--node-id",
            node_id,
            "--reason",
            "DRAIN_NODE_REASON_PREEMPTION",
            "--reason-message",
            "spot preemption",
            "--deadline-remaining-seconds",
            "120",
        ]
        noticed = time.monotonic()
        result = subprocess.run(drain, env=dev.env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr[-2000:]
        while not list((run_dir / "checkpoints").glob("ckpt_*.pt")) and time.monotonic() - noticed < 30:
            time.sleep(0.1)
        checkpoint_s = time.monotonic() - noticed
        wait_for_workers_off(run_dir, moved, node_id, proc)
        proc.send_signal(signal.SIGINT)
    finally:
        stdout, _ = finish(dev, proc, tmp_path, returncode=130)
    assert checkpoint_s <= 5.0, f"the checkpoint came {checkpoint_s:.1f} s after the drain notice"
    assert f"the learners' node {node_id[:8]} is draining" in stdout and "checkpoint written at once" in stdout
    if moved:
        assert (
            f"{', '.join(moved)} on draining node {node_id[:8]}" in stdout
            and "restarted now on nodes with room" in stdout
        )
        after = json.loads((run_dir / "placement.json").read_text())
        assert all(after[name]["node_id"] != node_id for name in moved), (moved, after)
        assert all(f"{name} is back on node" in stdout for name in moved), stdout[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted" and summary["env_steps"] < 1500000
    print(f"drain notice to checkpoint: {checkpoint_s:.2f} s")


def wait_for_workers_off(run_dir, moved: list[str], node_id: str, proc, timeout: float = 120) -> None:
    """Until ``moved`` are placed off ``node_id`` and a metrics row written after that counts every worker active."""
    deadline, rows_then = time.time() + timeout, None
    while time.time() < deadline:
        text = (run_dir / "metrics.jsonl").read_text()
        rows = [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]  # whole lines only
        if rows_then is None:
            placement = json.loads((run_dir / "placement.json").read_text())
            if all(placement[name]["node_id"] != node_id for name in moved):
                rows_then = len(rows)
        elif len(rows) > rows_then and rows[-1]["workers_active"] == 3:
            return
        assert proc.poll() is None, "the run ended before the moved workers answered on the other node"
        time.sleep(0.5)
    raise AssertionError(f"{moved} not back off node {node_id[:8]} within {timeout} s")


@pytest.mark.slow
def test_a_batch_goes_from_its_workers_node_to_its_learners_and_outlives_the_first(tmp_path):
    """The driver's head has no CPUs; a worker samples on the rollout node, the learner's node is a third. The round
    the coordinator hands over is on the rollout node and the learner's, never on the head (it holds refs only); the
    rollout node is then killed whole, and a learner on its node trains on the round with nothing lost."""
    from clusters import local_dev_cluster

    base = tempfile.mkdtemp(prefix="bp_", dir="/tmp")
    dev = local_dev_cluster.start(
        rollout_nodes=1, rollout_cpus=1, learner_cpus=1, temp_dir=os.path.join(base, "ray"), learner_node=True
    )
    try:
        args = [sys.executable, "-m", "tests.batch_path_probe", dev.gcs_address, dev.temp_dir]
        result = subprocess.run(args, cwd=ROOT, env=dev.env, capture_output=True, text=True, timeout=420)
    finally:
        dev.shutdown()
        shutil.rmtree(base, ignore_errors=True)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["batches"] == 1 and all(size > 100 * 1024 for size in seen["sizes"]), seen
    assert seen["locations"] == [sorted([seen["rollout_node"], seen["learner_node"]])], seen
    assert seen["killed"] > 0
    assert seen["lost"] == [] and seen["version"] == 1, seen
