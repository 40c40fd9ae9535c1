"""Runs mirrored under a storage URI: a local path, and S3 through a real S3 API (moto's server) on 127.0.0.1."""

import json
import os

import pytest

from distrl.common.checkpoint import CheckpointError
from distrl.driver.storage import RunStorage, StorageError
from tests.conftest import ROOT, run_cli

CARTPOLE = str(ROOT / "configs" / "cartpole.yaml")
SHORT = ["--set", "stop.episode_return_mean=null", "--set", "checkpoint.every_iterations=2"]


def fake_run(run_dir, checkpoints=("ckpt_0000002.pt", "ckpt_0000004.pt")):
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("seed: 0\n")
    (run_dir / "metrics.jsonl").write_text('{"iteration": 1}\n')
    (run_dir / "events.out.tfevents.1.host").write_bytes(b"\x00tb")
    for name in checkpoints:
        (run_dir / "checkpoints" / name).write_bytes(name.encode())


def test_local_path_mirror_uploads_atomically_prunes_and_fetches(tmp_path):
    run_dir, remote = tmp_path / "run", tmp_path / "bucket" / "runs" / "run"
    fake_run(run_dir)
    storage = RunStorage(str(remote))
    storage.check_writable()
    storage.mirror(run_dir)
    assert sorted(p.name for p in remote.iterdir()) == [
        "checkpoints",
        "config.yaml",
        "events.out.tfevents.1.host",
        "metrics.jsonl",
    ]
    assert storage.checkpoint_names() == ["ckpt_0000002.pt", "ckpt_0000004.pt"]
    (run_dir / "checkpoints" / "ckpt_0000002.pt").unlink()  # `checkpoint.keep` removed it locally
    (run_dir / "checkpoints" / "ckpt_0000006.pt").write_bytes(b"six")
    storage.mirror(run_dir)
    assert storage.checkpoint_names() == ["ckpt_0000004.pt", "ckpt_0000006.pt"]
    assert not [p for p in remote.rglob("*") if p.name.startswith(".tmp-")]  # no temporary left behind
    elsewhere = tmp_path / "other-machine" / "run"
    storage.fetch_run(elsewhere)
    assert (elsewhere / "checkpoints" / "ckpt_0000006.pt").read_bytes() == b"six"
    assert (elsewhere / "metrics.jsonl").read_text() == '{"iteration": 1}\n'
    with pytest.raises(CheckpointError, match="no checkpoints/ckpt_"):
        RunStorage(str(tmp_path / "empty")).fetch_run(tmp_path / "x")


def test_unwritable_or_unknown_storage_is_one_clear_line(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(StorageError, match=r"^storage.uri='.*file/runs': cannot write there"):
        RunStorage(str(tmp_path / "file" / "runs")).check_writable()
    with pytest.raises(StorageError, match=r"^storage.uri='nope://x': cannot open it"):
        RunStorage("nope://x")
    result = run_cli("train", CARTPOLE, "--run-dir", str(tmp_path / "run"), "--storage", "nope://x", timeout=60)
    assert result.returncode == 2 and result.stderr.startswith(
        "distrl: error: storage.uri='nope://x/run': cannot open it"
    )
    assert not (tmp_path / "run").exists()


@pytest.fixture
def s3(monkeypatch):
    """A real S3 API server (moto) on 127.0.0.1 with one bucket; its address in the environment as AWS SDKs read it."""
    boto3 = pytest.importorskip("boto3")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    client = boto3.client("s3")
    client.create_bucket(Bucket="distrl-runs")
    yield client
    server.stop()


def keys(client, prefix):
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket="distrl-runs", Prefix=prefix).get("Contents", []))


@pytest.mark.slow
def test_s3_round_trip_train_then_resume_on_another_machine(s3, tmp_path):
    first, second = tmp_path / "machine-a", tmp_path / "machine-b"
    first.mkdir(), second.mkdir()
    trained = run_cli(
        "train",
        CARTPOLE,
        "--run-dir",
        str(first / "cartpole"),
        "--storage",
        "s3://distrl-runs/team",
        "--set",
        "stop.env_steps=40000",
        *SHORT,
        cwd=first,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "mirrored to s3://distrl-runs/team/cartpole" in trained.stdout
    stored = keys(s3, "team/cartpole/")
    assert {
        "team/cartpole/config.yaml",
        "team/cartpole/metrics.jsonl",
        "team/cartpole/placement.json",
        "team/cartpole/summary.json",
    } <= set(stored)
    assert any(k.startswith("team/cartpole/events.out.tfevents.") for k in stored)
    summary = json.loads(s3.get_object(Bucket="distrl-runs", Key="team/cartpole/summary.json")["Body"].read())
    assert summary["storage"] == "s3://distrl-runs/team/cartpole" and summary["iterations"] == 5
    assert [k for k in stored if "/checkpoints/" in k][-1] == "team/cartpole/checkpoints/ckpt_0000005.pt"
    assert summary["checkpoint"] == "s3://distrl-runs/team/cartpole/checkpoints/ckpt_0000005.pt"
    assert summary["best_checkpoint"].startswith("s3://distrl-runs/team/cartpole/checkpoints/ckpt_")
    # Machine A is gone; machine B continues the run from the bucket alone.
    resumed = run_cli(
        "train", "--resume", "s3://distrl-runs/team/cartpole", "--set", "stop.env_steps=60000", cwd=second
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming at iteration 5, 40,960 env steps" in resumed.stdout
    assert (second / "runs" / "cartpole" / "summary.json").exists()
    summary = json.loads(s3.get_object(Bucket="distrl-runs", Key="team/cartpole/summary.json")["Body"].read())
    assert summary["iterations"] == 8 and summary["env_steps"] == 65536
    rows = s3.get_object(Bucket="distrl-runs", Key="team/cartpole/metrics.jsonl")["Body"].read().decode().splitlines()
    assert [json.loads(r)["iteration"] for r in rows] == list(range(1, 9))
    assert "team/cartpole/checkpoints/ckpt_0000008.pt" in keys(s3, "team/cartpole/checkpoints/")
    assert os.listdir(first / "cartpole" / "checkpoints") and not (second / "cartpole").exists()
