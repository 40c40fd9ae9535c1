"""A run's Ray actors: learners in one placement group, rollout workers, their start, restart and teardown.

Workers are restarted by Ray (``max_restarts``) and their interrupted sample retried; a
restarted worker draws a new random stream and acts with the weights of its next task.
Learners are rebuilt here instead: when one dies, every rank is replaced (a DDP group cannot
take a new member) in a new placement group and loaded with the newest state the driver
holds, so the interrupted update runs again on the same batch. The learners come first: when
their new group finds no room because workers hold it (a lost node's workers restarted where
the learner was to go), workers are evicted to make room, and each is replaced by a new actor
that starts once a node has room (as a worker range's do).
"""

from __future__ import annotations

import time

import ray
from ray._private.state import available_resources_per_node  # a developer API: free resources per node
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from distrl.common.log import get_logger
from distrl.config import Config
from distrl.driver.placement import (
    covers,
    fits,
    learner_bundle,
    learner_placement_group,
    wait_until_ready,
    worker_bundle,
    worker_options,
)
from distrl.rollout.coordinator import SampleCoordinator
from distrl.rollout.restarts import draining_nodes
from distrl.rollout.worker_actor import remote_worker_class

log = get_logger("driver")
LEARNER_FIRST_S = 10.0  # how long a rebuilt learners' group waits for room before workers are evicted for it


