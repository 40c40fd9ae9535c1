"""rollout.env_groups: a worker's env copies in groups, one group's step running while the policy acts for another
(double buffering), fill exactly the batch one vector env of all the copies fills, step by step."""

import gymnasium as gym
import numpy as np
import pytest

from distrl.config import load_config
from distrl.envs.guard import GuardedVectorEnv
from distrl.envs.stepping import SendRecvStepper, ThreadStepper, background_stepper, env_groups
from distrl.rollout import RolloutWorker

BASE = [
    "env.num_envs_per_worker=8",
    "rollout.rollout_length=32",
    "ppo.minibatch_size=256",
    "rollout.compile.backend=onnxrt",
]

# Every kind of state that follows an env copy, and every way a group steps without the worker. Sync vectorization
# seeds each copy from its index (CartPole's native vector env draws every copy from one generator, so a group of
# it starts elsewhere than the same copies in one vector env).
CASES = {
    "thread, MLP": ["env.vectorization=sync"],
    "subprocesses": ["env.vectorization=async"],
    "normalised obs and reward": ["env.vectorization=sync", "env.normalize_obs=true", "env.normalize_reward=true"],
    "LSTM state": [
        "env.id=distrl.envs.wrappers:cartpole_no_velocity",
        "env.vectorization=sync",
        "model.lstm_size=16",
        "model.shared_trunk=true",
        "ppo.seq_len=8",
    ],
    "attention window": [
        "env.vectorization=sync",
        "model.type=attention",
        "model.window=4",
        "model.d_model=16",
        "model.heads=2",
    ],
    "Dict observations": ["env.id=distrl.envs.testing:dict_obs_cartpole", "env.vectorization=sync"],
    "Gaussian actions": ["env.id=Pendulum-v1", "env.vectorization=sync"],
    "env errors": [
        "env.id=distrl.envs.testing:flaky_cartpole",
        "env.vectorization=sync",
        "env.kwargs={fail_every: 7}",
        "env.max_consecutive_errors=100",
    ],
    "non-finite numbers": [
        "env.id=distrl.envs.testing:nan_obs_cartpole",
        "env.vectorization=async",
        "env.kwargs={every: 11}",
    ],
}


def _worker(groups: int, overrides: list[str]) -> RolloutWorker:
    return RolloutWorker(load_config(None, [*BASE, *overrides, f"rollout.env_groups={groups}"]))


