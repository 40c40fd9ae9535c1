import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

RAY_TMPDIR = pytest.StashKey[str]()


def pytest_configure(config):
    """Every Ray a test starts without a temp dir of its own (``ray_local`` below, the CLI runs' private Rays, which
    inherit this environment) keeps its session files in a directory of this test session's, removed when it ends, not
    in the machine's /tmp/ray: nothing is left behind, and no test finds another Ray's address file. Made here, once
    per session (this module is imported a second time as ``tests.conftest``). Short: socket paths must fit 107
    chars."""
    config.stash[RAY_TMPDIR] = os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rt_", dir="/tmp")
    # The temp files of the processes tests start (Ray dashboards' forkservers) go there too: a killed process leaves
    # its own behind otherwise (a pymp-* dir per Ray dashboard). This process keeps /tmp (pytest's tmp_path included:
    # Ray's socket paths under it must stay short).
    tempfile.gettempdir()
    os.environ["TMPDIR"] = config.stash[RAY_TMPDIR]
    # pytest-xdist's workers inherit the first process's environment: its temp dir holds the locks they share.
    os.environ.setdefault(LOCKS_DIR, config.stash[RAY_TMPDIR])


LOCKS_DIR = "DISTRL_TEST_LOCKS"


@contextmanager
def _turn(alone: bool):
    """Under pytest-xdist, a test marked ``alone`` (it measures CPU time, a deadline or the machine's processes)
    runs while no other test does; the rest share the machine. A reader-writer lock with a turnstile: a test waiting
    to run alone holds the turnstile, so no new test starts before it."""
    base = Path(os.environ[LOCKS_DIR])
    with open(base / "turnstile.lock", "a") as turnstile, open(base / "tests.lock", "a") as tests:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(tests, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(tests, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Set-up, call and tear-down of a test in one turn (only where xdist runs tests side by side)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    with _turn(item.get_closest_marker("alone") is not None):
        yield


@pytest.hookimpl(trylast=True)  # after pytest's own, which tears the session's fixtures down (ray_local's shutdown)
def pytest_sessionfinish(session, exitstatus):
    """Ray's last processes can still be writing as they exit, so a first removal can leave a directory behind: it is
    removed again, for up to 10 s."""
    path = session.config.stash[RAY_TMPDIR]
    for _ in range(20):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            return
        time.sleep(0.5)


@pytest.fixture(scope="session")
def ray_local():
    """A local Ray on loopback for the session; shut down afterwards (only what this fixture started)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    from distrl.driver.connection import agent_port_of_its_own

    agent_port_of_its_own()  # Ray's fixed agent port left to the runs the tests start beside it
    ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1", configure_logging=False)
    yield ray
    ray.shutdown()


def run_cli(
    *args: str, timeout: float = 600, cwd: Path | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
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


def under_a_terminal(
    args: list[str], columns: int = 160, env: dict | None = None, code: int = 0, cwd: Path | None = None
) -> str:
    """Run ``args`` in ``cwd`` (the repository) with a pseudo-terminal of ``columns`` x 40 as its stdin and stdout
    (``env`` over this process's, a private Ray); what it wrote there, ANSI codes out, once it exited with
    ``code``."""
    import fcntl
    import pty
    import struct
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    base = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(
        args,
        cwd=cwd or ROOT,
        stdin=child,
        stdout=child,
        stderr=subprocess.PIPE,
        env={**base, "TERM": "xterm", "RAY_ADDRESS": "local", **(env or {})},
    )
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=300)
    os.close(main)
    assert proc.returncode == code, proc.stderr.read()[-3000:]
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace"))
