"""The dev cluster: a `ray start` that timed out on a busy machine is cleaned up and tried again, any other failure
is reported at once; nodes given cores of their own run on them only."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT))
from clusters.local_dev_cluster import SLOW_START, ray_start


def flaky_command(tmp_path, fails: int, message: str) -> list[str]:
    """A process that fails ``fails`` times with ``message`` on stderr, then succeeds; it counts its runs in a file."""
    counter = tmp_path / "runs"
    code = (
        f"import pathlib, sys; p = pathlib.Path({str(counter)!r}); n = int(p.read_text()) if p.exists() else 0; "
        f"p.write_text(str(n + 1)); sys.exit(0) if n >= {fails} else sys.exit(print({message!r}, file=sys.stderr) or 1)"
    )
    return [sys.executable, "-c", code]


def test_a_start_that_timed_out_is_cleaned_up_and_tried_again(tmp_path):
    cleaned = []
    ray_start(
        flaky_command(tmp_path, 2, f"Exception: The current node {SLOW_START}."),
        {},
        lambda: cleaned.append(1),
        pause_s=0,
    )
    assert (tmp_path / "runs").read_text() == "3" and cleaned == [1, 1]


def test_a_start_that_keeps_timing_out_raises_after_its_attempts(tmp_path):
    cleaned = []
    with pytest.raises(subprocess.CalledProcessError) as caught:
        ray_start(
            flaky_command(tmp_path, 5, f"The current node {SLOW_START}."),
            {},
            lambda: cleaned.append(1),
            attempts=3,
            pause_s=0,
        )
    assert SLOW_START in caught.value.stderr
    assert (tmp_path / "runs").read_text() == "3" and cleaned == [1, 1]


def test_any_other_failure_raises_at_once(tmp_path):
    with pytest.raises(subprocess.CalledProcessError):
        ray_start(
            flaky_command(tmp_path, 1, "ValueError: port 6379 already in use"), {}, lambda: pytest.fail("cleaned")
        )
    assert (tmp_path / "runs").read_text() == "1"


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_nodes_given_cores_run_on_them_only_and_sigterm_stops_every_process():
    """``--learner-cores`` / ``--rollout-cores``: each node's raylet and the Ray workers it starts (an actor's
    process) run on that node's cores only, as on separate machines; SIGTERM to the command stops every process of
    the cluster, as Ctrl-C does."""
    import signal

    from clusters.local_dev_cluster import DevCluster

    command = [sys.executable, "clusters/local_dev_cluster.py", "--rollout-cpus", "1"]
    proc = subprocess.Popen(
        [*command, "--learner-cores", "0", "--rollout-cores", "1"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    printed = []
    for line in proc.stdout:
        printed.append(line.strip())
        if line.startswith("Ctrl-C or SIGTERM stops the cluster") or len(printed) > 50:
            break
    said = {line.partition(":")[0]: line.partition(":")[2].strip() for line in printed}
    assert "GCS address" in said, proc.stderr.read()[-3000:] if proc.poll() is not None else printed
    address = said["GCS address"]
    cluster = DevCluster(said["temp dir"].split(" ")[0], int(address.rsplit(":", 1)[1]), 0, "", {})
    try:
        raylets = {
            ("/n1" in " ".join(p.cmdline())): p.cpu_affinity() for p in cluster.processes() if "raylet" in p.name()
        }
        assert raylets == {False: [0], True: [1]}
        token = next(line for line in printed if line.startswith("export RAY_AUTH_MODE")).rpartition("=")[2]
        probe = (
            "import os, ray; ray.init(address=os.environ['ADDR'])\n"
            "where = ray.remote(lambda: sorted(os.sched_getaffinity(0)))\n"
            "print(ray.get(where.options(resources={'learner': 0.5}).remote()),"
            " ray.get(where.options(resources={'rollout': 0.5}).remote()))"
        )
        env = {**os.environ, "ADDR": address, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
        result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.strip().splitlines()[-1] == "[0] [1]"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
        assert cluster.processes() == []
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        cluster.shutdown()
        shutil.rmtree(cluster.temp_dir, ignore_errors=True)


def test_free_ports_are_outside_the_ephemeral_range_and_not_repeated():
    """The kernel may hand an ephemeral port to any outgoing connection before the daemon that was given it binds."""
    from clusters import local_dev_cluster

    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [local_dev_cluster.free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(local_dev_cluster.PORT_RANGE[0] <= port < low for port in ports)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["dev", "fake autoscaling"])
def test_a_head_whose_job_agent_never_listens_is_stopped_and_started_again(tmp_path, monkeypatch, capsys, kind):
    """The head's job agent given a port that something else holds never listens: that head is stopped (every
    process of it) and a second one, on fresh ports, starts; the first's failure is printed with the agent's log.
    The dev cluster and the fake autoscaling one share the retry."""
    import socket

    from clusters import fake_autoscaling_cluster, local_dev_cluster

    held = socket.socket()
    held.bind(("127.0.0.1", local_dev_cluster.free_port()))
    taken = held.getsockname()[1]
    handed: list[int] = []
    real = local_dev_cluster.free_port

    def ports() -> int:  # the head's third port (its job agent's) the held one, the first time only
        handed.append(taken if len(handed) == 2 else real())
        return handed[-1]

    monkeypatch.setattr(local_dev_cluster, "free_port", ports)
    monkeypatch.setattr(fake_autoscaling_cluster, "free_port", ports)
    monkeypatch.setattr(local_dev_cluster, "AGENT_WAIT_S", 15)
    base = tempfile.mkdtemp(prefix="rag_", dir="/tmp")  # short: Ray's socket paths must fit 107 chars
    try:
        if kind == "dev":
            dev = local_dev_cluster.start(rollout_nodes=1, rollout_cpus=1, temp_dir=os.path.join(base, "ray"))
        else:
            dev = fake_autoscaling_cluster.start(Path(fake_autoscaling_cluster.__file__).with_name("aws.yaml"))
    finally:
        held.close()
    try:
        first_gcs = handed[0]
        assert dev.gcs_port not in (first_gcs, taken)
        stale = local_dev_cluster.DevCluster("/nonexistent", first_gcs, 0, "", {})
        assert stale.processes() == []  # the first head's processes are gone
        printed = capsys.readouterr().err
        assert f"nothing listening on 127.0.0.1:{taken}" in printed and "address already in use" in printed
    finally:
        dev.shutdown()
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(dev.temp_dir, ignore_errors=True)  # the fake cluster's own (under base for the dev cluster)
    assert dev.processes() == []
