"""rollout.ready_envs: the policy acts for ale-py's copies as they become ready, each copy's column of the batch
filling at its own pace, and the batch keeps its layout: column i is T consecutive steps of copy i and its bootstrap
observation, the next batch's column going on from there."""

import copy

import numpy as np
import pytest
import torch

from distrl.common.errors import EnvFailure
from distrl.config import load_config
from distrl.data.messages import Weights
from distrl.envs.episodes import EpisodeTracker
from distrl.envs.factory import make_vec_env
from distrl.envs.guard import GuardedVectorEnv
from distrl.rollout import RolloutWorker
from distrl.rollout.ready_runner import ReadyEnvRunner
from tests.conftest import run_cli
from tests.test_train_e2e import check_run_dir

ale_py = pytest.importorskip("ale_py")

T = 16
BASE = [
    "env.id=ALE/Breakout-v5",
    "env.num_envs_per_worker=8",
    "rollout.ready_envs=4",
    "model.type=cnn",
    "model.hidden=[32]",
    "model.shared_trunk=true",
    f"rollout.rollout_length={T}",
    "ppo.minibatch_size=128",
    "rollout.compile.backend=onnxrt",
]


def _worker(*overrides: str) -> RolloutWorker:
    return RolloutWorker(load_config(None, [*BASE, *overrides]))


def _check_columns(batches: list, infos: list) -> None:
    """Every column is one copy's consecutive steps: Breakout's observation is its last four frames, so where a step
    neither ends an episode nor follows one, the next observation's first three frames are this one's last three;
    a batch's step 0 is the batch before's bootstrap observation, with the same value."""
    follows = 0
    for before, batch in zip(batches, batches[1:]):
        np.testing.assert_array_equal(batch.obs[0], before.obs[T])
        np.testing.assert_array_equal(batch.values[0], before.values[T])
    for batch in batches:
        ended = batch.terminated | batch.truncated
        for t in range(T):
            for i in range(batch.num_envs):
                if batch.valid[t, i] and not ended[t, i]:
                    np.testing.assert_array_equal(batch.obs[t + 1, i, :3], batch.obs[t, i, 1:], err_msg=f"t={t} i={i}")
                    follows += 1
    assert follows > 0.9 * len(batches) * T * batches[0].num_envs
    for info in infos:
        assert info.env_steps == T * 8


def test_columns_are_each_copys_consecutive_steps_and_log_probs_are_the_policys():
    worker = _worker()
    try:
        assert worker.runner.stepping == "ale-py send/recv, acting on the first 4 of 8 copies whose step is done"
        assert worker.backend_info()["env_groups"] == 1
        samples = [worker.sample() for _ in range(4)]
        infos, batches = [s[0] for s in samples], [s[1] for s in samples]
        _check_columns(batches, infos)
        for batch in batches:  # the weights never changed: every step's log-probability is this policy's
            with torch.no_grad():
                pd_params, value = worker.policy.module(torch.as_tensor(batch.obs[:T].reshape(T * 8, 4, 84, 84)))
            logp, _ = worker.dist.log_prob_entropy(pd_params, torch.as_tensor(batch.actions.reshape(-1)))
            np.testing.assert_allclose(logp.numpy(), batch.logp.reshape(-1), atol=1e-4)
            np.testing.assert_allclose(value.reshape(-1).numpy(), batch.values[:T].reshape(-1), atol=1e-4)
        assert all(info.version_changes == [(0, 0)] for info in infos)
    finally:
        worker.close()


