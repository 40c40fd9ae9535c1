"""Which Ray a run joins: --address, RAY_ADDRESS, a live `ray start` cluster on this machine, or a private one."""

import json
import os
import shutil
import socket
import sys
import tempfile

import pytest

from distrl.driver.connection import ConnectionProblem, RayTarget, ray_address_file, resolve_target
from tests.conftest import ROOT, run_cli


@pytest.fixture
def listener():
    """Something that accepts TCP connections on loopback, standing in for a reachable address."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield f"127.0.0.1:{server.getsockname()[1]}"


def closed_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"  # closed again when this returns


def test_local_forces_a_private_ray_even_with_ray_address(listener):
    assert resolve_target("local", {"RAY_ADDRESS": listener}) == RayTarget(None, "private")
    assert resolve_target(None, {"RAY_ADDRESS": "local"}).private


def test_named_address_is_joined_when_it_answers_and_refused_in_one_line_when_not(listener):
    assert resolve_target(listener, {}) == RayTarget(listener, "--address")
    assert resolve_target(None, {"RAY_ADDRESS": listener}) == RayTarget(listener, "RAY_ADDRESS")
    assert resolve_target(listener, {"RAY_ADDRESS": closed_address()}).source == "--address"  # the flag wins
    dead = closed_address()
    with pytest.raises(ConnectionProblem, match=rf"^RAY_ADDRESS={dead}: no Ray cluster answers there within 2 s"):
        resolve_target(None, {"RAY_ADDRESS": dead})


def test_address_file_of_ray_start_is_joined_only_while_it_answers(tmp_path, monkeypatch, listener):
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    assert ray_address_file() == tmp_path / "ray" / "ray_current_cluster"
    assert resolve_target(None, {}) == RayTarget(None, "private")  # no file: private, nothing to warn about
    ray_address_file().parent.mkdir()
    ray_address_file().write_text(listener)
    assert resolve_target(None, {}) == RayTarget(listener, "ray start on this machine")
    assert resolve_target("auto", {"RAY_ADDRESS": "auto"}).address == listener
    dead = closed_address()
    ray_address_file().write_text(dead)
    stale = resolve_target(None, {})
    assert stale.private and dead in stale.warning and "starting a private Ray instead" in stale.warning


def test_cli_refuses_an_address_nobody_answers_at_before_starting_ray(tmp_path):
    dead = closed_address()
    result = run_cli(
        "train", "configs/cartpole.yaml", "--run-dir", str(tmp_path / "run"), "--address", dead, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"distrl: error: --address={dead}: no Ray cluster answers there within 2 s; start it, "
        "fix the address, or use --address local for a private Ray"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_train_joins_a_live_ray_start_head_waits_for_resources_there_and_survives_it_dying(tmp_path):
    """A head started by `ray start` on this machine is joined (and resource requests wait for it); once it
    has died without `ray stop`, its address file is stale and the next run starts a private Ray at once."""
    sys.path.insert(0, str(ROOT))
    from clusters import local_dev_cluster

    base = tempfile.mkdtemp(prefix="rc_", dir="/tmp")  # short: Ray's socket paths must fit 107 chars
    dev = local_dev_cluster.start(rollout_nodes=0, learner_cpus=2, temp_dir=os.path.join(base, "ray"))
    env = {**dev.env, "RAY_TMPDIR": base}
    try:
        found = (local_dev_cluster.Path(base) / "ray" / "ray_current_cluster").read_text().strip()
        assert found.endswith(f":{dev.gcs_port}")  # `ray start` writes the machine's address there
        short = [
            "--set",
            "stop.env_steps=8192",
            "--set",
            "stop.episode_return_mean=null",
            "--set",
            "rollout.num_workers=1",
            "--set",
            "logging.tensorboard=false",
        ]
        joined = run_cli("train", "configs/cartpole.yaml", "--run-dir", str(tmp_path / "joined"), *short, env=env)
        assert joined.returncode == 0, joined.stderr[-3000:]
        assert f"the cluster at {found} (ray start on this machine" in joined.stdout
        # The run's driver and actors are in the head's session: it joined that cluster, not a Ray of its own.
        logs = local_dev_cluster.Path(base) / "ray" / "session_latest" / "logs"
        assert list(logs.glob("python-core-driver-*.log")) and len(list(logs.glob("python-core-worker-*.log"))) >= 2
        assert (
            len({spot["node_id"] for spot in json.loads((tmp_path / "joined" / "placement.json").read_text()).values()})
            == 1
        )
        # On a joined cluster a request it cannot hold yet waits (for an autoscaler) instead of failing at once.
        waits = run_cli(
            "train",
            "configs/cartpole.yaml",
            "--run-dir",
            str(tmp_path / "waits"),
            *short,
            "--set",
            "learner.num_gpus_per_learner=1",
            "--set",
            "cluster.placement_timeout_s=3",
            env=env,
        )
        assert waits.returncode == 2
        assert "waiting for the autoscaler: learner.num_gpus_per_learner=1 needs 1 GPUs" in waits.stdout
        assert "cluster.placement_timeout_s=3: learner placement group (1 bundles) still not placed" in waits.stderr
    finally:
        dev.shutdown()  # kill -TERM/-KILL of exactly its processes: no `ray stop`, so its address file stays
    assert dev.processes() == []
    stale = run_cli(
        "train", "configs/cartpole.yaml", "--run-dir", str(tmp_path / "stale"), *short, env=env, timeout=300
    )
    assert stale.returncode == 0, stale.stderr[-3000:]
    assert f"names {found}, where no Ray answers" in stale.stdout
    assert "a private Ray on this machine, stopped with the run" in stale.stdout
    # The private run's own Ray is gone with it.
    assert not [
        p for p in local_dev_cluster.psutil.process_iter(["cmdline"]) if base in " ".join(p.info["cmdline"] or [])
    ]
    shutil.rmtree(base, ignore_errors=True)  # the cluster's temp dir and the runs' private Rays', logs and all


def test_a_private_rays_dashboard_agent_takes_any_free_port_not_rays_fixed_one():
    """ray.init has no setting for the agent's HTTP port: distrl's private Ray gives it port 0 (any free one), so a
    second Ray on the machine does not make its agent retry a taken 52365 while the raylet waits; a port given
    explicitly (ray start's) is kept."""
    from ray._private.parameter import RayParams

    from distrl.driver.connection import agent_port_of_its_own

    agent_port_of_its_own()
    agent_port_of_its_own()  # once is enough; twice changes nothing
    assert RayParams().dashboard_agent_listen_port == 0
    assert RayParams(dashboard_agent_listen_port=52366).dashboard_agent_listen_port == 52366
