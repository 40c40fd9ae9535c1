"""The asynchronous pipeline: the stream's stale-batch rule on real actors, and runs through the CLI that learn and ride
out a killed worker or learner."""

import dataclasses
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch

from distrl.config import load_config
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.models import build_model
from distrl.rollout import RolloutWorker, SampleCoordinator, remote_worker_class
from distrl.rollout import pump as pump_module
from distrl.rollout.membership import Membership
from distrl.rollout.stream import SampleStream
from tests.conftest import run_cli
from tests.test_faults import kill_actor_mid_run
from tests.test_train_e2e import check_run_dir


def test_a_stale_batch_is_dropped_and_counted_never_trained_on(ray_local):
    ray = ray_local
    config = load_config(
        None,
        [
            "env.num_envs_per_worker=4",
            "rollout.rollout_length=16",
            "rollout.num_workers=2",
            "rollout.pipeline=async",
            "rollout.compile.backend=eager",
            "ppo.minibatch_size=32",
            "rollout.max_policy_lag=1",
        ],
    )
    workers = [remote_worker_class().options(num_cpus=0.1).remote(config, i) for i in range(2)]
    coordinator = ray.remote(SampleCoordinator).options(num_cpus=0, max_concurrency=4).remote(1, config.env.id)
    learner = Learner(config, *probe_spaces(config.env))
    try:
        ray.get(coordinator.attach.remote(workers))
        # It holds the workers' handles (Ray loaded their actor class to deserialise them) and has no torch in it.
        pids = [
            p.pid
            for p in psutil.Process().children(recursive=True)
            if "ray::SampleCoordinator" in " ".join(p.cmdline())
        ]
        assert pids and not any("libtorch" in Path(f"/proc/{pid}/maps").read_text() for pid in pids)
        ray.get([worker.ready.remote() for worker in workers])  # constructed: the 3 s wait below times sampling only
        ray.get(coordinator.start_stream.remote([None], None, 60.0, 4))  # the workers' own weights: version 0
        # An update at version 2 that allows a lag of 1 takes version >= 1 only: every batch so far is stale.
        report, _ = ray.get(coordinator.gather.options(num_returns=2).remote(1, 1, 3.0))
        assert report.infos == [] and report.stale_batches >= 1 and report.min_version == 1
        weights = learner.get_weights()
        weights.version = learner.version = 1  # as if the learner had updated once
        ray.get(coordinator.release.remote(0, [ray.put(weights)], None, 60.0))  # update 0 over: its weights
        report, shards = ray.get(coordinator.gather.options(num_returns=2).remote(2, 1, 60.0))
        # Batches of version-0 steps only in between: dropped; a batch that version 1 reached on its way: taken
        assert [info.newest_version for info in report.infos] == [1, 1]
        old = sum(
            int(batch.valid[info.step_versions(16) < 1].sum())
            for info, batch in zip(report.infos, ray.get(list(shards)))
        )
        learner.version = 2  # the update at version 2 that allows a lag of 1 (the gather's bound, in the report)
        metrics = learner.update_refs(report, shards)
        assert report.min_version == 1 and metrics["stale_steps"] == old and metrics["env_steps"] == 2 * 4 * 16
    finally:
        for actor in [coordinator, *workers]:
            ray.kill(actor)


def test_steps_older_than_the_lag_allows_are_left_out_of_the_update_and_the_rest_train():
    """A batch that new weights reached on its way (a slow worker's long rollout): the learner leaves out the steps that
    acted with a version older than the bound the stream gathered by (``SampleReport.min_version``), and only those.
    Its update is the one on the same batch with those steps marked invalid by hand, and not the one that trains on
    them too; the policy lag it reports is the trained steps'."""
    config = load_config(
        None,
        ["env.num_envs_per_worker=4", "rollout.rollout_length=16", "ppo.minibatch_size=32", "rollout.pipeline=async"],
    )
    info, batch = RolloutWorker(config).sample()
    info.version_changes = [(0, 0), (6, 2)]  # steps 0-5 acted with version 0, steps 6-15 with version 2

    def update(info, batch, min_version):
        learner = Learner(config, *probe_spaces(config.env))
        learner.version = 3  # as if it had updated three times
        metrics = learner.update((info, batch), min_version=min_version)
        return metrics["stale_steps"], metrics["policy_lag_mean"], learner.get_weights().model

    left_out, lag, weights = update(info, batch, 2)  # version 2 is the oldest a lag of 1 allows at version 3
    assert left_out == int(batch.valid[:6].sum()) > 0 and lag == 1.0
    by_hand = dataclasses.replace(batch, valid=batch.valid.copy())
    by_hand.valid[:6] = False
    none_left_out, _, expected = update(dataclasses.replace(info, version_changes=[(0, 2)]), by_hand, 2)
    assert none_left_out == 0
    for name in expected:
        np.testing.assert_array_equal(weights[name], expected[name], err_msg=name)
    # With no bound (the sync and overlap pipelines: their lag is at most 1 by construction) every step trains
    trained_all, lag, other = update(info, batch, None)
    assert trained_all == 0 and any(not np.array_equal(other[n], expected[n]) for n in expected)
    valid = batch.valid.astype(bool)
    assert lag == pytest.approx((3 - info.step_versions(16)[:, None].repeat(4, axis=1))[valid].mean())


