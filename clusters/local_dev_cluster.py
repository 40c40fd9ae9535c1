"""A real multi-node Ray cluster on one machine, for development: a head plus extra raylets on 127.0.0.1.

Each raylet is its own node with its own resources and labels, so placement behaves as on
a cluster: the head is the 'learner' node, the others are 'rollout' nodes. Token
authentication is on; the token is generated here unless RAY_AUTH_TOKEN is set, and is
passed through the environment, never written to disk. Everything lives under a private
temp dir, so stopping kills exactly this cluster's processes and no other Ray.

    python clusters/local_dev_cluster.py             # prints the addresses and token; Ctrl-C stops it
    export RAY_AUTH_MODE=token RAY_AUTH_TOKEN=...     # as printed
    ray job submit --address http://127.0.0.1:PORT --working-dir . -- distrl train configs/cartpole.yaml
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil


def ray_command() -> str:
    """The ``ray`` command of this interpreter (beside ``sys.executable``), so a venv need not be activated."""
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.exists() else (shutil.which("ray") or "ray")


# Listening ports are picked between Ray's worker ports (10002-19999) and the kernel's ephemeral range (32768 on):
# a port the kernel handed out (bind to 0) can be taken again as the local end of any outgoing connection in the
# seconds before the Ray daemon that was given it binds it, and that daemon then never listens.
PORT_RANGE = (20000, 32767)
_handed_out: set[int] = set()


def free_port() -> int:
    """A port free on 127.0.0.1 now, outside the ephemeral range, not handed out before by this process."""
    rng = random.SystemRandom()
    for _try in range(1000):
        port = rng.randint(*PORT_RANGE)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {PORT_RANGE[0]}-{PORT_RANGE[1]} on 127.0.0.1")


@dataclass
class DevCluster:
    temp_dir: str
    gcs_port: int
    dashboard_port: int
    token: str
    env: dict = field(repr=False)

    @property
    def gcs_address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def processes(self) -> list[psutil.Process]:
        """Every live process of this cluster: those naming its temp dir or GCS port, and their children."""
        found: dict[int, psutil.Process] = {}
        for proc in psutil.process_iter(["cmdline"]):
            try:
                cmdline = " ".join(proc.info["cmdline"] or [])
                if self.temp_dir in cmdline or f":{self.gcs_port}" in cmdline:
                    found[proc.pid] = proc
                    for child in proc.children(recursive=True):
                        found[child.pid] = child
            except psutil.Error:
                continue
        return [p for p in found.values() if _alive(p)]

    def shutdown(self) -> None:
        """SIGTERM, then SIGKILL, every process of this cluster; again until none is left (a busy machine can
        let one slip past a single listing, or a daemon spawn a child meanwhile). The grace is short: the GCS
        and the raylets wait out their own drain on SIGTERM (9-20 s here), and this cluster is thrown away whole."""
        for _round in range(5):
            procs = self.processes()
            if not procs:
                return
            for proc in procs:
                try:
                    proc.terminate()
                except psutil.Error:
                    pass
            _, alive = psutil.wait_procs(procs, timeout=SHUTDOWN_GRACE_S)
            for proc in alive:
                try:
                    proc.kill()
                except psutil.Error:
                    pass
            psutil.wait_procs(alive, timeout=5)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def start(
    rollout_nodes: int = 1,
    rollout_cpus: int = 2,
    learner_cpus: int = 1,
    learner_gpus: int = 0,
    temp_dir: str | None = None,
    learner_cores: str | None = None,
    rollout_cores: str | None = None,
    learner_node: bool = False,
) -> DevCluster:
    """Start the cluster; ``temp_dir`` (default: a new one under /tmp) is where `ray start` writes its address file.
    ``learner_cores`` / ``rollout_cores`` (``taskset`` lists, e.g. "0" and "1"): the cores the head's / the rollout
    nodes' processes run on (default: all), so that nodes on one machine do not share cores, as separate machines
    do not. ``learner_node``: the learner's CPUs and GPUs on a node of their own (index ``rollout_nodes + 1``), the
    head keeping none, as a cluster whose driver runs on a small head does."""
    temp_dir = temp_dir or tempfile.mkdtemp(prefix="rdev_", dir="/tmp")  # short: Ray's socket paths must fit 107 chars
    env, token = cluster_env(temp_dir)
    return start_retrying(
        "dev cluster",
        lambda: _start_once(
            env,
            token,
            temp_dir,
            rollout_nodes,
            rollout_cpus,
            learner_cpus,
            learner_gpus,
            learner_cores,
            rollout_cores,
            learner_node,
        ),
    )


def cluster_env(temp_dir: str) -> tuple[dict, str]:
    """The environment a cluster's processes start with, and its token (``RAY_AUTH_TOKEN``'s, or a new one)."""
    token = os.environ.get("RAY_AUTH_TOKEN") or secrets.token_hex(32)
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
        "RAY_USAGE_STATS_ENABLED": "0",
        "TMPDIR": temp_dir,
    }  # its processes' own temp files (the dashboard's forkserver socket) go with it
    # A node lost on loopback is refused at once, so the GCS may call it dead after 3 missed checks a second apart
    # (~3 s; Ray's defaults, 5 at 3 s, take ~15 s). A node that is merely slow still has each check's 10 s timeout.
    env.setdefault("RAY_health_check_period_ms", "1000")
    env.setdefault("RAY_health_check_failure_threshold", "3")
    # Each raylet's metrics (object_transfers reads them) reported every second, not every 10.
    env.setdefault("RAY_metrics_report_interval_ms", "1000")
    # This interpreter's bin first: job entrypoints that say `python` or `distrl` get the same environment.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("RAY_ADDRESS", None)
    return env, token


AGENT_WAIT_S = 120  # how long a head's job agent may take to listen
SHUTDOWN_GRACE_S = 2  # SIGTERM to SIGKILL when the cluster is stopped


class AgentNeverListened(Exception):
    pass


def start_retrying(what: str, start_once) -> DevCluster:
    """``start_once()`` (a head on fresh ports, and its nodes), and once more where its job agent never listened.
    Seen once in CI, on a loaded 2-core machine (cause not known; the agent's log comes with the error)."""
    for attempt in (1, 2):
        try:
            return start_once()
        except AgentNeverListened as exc:
            failure = exc
            if attempt == 1:
                print(f"starting the {what} again: {exc}", file=sys.stderr, flush=True)
    raise RuntimeError(f"starting the {what} failed: {failure}") from None


def wait_for_agent(cluster: DevCluster, agent_port: int) -> None:
    """Wait for the head's job agent (job submission goes through it); where it never listens, raise
    ``AgentNeverListened`` with the tail of the agent's log (``stopped_on_failure`` then stops the cluster)."""
    try:
        _wait_for_port(agent_port, timeout_s=AGENT_WAIT_S)
    except TimeoutError as exc:
        log = _log_tail(Path(cluster.temp_dir) / "session_latest" / "logs" / "dashboard_agent.log")
        raise AgentNeverListened(f"{exc}; the head's dashboard_agent.log ends: {log}") from None


def _start_once(
    env: dict,
    token: str,
    temp_dir: str,
    rollout_nodes: int,
    rollout_cpus: int,
    learner_cpus: int,
    learner_gpus: int,
    learner_cores: str | None,
    rollout_cores: str | None,
    learner_node: bool = False,
) -> DevCluster:
    gcs_port, dashboard_port, agent_port = free_port(), free_port(), free_port()
    cluster = DevCluster(temp_dir, gcs_port, dashboard_port, token, env)
    common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats"]
    ray = ray_command()
    head = [
        ray,
        "start",
        "--head",
        f"--port={gcs_port}",
        f"--temp-dir={temp_dir}",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}",
        f"--dashboard-agent-listen-port={agent_port}",
        *(["--num-cpus=0", "--num-gpus=0"] if learner_node else learner_role(learner_cpus, learner_gpus)),
        *common,
    ]
    with stopped_on_failure(cluster, "dev cluster"):
        ray_start(on_cores(head, learner_cores), env, clean_up=cluster.shutdown)
        for index in range(1, rollout_nodes + 1):
            add_rollout_node(cluster, index, rollout_cpus, rollout_cores)
        if learner_node:
            add_node(cluster, rollout_nodes + 1, learner_role(learner_cpus, learner_gpus), learner_cores)
        wait_for_agent(cluster, agent_port)
    return cluster


