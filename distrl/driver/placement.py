"""Placing actors: resource checks, the learners' placement group, and waiting for an autoscaler visibly.

A local Ray (started by ``distrl train``) cannot grow, so a request it cannot hold is an
immediate error naming the key to change. A cluster joined by address may autoscale, so
distrl waits for it, printing what is still missing, up to ``cluster.placement_timeout_s``.
"""

from __future__ import annotations

import time

import ray
from ray.util.placement_group import PlacementGroup, placement_group

from distrl.common.errors import PlacementError
from distrl.config import Config

REPORT_EVERY_S = 10.0


def worker_options(config: Config) -> dict:
    r = config.rollout
    # A sample interrupted by the worker's death is submitted again by the coordinator (rollout/coordinator.py),
    # not retried by Ray: a sample killed for its timeout must not run again on the restarted worker. Ray restarts
    # workers without limit; rollout.max_restarts is kept by the coordinator (rollout/restarts.py), which does not
    # count a restart whose node was lost.
    options = {"num_cpus": r.num_cpus_per_worker, "max_restarts": -1, "max_task_retries": 0}
    if r.num_gpus_per_worker:
        options["num_gpus"] = r.num_gpus_per_worker
    if r.resources:
        options["resources"] = dict(r.resources)
    if r.node_labels:
        options["label_selector"] = dict(r.node_labels)
    return options


def _bundle(cpus: float, gpus: float, resources: dict) -> dict:
    bundle = {"CPU": cpus, **resources}
    if gpus:
        bundle["GPU"] = gpus
    return bundle


def worker_bundle(config: Config) -> dict:
    """What one worker holds: its CPUs, its GPU share, its custom resources."""
    r = config.rollout
    return _bundle(r.num_cpus_per_worker, r.num_gpus_per_worker, r.resources)


def learner_bundle(config: Config) -> dict:
    ln = config.learner
    return _bundle(ln.num_cpus_per_learner, ln.num_gpus_per_learner, ln.resources)


def learner_placement_group(config: Config) -> PlacementGroup:
    n = config.learner.num_learners
    labels = [dict(config.learner.node_labels)] * n if config.learner.node_labels else None
    return placement_group(
        [learner_bundle(config)] * n, strategy=config.learner.placement_strategy, bundle_label_selector=labels
    )


def covers(have: dict[str, float], request: dict[str, float]) -> bool:
    """Whether resources ``have`` hold ``request``."""
    return all(have.get(k, 0) >= v for k, v in request.items())


def fits(request: dict[str, float], labels: dict[str, str], node: dict) -> bool:
    """Whether ``node`` (an entry of ``ray.nodes()``) is alive, has ``labels`` and could ever hold ``request``."""
    node_labels = node.get("Labels", {}) or {}
    return (
        node.get("Alive", False)
        and all(node_labels.get(k) == v for k, v in labels.items())
        and covers(node.get("Resources", {}), request)
    )


def _fits_somewhere(request: dict[str, float], labels: dict[str, str], nodes: list[dict]) -> bool:
    return any(fits(request, labels, node) for node in nodes)


def impossible_requests(config: Config) -> list[str]:
    """What the cluster as it is now can never hold, each naming the config key to change."""
    nodes = ray.nodes()
    problems = shortfalls(config, ray.cluster_resources())
    r, ln = config.rollout, config.learner
    worker_request = worker_bundle(config)
    if r.node_labels and not _fits_somewhere(worker_request, r.node_labels, nodes):
        problems.append(f"rollout.node_labels={r.node_labels}: no node with these labels can hold a worker")
    if ln.node_labels and not _fits_somewhere(learner_bundle(config), ln.node_labels, nodes):
        problems.append(f"learner.node_labels={ln.node_labels}: no node with these labels can hold a learner")
    return problems


def this_machine(config: Config) -> dict[str, float]:
    """What a private Ray started here will have: Ray's own count of this machine's CPUs (a container's quota
    included) and, where the config asks for GPUs, torch's count of CUDA devices."""
    try:
        from ray._private.utils import get_num_cpus

        cpus = float(get_num_cpus())
    except Exception:  # Ray moved its helper: the count Ray falls back to
        import os

        cpus = float(os.cpu_count() or 1)
    machine = {"CPU": cpus, "GPU": 0.0}
    if config.learner.num_gpus_per_learner or config.rollout.num_gpus_per_worker:
        import torch

        machine["GPU"] = float(torch.cuda.device_count())
    return machine