def _stream(ray, overrides: list[str], count: int, max_queued: int):
    """``count`` workers (actor names ``...-worker-N``, as the driver names them) and a coordinator streaming from
    them."""
    config = load_config(
        None,
        [
            "env.num_envs_per_worker=2",
            "rollout.rollout_length=8",
            f"rollout.num_workers={count}",
            "rollout.pipeline=async",
            "rollout.compile.backend=eager",
            "ppo.minibatch_size=16",
            *overrides,
        ],
    )
    workers = [
        remote_worker_class().options(num_cpus=0.1, name=f"stream-test-worker-{i}").remote(config, i)
        for i in range(count)
    ]
    coordinator = ray.remote(SampleCoordinator).options(num_cpus=0, max_concurrency=4).remote(1, config.env.id)
    ray.get(coordinator.attach.remote(workers))
    ray.get([worker.ready.remote() for worker in workers])  # constructed: a test's wait then times sampling only
    ray.get(coordinator.start_stream.remote([None], None, 60.0, max_queued))
    return coordinator, workers


@pytest.mark.parametrize("updates_ahead", [0.5, 1, 2])
def test_while_the_learner_updates_the_workers_sample_one_update_ahead_and_no_more(ray_local, updates_ahead):
    """No gather for a while (the learner updating): the queue with the samples in flight stops at one update's batches
    (more would act with weights one more version old by their update), or ``rollout.updates_ahead`` updates'."""
    ray = ray_local
    ahead = int(4 * updates_ahead)  # as the async loop sizes it, for updates of 4 batches
    coordinator, workers = _stream(ray, [], count=2, max_queued=ahead)
    try:
        time.sleep(3.0)  # a rollout of 2 envs x 8 steps takes milliseconds: every worker is parked by now
        report, _ = ray.get(coordinator.gather.options(num_returns=2).remote(100, 0, 0.0))  # what is queued, at once
        assert len(report.infos) == ahead
    finally:
        for actor in [coordinator, *workers]:
            ray.kill(actor)


@pytest.mark.parametrize("max_queued", [1, 2])
def test_a_waiting_gather_never_waits_on_slow_workers_while_a_fast_one_is_parked(ray_local, max_queued):
    """Updates of 2 batches; workers 1 and 2 sleep 4 s a rollout, worker 0 16 ms. Their two samples in flight fill the
    bound (with 1: also what the gather needs), yet the fast worker fills the first updates alone: a sample running
    past twice the recent samples' median time does not count."""
    ray = ray_local
    kwargs = "env.kwargs={step_s: 0.25, slow_worker: 0, slow_factor: 0.004}"  # worker 0's steps 250x shorter
    coordinator, workers = _stream(
        ray,
        ["env.id=distrl.envs.testing:sleepy_cartpole", "env.vectorization=sync", kwargs],
        count=3,
        max_queued=max_queued,
    )
    try:
        for _ in range(3):
            report, _ = ray.get(coordinator.gather.options(num_returns=2).remote(2, 0, 60.0))
            assert [info.worker_index for info in report.infos] == [0, 0]
    finally:
        for actor in [coordinator, *workers]:
            ray.kill(actor)


