"""The driver's wait bounds (driver/timeouts.py) and the env guard's non-finite check, without Ray."""

import gymnasium as gym
import numpy as np
import pytest

from distrl.driver.timeouts import FIRST_SAMPLE_S, FIRST_UPDATE_S, SAMPLE_FLOOR_S, UPDATE_FLOOR_S, WaitBounds
from distrl.envs.guard import GuardedEnv, GuardedVectorEnv
from distrl.envs.testing import nan_obs_cartpole, nan_reward_cartpole


def test_auto_bounds_follow_the_runs_pace_above_a_floor():
    bounds = WaitBounds("auto", "auto")
    assert bounds.sample_s() == FIRST_SAMPLE_S and bounds.update_s() == FIRST_UPDATE_S  # nothing measured yet
    for seconds in (0.02, 0.03, 0.025):
        bounds.saw_sample(seconds)
        bounds.saw_update(seconds * 5)
    assert bounds.sample_s() == SAMPLE_FLOOR_S and bounds.update_s() == UPDATE_FLOOR_S  # fast runs: the floors
    bounds.saw_sample(9.0)  # a slow machine's Breakout sample
    bounds.saw_update(30.0)
    assert bounds.sample_s() == pytest.approx(90.0) and bounds.update_s() == pytest.approx(300.0)  # 10x the slowest
    for _ in range(10):  # the slow ones leave the window of recent iterations
        bounds.saw_sample(1.0)
    assert bounds.sample_s() == SAMPLE_FLOOR_S


def test_fixed_bounds_are_used_as_given():
    bounds = WaitBounds(5, 0.5)
    bounds.saw_sample(100.0)
    assert bounds.sample_s() == 5.0 and bounds.update_s() == 0.5


@pytest.mark.parametrize("factory,array", [(nan_obs_cartpole, "observation"), (nan_reward_cartpole, "reward")])
def test_guard_resets_a_nonfinite_step_and_names_the_array(factory, array):
    env = GuardedEnv(factory(every=3), max_consecutive_errors=3)
    env.reset(seed=0)
    for call in range(1, 7):
        obs, reward, terminated, truncated, info = env.step(0)
        assert np.isfinite(obs).all() and np.isfinite(reward)  # what a worker sees is always finite
        if call % 3 == 0:
            assert truncated and reward == 0.0 and info["env_nonfinite"] == f"{array} not finite"
        else:
            assert "env_nonfinite" not in info


def test_guard_of_a_native_vector_env_resets_it_whole_and_marks_the_copies_at_fault():
    class NanCopyTwo(gym.vector.VectorWrapper):
        def step(self, actions):
            obs, rewards, terminated, truncated, info = self.env.step(actions)
            obs = obs.copy()
            obs[2, 1] = np.inf
            return obs, rewards, terminated, truncated, info

    envs = GuardedVectorEnv(
        NanCopyTwo(gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="vector_entry_point")), 3
    )
    envs.reset(seed=0)
    obs, rewards, terminated, truncated, info = envs.step(np.zeros(4, dtype=np.int64))
    assert np.isfinite(obs).all() and truncated.all() and not rewards.any()
    assert info["_env_nonfinite"].tolist() == [False, False, True, False] and info["_env_reset"].all()
    assert info["env_nonfinite"][2] == "observation not finite"