def shortfalls(config: Config, total: dict[str, float], where: str = "this Ray cluster") -> list[str]:
    """What ``total`` resources can never hold of the config's CPUs, GPUs and custom resources, each naming the
    config key to change."""
    problems = []
    ln, r = config.learner, config.rollout
    need_gpu = ln.num_learners * ln.num_gpus_per_learner
    if need_gpu > total.get("GPU", 0):
        problems.append(
            f"learner.num_gpus_per_learner={ln.num_gpus_per_learner:g} needs {need_gpu:g} GPUs but {where} "
            f"has {total.get('GPU', 0):g}; set it to 0 or connect to a cluster with GPUs"
        )
    elif r.num_gpus_per_worker and need_gpu + r.min_workers * r.num_gpus_per_worker > total.get("GPU", 0):
        problems.append(
            f"rollout.num_workers={r.describe_workers()} x rollout.num_gpus_per_worker={r.num_gpus_per_worker:g}"
            + (
                f" + learner.num_learners={ln.num_learners} x learner.num_gpus_per_learner={ln.num_gpus_per_learner:g}"
                if need_gpu
                else ""
            )
            + f" needs {need_gpu + r.min_workers * r.num_gpus_per_worker:g} GPUs but {where} has "
            f"{total.get('GPU', 0):g}; lower the shares (a learner and its workers can share a GPU: e.g. 0.5 and 0.05)"
        )
    need_cpu = r.min_workers * r.num_cpus_per_worker + ln.num_learners * ln.num_cpus_per_learner  # a range: its min
    if need_cpu > total.get("CPU", 0):
        problems.append(
            f"rollout.num_workers={r.describe_workers()} x rollout.num_cpus_per_worker={r.num_cpus_per_worker:g} + "
            f"learner.num_learners={ln.num_learners} x learner.num_cpus_per_learner={ln.num_cpus_per_learner:g} "
            f"needs {need_cpu:g} CPUs but {where} has {total.get('CPU', 0):g}; lower them or use fractional "
            "CPUs"
        )
    for key, resources, count in (
        ("rollout.resources", r.resources, r.min_workers),
        ("learner.resources", ln.resources, ln.num_learners),
    ):
        for name, amount in resources.items():
            if amount * count > total.get(name, 0):
                problems.append(
                    f"{key}={{{name}: {amount:g}}}: needs {amount * count:g} '{name}' but {where} has "
                    f"{total.get(name, 0):g}"
                )
    return problems


def wait_until_ready(
    pending: dict[str, ray.ObjectRef], timeout_s: float, say, optional: dict | None = None, enough: int = 0
) -> None:
    """Wait for every named readiness ref in ``pending`` and at least ``enough`` of ``optional``, saying what is still
    missing; PlacementError at the timeout."""
    start = last_report = time.monotonic()
    remaining = {**pending, **(optional or {})}
    needed = len(pending) + min(enough, len(optional or {})) if optional else len(pending)
    ready = 0
    while remaining:
        done, _ = ray.wait(list(remaining.values()), num_returns=len(remaining), timeout=1.0)
        for ref in done:
            ray.get(ref)  # raises the actor's own construction error, if any
        ready += len(done)
        remaining = {name: ref for name, ref in remaining.items() if ref not in done}
        if not remaining or (ready >= needed and not any(name in remaining for name in pending)):
            return
        elapsed = time.monotonic() - start
        if elapsed >= timeout_s:
            raise PlacementError(
                f"cluster.placement_timeout_s={timeout_s:g}: {', '.join(remaining)} still not placed; the cluster has "
                f"{_free_summary()} free. Check the node types' resources and labels against rollout.* and learner.*"
            )
        if time.monotonic() - last_report >= REPORT_EVERY_S:
            last_report = time.monotonic()
            say(
                f"waiting for resources ({elapsed:.0f}/{timeout_s:g} s): {', '.join(remaining)} not placed yet; "
                f"free now: {_free_summary()}"
            )


def _free_summary() -> str:
    free = ray.available_resources()
    keys = [
        k for k in free if not k.startswith(("node:", "bundle_group_")) and k not in ("memory", "object_store_memory")
    ]
    return ", ".join(f"{k} {free[k]:g}" for k in sorted(keys)) or "nothing"