@pytest.mark.parametrize("slow_in_flight", [False, True])
def test_a_request_a_gather_sends_is_followed_at_once_not_after_the_pumps_wait(ray_local, monkeypatch, slow_in_flight):
    """Every worker parked, a gather takes their batches and sends them their next requests: the pump follows those
    samples from then on, whether it was idle (nothing in flight) or waiting on a slow worker's sample. With the pump's
    longest wait made 30 s, the next gather still gets its batch within its 20 s (it got none when the pump slept
    through the requests it had not sent itself: up to 0.5 s per update with the shipped wait)."""
    ray = ray_local
    monkeypatch.setattr(pump_module, "PUMP_WAIT_S", 30.0)
    count = 2 if slow_in_flight else 1
    # Worker 1's rollout of 8 steps of 5 s stays in flight all test long; worker 0's takes milliseconds.
    config = load_config(
        None,
        [
            "env.id=distrl.envs.testing:sleepy_cartpole",
            "env.vectorization=sync",
            "env.kwargs={step_s: 5.0, slow_worker: 0, slow_factor: 0.0002}",
            "env.num_envs_per_worker=2",
            "rollout.rollout_length=8",
            f"rollout.num_workers={count}",
            "rollout.pipeline=async",
            "rollout.compile.backend=eager",
            "ppo.minibatch_size=16",
        ],
    )
    workers = [
        remote_worker_class().options(num_cpus=0.1, name=f"pump-test-worker-{i}").remote(config, i)
        for i in range(count)
    ]
    ray.get([worker.ready.remote() for worker in workers])

    def submit(index, weights_ref, plan_ref):
        return workers[index].sample_shards.options(num_returns=2, max_task_retries=0).remote(weights_ref, 1, plan_ref)

    stream = SampleStream(Membership(workers, 0), 1, submit, lambda index, ref: None, 60.0, [None], None, max_queued=1)
    try:
        first, _ = stream.gather(1, 0, 20.0)  # the first batch: worker 0 parks behind it, then is sent its next
        time.sleep(1.0)  # that sample is in by now and worker 0 parked again: the queue holds the bound
        assert [info.worker_index for info in first.infos] == [0]
        for _ in range(3):  # each gather takes the queued batch and sends worker 0 its next request
            report, _ = stream.gather(1, 0, 20.0)
            assert [info.worker_index for info in report.infos] == [0]
    finally:
        for worker in workers:
            ray.kill(worker)


def _two_workers_streaming(ray, max_queued: int):
    """Two workers of milliseconds-long rollouts, a stream from them in this process, and a learner for weights."""
    config = load_config(
        None,
        [
            "env.num_envs_per_worker=2",
            "rollout.rollout_length=8",
            "rollout.num_workers=2",
            "rollout.pipeline=async",
            "rollout.compile.backend=eager",
            "ppo.minibatch_size=16",
        ],
    )
    workers = [remote_worker_class().options(num_cpus=0.1).remote(config, i) for i in range(2)]
    ray.get([worker.ready.remote() for worker in workers])

    def submit(index, weights_ref, plan_ref):
        return workers[index].sample_shards.options(num_returns=2, max_task_retries=0).remote(weights_ref, 1, plan_ref)

    stream = SampleStream(
        Membership(workers, 0), 1, submit, lambda index, ref: None, 60.0, [None], None, max_queued=max_queued
    )
    return workers, stream, Learner(config, *probe_spaces(config.env))


def test_a_gather_sent_while_an_update_runs_holds_the_workers_until_that_update_is_over(ray_local):
    """The async loop takes the next update's batches while the update before it runs, and queues that update on the
    learner. Until the driver releases the running update, the batches taken still count against the bound: the workers
    stay parked and then sample with that update's weights (sent earlier, they would act with weights two versions old
    by their update). A release that comes before the gather (a slow gather) holds nothing back."""
    ray = ray_local
    workers, stream, learner = _two_workers_streaming(ray, max_queued=2)
    try:
        time.sleep(3.0)  # rollouts of milliseconds: both workers parked behind the bound's two batches
        report, _ = stream.gather(2, 0, 20.0, hold_until=0)  # update 1's batches, while update 0 runs
        assert len(report.infos) == 2
        time.sleep(1.0)
        with stream.cond:
            assert (
                sorted(stream.handover.parked) == [0, 1] and not stream.pump.inflight and not stream.handover.queue
            )  # none sent meanwhile
            assert stream.handover.held == {0: 2}
        weights = learner.get_weights()
        weights.version = 1  # update 0's
        stream.set_weights([ray.put(weights)], None, 60.0)
        stream.release(0)
        report, _ = stream.gather(2, 1, 20.0, hold_until=1)  # update 2's, while update 1 runs: sampled on version 1
        assert [info.policy_version for info in report.infos] == [1, 1] and report.stale_batches == 0
        stream.release(2)  # updates 1 and 2 over before the next gather: it holds nothing
        report, _ = stream.gather(2, 1, 20.0, hold_until=2)
        assert len(report.infos) == 2
        with stream.cond:
            assert stream.handover.held == {}
    finally:
        for worker in workers:
            ray.kill(worker)


