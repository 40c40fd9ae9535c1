"""LockstepRounds: the ``sync`` and ``overlap`` pipelines' sampler. Every worker samples once per round with the same
weights; the round is collected whole, each sample waited for within a bound. Held by the coordinator
(``coordinator.py``), with the run's membership (``membership.py``).

A round's faults, each bounded:

- a worker whose process died mid-sample is restarted by Ray on its node, and its sample is
  submitted again to the new incarnation once it answers (the round waits for it);
- a worker whose node is gone is not waited for: the round goes on without its batch, and later
  rounds leave it out (``workers_down``) until it answers again (Ray restarts it where there is
  room) or Ray gives it up (``workers_lost``; the run goes on with the others);
- a worker whose sample does not return within the timeout (a stuck env) is killed, Ray
  restarts it, and the round goes on without its batch: waiting for a replacement would add a
  restart and a whole sample to the iteration, and a stuck env may well get stuck again;
- a worker on a live node that Ray will no longer restart (``rollout.max_restarts`` spent, by
  deaths and timeouts alike) ends the run with ``WorkerFailure`` (the stream, instead, goes on without it);
- a worker evicted to make room for a rebuilt learner (``evict``: the learner comes first) is left
  out until its replacement, a new actor that waits for a node with room (``replace``), answers.

Sample tasks are submitted with ``max_task_retries=0``: the retry is ours, so a sample killed
for its timeout is not run again by Ray on the restarted worker.
"""

from __future__ import annotations

import time

import ray

from distrl.common.errors import EnvFailure
from distrl.data.messages import SampleInfo, SampleReport
from distrl.rollout.membership import Membership

NODE_CHECK_S = 1.0  # how often a wait for a restarting worker asks whether its node is still there


class WorkerFailure(EnvFailure):
    """A rollout worker cannot go on: it died or timed out more often than ``rollout.max_restarts`` allows."""


