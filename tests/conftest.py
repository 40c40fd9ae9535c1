import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def ray_local():
    """A local Ray on loopback for the session; shut down afterwards (only what this fixture started)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1", configure_logging=False)
    yield ray
    ray.shutdown()


def run_cli(*args: str, timeout: float = 600, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m distrl ARGS`` as a user would, with a clean environment for Ray (or ``env``)."""
    if env is None:  # a private Ray, even on a machine where `ray start` left a cluster (or its address file)
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}, "RAY_ADDRESS": "local"}
    else:  # the caller's environment as given (RAY_ADDRESS included)
        env = dict(env)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    return subprocess.run(
        [sys.executable, "-m", "distrl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd or ROOT,
    )