def test_a_held_gather_waits_for_the_rest_of_its_batches_until_the_update_is_over(ray_local):
    """``rollout.updates_ahead: 0.5``: half an update's batches are sampled while the update before it runs, the rest
    after it, with its weights. A gather that waits for the rest while that update runs sends no worker meanwhile."""
    import threading

    ray = ray_local
    workers, stream, learner = _two_workers_streaming(ray, max_queued=1)
    try:
        time.sleep(3.0)  # both workers parked (their first samples were sent before the bound applied: 1 or 2 queued)
        with stream.cond:
            queued = len(stream.handover.queue)
        result = []
        gathering = threading.Thread(target=lambda: result.append(stream.gather(queued + 1, 0, 30.0, hold_until=0)))
        gathering.start()
        time.sleep(1.0)
        with stream.cond:
            assert (
                stream.handover.in_hand == queued
                and sorted(stream.handover.parked) == [0, 1]
                and not stream.pump.inflight
            )
        weights = learner.get_weights()
        weights.version = 1
        stream.set_weights([ray.put(weights)], None, 60.0)
        stream.release(0)
        gathering.join(timeout=30.0)
        assert [info.policy_version for info in result[0][0].infos] == [0] * queued + [1]
    finally:
        for worker in workers:
            ray.kill(worker)


def test_weights_staged_while_the_pump_reads_its_abandoned_refs_never_break_the_stream(ray_local):
    """``set_weights`` (the driver's call, on another thread) adds a staging call per running sample to the refs the
    pump reads once they fail; the pump reads them between its waits. Reading the list while another thread grows it
    made ``ray.wait`` raise a bare AssertionError, which ended a run (seen after a lost node, when those refs are slow
    to read). Here the staging calls never answer, so the list only grows while a fast worker keeps the pump busy."""
    ray = ray_local

    @ray.remote(num_cpus=0, max_concurrency=10000)
    class Never:
        async def answer(self):
            import asyncio

            await asyncio.sleep(600)

    never = Never.remote()
    config = load_config(
        None,
        [
            "env.num_envs_per_worker=1",
            "rollout.rollout_length=1",
            "rollout.num_workers=1",
            "rollout.pipeline=async",
            "rollout.compile.backend=eager",
            "ppo.minibatch_size=1",
        ],
    )
    worker = remote_worker_class().options(num_cpus=0.1).remote(config, 0)
    ray.get(worker.ready.remote())

    def submit(index, weights_ref, plan_ref):
        return worker.sample_shards.options(num_returns=2, max_task_retries=0).remote(weights_ref, 1, plan_ref)

    staged = []

    def stage(index, ref):
        staged.append(never.answer.remote())
        return staged[-1]

    stream = SampleStream(Membership([worker], 0), 1, submit, stage, 60.0, [None], None, max_queued=4)
    weights = [ray.put(_weights(config, 0, False))]  # version 0, as the worker holds
    try:
        deadline = time.monotonic() + 8.0
        while time.monotonic() < deadline and stream.pump.error is None:
            stream.set_weights(weights, None, 60.0)  # one staging call per running sample
            report, _ = stream.gather(1, 0, 10.0)  # keeps the worker sampling, and the pump reading
        assert stream.pump.error is None, repr(stream.pump.error)
        time.sleep(1.0)  # the worker parks behind a full queue: the pump's last read is over
        with stream.cond:
            assert len(stream.members.abandoned) == len(staged) > 100  # none answered, and none was lost in the reads
    finally:
        ray.kill(worker)
        ray.kill(never)


SLEEPY = [
    "env.id=distrl.envs.testing:sleepy_cartpole",
    "env.vectorization=sync",
    "env.kwargs={step_s: 0.05}",
    "ppo.minibatch_size=16",
]


def _weights(config, version: int, favour_left: bool):
    """The learner's initial weights (the workers' version 0) as ``version``; ``favour_left``: the policy head made to
    push left nearly always (log-probabilities far from the initial policy's)."""
    weights = Learner(config, *probe_spaces(config.env)).get_weights()
    weights.version = version
    if favour_left:
        weights.model = {
            **weights.model,
            "policy_head.weight": np.zeros_like(weights.model["policy_head.weight"]),
            "policy_head.bias": np.array([5.0, -5.0], np.float32),
        }
    return weights