class LockstepRounds:
    def __init__(self, members: Membership, num_shards: int, env_id: str):
        """``members``: the run's membership (its lock guards every change: overlap's next ``sample`` runs beside this
        round's ``collect``, and ``evict``/``replace`` come from the driver at any time)."""
        self.members = members
        self.workers = members.workers
        self.lock = members.lock
        self.num_shards = num_shards
        self.env_id = env_id
        self.probes: dict[int, ray.ObjectRef] = {}  # the down workers' probes, read at each round's start

    def _submit(self, index: int, round_: dict) -> tuple:
        world = self.num_shards
        league = round_["league"][0] if round_["league"] else None
        return (
            self.workers[index]
            .sample_shards.options(num_returns=1 + world, max_task_retries=0)
            .remote(round_["weights"][0], world, league)
        )

    def sample(self, weights: list, league: list | None = None) -> dict:
        """Start every worker's next sample; returns the round at once (its refs, owned here).

        ``weights`` is ``[ObjectRef]`` (wrapped, so it reaches the workers as a ref, not as a copy made here);
        ``league``, likewise, the league's matchmaking plan in a league run.
        """
        with self.lock:
            self._read_probes()
            round_ = {"weights": weights, "league": league}
            round_["refs"] = [
                self._submit(i, round_) if self.members.samples(i) else None for i in range(len(self.workers))
            ]
        return round_

    def collect(self, round_: dict, timeout_s: float) -> tuple:
        """Wait for a round's samples, each for at most ``timeout_s``; returns ``(report, shards of rank 0, ...)``.

        ``report``: ``infos`` of the workers whose batch is in (by worker index), ``timeouts`` (one
        ``{"worker", "waited_s"}`` per sample given up on) and ``resubmitted`` (workers that died mid-sample).
        """
        self.members.read_abandoned()
        refs = list(round_["refs"])
        start = time.monotonic()
        deadline = {i: start + timeout_s for i in range(len(refs))}
        pending = {refs[i][0]: i for i in range(len(refs)) if refs[i] is not None}
        infos: dict[int, SampleInfo] = {}
        timeouts, resubmitted = [], []
        with self.lock:
            probes = list(self.probes.values())
        if not pending and probes:  # every worker's node is gone: wait a little for one to be back, not spin
            ray.wait(probes, num_returns=1, timeout=NODE_CHECK_S)
        while pending:
            wait_s = max(0.0, min(deadline[i] for i in pending.values()) - time.monotonic())
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait_s)
            for ref in ready:
                index = pending.pop(ref)
                try:
                    info = ray.get(ref)  # ready: no wait
                    with self.lock:
                        if not self.members.seen(index, info.incarnation):
                            raise self._lost(index, None)
                        infos[index] = info
                        self.members.sampled_on(index, info.node_id)
                except ray.exceptions.ActorUnavailableError:  # it died, or was being restarted when the task came
                    try:
                        answer = (
                            None if self.members.node_gone(index) else self._wait_until_alive(index, deadline[index])
                        )
                    except ray.exceptions.ActorDiedError as exc:
                        with self.lock:
                            self._died(index, exc)
                        continue
                    with self.lock:
                        if answer is None:  # its node is gone: not waited for
                            self._went_down(index)
                            continue
                        if answer and not self.members.seen(index, answer):
                            raise self._lost(index, None) from None
                        resubmitted.append(index)
                        refs[index] = self._submit(index, round_)
                    pending[refs[index][0]] = index
                    deadline[index] = time.monotonic() + timeout_s
                except ray.exceptions.ActorDiedError as exc:  # Ray will not restart it again
                    with self.lock:
                        self._died(index, exc)
            now = time.monotonic()
            with self.lock:
                for ref, index in list(pending.items()):
                    if now >= deadline[index]:
                        del pending[ref]
                        timeouts.append({"worker": index, "waited_s": round(now - (deadline[index] - timeout_s), 1)})
                        self.members.abandon(refs[index])
                        self.members.budget.timed_out(
                            index
                        )  # killed for a restart, or for good once its budget is spent
        done = sorted(infos)
        with self.lock:
            report = SampleReport([infos[i] for i in done], timeouts, resubmitted, **self.members.events())
        return (report, *(tuple(refs[i][1 + rank] for i in done) for rank in range(self.num_shards)))

    def _wait_until_alive(self, index: int, deadline: float) -> str | None:
        """Until worker ``index`` answers again (a task sent while Ray restarts an actor fails at once): its
        incarnation; "" once the deadline passes (its next sample then times out as usual); None as soon as its node
        is found gone (Ray calls a node dead after its health checks fail, and only then restarts its actors
        elsewhere)."""
        ref = self.workers[index].ready.remote()
        while time.monotonic() < deadline:
            try:
                return ray.get(ref, timeout=min(NODE_CHECK_S, max(0.1, deadline - time.monotonic())))
            except ray.exceptions.ActorUnavailableError:
                time.sleep(0.2)
                ref = self.workers[index].ready.remote()
            except ray.exceptions.GetTimeoutError:
                pass
            if self.members.node_gone(index):
                return None
        return ""

    def evict(self, index: int) -> None:
        """Worker ``index`` is being stopped for good (``SampleCoordinator.evict``): left out until ``replace``."""
        with self.lock:
            self.members.evict(index)
            self.probes.pop(index, None)

    def replace(self, index: int, worker) -> None:
        """``worker``: a new actor in evicted worker ``index``'s place: probed at each round's start until it
        answers."""
        with self.lock:
            self.members.replace(index, worker)
            self.probes[index] = worker.ready.remote()

    def _went_down(self, index: int) -> None:
        """Its node is gone: left out of rounds, probed each round until it answers (restarted elsewhere). Under
        ``self.lock``, as ``_died`` and ``_read_probes``."""
        self.members.went_down(index)
        self.probes[index] = self.workers[index].ready.remote()

    def _died(self, index: int, exc: BaseException) -> None:
        """Ray will not restart it: with its node gone, the run goes on without it (while any worker is left); on a
        live node, its restarts are spent and the run stops."""
        members = self.members
        if index in members.evicted:  # stopped by ``evict`` (already left out) and not replaced yet
            return
        if index in members.budget.killed:  # a task that ran as distrl killed it for a restart fails as died
            self._went_down(index)
            return
        if not members.node_gone(index) or len(members.lost) + 1 == len(self.workers):
            raise self._lost(index, exc) from None
        members.lose(index)

    def _read_probes(self) -> None:
        """The left-out workers that answer again rejoin the next round; those Ray gave up are lost for good."""
        if not self.probes:
            return
        index_of = {ref: index for index, ref in self.probes.items()}
        ready, _ = ray.wait(list(index_of), num_returns=len(index_of), timeout=0)
        for ref in ready:
            index = index_of[ref]
            try:
                self.members.seen(index, ray.get(ref))  # its node is gone: spends nothing
            except ray.exceptions.ActorUnavailableError:  # being restarted: asked again next round
                self.probes[index] = self.workers[index].ready.remote()
                continue
            except ray.exceptions.ActorDiedError:
                del self.probes[index]
                if index not in self.members.evicted:  # an evicted one stays down until its replacement answers
                    self.members.lose(index)
                continue
            del self.probes[index]
            self.members.back(index)  # a replacement answers: counted as any worker from now on

    def _lost(self, index: int, exc: BaseException | None) -> WorkerFailure:
        spent = self.members.budget.describe(index)
        last = f"; last: {str(exc).strip().splitlines()[0][:120]}" if exc is not None else ""
        return WorkerFailure(
            f"worker-{index} ({self.env_id}) cannot go on: it is not restarted again (rollout.max_restarts="
            f"{self.members.budget.limit}){'; ' + spent if spent else ''}{last}"
        )
