"""SampleCoordinator: the actor that drives every rollout worker's sampling for the driver.

Whoever submits a Ray task owns its return objects and does the bookkeeping for each one
(locations, borrowers, freeing). With N workers and M learners that is N x (1 + M) objects
per iteration; done by the driver, its CPU per iteration grew with N. The coordinator takes
that work: the driver makes a constant number of calls per iteration (one ``sample``, one
``collect``, one update per learner) and passes along a few small objects that hold refs,
never the refs one by one. Learner r fetches the shards its object names.

``collect`` is also where a round's faults are handled, with a bound on every wait:

- a worker that died mid-sample (its process killed, its node lost) is restarted by Ray, and
  its sample is submitted again to the new incarnation once it answers (the round waits for it);
- a worker whose sample does not return within the timeout (a stuck env) is killed, Ray
  restarts it, and the round goes on without its batch: waiting for a replacement would add a
  restart and a whole sample to the iteration, and a stuck env may well get stuck again;
- a worker that Ray will no longer restart (``rollout.max_restarts`` spent, by deaths and
  timeouts alike) ends the run with ``WorkerFailure``.

Sample tasks are submitted with ``max_task_retries=0``: the retry is ours, so a sample killed
for its timeout is not run again by Ray on the restarted worker.
"""

from __future__ import annotations

import time

import ray

from distrl.common.errors import EnvFailure
from distrl.data.messages import SampleInfo, SampleReport
from distrl.rollout.stream import SampleStream, read_failed


class WorkerFailure(EnvFailure):
    """A rollout worker cannot go on: it died or timed out more often than ``rollout.max_restarts`` allows."""