def _logp(config, weights, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
    model = build_model(*probe_spaces(config.env), config.model)
    model.load_state_dict({k: torch.as_tensor(v) for k, v in weights.model.items()})
    with torch.no_grad():
        pd_params, _ = model(torch.from_numpy(np.array(obs)))
        return model.dist.log_prob_entropy(pd_params, torch.as_tensor(actions))[0].numpy()


def test_weights_sent_during_a_sample_act_from_its_next_step(ray_local):
    """New weights reach a running sample (the onnxrt policy's, checked at the swap): every step before the swap is the
    old policy's, every one after it the new one's, and the batch reports the version it started with (what the
    staleness bound reads) and the mean over its steps (the policy lag)."""
    ray = ray_local
    config = load_config(None, [*SLEEPY, "env.num_envs_per_worker=2", "rollout.rollout_length=32"])  # 1.6 s a sample
    worker = remote_worker_class().options(num_cpus=0.1).remote(config, 0)
    try:
        assert ray.get(worker.backend_info.remote())["backend"] == "onnxrt"
        old, new = _weights(config, 0, False), _weights(config, 1, True)
        sample = worker.sample_shards.remote(None, 1)
        time.sleep(0.6)
        assert ray.get(worker.stage_weights.options(concurrency_group="weights").remote(new), timeout=5) == 1
        info, batch = ray.get(sample)
        assert info.policy_version == 0 and 0 < info.policy_version_mean < 1 and info.policy_backend == "onnxrt"
        swap = info.version_changes[-1][0]  # the first step with version 1
        assert info.version_changes == [(0, 0), (swap, 1)] and swap == round(32 * (1 - info.policy_version_mean))
        assert info.newest_version == 1 and list(info.step_versions(32)) == [0] * swap + [1] * (32 - swap)
        for t in range(32):
            expected = _logp(config, old if t < swap else new, batch.obs[t], batch.actions[t])
            np.testing.assert_allclose(batch.logp[t], expected, atol=1e-4, err_msg=f"step {t}, swap at {swap}")
        assert (batch.actions[swap:] == 0).mean() > 0.9  # the new policy pushes left
        info, _ = ray.get(worker.sample_shards.remote(None, 1))
        assert info.policy_version == 1 and info.policy_version_mean == 1.0 and info.version_changes == [(0, 1)]
    finally:
        ray.kill(worker)


def test_weights_staged_as_a_sample_starts_are_the_version_that_acted_first():
    """Weights that come in after a sample's own check for staged weights but before its first step act from step 0:
    the batch names them as the version that acted first, and the older version, which never acted, not at all."""
    config = load_config(
        None,
        [
            "env.num_envs_per_worker=2",
            "rollout.rollout_length=8",
            "rollout.compile.backend=eager",
            "ppo.minibatch_size=16",
        ],
    )
    worker = RolloutWorker(config)
    checks, take = [], worker._take_staged

    def missed_once():  # the check before the first step misses them: they arrive just after it
        checks.append(len(checks))
        if len(checks) > 1:
            take()

    worker._take_staged = missed_once
    worker.stage_weights(_weights(config, 1, False))
    info, _ = worker.sample()
    assert info.policy_version == 1 and info.version_changes == [(0, 1)] and info.policy_version_mean == 1.0


def test_the_stream_sends_new_weights_to_the_samples_running(ray_local):
    """The coordinator's stream: weights set while a sample runs reach it, not only the samples sent after; a gather
    that asks for the new version takes that sample (its newer steps train; the learner leaves out the older ones)."""
    ray = ray_local
    coordinator, workers = _stream(ray, [*SLEEPY, "rollout.rollout_length=40"], count=1, max_queued=1)  # 2 s a sample
    config = load_config(None, SLEEPY)
    try:
        report, _ = ray.get(coordinator.gather.options(num_returns=2).remote(1, 0, 60.0))
        seen = [(report.infos[0].policy_version, report.infos[0].policy_version_mean)]
        for version in (1, 2, 3):  # the next sample was sent as the last one came in: it is running now
            time.sleep(0.3)
            weights = [ray.put(_weights(config, version, True))]
            ray.get(coordinator.release.remote(version - 1, weights, None, 60.0))
            report, _ = ray.get(coordinator.gather.options(num_returns=2).remote(1, version, 60.0))
            assert report.infos[0].newest_version == version
            seen.append((report.infos[0].policy_version, report.infos[0].policy_version_mean))
        # Swapped mid-sample: started with the previous version, a mean between (a loaded machine may miss once)
        assert any(start == v - 1 and v - 1 < mean < v for v, (start, mean) in enumerate(seen[1:], 1)), seen
    finally:
        for actor in [coordinator, *workers]:
            ray.kill(actor)


ASYNC = [
    "--set",
    "rollout.pipeline=async",
    "--set",
    "rollout.num_workers=2",
    "--set",
    "rollout.num_cpus_per_worker=0.5",
    "--set",
    "env.num_envs_per_worker=32",
]


@pytest.mark.slow
def test_async_learns_cartpole(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        "train", "configs/cartpole.yaml", "--run-dir", str(run_dir), *ASYNC, "--set", "stop.env_steps=1200000"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "pipeline async" in result.stdout
    rows, summary = check_run_dir(run_dir)
    assert summary["stop_reason"] == "episode_return_mean" and summary["episode_return_mean"] >= 475, summary
    lags = [r["policy_lag_mean"] for r in rows[1:]]
    assert all(0 <= lag <= 4 for lag in lags) and max(lags) > 0  # off-policy, within rollout.max_policy_lag
    assert rows[-1]["stale_batches"] == summary["stale_batches"]


@pytest.mark.slow
def test_async_appo_learns(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "configs/cartpole.yaml",
        "--run-dir",
        str(run_dir),
        *ASYNC,
        "--set",
        "algo=appo",
        "--set",
        "stop.env_steps=400000",
        "--set",
        "stop.episode_return_mean=null",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows, summary = check_run_dir(run_dir)
    # Random play: ~22. V-trace's cut traces make APPO's async runs swing (final means 72-261 at 400k steps on 2
    # cores): the run's best mean over 100 is learning no chance reaches.
    best = max(r["episode_return_mean"] for r in rows if r["episode_return_mean"] is not None)
    assert rows[0]["episode_return_mean"] < 40 and best > 100, summary


@pytest.mark.slow
@pytest.mark.parametrize("title", ["ray::RolloutWorker", "ray::Learner"])
def test_async_run_rides_out_a_killed_worker_or_learner(tmp_path, title):
    run_dir = tmp_path / "run"
    stdout = kill_actor_mid_run(run_dir, title, "rollout.pipeline=async", "checkpoint.every_iterations=0")
    rows, summary = check_run_dir(run_dir)
    assert summary["stop_reason"] == "env_steps" and summary["env_steps"] >= 200000
    assert [r["env_steps"] for r in rows] == [8192 * (i + 1) for i in range(len(rows))]  # each update a full batch
    if title == "ray::Learner":
        assert "a learner died" in stdout and summary["learner_restarts"] == 1
        assert "older than the learner's last" not in stdout  # a snapshot after every update: rebuilt from the newest
        assert [r["learner_version"] for r in rows] == list(range(1, len(rows) + 1))
    else:
        assert "worker-0 was restarted (restart 1)" in stdout and summary["worker_restarts"] == 1


@pytest.mark.slow
def test_checkpoints_of_an_async_run_with_snapshots_on_a_budget_hold_their_own_update(tmp_path):
    """``learner.snapshot_every_s`` that no update meets after the first: the updates whose rows write a checkpoint
    send their state anyway (the one queued behind the update running included), so each checkpoint's learner state is
    the one its counters describe."""
    from distrl.common.checkpoint import _load_file, list_checkpoints

    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "configs/cartpole.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "rollout.pipeline=async",
        "--set",
        "learner.snapshot_every_s=1000",
        "--set",
        "checkpoint.every_iterations=2",
        "--set",
        "checkpoint.keep=20",
        "--set",
        "stop.episode_return_mean=null",
        "--set",
        "stop.env_steps=65536",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows, summary = check_run_dir(run_dir)
    payloads = [_load_file(path) for path in list_checkpoints(run_dir)]
    assert len(payloads) >= 4, [p["counters"]["iteration"] for p in payloads]
    for payload in payloads:
        version, iteration = payload["learner"]["version"], payload["counters"]["iteration"]
        final = iteration == summary["iterations"]
        # The final checkpoint takes the learner's state at the stop: the update queued behind the last may be in it.
        assert version == rows[iteration - 1]["learner_version"] or (
            final and version == rows[-1]["learner_version"] + 1
        )
