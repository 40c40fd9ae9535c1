"""Which Ray a run uses, decided as Ray users expect, and without ever hanging on a dead cluster.

In order: ``--address`` (``local`` forces a private Ray), then ``RAY_ADDRESS``, then the
cluster that ``ray start`` last started on this machine (Ray's own address file, what a bare
``ray.init()`` joins, what a user on a head node expects), and otherwise a private Ray
started in this process. A cluster found only through the address file is joined when its
GCS answers within ``PROBE_TIMEOUT_S``; a stale file (its head died without ``ray stop``)
gets a warning and a private Ray instead of minutes of retries.

Nothing here imports ray: the CLI decides before Ray reads its environment.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

PROBE_TIMEOUT_S = 2.0


class ConnectionProblem(Exception):
    """An address the user named that nothing answers at."""


@dataclass(frozen=True)
class RayTarget:
    """Where a run's Ray lives: ``address`` None means a private Ray started by this process."""

    address: str | None
    source: str  # "--address", "RAY_ADDRESS", "ray start on this machine", or "private"
    warning: str | None = None  # said before starting, e.g. a stale address file

    @property
    def private(self) -> bool:
        return self.address is None

    def describe(self) -> str:
        if self.private:
            return (
                "a new Ray on this machine, started for this run and stopped with it "
                "(asking it for more than it has fails at once)"
            )
        return f"the cluster at {self.address} ({self.source}; requests wait for its autoscaler)"

    def describe_short(self) -> str:
        if self.private:
            return "a private Ray on this machine, stopped with the run"
        return f"the cluster at {self.address} ({self.source})"


def ray_address_file() -> Path:
    """Ray's ``ray_current_cluster`` file, found as Ray finds it (``ray._common.utils.get_ray_address_file``)."""
    if "RAY_TMPDIR" in os.environ:
        base = os.environ["RAY_TMPDIR"]
    elif sys.platform.startswith("linux") and "TMPDIR" in os.environ:
        base = os.environ["TMPDIR"]
    else:
        base = "/tmp"
    return Path(base) / "ray" / "ray_current_cluster"


def answers(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether something accepts a TCP connection at ``host:port`` (``ray://`` addresses included)."""
    host_port = address.split("://", 1)[-1].rstrip("/")
    host, _, port = host_port.rpartition(":")
    if not host or not port.isdigit():
        return False
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


def resolve_target(address: str | None, environ: dict[str, str] | None = None) -> RayTarget:
    """Decide which Ray to use; raises ConnectionProblem for a named address nobody answers at."""
    environ = os.environ if environ is None else environ
    named = [
        (value, source)
        for value, source in ((address, "--address"), (environ.get("RAY_ADDRESS"), "RAY_ADDRESS"))
        if value and value != "auto"
    ]  # ("auto": what Ray does with no address, below)
    for value, source in named[:1]:
        if value == "local":
            return RayTarget(None, "private")
        if not answers(value):
            raise ConnectionProblem(
                f"{source}={value}: no Ray cluster answers there within {PROBE_TIMEOUT_S:g} s; start it, fix the "
                "address, or use --address local for a private Ray"
            )
        return RayTarget(value, source)
    file = ray_address_file()
    try:
        found = file.read_text().strip()
    except OSError:
        return RayTarget(None, "private")
    if found and answers(found):
        return RayTarget(found, "ray start on this machine")
    return RayTarget(
        None,
        "private",
        warning=f"{file} names {found or 'nothing'}, where no Ray answers (a cluster that died without `ray stop`?); "
        "starting a private Ray instead",
    )


def prepare_private_ray_environment() -> None:
    """Settings for a private Ray, made before ``ray`` is imported (it reads them then). Token authentication
    (Ray's default for local clusters; saying so keeps its notice quiet), no usage reports off this machine, and
    Ray's worker processes started with the raylet rather than when the driver connects, so the run's first actors
    take processes that have already started and imported Ray. Those processes do not import torch before they take
    an actor (``RAY_preload_python_modules``): one of them goes to the coordinator, which needs no torch, and on two
    cores its import would slow the learner's and the workers' own (benchmarks/startup/startup.py measures it).

    A private Ray is one node that no other machine joins, so it registers at 127.0.0.1 and its servers listen there
    only: Ray would take the machine's own address (its rule for a node others may join) unless told, as it tells
    itself on macOS and Windows, that no other node will (docs/clusters.md: what listens where)."""
    import os

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_enable_worker_prestart", "1")


def agent_port_of_its_own() -> None:
    """A Ray this process starts (``ray.init``) lets its dashboard agent's HTTP server take any free port instead of
    Ray's fixed 52365. ``ray.init`` takes no such setting (``ray start --dashboard-agent-listen-port`` does), and where
    another Ray on the machine holds 52365 (a second run, a test session's Ray, a ``ray start`` cluster) the agent
    retries its bind for seconds, which the raylet waits out before it registers: the whole start-up waits with it
    (docs/performance.md, start-up). A private Ray's agent serves no job submission (it has no dashboard), so any port
    does. Applied once; Ray's own default stays for every ``RayParams`` given the port."""
    import functools

    from ray._private import parameter

    init = parameter.RayParams.__init__
    if getattr(init, "distrl_agent_port", False):
        return

    @functools.wraps(init)
    def any_free_agent_port(self, *args, **kwargs):
        kwargs.setdefault("dashboard_agent_listen_port", 0)
        init(self, *args, **kwargs)

    any_free_agent_port.distrl_agent_port = True
    parameter.RayParams.__init__ = any_free_agent_port
