"""distrl as a library: distrl.train / distrl.load_policy, in a fresh Python process as a notebook would use them."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import distrl
from distrl.api import _as_override_list
from distrl.config import ConfigError, load_config
from tests.conftest import ROOT


def run_script(code: str, timeout: float = 600) -> subprocess.CompletedProcess:
    import os

    # A private Ray, even where `ray start` left a cluster on this machine (as run_cli does).
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": "local"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
        env=env,
    )


@pytest.mark.slow
def test_notebook_style_script_trains_cartpole_to_475_and_acts(tmp_path):
    result = run_script(f"""
        import json, logging
        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
        import distrl
        import gymnasium as gym
        import numpy as np
        import ray

        result = distrl.train("configs/cartpole.yaml", run_dir={str(tmp_path / "run")!r})
        print("RESULT", json.dumps({{"reason": result.stop_reason, "ret": result.episode_return_mean,
                                    "solved": result.solved_at_s, "best": str(result.best_checkpoint),
                                    "steps": result.env_steps}}))
        print("RAY_AFTER", ray.is_initialized())
        policy = distrl.load_policy(result.best_checkpoint)
        env = gym.make("CartPole-v1")
        returns = []
        for episode in range(5):
            obs, _ = env.reset(seed=episode)
            total, done = 0.0, False
            while not done:
                action, _ = policy.predict(obs)
                obs, reward, terminated, truncated, _ = env.step(action)
                total += reward
                done = terminated or truncated
            returns.append(total)
        print("EVAL", json.dumps(returns))
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    payload = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
    assert payload["reason"] == "episode_return_mean" and payload["ret"] >= 475 and payload["solved"] is not None
    assert payload["best"].endswith(".pt")
    assert "RAY_AFTER False" in out  # the Ray train() started is gone with it
    assert "distrl.driver: started: first update at" in result.stderr  # through logging, as the caller configured
    assert np.mean(json.loads(out.split("EVAL ", 1)[1].splitlines()[0])) >= 400


@pytest.mark.slow
def test_train_joins_the_callers_ray_from_a_thread_and_leaves_it_running(tmp_path):
    result = run_script(f"""
        import threading
        import ray
        import distrl

        ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
        out = {{}}
        def run():
            try:
                out["result"] = distrl.train({{"env": {{"id": "CartPole-v1", "num_envs_per_worker": 16}}}},
                                             overrides=["stop.env_steps=4000"], run_dir={str(tmp_path / "run")!r})
            except BaseException as exc:
                out["error"] = repr(exc)
        thread = threading.Thread(target=run)  # no signal handlers outside the main thread
        thread.start(); thread.join()
        print("ERROR", out.get("error"))
        print("STEPS", out["result"].env_steps, out["result"].stop_reason)
        print("RAY_AFTER", ray.is_initialized(), ray.cluster_resources().get("CPU"))
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ERROR None" in result.stdout
    assert "STEPS" in result.stdout and "env_steps" in result.stdout
    assert "RAY_AFTER True 2.0" in result.stdout
    placement = json.loads((tmp_path / "run" / "placement.json").read_text())
    assert set(placement) == {"learner-0", "worker-0"}


def test_overrides_as_a_dict_or_strings_give_the_same_config():
    as_dict = {"ppo.lr": 1e-3, "model.hidden": [32, 32], "stop.episode_return_mean": None, "env.id": "Pendulum-v1"}
    strings = ["ppo.lr=1e-3", "model.hidden=[32, 32]", "stop.episode_return_mean=null", "env.id=Pendulum-v1"]
    assert load_config("configs/cartpole.yaml", as_dict) == load_config("configs/cartpole.yaml", strings)
    assert load_config("configs/cartpole.yaml", _as_override_list(as_dict)) == load_config(
        "configs/cartpole.yaml", strings
    )
    config = load_config({"ppo": {"lr": 5e-4}}, {"seed": 3})
    assert config.ppo.lr == 5e-4 and config.seed == 3
    assert load_config(config, ["seed=4"]).seed == 4


def test_bad_input_raises_before_anything_starts(tmp_path):
    import ray

    ray_before = ray.is_initialized()  # another test file's session Ray may be up: train must not change that
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"ppo\.lr=-1"):
        distrl.train("configs/cartpole.yaml", overrides={"ppo.lr": -1}, run_dir=run_dir)
    with pytest.raises(distrl.UsageError, match="not empty"):
        (tmp_path / "full").mkdir()
        (tmp_path / "full" / "notes.txt").write_text("mine")
        distrl.train("configs/cartpole.yaml", run_dir=tmp_path / "full")
    assert not run_dir.exists() and ray.is_initialized() == ray_before
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine"


def test_load_policy_acts_on_one_observation_or_a_batch(tmp_path):
    from distrl.common.checkpoint import save_checkpoint
    from distrl.envs import probe_spaces
    from distrl.learner import Learner

    for name, overrides in (("mlp", []), ("lstm", ["model.lstm_size=16", "model.shared_trunk=true"])):
        config = load_config("configs/cartpole.yaml", overrides)
        learner = Learner(config, *probe_spaces(config.env))
        payload = {"counters": {}, "learner": learner.state(), "config": config.model_dump(mode="json")}
        path = save_checkpoint(tmp_path / name, 1, payload, keep=1)
        policy = distrl.load_policy(path)
        obs = np.zeros((3, 4), dtype=np.float32)
        actions, state = policy.predict(obs)
        assert actions.shape == (3,) and set(actions.tolist()) <= {0, 1}
        single, _ = policy.predict(obs[0], None if state is None else tuple(s[:1] for s in state))
        assert np.ndim(single) == 0 and single == actions[0]
        assert (state is None) == (name == "mlp")
        if state is not None:  # an episode start resets that row's state
            _, reset = policy.predict(obs, state, episode_start=np.array([True, False, False]))
            _, fresh = policy.predict(obs)
            np.testing.assert_allclose(reset[0][0], fresh[0][0], atol=1e-6)
        with pytest.raises(ValueError, match="observation shape"):
            policy.predict(np.zeros(5, dtype=np.float32))


def test_load_policy_clips_continuous_actions_to_the_action_space(tmp_path):
    from distrl.common.checkpoint import save_checkpoint
    from distrl.envs import probe_spaces
    from distrl.learner import Learner

    config = load_config("configs/pendulum.yaml", ["model.init_log_std=2.0"])  # wide: samples leave [-2, 2]
    learner = Learner(config, *probe_spaces(config.env))
    payload = {"counters": {}, "learner": learner.state(), "config": config.model_dump(mode="json")}
    policy = distrl.load_policy(save_checkpoint(tmp_path, 1, payload, keep=1))
    policy.seed(0)
    obs = np.random.default_rng(0).normal(size=(256, 3)).astype(np.float32)
    actions, state = policy.predict(obs, deterministic=False)
    assert state is None and actions.shape == (256, 1)
    assert actions.min() >= -2.0 and actions.max() <= 2.0 and (np.abs(actions) == 2.0).any()
