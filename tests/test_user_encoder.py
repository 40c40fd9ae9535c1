"""model.encoder: a torch module from the user's code as the policy's encoder. What it receives, what distrl adds,
every worker backend checked against eager after a weight update, a backend that cannot take it, the bad factories,
and the trust rule; one real run trains with a module from its working directory, resumes, plays and exports."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.compile import CompileError
from distrl.compile.build import CheckedPolicy
from distrl.config import ConfigError, load_config
from distrl.data.memory import example_inputs
from distrl.envs.testing import image_cartpole, pixel_cartpole, tuple_obs_cartpole
from distrl.models import build_model
from distrl.models.user import UserEncoder, encoder_parameters
from tests.conftest import ROOT
from tests.encoders import Recorder
from tests.worker_backends import BACKENDS

CARTPOLE = str(ROOT / "configs" / "cartpole.yaml")


def _model(env: gym.Env, *overrides: str):
    torch.manual_seed(0)
    config = load_config(CARTPOLE, list(overrides))
    return build_model(env.observation_space, env.action_space, config.model).eval()


def test_a_dict_reaches_the_module_as_a_dict_of_its_parts_in_their_shapes_and_pixels_as_uint8():
    env = image_cartpole()
    model = _model(env, "model.encoder=tests.encoders:recorder")
    obs = [env.observation_space.sample() for _ in range(3)]
    flat = torch.as_tensor(np.stack([gym.spaces.flatten(env.observation_space, o) for o in obs]))
    Recorder.seen.clear()
    model(flat)
    got = Recorder.seen[-1]
    assert isinstance(got, dict) and list(got) == ["image", "state"]
    assert got["image"].dtype == torch.uint8 and tuple(got["image"].shape) == (3, 1, 16, 16)
    assert torch.equal(got["image"], torch.as_tensor(np.stack([o["image"] for o in obs])))
    assert got["state"].dtype == torch.float32 and tuple(got["state"].shape) == (3, 3)
    assert model.actor_encoder.out_dim == 8  # read off one forward: the module declares no out_dim


def test_a_tuple_reaches_the_module_as_a_tuple_and_a_box_as_it_is_pixels_as_uint8():
    env = tuple_obs_cartpole()
    model = _model(env, "model.encoder=tests.encoders:recorder")
    flat = torch.as_tensor(np.stack([gym.spaces.flatten(env.observation_space, env.observation_space.sample())] * 2))
    Recorder.seen.clear()
    model(flat)
    assert isinstance(Recorder.seen[-1], tuple) and len(Recorder.seen[-1]) == len(env.observation_space.spaces)
    box = gym.make("CartPole-v1")
    model = _model(box, "model.encoder=tests.encoders:recorder")
    model(torch.zeros(5, 4))
    assert isinstance(Recorder.seen[-1], torch.Tensor) and tuple(Recorder.seen[-1].shape) == (5, 4)
    pixels = pixel_cartpole(height=8, width=8, channels=1)  # a uint8 Box of [8, 8, 1]
    model = _model(pixels, "model.encoder=tests.encoders:recorder")
    frames = torch.as_tensor(np.stack([pixels.observation_space.sample() for _ in range(3)]))
    model(frames)
    assert Recorder.seen[-1].dtype == torch.uint8 and torch.equal(Recorder.seen[-1], frames)  # as the env gives them
    model(frames.float() / 7.0)  # normalised by env.normalize_obs: floats, as they come
    assert Recorder.seen[-1].dtype == torch.float32


def test_distrl_adds_its_heads_the_critics_copy_and_an_lstm_core():
    env = gym.make("CartPole-v1")
    model = _model(env, "model.encoder=distrl.models.examples:residual_mlp", "model.encoder_kwargs={width: 32}")
    assert isinstance(model.actor_encoder, UserEncoder) and isinstance(model.critic_encoder, UserEncoder)
    assert model.actor_encoder.module is not model.critic_encoder.module  # the critic's own copy
    assert model.policy_head.in_features == 32 and model.value_head.in_features == 32
    assert encoder_parameters(model) == 2 * sum(p.numel() for p in model.actor_encoder.module.parameters())
    recurrent = _model(env, "model.encoder=distrl.models.examples:residual_mlp", "model.lstm_size=16")
    assert recurrent.lstm.input_size == 64 and recurrent.is_recurrent
    h = c = torch.zeros(3, recurrent.lstm_size)
    steps = [recurrent(torch.randn(3, 4), h, c)]
    assert steps[0][0].shape == (3, 2) and steps[0][2].shape == (3, 32)
    shared = _model(env, "model.encoder=distrl.models.examples:residual_mlp", "model.shared_trunk=true")
    assert shared.critic_encoder is None


def test_the_actor_of_an_asymmetric_model_is_given_the_dict_without_the_critics_parts():
    space = gym.spaces.Dict(
        {"critic": gym.spaces.Box(-1, 1, (5,), np.float32), "obs": gym.spaces.Box(-1, 1, (3,), np.float32)}
    )
    config = load_config(CARTPOLE, ["model.encoder=tests.encoders:recorder"])
    model = build_model(space, gym.spaces.Discrete(2), config.model)
    Recorder.seen.clear()
    model(torch.arange(16, dtype=torch.float32).reshape(2, 8))
    actor, critic = Recorder.seen[-2:]
    assert list(actor) == ["obs"] and list(critic) == ["critic", "obs"]
    assert torch.equal(actor["obs"], torch.tensor([[5.0, 6, 7], [13, 14, 15]]))  # its offset in the whole vector


@pytest.mark.parametrize(
    "make, encoder",
    [
        (lambda: gym.make("CartPole-v1"), "distrl.models.examples:residual_mlp"),
        (image_cartpole, "distrl.models.examples:dict_cnn"),
    ],
    ids=["residual_mlp", "dict_cnn"],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_worker_backend_takes_a_user_encoder_and_matches_eager_after_weight_updates(backend, make, encoder):
    env = make()
    for lstm in (0, 16):
        model = _model(env, f"model.encoder={encoder}", f"model.lstm_size={lstm}")
        example = example_inputs(model, 8, seed=1)
        policy = CheckedPolicy(model, backend, example, strict=True)
        assert policy.backend == backend, policy.report.reason
        for step in range(2):
            generator = torch.Generator().manual_seed(10 + step)
            state = {k: v + 0.05 * torch.randn(v.shape, generator=generator) for k, v in model.state_dict().items()}
            policy.update_weights(state)
            policy.verify(example, f"after update {step}")  # the worker's check at every weight sync
        assert policy.sync_checks == 2


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_a_user_cnn_acts_in_bf16_channels_last_where_the_cpu_has_bf16_and_follows_weight_syncs(backend, monkeypatch):
    import distrl.compile.forms as forms
    from distrl.compile.backends.base import Form

    monkeypatch.setattr(forms, "cpu_bf16", lambda: "AMX")  # as on a CPU with bf16 instructions
    model = _model(image_cartpole(), "model.encoder=distrl.models.examples:dict_cnn")
    example = example_inputs(model, 8, seed=1)
    policy = CheckedPolicy(model, backend, example, precision="bf16", memory_format="auto", strict=True)
    assert policy.report.form == Form("bf16", "channels_last") and policy.backend == backend
    for step in range(2):  # the bf16 check at each weight sync
        generator = torch.Generator().manual_seed(20 + step)
        policy.update_weights(
            {k: v + 0.05 * torch.randn(v.shape, generator=generator) for k, v in model.state_dict().items()}
        )
        policy.verify(example, f"after update {step}")
    assert policy.sync_checks == 2


def test_the_learner_updates_a_user_encoder_under_bf16_autocast():
    from distrl.envs import probe_spaces
    from distrl.learner import Learner
    from distrl.rollout import RolloutWorker

    config = load_config(
        CARTPOLE,
        [
            "model.encoder=distrl.models.examples:residual_mlp",
            "learner.amp=bf16",
            "env.num_envs_per_worker=8",
            "rollout.rollout_length=32",
            "ppo.minibatch_size=64",
            "ppo.epochs=2",
        ],
    )
    worker, learner = RolloutWorker(config), Learner(config, *probe_spaces(config.env))
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    result = learner.update(worker.sample())
    assert learner.describe()["precision"] == "bf16" and result["gradient_steps"] == 8
    assert all(np.isfinite(result[key]) for key in ("loss_policy", "loss_value", "entropy", "grad_norm"))
    changed = [k for k, v in learner.model.state_dict().items() if not torch.equal(v, before[k])]
    assert any(".module." in k for k in changed), changed  # the user's module trained, its weights in fp32
    assert all(v.dtype == torch.float32 for v in learner.model.state_dict().values())


def test_a_backend_that_cannot_take_the_module_names_itself_and_the_operation(caplog):
    env = gym.make("CartPole-v1")
    model = _model(env, "model.encoder=tests.encoders:bessel")
    example = example_inputs(model, 8, seed=1)
    with pytest.raises(CompileError) as refused:  # asked for by name: refused, never replaced
        CheckedPolicy(model, "onnxrt", example, strict=True)
    message = str(refused.value)
    assert message.startswith("rollout.compile.backend=onnxrt") and "aten::i0" in message, message
    assert len(message.splitlines()) == 1
    chosen = CheckedPolicy(model, "auto", example)  # auto goes on to one that takes it, and says why not onnxrt
    assert chosen.backend in ("eager", "inductor", "ipex") and "onnxrt" in chosen.report.reason
    assert "aten::i0" in chosen.report.reason


@pytest.mark.parametrize(
    "overrides, says",
    [
        (["model.encoder=distrl.models.examples"], "give package.module:factory"),
        (["model.encoder=tests.no_such_module:f"], "cannot import module 'tests.no_such_module'"),
        (["model.encoder=distrl.models.examples:nothing"], "has no callable 'nothing'"),
        (
            ["model.encoder=distrl.models.examples:residual_mlp", "model.encoder_kwargs={depth: 3}"],
            "residual_mlp(observation_space, **model.encoder_kwargs) raised TypeError",
        ),
        (["model.encoder=tests.encoders:three_dims"], "returned (2, 1, 4) for a batch of 2 observations"),
        (["model.encoder=tests.encoders:not_a_module"], "returned str, not a torch.nn.Module"),
        (["model.encoder=distrl.models.examples:residual_mlp", "model.type=cnn"], "model.type=cnn: not with"),
        (["model.encoder_kwargs={width: 3}"], "model.encoder_kwargs: given without model.encoder"),
    ],
)
def test_a_bad_encoder_is_one_line_naming_the_key(overrides, says):
    env = gym.make("CartPole-v1")
    with pytest.raises(ConfigError) as problem:
        config = load_config(CARTPOLE, overrides)
        build_model(env.observation_space, env.action_space, config.model)
    assert says in str(problem.value) and len(str(problem.value).splitlines()) == 1, str(problem.value)


ENCODER_MODULE = """
import torch
from torch import nn


