"""A worker evicted to make room for a rebuilt learner (``SampleCoordinator.evict``, called by ``RunActors`` when the
learners' new placement group finds no room): left out of the rounds (sync, overlap) and of the stream (async), no
error raised, until ``replace`` hands over a new actor that answers. On real actors; the whole path through a run on
a multi-node cluster is in tests/test_nodes.py."""

import time

import pytest

from distrl.config import load_config
from distrl.rollout import SampleCoordinator, remote_worker_class

SMALL = [
    "env.num_envs_per_worker=4",
    "rollout.rollout_length=64",
    "rollout.num_workers=2",
    "rollout.compile.backend=eager",
    "ppo.minibatch_size=32",
]


def actors(ray, pipeline: str):
    config = load_config(None, [*SMALL, f"rollout.pipeline={pipeline}"])

    def worker(index: int, seed_offset: int = 0):
        return remote_worker_class().options(num_cpus=0.1, max_restarts=-1).remote(config, index, seed_offset)

    coordinator = ray.remote(SampleCoordinator).options(num_cpus=0, max_concurrency=4).remote(1, config.env.id)
    workers = [worker(i) for i in range(2)]
    ray.get(coordinator.attach.remote(workers))
    return coordinator, workers, worker


def rounds(ray, coordinator, pipeline: str):
    """Round after round of a sync or overlap sampler: each call releases the update on the round before (weights
    unchanged) and gathers the next round; ``evict``: a worker evicted while that round's samples are in flight."""
    ray.get(coordinator.start_stream.remote([None], None, 60.0, 0, None, pipeline))
    number = -1

    def next_round(evict: int | None = None):
        nonlocal number
        if number >= 0:
            coordinator.release.remote(number, None, None, 60.0)
        number += 1
        if evict is not None:
            ray.get(coordinator.evict.remote(evict))
        running = number - 1 if number > 0 else None  # the update whose round this gather follows
        report, _ = ray.get(coordinator.gather.options(num_returns=2).remote(0, 0, 60.0, running))
        return report

    return next_round


def kill_all(ray, handles):
    for actor in handles:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:
            pass


def test_rounds_leave_out_an_evicted_worker_until_its_replacement_answers(ray_local):
    ray = ray_local
    coordinator, workers, worker = actors(ray, "sync")
    replacement = None
    round_ = rounds(ray, coordinator, "sync")
    try:
        first = round_()
        assert [info.worker_index for info in first.infos] == [0, 1]
        report = round_(evict=1)  # its sample fails as the actor dies: no WorkerFailure, nothing resubmitted
        assert report.workers_down == [1] and report.workers_lost == [] and report.resubmitted == []
        assert 0 in [info.worker_index for info in report.infos]
        with pytest.raises(ray.exceptions.RayActorError):  # gone for good: Ray does not restart it
            ray.get(workers[1].ready.remote(), timeout=60)
        report = round_()
        assert [info.worker_index for info in report.infos] == [0] and report.workers_down == []
        replacement = worker(1, seed_offset=7)
        ray.get(coordinator.replace.remote(1, replacement))
        ray.get(replacement.ready.remote(), timeout=120)
        for _ in range(20):  # it joins the round after it answers
            report = round_()
            if report.workers_back:
                break
            time.sleep(0.2)
        assert report.workers_back == [1], report
        report = round_()
        infos = {info.worker_index: info for info in report.infos}
        assert sorted(infos) == [0, 1]
        old = {info.worker_index: info for info in first.infos}
        assert infos[1].incarnation != old[1].incarnation and infos[1].seed != old[1].seed
    finally:
        kill_all(ray, [coordinator, *workers, *([replacement] if replacement else [])])


def test_the_stream_leaves_out_an_evicted_worker_until_its_replacement_answers(ray_local):
    ray = ray_local
    coordinator, workers, worker = actors(ray, "async")
    replacement = None

    def gather(count: int):
        report, _ = ray.get(coordinator.gather.options(num_returns=2).remote(count, 0, 60.0))
        return report

    try:
        ray.get(coordinator.start_stream.remote([None], None, 60.0, 4))
        old = ray.get(workers[1].ready.remote())
        assert len(gather(4).infos) == 4
        ray.get(coordinator.evict.remote(1))
        report = gather(4)
        assert report.workers_down == [1] and report.workers_lost == [], report
        gather(8)  # whatever worker-1 had queued or in copy before (at most an update's worth and one more each)
        report = gather(4)
        assert {info.worker_index for info in report.infos} == {0} and report.workers_lost == []
        replacement = worker(1, seed_offset=7)
        ray.get(coordinator.replace.remote(1, replacement))
        new = ray.get(replacement.ready.remote(), timeout=120)
        seen_back, incarnations = [], set()
        for _ in range(20):
            report = gather(2)
            seen_back += report.workers_back
            incarnations |= {info.incarnation for info in report.infos if info.worker_index == 1}
            if new in incarnations:
                break
        assert seen_back == [1] and incarnations == {new} and old != new
    finally:
        kill_all(ray, [coordinator, *workers, *([replacement] if replacement else [])])


@pytest.mark.slow
def test_rounds_beside_evictions_read_a_returning_workers_probe_once(ray_local):
    """Overlap starts the next round as this one is in, while the driver's evictions and replacements come from
    threads of their own in the coordinator: a worker that answers again is reported back once, joins a round, and no
    round fails on the membership another call changed meanwhile."""
    ray = ray_local
    coordinator, workers, worker = actors(ray, "overlap")
    replacements = []
    round_ = rounds(ray, coordinator, "overlap")
    try:
        for cycle in range(6):  # without the lock a cycle in five or so failed
            ray.get(coordinator.evict.remote(1))
            replacement = worker(1, seed_offset=cycle + 1)
            replacements.append(replacement)
            ray.get(coordinator.replace.remote(1, replacement))
            ray.get(replacement.ready.remote(), timeout=120)
            time.sleep(0.5)  # its probe has answered: the next rounds' samples all find it ready
            reports = [round_() for _ in range(8)]
            backs = [report.workers_back for report in reports if report.workers_back]
            assert backs == [[1]], (cycle, [(r.workers_back, r.workers_down) for r in reports])
            assert any(1 in [info.worker_index for info in report.infos] for report in reports)
    finally:
        kill_all(ray, [coordinator, *workers, *replacements])
