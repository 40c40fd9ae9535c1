"""A batch-sized tensor from one actor to another on another node: Ray's object store against Ray Direct Transport
over Gloo (``@ray.method(tensor_transport="gloo")``) and against a compiled graph (``experimental_compile``: the
sender's method bound to the receiver's, their channel set up once), on a two-node cluster on 127.0.0.1
(clusters/local_dev_cluster.py). A direct transfer that does not complete is recorded as failed, with Ray's error.

A sender on the rollout node makes a uint8 tensor of each size (MinAtar's batch of 8,192 env steps is about 14 MB,
Atari's of 1,024 about 30 MB); a receiver on the learner's node reads it (``ray.get`` of the ref passed in a list, as a
learner reads its shards) and returns its sum. Each call's time from the send to the receiver's answer, median of
``--repeats``: the object store's calls first, then the direct ones (a failed direct transfer kills both actors), then
the compiled graph's, between a pair of actors of its own (each actor takes half a CPU and half its node's role, so
both pairs fit the nodes).

    python benchmarks/scaling/direct_transport.py --results-dir benchmarks/results/batch_path
    python benchmarks/scaling/direct_transport.py --quick
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, markdown_table, start_study, study_parser
from clusters import local_dev_cluster

SIZES_MB = [0.25, 2, 14, 30]

# Run in a process joined to the cluster (this one may hold another Ray).
CHILD = r"""
import json, statistics, sys, time
import ray, torch
from ray.experimental.collective import create_collective_group

ray.init(address=sys.argv[1], configure_logging=False, log_to_driver=False)
sizes, repeats = json.loads(sys.argv[2]), int(sys.argv[3])

@ray.remote(num_cpus=0.5, resources={"rollout": 0.5})
class Sender:
    def make(self, nbytes):
        return torch.ones(nbytes, dtype=torch.uint8)
    @ray.method(tensor_transport="gloo")
    def make_direct(self, nbytes):
        return torch.ones(nbytes, dtype=torch.uint8)

# The receiver declares the transport too: without it Ray starts no thread to take a direct transfer in, and the
# sender's tensor waits out Ray's 60 s fetch timeout (ray-project/ray#66264).
@ray.remote(num_cpus=0.5, resources={"learner": 0.5}, enable_tensor_transport=True)
class Receiver:
    def read(self, refs):
        return int(ray.get(refs[0]).sum())
    def read_direct(self, tensor):
        return int(tensor.sum())

sender, receiver = Sender.remote(), Receiver.remote()
create_collective_group([sender, receiver], backend="torch_gloo")
def timed(call, nbytes):
    times = []
    for i in range(repeats + 1):  # the first is a warm-up
        began = time.perf_counter()
        assert ray.get(call(nbytes), timeout=120) == nbytes
        if i:
            times.append(1e3 * (time.perf_counter() - began))
    return statistics.median(times)

out = [{"mb": mb, "object store": timed(lambda n: receiver.read.remote([sender.make.remote(n)]), int(mb * 1e6))}
       for mb in sizes]
# Last: a failed direct transfer kills both actors (Ray's RDT gives up on them).
failed = None
for row in out:
    try:
        direct = lambda n: receiver.read_direct.remote(sender.make_direct.remote(n))  # noqa: E731
        row["direct (gloo)"] = timed(direct, int(row["mb"] * 1e6))
    except Exception as exc:  # Ray's own words for why, kept with the results
        failed = f"{row['mb']} MB: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
        break
for row in out:
    row.setdefault("direct (gloo)", None)

# A compiled graph: its channel sized once for the largest tensor, every size through the same graph.
from ray.dag import InputNode

@ray.remote(num_cpus=0.5, resources={"rollout": 0.5})
class GraphSender:
    def make(self, nbytes):
        return torch.ones(nbytes, dtype=torch.uint8)

@ray.remote(num_cpus=0.5, resources={"learner": 0.5})
class GraphReceiver:
    def read(self, tensor):
        return int(tensor.sum())

graph_sender, graph_receiver = GraphSender.remote(), GraphReceiver.remote()
with InputNode() as size:
    graph = graph_receiver.read.bind(graph_sender.make.bind(size))
compiled = graph.experimental_compile(_buffer_size_bytes=int(max(sizes) * 1e6) + (1 << 20))
for row in out:
    row["compiled graph"] = timed(lambda n: compiled.execute(n), int(row["mb"] * 1e6))
compiled.teardown(kill_actors=True)  # without the kill, teardown waits on the actors' execution loops
print("RESULT " + json.dumps({"rows": out, "direct_failed": failed}))
"""


def main() -> int:
    parser = study_parser(__doc__, "two sizes, three calls each", overrides=False)
    parser.add_argument("--repeats", type=int, default=10, help="calls per size and transport")
    args, info = start_study(parser)
    sizes, repeats = (SIZES_MB[:2], 3) if args.quick else (SIZES_MB, args.repeats)
    base = tempfile.mkdtemp(prefix="dt_", dir="/tmp")  # short: Ray's socket paths must fit 107 characters
    dev = local_dev_cluster.start(
        rollout_nodes=1, rollout_cpus=1, learner_cpus=1, temp_dir=os.path.join(base, "ray"), learner_node=True
    )
    try:
        args_ = [sys.executable, "-c", CHILD, dev.gcs_address, json.dumps(sizes), str(repeats)]
        result = subprocess.run(args_, cwd=ROOT, env=dev.env, capture_output=True, text=True, timeout=1200)
    finally:
        dev.shutdown()
        shutil.rmtree(base, ignore_errors=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode != 0 or not lines:
        raise SystemExit(f"the transfers failed:\n{result.stderr[-3000:]}")
    found = json.loads(lines[-1][len("RESULT ") :])
    rows = found["rows"]
    for row in rows:
        row["ratio"] = row["direct (gloo)"] / row["object store"] if row["direct (gloo)"] else None
        row["graph ratio"] = row["compiled graph"] / row["object store"]
    if found["direct_failed"]:
        print(f"the direct transfer failed: {found['direct_failed']}")
    columns = (
        "mb: MB | object store: object store ms | direct (gloo): direct (gloo) ms | "
        "ratio: direct / store | compiled graph: compiled graph ms | "
        "graph ratio: graph / store"
    )
    table = markdown_table(rows, columns)
    print(table)
    if found["direct_failed"]:
        table += f"\n\nThe direct transfer failed: {found['direct_failed']}"
    return finish(
        "direct_transport", args, info, rows, table=table, repeats=repeats, direct_failed=found["direct_failed"]
    )


if __name__ == "__main__":
    sys.exit(main())