def _same_batches(serial: RolloutWorker, grouped: RolloutWorker, samples: int = 3) -> list:
    infos = []
    for _ in range(samples):
        info_1, batch_1 = serial.sample()
        info_2, batch_2 = grouped.sample()
        arrays_2 = batch_2.arrays()
        assert batch_1.arrays().keys() == arrays_2.keys()
        for name, array in batch_1.arrays().items():
            assert array.shape == arrays_2[name].shape, name
            np.testing.assert_allclose(array, arrays_2[name], rtol=0, atol=1e-6, err_msg=name)
        assert sorted(info_1.episode_returns) == sorted(info_2.episode_returns)
        assert sorted(info_1.episode_lengths) == sorted(info_2.episode_lengths)
        assert info_1.env_steps == info_2.env_steps
        assert (info_1.env_errors, info_1.env_nonfinite) == (info_2.env_errors, info_2.env_nonfinite)
        assert info_1.version_changes == info_2.version_changes
        for stats in ("obs_stats", "return_stats"):
            one, two = getattr(info_1, stats), getattr(info_2, stats)
            assert (one is None) == (two is None), stats
            if one is not None:
                assert one[0] == two[0]
                np.testing.assert_allclose(one[1], two[1], rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(one[2], two[2], rtol=1e-5, atol=1e-6)
        infos.append(info_2)
    return infos


@pytest.mark.parametrize("case", list(CASES))
def test_groups_fill_the_batch_one_vector_env_fills(case):
    """Each env copy's trajectory (observations, actions, rewards, episode ends, model memory) is the one it has in a
    single vector env, and the batch keeps its layout; the worker's action draws come from one stream in the copies'
    order, so the actions are the same too."""
    serial, grouped = _worker(1, CASES[case]), _worker(2, CASES[case])
    try:
        assert serial.runner.stepping == "serial" and len(grouped.runner.runners) == 2
        infos = _same_batches(serial, grouped)
        if case == "env errors":
            assert sum(info.env_errors for info in infos) > 0
        if case == "non-finite numbers":
            assert sum(info.env_nonfinite for info in infos) > 0
    finally:
        serial.close()
        grouped.close()


def test_four_groups_and_a_version_taken_mid_sample():
    """Four groups; a newer policy version taken mid-sample (as staged weights are, at a step) acts for every
    group from the same step, and the batch reports it where one vector env's would."""
    overrides = ["env.vectorization=sync"]
    serial, grouped = _worker(1, overrides), _worker(4, overrides)
    try:
        assert [r.num_envs for r in grouped.runner.runners] == [2, 2, 2, 2]
        assert {r.stepper.kind for r in grouped.runner.runners} == {"thread"}
        _same_batches(serial, grouped, samples=1)
        for worker in (serial, grouped):
            steps, original = [], worker._before_step

            def before_step(worker=worker, steps=steps, original=original):
                steps.append(None)
                if len(steps) == 10:  # the tenth step takes newer weights
                    worker.policy_version += 1
                return original()

            worker._before_step = before_step
        info_1, _ = serial.sample()
        info_2, _ = grouped.sample()
        assert info_1.version_changes == info_2.version_changes == [(0, 0), (9, 1)]
        assert info_1.policy_version_mean == info_2.policy_version_mean
    finally:
        serial.close()
        grouped.close()


def test_ale_groups_step_through_send_and_recv():
    """ale-py's native vector env: each group sends its actions and the policy acts for the other while the
    emulators run; every copy plays as it does in one vector env of all eight."""
    pytest.importorskip("ale_py")
    overrides = [
        "env.id=ALE/Breakout-v5",
        "env.vectorization=native",
        "model.type=cnn",
        "model.hidden=[32]",
        "model.shared_trunk=true",
        "rollout.rollout_length=16",
        "ppo.minibatch_size=128",
    ]
    serial, grouped = _worker(1, overrides), _worker(2, overrides)
    try:
        assert [r.stepper.kind for r in grouped.runner.runners] == ["send/recv", "send/recv"]
        _same_batches(serial, grouped, samples=2)
    finally:
        serial.close()
        grouped.close()


def test_auto_chooses_by_how_the_env_steps():
    config = lambda *o: load_config(None, ["env.num_envs_per_worker=8", "ppo.minibatch_size=128", *o])  # noqa: E731
    assert env_groups(config()) == (
        1,
        "a native vector env's step holds Python's lock, so it cannot overlap the policy",
    )
    assert env_groups(config("env.vectorization=sync"))[0] == 1
    assert env_groups(config("env.vectorization=async"))[0] == 2
    assert env_groups(config("env.id=ALE/Breakout-v5", "env.vectorization=native")) == (
        2,
        "ale-py steps one group (send/recv) while the policy acts for the other",
    )
    assert env_groups(config("env.vectorization=async", "env.num_envs_per_worker=7"))[0] == 1
    for pipeline in ("overlap", "async"):  # the learner's update beside the workers takes the core the overlap needs
        groups, why = env_groups(config("env.vectorization=async", f"rollout.pipeline={pipeline}"))
        assert groups == 1 and why.startswith(f"the learner updates while the workers sample ({pipeline})")
    assert env_groups(config("env.vectorization=async", "rollout.env_groups=1")) == (1, "")
    assert env_groups(config("rollout.env_groups=4")) == (4, "")


class _SendRecvEnv(gym.vector.VectorEnv):
    """A native-style vector env with send/recv whose send raises at one step and whose recv returns NaN at another."""

    def __init__(self, raise_at: int, nan_at: int, num_envs: int = 3):
        self.num_envs, self.raise_at, self.nan_at, self.t = num_envs, raise_at, nan_at, 0
        self.single_observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.resets = 0

    def reset(self, **kwargs):
        self.resets += 1
        return np.zeros((self.num_envs, 2), np.float32), {}

    def send(self, actions):
        self.t += 1
        if self.t == self.raise_at:
            raise RuntimeError("emulator fault")

    def recv(self):
        obs = np.full((self.num_envs, 2), 0.5, np.float32)
        if self.t == self.nan_at:
            obs[1, 0] = np.nan
        n = self.num_envs
        return obs, np.ones(n), np.zeros(n, bool), np.zeros(n, bool), {}

    def step(self, actions):
        self.send(actions)
        return self.recv()


def test_guarded_send_recv_handles_errors_as_step_does():
    envs = GuardedVectorEnv(_SendRecvEnv(raise_at=2, nan_at=4), max_consecutive_errors=3)
    stepper = background_stepper(envs)
    assert isinstance(stepper, SendRecvStepper)
    actions = np.zeros(3, np.int64)
    stepper.start(actions)
    obs, reward, terminated, truncated, info = stepper.finish()
    assert (reward == 1).all() and "_env_error" not in info
    stepper.start(actions)  # the send raises: recv reports it as a failed step, every copy reset
    obs, reward, terminated, truncated, info = stepper.finish()
    assert truncated.all() and info["_env_error"].all() and "emulator fault" in info["env_error"][0]
    assert envs.env.resets == 1
    stepper.start(actions)
    assert "_env_error" not in stepper.finish()[4]
    stepper.start(actions)  # NaN in copy 1's observation
    info = stepper.finish()[4]
    assert info["_env_nonfinite"].tolist() == [False, True, False] and info["_env_reset"].all()


def test_thread_stepper_raises_the_step_error_in_finish():
    class Broken(_SendRecvEnv):
        def step(self, actions):
            raise ValueError("broken step")

    stepper = ThreadStepper(Broken(raise_at=0, nan_at=0))
    stepper.start(np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="broken step"):
        stepper.finish()
    stepper.close()