@contextlib.contextmanager
def stopped_on_failure(cluster: DevCluster, what: str):
    """Whatever stops a cluster's start (a failed `ray start`, its agent never listening, a SIGTERM or Ctrl-C while it
    starts) stops every process of it that has started; a failed `ray start` is reported with its stderr's end."""
    try:
        yield
    except subprocess.CalledProcessError as exc:
        cluster.shutdown()
        raise RuntimeError(f"starting the {what} failed: {exc.stderr[-2000:]}") from None
    except BaseException:
        cluster.shutdown()
        raise


def _log_tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:] or "(empty)"
    except OSError as exc:
        return f"(unreadable: {exc.strerror})"


def learner_role(cpus: int, gpus: int) -> list[str]:
    """`ray start` options of the node the learner runs on."""
    return [
        f"--num-cpus={cpus}",
        f"--num-gpus={gpus}",
        "--resources=" + json.dumps({"learner": 1}),
        "--labels=distrl-role=learner",
    ]


def add_rollout_node(cluster: DevCluster, index: int, cpus: int, cores: str | None = None) -> None:
    """Start rollout node ``index`` (its own raylet, temp dir ``TEMP/nINDEX``): a machine joining the cluster;
    ``cores``: the cores its processes run on (default: all)."""
    role = [f"--num-cpus={cpus}", "--resources=" + json.dumps({"rollout": cpus}), "--labels=distrl-role=rollout"]
    add_node(cluster, index, role, cores)