class SampleCoordinator:
    def __init__(self, num_shards: int, env_id: str = "", max_restarts: int = 0, artifacts: list | None = None):
        """``artifacts``: ``[ObjectRef]`` to large compile artifacts, handed to workers by ``artifacts()``."""
        self.workers: list = []
        self.num_shards = num_shards
        self.env_id = env_id
        self.max_restarts = max_restarts
        self._artifacts = artifacts
        self.timeouts: list[int] = []  # per worker, in the whole run
        self.abandoned: list = []  # refs of killed samples: read once they fail, so Ray reports no unread errors

    def attach(self, workers: list) -> bool:
        """The workers to drive (created after the coordinator, which their constructors may ask for artifacts)."""
        self.workers = workers
        self.timeouts = [0] * len(workers)
        return True

    def artifacts(self) -> list | None:
        """``[ObjectRef]`` to the shared compile artifacts (a worker's constructor fetches them, after a restart too)."""
        return self._artifacts

    def _submit(self, index: int, round_: dict) -> tuple:
        world = self.num_shards
        league = round_["league"][0] if round_["league"] else None
        return self.workers[index].sample_shards.options(num_returns=1 + world, max_task_retries=0).remote(
            round_["weights"][0], world, league)

    def sample(self, weights: list, league: list | None = None) -> dict:
        """Start every worker's next sample; returns the round at once (its refs, owned here).

        ``weights`` is ``[ObjectRef]`` (wrapped, so it reaches the workers as a ref, not as a copy made here);
        ``league``, likewise, the league's matchmaking plan in a league run.
        """
        round_ = {"weights": weights, "league": league}
        round_["refs"] = [self._submit(i, round_) for i in range(len(self.workers))]
        return round_

    def collect(self, round_: dict, timeout_s: float) -> tuple:
        """Wait for a round's samples, each for at most ``timeout_s``; returns ``(report, shards of rank 0, ...)``.

        ``report``: ``infos`` of the workers whose batch is in (by worker index), ``timeouts`` (one
        ``{"worker", "waited_s"}`` per sample given up on) and ``resubmitted`` (workers that died mid-sample).
        """
        self._read_abandoned()
        refs = list(round_["refs"])
        start = time.monotonic()
        deadline = {i: start + timeout_s for i in range(len(refs))}
        pending = {refs[i][0]: i for i in range(len(refs))}
        infos: dict[int, SampleInfo] = {}
        timeouts, resubmitted = [], []
        while pending:
            wait_s = max(0.0, min(deadline[i] for i in pending.values()) - time.monotonic())
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait_s)
            for ref in ready:
                index = pending.pop(ref)
                try:
                    infos[index] = ray.get(ref)
                except ray.exceptions.ActorUnavailableError:  # it died, or was being restarted when the task came
                    resubmitted.append(index)
                    try:
                        self._wait_until_alive(index, deadline[index])
                    except ray.exceptions.ActorDiedError as exc:
                        raise self._lost(index, exc) from None
                    refs[index] = self._submit(index, round_)
                    pending[refs[index][0]] = index
                    deadline[index] = time.monotonic() + timeout_s
                except ray.exceptions.ActorDiedError as exc:  # Ray will not restart it again
                    raise self._lost(index, exc) from None
            now = time.monotonic()
            for ref, index in list(pending.items()):
                if now >= deadline[index]:
                    del pending[ref]
                    timeouts.append({"worker": index, "waited_s": round(now - (deadline[index] - timeout_s), 1)})
                    self.abandoned.extend(refs[index])
                    self.timeouts[index] += 1
                    ray.kill(self.workers[index], no_restart=False)  # Ray restarts it: a new process, a new env
        done = sorted(infos)
        report = SampleReport([infos[i] for i in done], timeouts, resubmitted)
        return (report, *(tuple(refs[i][1 + rank] for i in done) for rank in range(self.num_shards)))

    # --- the asynchronous pipeline: a stream of samples (stream.py) ----------------------------------
    def start_stream(self, weights: list, plan: list | None, timeout_s: float, max_queued: int,
                     started: list[int] | None = None) -> bool:  # fmt: skip
        """Every worker samples continuously from now on, with ``weights`` (``[ObjectRef]``, or ``[None]``: what the
        workers hold) until ``set_stream_weights`` names newer ones."""
        def submit(index, weights_ref, plan_ref):
            return self.workers[index].sample_shards.options(num_returns=1 + self.num_shards, max_task_retries=0).remote(
                weights_ref, self.num_shards, plan_ref)

        self.stream = SampleStream(self.workers, self.num_shards, submit, timeout_s, weights, plan, max_queued, started)
        return True

    def set_stream_weights(self, weights: list, plan: list | None, timeout_s: float) -> None:
        """The newest weights (``[ObjectRef]``, one object per update), league plan and sample bound for every sample
        sent from now on."""
        self.stream.set_weights(weights, plan, timeout_s)

    def gather(self, count: int, min_version: int, timeout_s: float) -> tuple:
        """The next ``count`` batches of policy version >= ``min_version``: ``(SampleReport, shards of rank 0, ...)``."""
        return self.stream.gather(count, min_version, timeout_s)

    def _wait_until_alive(self, index: int, deadline: float) -> None:
        """Until worker ``index`` answers again (a task sent while Ray restarts an actor fails at once), or the
        deadline passes (its next sample then times out as usual)."""
        while time.monotonic() < deadline:
            try:
                ray.get(self.workers[index].ready.remote(), timeout=max(0.1, deadline - time.monotonic()))
                return
            except ray.exceptions.ActorUnavailableError:
                time.sleep(0.2)
            except ray.exceptions.GetTimeoutError:
                return

    def _lost(self, index: int, exc: BaseException) -> WorkerFailure:
        timeouts = f"; it timed out {self.timeouts[index]} times (rollout.sample_timeout_s)" if self.timeouts[index] else ""
        return WorkerFailure(
            f"worker-{index} ({self.env_id}) cannot go on: Ray will not restart it again (rollout.max_restarts="
            f"{self.max_restarts}){timeouts}; last: {str(exc).strip().splitlines()[0][:120]}"
        )

    def _read_abandoned(self) -> None:
        self.abandoned = read_failed(self.abandoned)