def test_an_lstm_state_follows_each_copy_into_its_column():
    """With an LSTM each column's chunks start from the state its copy had there (h0, c0) and mark its episode starts:
    the learner's unroll over the batch (``forward_sequence``) gives back every step's log-probability and value."""
    seq_len = 8
    worker = _worker("model.lstm_size=16", f"ppo.seq_len={seq_len}")
    try:
        samples = [worker.sample() for _ in range(3)]
        _check_columns([s[1] for s in samples], [s[0] for s in samples])
        module = worker.policy.module
        for _, batch in samples:
            assert batch.h0.shape == (T // seq_len, 8, 16) and batch.starts.shape == (T, 8)
            for j in range(T // seq_len):
                rows = slice(j * seq_len, (j + 1) * seq_len)
                with torch.no_grad():
                    pd_params, values = module.forward_sequence(
                        torch.as_tensor(batch.obs[rows]),
                        torch.as_tensor(batch.h0[j]),
                        torch.as_tensor(batch.c0[j]),
                        torch.as_tensor(batch.starts[rows]),
                    )
                    logp, _ = worker.dist.log_prob_entropy(
                        pd_params.reshape(seq_len * 8, -1), torch.as_tensor(batch.actions[rows].reshape(-1))
                    )
                np.testing.assert_allclose(logp.numpy().reshape(seq_len, 8), batch.logp[rows], atol=1e-4)
                np.testing.assert_allclose(values.numpy(), batch.values[rows], atol=1e-4)
        assert not np.allclose(samples[-1][1].h0, 0)  # the state is carried, not zeroed
    finally:
        worker.close()


def test_each_copys_discounted_return_runs_on_across_its_columns():
    """env.normalize_reward: each copy's discounted return is kept per copy as its column fills (and on into the next
    batch's), so the statistics a batch reports are those of its columns' returns, recomputed here step by step."""
    worker = _worker("env.normalize_reward=true", "ppo.gamma=0.9")
    try:
        samples = [worker.sample() for _ in range(4)]
        returns = np.zeros(8)
        for info, batch in samples:
            seen = np.zeros((T, 8))
            for t in range(T):
                valid = batch.valid[t]
                returns = np.where(valid, returns * 0.9 + batch.rewards[t], returns)
                seen[t] = returns
                returns[batch.terminated[t] | batch.truncated[t]] = 0.0
            count, mean, var = info.return_stats
            assert count == batch.valid.sum()
            np.testing.assert_allclose([mean, var], [seen[batch.valid].mean(), seen[batch.valid].var()], rtol=1e-6)
        assert any(batch.rewards.any() for _, batch in samples)  # rewards came, so the returns are not all zero
    finally:
        worker.close()


def _log_probs(module, batch) -> np.ndarray:
    with torch.no_grad():
        pd_params, _ = module(torch.as_tensor(batch.obs[:T].reshape(T * 8, 4, 84, 84)))
        logp, _ = module.dist.log_prob_entropy(pd_params, torch.as_tensor(batch.actions.reshape(-1)))
    return logp.numpy().reshape(T, 8)


def test_a_step_acted_before_new_weights_keeps_its_version():
    """Step 0 of every column was acted on with the batch before (its bootstrap observation, the action sent at
    once), and a column running ahead acts on more: each step's log-probability is the policy's that acted, and the
    batch reports each row's oldest version (the one every step of the row is at least)."""
    worker = _worker()
    try:
        worker.sample()
        old = copy.deepcopy(worker.policy.module)
        state = {k: v.detach().numpy() + 0.05 for k, v in worker.policy.module.state_dict().items()}
        calls, before_step = [], worker._before_step

        def new_weights_at_the_fourth_act():  # as weights staged mid-sample are taken (mid-row: half the copies)
            calls.append(None)
            if len(calls) == 4:
                worker.set_weights(Weights(version=1, model=state))
            return before_step()

        worker._before_step = new_weights_at_the_fourth_act
        info, batch = worker.sample()
        old_logp, new_logp = _log_probs(old, batch), _log_probs(worker.policy.module, batch)
        by_old, by_new = np.isclose(batch.logp, old_logp, atol=1e-4), np.isclose(batch.logp, new_logp, atol=1e-4)
        assert not (by_old & by_new).any() and (by_old | by_new).all()
        assert by_old[0].all() and by_new[-1].all()
        assert (by_old.any(axis=1) & by_new.any(axis=1)).any()  # a row acted on by both: its oldest version counts
        versions = np.where(by_new, 1, 0).min(axis=1)
        first_new = int(np.argmax(versions == 1))
        assert info.version_changes == [(0, 0), (first_new, 1)]
        assert info.policy_version_mean == pytest.approx(by_new.mean() * 1.0)
    finally:
        worker.close()


class _FailingAtari(ale_py.vector_env.AtariVectorEnv):
    """ale-py's vector env whose ``recv`` raises on its ``fail_at``-th call (counted across every instance), and returns
    a NaN reward for its first copy on its ``nan_at``-th."""

    calls = 0
    fail_at: tuple[int, ...] = ()
    nan_at = 0
    nan_copy = -1

    def recv(self):
        _FailingAtari.calls += 1
        if _FailingAtari.calls in self.fail_at:
            raise RuntimeError("emulator fault")
        obs, reward, terminated, truncated, info = super().recv()
        if _FailingAtari.calls == self.nan_at:
            reward = reward.astype(np.float64)
            reward[0] = np.nan
            _FailingAtari.nan_copy = int(info["env_id"][0])
        return obs, reward, terminated, truncated, info


def _failing_runner(fail_at: tuple[int, ...], max_errors: int, nan_at: int = 0):
    config = load_config(None, [*BASE, f"env.max_consecutive_errors={max_errors}"])
    _FailingAtari.calls, _FailingAtari.fail_at, _FailingAtari.nan_at = 0, fail_at, nan_at
    built = []

    def make_envs():
        envs = GuardedVectorEnv(
            _FailingAtari("breakout", num_envs=8, batch_size=4, num_threads=1, reward_clipping=False), max_errors
        )
        built.append(envs)
        return envs

    worker = _worker()  # for its policy and action distribution
    runner = ReadyEnvRunner(
        make_envs(),
        make_envs,
        worker.memory,
        lambda raw: raw,
        worker.dist,
        config,
        seed=0,
        rng=np.random.default_rng(0),
    )
    return worker, runner, built


def test_an_env_error_ends_the_steps_in_flight_and_a_new_env_goes_on():
    worker, runner, built = _failing_runner(fail_at=(20,), max_errors=3)
    try:
        batches, infos = [], []
        for _ in range(3):
            batch, stats = runner.next_batch(worker.policy, lambda: 0)
            batches.append(batch)
            infos.append(stats)
        assert len(built) == 2
        assert sum(s.env_errors for s in infos) == 8  # every copy's step was in flight
        assert any("emulator fault" in m for s in infos for m in s.error_messages)
        failed = np.concatenate([b.truncated & ~b.valid & ~b.terminated for b in batches], axis=0)
        assert failed.sum(axis=0).min() >= 1  # each column holds its failed step, out of the loss
        for batch in batches:
            np.testing.assert_array_equal(batch.obs[0].shape, (8, 4, 84, 84))
    finally:
        runner.close()
        worker.close()


def test_a_non_finite_reward_is_counted_and_a_new_env_goes_on():
    worker, runner, built = _failing_runner(fail_at=(), max_errors=3, nan_at=15)
    try:
        infos = [runner.next_batch(worker.policy, lambda: 0)[1] for _ in range(3)]
        assert len(built) == 2
        assert sum(s.env_nonfinite for s in infos) == 1 and sum(s.env_errors for s in infos) == 0
        assert [m for s in infos for m in s.nonfinite_messages] == [f"env {_FailingAtari.nan_copy}: reward not finite"]
    finally:
        runner.close()
        worker.close()


def test_errors_past_the_budget_stop_the_run():
    worker, runner, built = _failing_runner(fail_at=(10, 11), max_errors=2)
    try:
        with pytest.raises(EnvFailure, match="failed 2 times in a row"):
            for _ in range(3):
                runner.next_batch(worker.policy, lambda: 0)
    finally:
        runner.close()
        worker.close()


def test_tracking_some_copies_is_tracking_all_of_them():
    rng = np.random.default_rng(0)
    whole, parts = EpisodeTracker(6), EpisodeTracker(6)
    for _ in range(200):
        reward = rng.normal(size=6)
        terminated, truncated, error = rng.random(6) < 0.1, rng.random(6) < 0.05, rng.random(6) < 0.03
        valid = whole.step(reward, terminated, truncated, error)
        order = rng.permutation(6)
        for ids in (order[:2], order[2:]):
            np.testing.assert_array_equal(
                parts.step_copies(ids, reward[ids], terminated[ids], truncated[ids], error[ids]), valid[ids]
            )
    assert sorted(whole.pop()[0]) == sorted(parts.pop()[0])


def test_make_vec_env_passes_the_ready_count_to_ale():
    config = load_config(None, BASE)
    envs = make_vec_env(config.env, num_threads=1, ready=4)
    try:
        obs, info = envs.reset(seed=0)
        assert obs.shape == (4, 4, 84, 84) and len(info["env_id"]) == 4
    finally:
        envs.close()


@pytest.mark.slow
def test_a_training_run_acts_on_ready_copies(tmp_path):
    """``distrl train`` on Breakout with rollout.ready_envs, through Ray: it says how its copies step, and every
    iteration trains on one full batch."""
    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "configs/breakout.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "rollout.ready_envs=4",
        "--set",
        "rollout.rollout_length=32",
        "--set",
        "stop.env_steps=2048",
        "--set",
        "learner.compile.backend=eager",
        "--set",
        "learner.amp=off",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "env copies: ale-py send/recv, acting on the first 4 of 8 copies whose step is done"
        in (run_dir / "setup.txt").read_text()
    )
    rows, summary = check_run_dir(run_dir)
    assert [r["env_steps"] for r in rows] == [256 * (i + 1) for i in range(len(rows))] and summary["env_steps"] >= 2048