class Residual(nn.Module):
    def __init__(self, size, width):
        super().__init__()
        self.inp = nn.Linear(size, width)
        self.block = nn.Sequential(nn.LayerNorm(width), nn.GELU(), nn.Linear(width, width))

    def forward(self, obs):
        x = self.inp(obs)
        return x + self.block(x)


def residual(observation_space, width=32):
    return Residual(observation_space.shape[0], width)
"""


def _distrl(*args: str, cwd):
    """The installed ``distrl`` command in ``cwd`` (not ``python -m``, which puts the working directory on sys.path
    itself), without PYTHONPATH: as a user runs it beside their module."""
    script = Path(sys.executable).parent / "distrl"
    if not script.exists():
        pytest.skip("the distrl console script is not installed beside this Python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
    env.update(RAY_ADDRESS="local", RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
    return subprocess.run([str(script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_run_with_an_encoder_from_the_working_directory_trains_resumes_plays_and_exports(tmp_path, monkeypatch):
    """A module beside the user (no PYTHONPATH): trained on onnxrt workers, which run its export, with an LSTM core;
    the config file that names it is refused until the module is named; resume, eval and export take the same."""
    (tmp_path / "my_encoders.py").write_text(textwrap.dedent(ENCODER_MODULE))
    config = tmp_path / "mine.yaml"
    config.write_text(
        (ROOT / "configs" / "cartpole.yaml")
        .read_text()
        .replace("model:\n", "model:\n  encoder: my_encoders:residual\n")
    )
    trust = ["--trust-model", "my_encoders:residual"]
    common = ["--set", "rollout.compile.backend=onnxrt", "--set", "rollout.compile.strict=true"]
    common += [
        "--set",
        "model.lstm_size=8",
        "--set",
        "stop.episode_return_mean=null",
        "--set",
        "env.num_envs_per_worker=16",
    ]
    refused = _distrl("train", "mine.yaml", "--run-dir", "run", *common, cwd=tmp_path)
    assert refused.returncode == 2 and not (tmp_path / "run").exists(), refused.stderr[-2000:]
    assert refused.stderr.strip().splitlines() == [
        "distrl: config error: model.encoder='my_encoders:residual' (from config 'mine.yaml'): an encoder is code, "
        "and distrl imports code only when you name it; if you trust it, add --trust-model my_encoders:residual (in "
        "Python: trusted_models=['my_encoders:residual'])"
    ]
    first = _distrl(
        "train", "mine.yaml", "--run-dir", "run", *common, *trust, "--set", "stop.env_steps=16384", cwd=tmp_path
    )
    assert first.returncode == 0, first.stderr[-3000:]
    setup = (tmp_path / "run" / "setup.txt").read_text()
    assert "encoder my_encoders:residual (" in setup and " parameters)" in setup, setup
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert set(summary["worker_backends"]) == {"onnxrt"}, summary["worker_backends"]
    assert "built without torch" in setup  # the worker ran the export: neither torch nor the module imported there

    # The run's own config.yaml is a file: its encoder is named again to go on.
    again = ["train", "--resume", "run", "--set", f"stop.env_steps={summary['env_steps'] + 1}"]
    refused = _distrl(*again, cwd=tmp_path)
    assert refused.returncode == 2 and "--trust-model my_encoders:residual" in refused.stderr, refused.stderr
    resumed = _distrl(*again, "--set", "model.encoder=my_encoders:residual", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["env_steps"] > summary["env_steps"]

    for command in (["eval", "run", "--episodes", "2"], ["export", "run", "p.onnx"]):
        refused = _distrl(*command, cwd=tmp_path)
        assert refused.returncode == 2 and "--trust-model my_encoders:residual" in refused.stderr, refused.stderr
        done = _distrl(*command, *trust, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
    assert "checked against torch" in done.stdout and (tmp_path / "p.onnx").is_file()

    # In Python: load_policy takes the same rule (trusted_models).
    import distrl

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"trusted_models=\['my_encoders:residual'\]"):
        distrl.load_policy("run")
    policy = distrl.load_policy("run", trusted_models=["my_encoders:residual"])
    actions, state = policy.predict(np.zeros((3, 4), np.float32))
    assert actions.shape == (3,) and state is not None  # the LSTM core's state
