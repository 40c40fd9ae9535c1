"""The policy models the policy-call studies time (``MODELS``: a config each), and real observations to feed them:
what ``inference.py``, ``inference_forms.py`` and ``compile_check.py`` share."""

from __future__ import annotations

import numpy as np
import torch

from distrl.config import load_config
from distrl.data.batch import policy_observation
from distrl.envs import make_vec_env
from distrl.models import build_model

MODELS = {
    # model: (config overrides, env overrides)
    "mlp": ([], ["env.id=CartPole-v1"]),
    "lstm": (
        ["model.lstm_size=64", "model.shared_trunk=true", "model.hidden=[64]"],
        ["env.id=distrl.envs.wrappers:cartpole_no_velocity", "env.vectorization=sync"],
    ),
    "cnn": (
        ["model.type=cnn", "model.hidden=[512]", "model.shared_trunk=true", "model.activation=relu"],
        ["env.id=ALE/Breakout-v5"],
    ),
    "attention": (
        [
            "model.type=attention",
            "model.window=8",
            "model.d_model=32",
            "model.heads=2",
            "model.layers=1",
            "model.shared_trunk=true",
        ],
        ["env.id=distrl.envs.wrappers:cartpole_no_velocity", "env.vectorization=sync"],
    ),
    # MuJoCo's float64 observations, cast at the worker boundary as the worker casts them; a Gaussian policy, the
    # actor and critic apart (configs/mujoco/hopper.yaml). Needs pip install -e ".[mujoco]".
    "mujoco": (["model.shared_trunk=false"], ["env.id=Hopper-v5", "env.vectorization=sync"]),
}
CNN_MAX_BATCH = 256  # a 1024-frame Nature-CNN batch takes seconds a call on one core: not a worker's batch


def collect_observations(model_name: str, batch: int, seed: int = 0) -> list[np.ndarray]:
    """Distinct batches of real observations, gathered by stepping the env with random actions."""
    model_overrides, env_overrides = MODELS[model_name]
    envs_n = min(batch, 64 if model_name != "cnn" else 16)
    config = load_config(
        None,
        [
            *env_overrides,
            f"env.num_envs_per_worker={envs_n}",
            "ppo.minibatch_size=64",
            "rollout.rollout_length=128",
            *model_overrides,
        ],
    )
    envs = make_vec_env(config.env)
    obs, _ = envs.reset(seed=seed)
    rows_needed = max(batch * 8, 512 if model_name != "cnn" else 64)
    pool = [obs]
    while sum(len(p) for p in pool) < rows_needed:
        obs, *_ = envs.step(envs.action_space.sample())
        pool.append(obs)
    envs.close()
    pool_steps = pool
    pool = np.concatenate(pool)
    rng = np.random.default_rng(seed)
    window = config.model.window if config.model.type == "attention" else 0
    if window:  # windows of W consecutive observations of one env: [batch, W, *obs]
        steps = np.stack([p for p in pool_steps if len(p) == envs_n])  # [T, envs, *obs]

        def windows():
            t = rng.integers(0, len(steps) - window, batch)
            e = rng.integers(0, envs_n, batch)
            return np.stack([steps[ti : ti + window, ei] for ti, ei in zip(t, e)])

        return [windows() for _ in range(8)], config
    # Cast as the worker casts (distrl/data/batch.py: float64 and other dtypes to float32, uint8 frames kept).
    return [policy_observation(pool[rng.choice(len(pool), batch, replace=False)]) for _ in range(8)], config


def build(model_name: str, config):
    """The model of ``config`` (``collect_observations``'s), seeded, in eval mode."""
    envs = make_vec_env(config.env.model_copy(update={"num_envs_per_worker": 1}))
    spaces = envs.single_observation_space, envs.single_action_space
    envs.close()
    torch.manual_seed(0)
    return build_model(*spaces, config.model).eval()


def example_inputs(model, batches):
    """What a compiled policy is traced with: the first batch, and a recurrent model's initial state."""
    if model.is_recurrent:
        return (batches[0], *model.initial_state(len(batches[0])))
    return (batches[0],)
