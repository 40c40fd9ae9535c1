"""The configs written for envs no one tuned them on (the starting configs, MinAtar's one config for the suite): each
loads and trains a few thousand steps on every env and game it names, in process (the studies train them to their
budgets: benchmarks/learning/start_configs.py, minatar_suite.py)."""

import importlib.util

import numpy as np
import pytest

from distrl.config import load_config
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.rollout import RolloutWorker
from tests.conftest import ROOT

MINATAR = pytest.mark.skipif(importlib.util.find_spec("minatar") is None, reason="MinAtar is not installed")
MUJOCO = pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="MuJoCo is not installed")
CASES = [
    *(("start_discrete", env) for env in ("Acrobot-v1", "MountainCar-v0", "CartPole-v1")),
    ("start_continuous", "Pendulum-v1"),
    pytest.param("start_continuous", "Hopper-v5", marks=MUJOCO),
    *(
        pytest.param("minatar", f"MinAtar/{game}-v1", marks=MINATAR)
        for game in ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
    ),
]
SMALL = ["env.num_envs_per_worker=4", "rollout.rollout_length=256", "rollout.compile.backend=eager", "ppo.epochs=1"]


@pytest.mark.parametrize("config, env", CASES)
def test_a_general_config_trains_on_each_env_it_names(config, env):
    settings = load_config(ROOT / "configs" / f"{config}.yaml", [f"env.id={env}", *SMALL])
    worker, learner = RolloutWorker(settings), Learner(settings, *probe_spaces(settings.env))
    for _ in range(2):  # two updates of 1,024 env steps, the second acting on the first's weights
        worker.set_weights(learner.get_weights())
        result = learner.update(worker.sample())
        assert result["gradient_steps"] > 0
        assert all(np.isfinite(result[key]) for key in ("loss_policy", "loss_value", "entropy", "grad_norm"))
