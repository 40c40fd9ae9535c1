"""The envs users bring: float64 observations on every backend, return normalisation, a module in the working
directory, gymnasium's ``module:EnvName-v0`` ids, the vectorization chosen for the user, and the small things."""

import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import run_cli

from distrl.common.checkpoint import save_checkpoint
from distrl.common.running_mean_std import RunningMeanStd
from distrl.config import load_config
from distrl.config.loader import parse_value
from distrl.deploy.policy import Policy
from distrl.envs import EnvSpecError, make_vec_env, probe_spaces, resolve_env_id, resolve_vectorization
from distrl.learner import Learner
from distrl.rollout import RolloutWorker

FLOAT64 = "distrl.envs.testing:float64_cartpole"


def _worker(*overrides):
    config = load_config(
        None, ["env.num_envs_per_worker=4", "rollout.rollout_length=16", "ppo.minibatch_size=32", *overrides]
    )
    return config, RolloutWorker(config)


@pytest.mark.parametrize("backend", ["eager", "onnxrt", "inductor"])
def test_float64_observations_run_on_every_backend(backend):
    config, worker = _worker(f"env.id={FLOAT64}", f"rollout.compile.backend={backend}", "rollout.compile.strict=true")
    assert worker.envs.single_observation_space.dtype == np.float64
    assert worker.policy.backend == backend  # strict: a fallback would have raised
    info, batch = worker.sample()
    assert batch.obs.dtype == np.float32 and info.policy_backend == backend
    learner = Learner(config, *probe_spaces(config.env))
    worker.set_weights(learner.get_weights())
    learner.update((info, batch))
    worker.set_weights(learner.get_weights())  # the compiled policy is checked again after the sync
    worker.sample()


def test_float64_observations_in_load_policy(tmp_path):
    config = load_config(None, [f"env.id={FLOAT64}", "env.vectorization=sync"])
    learner = Learner(config, *probe_spaces(config.env))
    payload = {"counters": {}, "learner": learner.state(), "config": config.model_dump(mode="json")}
    policy = Policy.from_checkpoint(save_checkpoint(tmp_path / "run", 1, payload, keep=1))
    obs = np.random.default_rng(0).normal(size=(5, 4))  # float64
    actions, _ = policy.predict(obs)
    np.testing.assert_array_equal(actions, policy.predict(obs.astype(np.float32))[0])


def test_mujoco_float64_on_onnxrt():
    pytest.importorskip("mujoco")
    _, worker = _worker(
        "env.id=Hopper-v5",
        "env.vectorization=sync",
        "rollout.compile.backend=onnxrt",
        "rollout.compile.strict=true",
        "env.normalize_obs=true",
        "env.normalize_reward=true",
    )
    info, batch = worker.sample()
    assert info.policy_backend == "onnxrt" and batch.actions.dtype == np.float32


# --- return normalisation --------------------------------------------------------------------------------


def test_worker_tracks_discounted_returns_per_env():
    """Each env's discounted return, by hand from the batch's rewards (SB3 VecNormalize's rule), over two batches."""
    config, worker = _worker("env.normalize_reward=true", "ppo.gamma=0.9", "env.vectorization=sync")
    expected = np.zeros(4)
    seen = []
    for _ in range(2):
        info, batch = worker.sample()
        for t in range(16):
            valid = batch.valid[t]
            expected = np.where(valid, expected * 0.9 + batch.rewards[t], expected)
            seen.extend(expected[valid])
            expected[valid & (batch.terminated[t] | batch.truncated[t])] = 0.0
        count, mean, var = info.return_stats
        assert count == batch.valid.sum()
        np.testing.assert_allclose(mean, np.mean(seen[-int(count) :]))
        np.testing.assert_allclose(var, np.var(seen[-int(count) :]))
    np.testing.assert_allclose(worker.runner.runners[0].discounted_returns, expected)


def test_learner_merges_return_statistics_and_restores_them():
    config = load_config(
        None,
        [
            "env.num_envs_per_worker=4",
            "rollout.rollout_length=16",
            "ppo.minibatch_size=32",
            "rollout.num_workers=2",
            "env.normalize_reward=true",
        ],
    )
    workers = [RolloutWorker(config, worker_index=i) for i in range(2)]
    learner = Learner(config, *probe_spaces(config.env))
    samples = [w.sample() for w in workers]
    learner.update(*samples)
    merged = RunningMeanStd(())
    for info, _ in samples:
        merged.merge(*info.return_stats)
    assert learner.return_rms.count == merged.count
    np.testing.assert_allclose(learner.return_rms.var, merged.var)
    assert learner.return_rms.var != 1.0
    restored = Learner(config, *probe_spaces(config.env))
    restored.load_state(learner.state())
    assert restored.return_rms.count == merged.count
    np.testing.assert_allclose(restored.return_rms.var, learner.return_rms.var)