def add_node(cluster: DevCluster, index: int, role: list[str], cores: str | None = None) -> None:
    """Start node ``index`` with the `ray start` options of its ``role`` (its CPUs, resources, labels)."""
    node = [
        ray_command(),
        "start",
        f"--address={cluster.gcs_address}",
        *role,
        # A temp dir of its own, as a separate machine has: raylets sharing one session dir share the
        # jobs' unpacked --working-dir too, and one raylet's clean-up deletes another's job directory.
        f"--temp-dir={cluster.temp_dir}/n{index}",
        # a second raylet on this machine needs agent ports of its own
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
        "--node-ip-address=127.0.0.1",
        "--disable-usage-stats",
    ]
    ray_start(on_cores(node, cores), cluster.env, clean_up=lambda: kill_rollout_node(cluster, index))


def on_cores(command: list[str], cores: str | None) -> list[str]:
    """``command`` run on ``cores`` only (``taskset``; the daemons `ray start` leaves and every process they start
    inherit it), or as it is when ``cores`` is None."""
    return command if cores is None else ["taskset", "-c", cores, *command]


# What `ray start` says when a raylet misses Ray's fixed 30 s to register with the GCS: a busy machine (the
# processes of the cluster before it still winding down, say), not a broken set-up.
SLOW_START = "timed out during startup"


def ray_start(command: list[str], env: dict, clean_up, attempts: int = 3, pause_s: float = 5.0) -> None:
    """Run ``command`` (a ``ray start``), again after a start that timed out; ``clean_up`` first kills what the
    failed try left running, so a late raylet cannot join as a second node. Any other failure raises at once."""
    for attempt in range(1, attempts + 1):
        try:
            subprocess.run(command, env=env, check=True, capture_output=True, text=True)
            return
        except subprocess.CalledProcessError as exc:
            if attempt == attempts or SLOW_START not in (exc.stderr or ""):
                raise
            print(f"ray start timed out (try {attempt} of {attempts}); starting it again", file=sys.stderr, flush=True)
            clean_up()
            time.sleep(pause_s)  # a moment for what kept the machine busy to pass


# Ray's own per-node counters of object transfers (the raylet's object manager), read off each node's metrics endpoint.
TRANSFERS = (
    "import json, re, urllib.request, ray\n"
    "ray.init(address={address!r}, configure_logging=False, log_to_driver=False)\n"
    "out = {{}}\n"
    "for node in ray.nodes():\n"
    "    if not node['Alive']: continue\n"
    "    url = 'http://127.0.0.1:%d/metrics' % node['MetricsExportPort']\n"
    "    text = urllib.request.urlopen(url, timeout=10).read().decode()\n"
    "    found = re.findall(r'ray_object_manager_bytes\\{{[^}}]*Type=\"(\\w+)\"[^}}]*\\}} (\\S+)', text)\n"
    "    out[node['NodeID']] = {{kind: float(value) for kind, value in found}}\n"
    "print(json.dumps(out))\n"
)


def object_transfers(cluster: DevCluster) -> dict[str, dict[str, float]]:
    """Each live node's object-manager bytes so far, by node id: ``Received`` (pulled into its object store from
    other nodes), ``PushedFromLocalPlasma`` (sent to others). Read in a process of its own (the caller may hold another
    Ray); a raylet reports its metrics every ``RAY_metrics_report_interval_ms`` (``cluster_env``: 1 s)."""
    code = TRANSFERS.format(address=cluster.gcs_address)
    result = subprocess.run([sys.executable, "-c", code], env=cluster.env, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"reading the nodes' transfer counters failed: {result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def kill_rollout_node(cluster: DevCluster, index: int) -> int:
    """SIGKILL every process of rollout node ``index`` (its raylet, object store, agents and workers), as a spot
    preemption ends a machine; returns how many there were."""
    marker = f"{cluster.temp_dir}/n{index}"
    procs: list[psutil.Process] = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if marker in " ".join(proc.info["cmdline"] or []):
                procs += [proc, *proc.children(recursive=True)]
        except psutil.Error:
            continue
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=30)
    return len(procs)


def _wait_for_port(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout_s:g} s")


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollout-nodes", type=int, default=1)
    parser.add_argument("--rollout-cpus", type=int, default=2)
    parser.add_argument("--learner-cpus", type=int, default=1)
    parser.add_argument(
        "--learner-cores", help="the cores the head's processes run on (taskset list, e.g. 0); default all"
    )
    parser.add_argument("--rollout-cores", help="the cores the rollout nodes' processes run on (e.g. 1-3); default all")
    args = parser.parse_args(argv)
    # SIGTERM (`kill`, a process manager) stops the cluster as Ctrl-C does, during its start too.
    signal.signal(signal.SIGTERM, _interrupt)
    dev = start(
        args.rollout_nodes,
        args.rollout_cpus,
        args.learner_cpus,
        learner_cores=args.learner_cores,
        rollout_cores=args.rollout_cores,
    )
    print(f"GCS address:     {dev.gcs_address}")
    print(f"dashboard / job: {dev.dashboard_url}")
    print(f"export RAY_AUTH_MODE=token RAY_AUTH_TOKEN={dev.token}")
    print(f"temp dir:        {dev.temp_dir} (the nodes' logs; kept after the cluster stops)")
    print("Ctrl-C or SIGTERM stops the cluster.", flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        dev.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