class RunActors:
    def __init__(self, config: Config, run_id: str, spaces: tuple, artifacts_ref, say, trial_group=None):
        """``trial_group``: a placement group made for this run by its caller (a Ray Tune trial's, from
        ``distrl.tune.trial_resources``): after the trial's own bundle, if it has one, the learners take one
        bundle each and the workers the next ones; the group is left to its owner at teardown."""
        self.config = config
        self.run_id = run_id
        self.spaces = spaces
        # Held for the whole run: a restarted worker is constructed again from this same reference.
        self.artifacts_ref = artifacts_ref
        self.say = say
        self.trial_group = trial_group
        self.placement_group = trial_group
        self.bundle_offset = 0
        if trial_group is not None:
            self.bundle_offset = (
                len(trial_group.bundle_specs) - config.learner.num_learners - config.rollout.max_workers
            )
            if self.bundle_offset not in (0, 1):
                raise ValueError(
                    f"the trial's placement group has {len(trial_group.bundle_specs)} bundles; this run needs "
                    f"{config.learner.num_learners} learner and {config.rollout.max_workers} worker bundles"
                )
        self.learners: list = []
        self.workers: list = []
        self.coordinator = None
        self.learner_device = "?"
        self.learner_info: dict = {}
        self.backend_infos: list[dict] = []
        self.started: list[int] = []  # workers constructed when the run started (a range's others come later)
        self.placement: dict[str, dict] = {}

    @property
    def world_size(self) -> int:
        return self.config.learner.num_learners

    def start(self, first_iteration: int) -> None:
        """Place the learners' group, create every actor, and wait until the workers and the coordinator are
        constructed (the learners go on starting: ``learners_ready`` waits for them)."""
        cfg = self.config
        timeout = cfg.cluster.placement_timeout_s
        if self.trial_group is None:  # the learners of one run are placed together, as one placement group
            self.placement_group = learner_placement_group(cfg)
            wait_until_ready(
                {f"learner placement group ({self.world_size} bundles)": self.placement_group.ready()},
                timeout,
                self.say,
            )
        # On the driver's node, on no resources: it only submits tasks and holds refs. It owns every batch in flight (a
        # Ray object dies with its owner's process; the bytes go to the learners' nodes, rollout/landing.py), so it must
        # live where the run lives: pinned to the driver's node (not soft: an actor that asks for nothing may otherwise
        # land on any node, and a worker node lost would take every batch with it). Not restartable: it holds nothing
        # that outlives an iteration, and the driver's node going down ends the run anyway. Threads: the next round is
        # submitted while `gather` waits on the current one (overlap); the async stream's `gather` waits while new
        # weights come in and restarted workers ask for artifacts. Created first: it also hands workers large compile
        # artifacts (a restartable actor given an object-store argument makes Ray warn that a restart could lose it; a
        # worker that asks the coordinator by name gets them after any restart).
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        coordinator_name = f"distrl-{self.run_id}-coordinator"
        large = isinstance(self.artifacts_ref, ray.ObjectRef)
        self.coordinator = (
            ray.remote(SampleCoordinator)
            .options(name=coordinator_name, num_cpus=0, scheduling_strategy=here, max_concurrency=4)
            .remote(
                self.world_size,
                cfg.env.id,
                cfg.rollout.max_restarts,
                [self.artifacts_ref] if large else None,
                self._learner_nodes(),
            )
        )
        # The learners next, then the workers: Ray starts one process per CPU ahead of time (the coordinator takes the
        # first) and the actor created after those waits for a new one to start. A learner is the start-up's
        # longest path (torch, its model, its first update); an onnxrt worker built from shipped artifacts imports no
        # torch and samples in about a second. A new run's workers hold the learners' initial weights, so the first
        # batch needs no learner (docs/performance.md, start-up, has what this order saves).
        self.learners = self._create_learners()
        self.workers = [self._new_worker(i, first_iteration) for i in range(cfg.rollout.max_workers)]
        ready = {f"worker-{i}": worker.backend_info.remote() for i, worker in enumerate(self.workers)}
        ready["coordinator"] = self.coordinator.attach.remote(self.workers)
        # A worker range: the run starts with min workers up; the rest start when a node with room joins.
        workers = {name: ref for name, ref in ready.items() if name.startswith("worker-")}
        wait_until_ready(
            {"coordinator": ready["coordinator"]}, timeout, self.say, optional=workers, enough=cfg.rollout.min_workers
        )
        done, _ = ray.wait(list(workers.values()), num_returns=len(workers), timeout=0)
        self.started = [i for i in range(cfg.rollout.max_workers) if workers[f"worker-{i}"] in done]
        self.backend_infos = ray.get([workers[f"worker-{i}"] for i in self.started])

    def _learner_nodes(self) -> list[str]:
        """The node each learner rank's bundle is placed on (the group is placed already): the batches' shards go
        there."""
        table = ray.util.placement_group_table(self.placement_group)["bundles_to_node_id"]
        return [table.get(rank + self.bundle_offset, "") for rank in range(self.world_size)]

    def _new_worker(self, index: int, seed_offset: int):
        """Worker ``index``'s actor (``seed_offset``: the iteration it starts at, so that a replacement draws a new
        stream). Large compile artifacts are asked of the coordinator by name; small ones travel as the argument."""
        large = isinstance(self.artifacts_ref, ray.ObjectRef)
        artifacts = f"distrl-{self.run_id}-coordinator" if large else self.artifacts_ref
        name = f"distrl-{self.run_id}-worker-{index}"
        options = {"name": name, **worker_options(self.config), **self._worker_bundle(index)}
        for attempt in range(50):
            try:
                return remote_worker_class().options(**options).remote(self.config, index, seed_offset, artifacts)
            except ValueError:  # the name of the actor it replaces, not released yet
                if attempt == 49:
                    raise
                time.sleep(0.2)

    def _worker_bundle(self, index: int) -> dict:
        """Inside a trial's group, worker ``index`` takes the bundle after the learners'."""
        if self.trial_group is None:
            return {}
        bundle = self.bundle_offset + self.world_size + index
        return {
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                self.trial_group, placement_group_bundle_index=bundle
            )
        }

    def learners_ready(self, learner_state_ref=None) -> None:
        """Wait until every learner is constructed, form the DDP group, load ``learner_state_ref`` (resume)."""
        ready = {f"learner-{rank}": learner.describe.remote() for rank, learner in enumerate(self.learners)}
        wait_until_ready(ready, self.config.cluster.placement_timeout_s, self.say)
        self._join_learners(learner_state_ref)
        self.learner_info = ray.get(ready["learner-0"])  # already resolved by wait_until_ready
        self.learner_device = self.learner_info["device"]
        self.placement = self._where()

    def _create_learners(self) -> list:
        from distrl.learner.policy_set import learner_class

        cfg = self.config
        learner_cls = ray.remote(learner_class(cfg))
        return [
            learner_cls.options(
                name=f"distrl-{self.run_id}-learner-{rank}",
                num_cpus=cfg.learner.num_cpus_per_learner,
                num_gpus=cfg.learner.num_gpus_per_learner,
                resources=dict(cfg.learner.resources) or None,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self.placement_group, placement_group_bundle_index=rank + self.bundle_offset
                ),
            ).remote(cfg, *self.spaces, rank, self.world_size)
            for rank in range(self.world_size)
        ]

    def _join_learners(self, learner_state_ref) -> None:
        """Form the DDP group (N > 1) and load ``learner_state_ref`` (resume or restart) into every rank."""
        if self.world_size > 1:
            address, port = ray.get(self.learners[0].rendezvous_address.remote())
            ray.get([learner.init_distributed.remote(address, port) for learner in self.learners])
        if learner_state_ref is not None:
            ray.get([learner.load_state.remote(learner_state_ref) for learner in self.learners])

    def _where(self) -> dict[str, dict]:
        names = [f"learner-{r}" for r in range(self.world_size)] + [f"worker-{i}" for i in self.started]
        spots = ray.get([actor.placement.remote() for actor in self.learners + [self.workers[i] for i in self.started]])
        return {name: {"actor": f"distrl-{self.run_id}-{name}", **spot} for name, spot in zip(names, spots)}

    def worker_joined(self, index: int) -> dict:
        """Where worker ``index`` runs, once it has started (a range's worker on a node that joined, or one Ray
        restarted elsewhere): recorded in ``placement`` and returned."""
        spot = {
            "actor": f"distrl-{self.run_id}-worker-{index}",
            **ray.get(self.workers[index].placement.remote(), timeout=60),
        }
        self.placement[f"worker-{index}"] = spot
        return spot

    def restart_learners(self, learner_state_ref, iteration: int = 0) -> None:
        """Replace every learner rank with a new actor holding ``learner_state_ref``, in a new placement group: the old
        one's node may be gone, and a new group lands on any node with room (the placement bound applies), made by
        evicting workers when they hold it (``iteration``: where their replacements start)."""
        for learner in self.learners:
            ray.kill(learner, no_restart=True)
        if self.trial_group is None:
            try:
                ray.util.remove_placement_group(self.placement_group)
            except Exception:  # gone with its node
                pass
            self.placement_group = learner_placement_group(self.config)
            evicted = self._make_room()
            wait_until_ready(
                {f"learner placement group ({self.world_size} bundles, rebuilt)": self.placement_group.ready()},
                self.config.cluster.placement_timeout_s,
                self.say,
            )
            for index in evicted:  # after the group holds its room: the new actor waits for a node with room
                self.workers[index] = self._new_worker(index, iteration + 1)
                ray.get(self.coordinator.replace.remote(index, self.workers[index]))
        self.learners = self._create_learners()
        ready = {
            f"learner-{rank} (restarted)": learner.device_name.remote() for rank, learner in enumerate(self.learners)
        }
        wait_until_ready(ready, self.config.cluster.placement_timeout_s, self.say)
        self._join_learners(learner_state_ref)
        ray.get(self.coordinator.learners_at.remote(self._learner_nodes()))
        spots = ray.get([learner.placement.remote() for learner in self.learners])
        for rank, spot in enumerate(spots):
            self.placement[f"learner-{rank}"].update(spot)

    def _make_room(self) -> list[int]:
        """While the learners' new group is not placed, evict the fewest workers that free a node that could hold a
        learner bundle (its labels; its free resources with theirs), until it is; returns the evicted workers. None
        evicted where evicting cannot make room (other jobs hold it): the group then waits for the cluster (an
        autoscaler may add a node) up to the placement bound."""
        ready = self.placement_group.ready()
        evicted: list[int] = []
        deadline = time.monotonic() + self.config.cluster.placement_timeout_s
        while not ray.wait([ready], timeout=LEARNER_FIRST_S)[0] and time.monotonic() < deadline:
            chosen = self._workers_in_the_way(evicted)
            if not chosen:
                break
            names = ", ".join(f"worker-{index}" for index in chosen)
            log.warning(
                f"the rebuilt learners found no room for {LEARNER_FIRST_S:g} s: {names} evicted to make room "
                "(the learners come first); each is replaced by a new worker that starts once a node has room"
            )
            for index in chosen:
                ray.get(self.coordinator.evict.remote(index))
                evicted.append(index)
        return evicted

    def _workers_in_the_way(self, evicted: list[int]) -> list[int]:
        """The fewest answering workers (highest-numbered first) whose resources, with a node's free ones, make room
        for a learner bundle on that live, non-draining node with the learners' labels; [] where none can."""
        bundle, labels = learner_bundle(self.config), dict(self.config.learner.node_labels)
        holds = worker_bundle(self.config)  # what one worker gives back
        draining = draining_nodes()
        nodes = {n["NodeID"] for n in ray.nodes() if n["NodeID"] not in draining and fits(bundle, labels, n)}
        free = available_resources_per_node()
        asked = {i: worker.placement.remote() for i, worker in enumerate(self.workers) if i not in evicted}
        done, _ = ray.wait(list(asked.values()), num_returns=len(asked), timeout=5.0)
        on_node: dict[str, list[int]] = {}
        for index, ref in asked.items():
            if ref in done:
                try:
                    node = ray.get(ref)["node_id"]
                except ray.exceptions.RayActorError:  # restarting or gone: holds nothing to give
                    continue
                if node in nodes:
                    on_node.setdefault(node, []).append(index)
        best: list[int] = []
        for node, indices in on_node.items():
            have, chosen = dict(free.get(node, {})), []
            for index in sorted(indices, reverse=True):
                if covers(have, bundle):
                    break
                chosen.append(index)
                for key, amount in holds.items():
                    have[key] = have.get(key, 0) + amount
            if covers(have, bundle) and chosen and (not best or len(chosen) < len(best)):
                best = chosen
        return best

    def teardown(self) -> None:
        """Kill every actor and release the placement group (safe to call twice, or after a failed start)."""
        for actor in self.workers + self.learners + ([self.coordinator] if self.coordinator is not None else []):
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # already gone
                pass
        self.workers, self.learners, self.coordinator = [], [], None
        if self.placement_group is not None and self.trial_group is None:
            try:
                ray.util.remove_placement_group(self.placement_group)
            except Exception:
                pass
            self.placement_group = None