def test_return_normalisation_scales_the_rewards_the_algorithm_sees():
    """With normalize_reward the value targets are the rewards' returns divided by the return std, so the value
    loss of the same batch is about 1/var as large (the critic starts near 0)."""
    losses = {}
    for on in (False, True):
        config = load_config(
            None,
            [
                "env.num_envs_per_worker=4",
                "rollout.rollout_length=64",
                "ppo.minibatch_size=256",
                f"env.normalize_reward={str(on).lower()}",
                "ppo.epochs=1",
                "ppo.clip_vloss=false",
            ],
        )
        worker = RolloutWorker(config)
        learner = Learner(config, *probe_spaces(config.env))
        info, batch = worker.sample()
        losses[on] = (learner.update((info, batch))["loss_value"], learner.return_rms)
    (off_loss, _), (on_loss, rms) = losses[False], losses[True]
    ratio = on_loss / off_loss
    assert 0.5 / rms.var < ratio < 2.0 / rms.var


# --- your own env ------------------------------------------------------------------------------------------

USER_ENV = textwrap.dedent('''
    import gymnasium as gym
    from gymnasium.envs.registration import register


    class Corridor(gym.Env):
        """Walk right to the end of a corridor: +1 there, -0.01 a step."""

        observation_space = gym.spaces.Box(0.0, 1.0, (1,), dtype="float64")
        action_space = gym.spaces.Discrete(2)

        def __init__(self, length=5):
            self.length = length

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.position = 0
            return self._obs(), {}

        def step(self, action):
            self.position = max(0, self.position + (1 if action == 1 else -1))
            done = self.position >= self.length
            return self._obs(), (1.0 if done else -0.01), done, False, {}

        def _obs(self):
            import numpy as np

            return np.array([self.position / self.length])


    def make_corridor(length=5):
        return gym.wrappers.TimeLimit(Corridor(length), 50)


    register(id="Corridor-v0", entry_point=Corridor, max_episode_steps=50)
''')


def _console_script() -> str:
    """The installed ``distrl`` command (not ``python -m``, which puts the working directory on sys.path itself)."""
    script = Path(sys.executable).parent / "distrl"
    if not script.exists():
        pytest.skip("the distrl console script is not installed beside this Python")
    return str(script)


@pytest.mark.slow
def test_user_env_module_in_the_working_directory_trains(tmp_path):
    """A user's module in the directory they run distrl from, named on the command line: no PYTHONPATH, no
    vectorization setting (auto chooses sync for a factory, said once), and eval after it with --trust-env."""
    import os
    import subprocess

    (tmp_path / "corridor_env.py").write_text(USER_ENV)
    (tmp_path / "corridor.yaml").write_text(
        "env: {num_envs_per_worker: 8, kwargs: {length: 4}}\nrollout: {rollout_length: 32}\n"
        "ppo: {minibatch_size: 256}\nstop: {env_steps: 8192}\n"
    )
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")},
        "RAY_ADDRESS": "local",
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONUNBUFFERED": "1",
    }
    cmd = [
        _console_script(),
        "train",
        "corridor.yaml",
        "--set",
        "env.id=corridor_env:make_corridor",
        "--run-dir",
        "run",
    ]
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    setup = (tmp_path / "run" / "setup.txt").read_text()  # the start-up summary in full
    assert "(sync, chosen by auto: an env factory has no native vector env)" in setup
    assert "Traceback" not in result.stderr
    # eval of a run trained on a user env: without the flag one line names the flag that works; with it, it plays.
    refused = subprocess.run(
        [_console_script(), "eval", "run", "--episodes", "2"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "--trust-env corridor_env:make_corridor" in refused.stderr
    played = subprocess.run(
        [_console_script(), "eval", "run", "--episodes", "2", "--trust-env", "corridor_env:make_corridor"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert played.returncode == 0, played.stderr[-2000:]


def test_gymnasium_module_colon_id_form(tmp_path, monkeypatch):
    (tmp_path / "corridor_reg.py").write_text(USER_ENV)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert resolve_env_id("corridor_reg:Corridor-v0") == "Corridor-v0"
    assert str(tmp_path) == sys.path[-1]  # appended: it shadows nothing installed
    envs = make_vec_env(load_config(None, ["env.id=corridor_reg:Corridor-v0", "env.num_envs_per_worker=16"]).env)
    assert envs.single_observation_space.shape == (1,)
    envs.close()
    with pytest.raises(EnvSpecError, match="no callable 'Nope-v0', and importing it registered no gymnasium id"):
        resolve_env_id("corridor_reg:Nope-v0")
    with pytest.raises(EnvSpecError, match="cannot import module 'not_here'"):
        resolve_env_id("not_here:make")


def test_vectorization_auto():
    env = lambda *o: load_config(None, list(o)).env  # noqa: E731
    assert resolve_vectorization(env()) == ("native", None)
    assert resolve_vectorization(env("env.id=Pendulum-v1")) == ("sync", "Pendulum-v1 has no native vector env")
    assert resolve_vectorization(env("env.action_repeat=2"))[0] == "sync"
    assert resolve_vectorization(env(f"env.id={FLOAT64}")) == ("sync", "an env factory has no native vector env")
    assert resolve_vectorization(env("env.vectorization=async")) == ("async", None)
    assert probe_spaces(env("env.id=Pendulum-v1"))[1].shape == (1,)


# --- small things ----------------------------------------------------------------------------------------


def test_set_none_is_null():
    assert parse_value("none") is None and parse_value("None") is None and parse_value("null") is None
    assert load_config(None, ["ppo.target_kl=none"]).ppo.target_kl is None
    assert parse_value("nonesuch") == "nonesuch"


def test_predict_takes_sb3_contrib_masks_and_pettingzoo_dicts(tmp_path):
    config = load_config(None, ["env.vectorization=sync"])
    learner = Learner(config, *probe_spaces(config.env))
    payload = {"counters": {}, "learner": learner.state(), "config": config.model_dump(mode="json")}
    policy = Policy.from_checkpoint(save_checkpoint(tmp_path / "run", 1, payload, keep=1))
    obs = np.zeros((3, 4), np.float32)
    only_one = np.array([[False, True]] * 3)
    for kwargs in ({"action_mask": only_one}, {"action_masks": only_one}):
        assert (policy.predict(obs, deterministic=False, **kwargs)[0] == 1).all()
    assert (policy.predict({"observation": obs, "action_mask": only_one}, deterministic=False)[0] == 1).all()
    assert policy.predict({"observation": obs[0], "action_mask": only_one[0]})[0] == 1  # one, unbatched
    with pytest.raises(ValueError, match="not both"):
        policy.predict(obs, action_mask=only_one, action_masks=only_one)


def test_export_prints_only_its_own_line(tmp_path):
    config = load_config(None, ["env.normalize_obs=true"])
    learner = Learner(config, *probe_spaces(config.env))
    payload = {"counters": {}, "learner": learner.state(), "config": config.model_dump(mode="json")}
    checkpoint = save_checkpoint(tmp_path / "run", 1, payload, keep=1)
    result = run_cli("export", str(checkpoint.relative_to(tmp_path)), "p.onnx", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr
    lines = result.stdout.splitlines()  # what it wrote, and how it was checked
    assert result.stdout.startswith("wrote p.onnx from run/") and "max_abs_diff=" in lines[1] and len(lines) == 2, lines


def test_dict_observations_with_images_leave_pixels_unnormalised():
    config = load_config(
        None,
        [
            "env.id=distrl.envs.testing:image_cartpole",
            "env.normalize_obs=true",
            "env.num_envs_per_worker=4",
            "rollout.rollout_length=16",
            "ppo.minibatch_size=32",
        ],
    )
    worker = RolloutWorker(config)
    learner = Learner(config, *probe_spaces(config.env))
    learner.update(worker.sample())
    worker.set_weights(learner.get_weights())
    _, batch = worker.sample()
    pixels = batch.obs[..., :256]
    assert set(np.unique(pixels)) <= {0.0, 255.0} and (pixels == 255).any()
    assert np.abs(batch.obs[..., 256:]).max() <= config.env.obs_clip
    assert gym.spaces.flatdim(probe_spaces(config.env)[0]) == 259
