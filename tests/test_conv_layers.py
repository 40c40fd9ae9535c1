"""Convolutional encoders from the config (``model.conv_layers``, ``model.channels``): images of any size, layout and
pixel dtype through every worker backend and the learner's step, checked against eager as every model is."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

import distrl.compile.forms as forms
from distrl.compile import check_against_eager, compile_policy
from distrl.compile.build import CheckedPolicy
from distrl.compile.check import Float64Reference
from distrl.config import load_config
from distrl.data.batch import policy_observation
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.models import build_model
from distrl.models.fit import check_model_fits
from distrl.models.image import conv_plan
from distrl.rollout import RolloutWorker
from tests.worker_backends import BACKENDS

# name -> (overrides, observation space): MinAtar's frames (10 x 10 x 4 bool, channels last) with the MinAtar paper's
# network, and Procgen's or Crafter's (64 x 64 x 3 uint8, channels last) with a stack of two.
IMAGES = {
    "minatar": (
        ["model.type=cnn", "model.conv_layers=[[16,3,1]]", "model.hidden=[128]", "model.activation=relu"],
        gym.spaces.Box(0, 1, (10, 10, 4), bool),
    ),
    "rgb64": (
        ["model.type=cnn", "model.conv_layers=[[16,5,2],[32,3,2]]", "model.hidden=[64,32]", "model.shared_trunk=true"],
        gym.spaces.Box(0, 255, (64, 64, 3), np.uint8),
    ),
}


def make(name, seed=0, batch=6):
    overrides, space = IMAGES[name]
    torch.manual_seed(seed)
    model = build_model(space, gym.spaces.Discrete(3), load_config(None, overrides).model).eval()
    space.seed(seed)
    return model, (policy_observation(np.stack([space.sample() for _ in range(batch)])),)


def test_the_plan_reads_the_layout_scales_by_dtype_and_sizes_each_layer():
    cfg = load_config(None, ["model.type=cnn", "model.conv_layers=[[16,3,1]]", "model.hidden=[128]"]).model
    plan = conv_plan((10, 10, 4), np.bool_, cfg)
    assert plan.channels_last and plan.chw == (4, 10, 10) and plan.scale == 1.0
    assert plan.layers == ((16, 3, 1),) and plan.dense == (128,) and plan.flat == 16 * 8 * 8
    assert (
        conv_plan((3, 64, 64), np.uint8, cfg).scale == pytest.approx(1 / 255)
        and not conv_plan((3, 64, 64), np.uint8, cfg).channels_last
    )
    # Unset: the Nature-CNN for 84 x 84 stacks, its state_dict names as before; two 3x3 convolutions for small images.
    nature = load_config(None, ["model.type=cnn", "model.hidden=[512]", "model.shared_trunk=true"]).model
    model = build_model(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(4), nature)
    layers = ("conv.0", "conv.2", "conv.4", "fc.0")
    assert [k for k in model.state_dict() if k.startswith("actor_encoder")] == [
        f"actor_encoder.{layer}.{kind}" for layer in layers for kind in ("weight", "bias")
    ]
    assert conv_plan((4, 84, 84), np.uint8, nature).flat == 64 * 7 * 7
    assert conv_plan((12, 12, 3), np.uint8, nature).layers == ((16, 3, 2), (32, 3, 1))


def test_a_stack_too_deep_for_its_image_is_refused_with_the_size_after_each_layer():
    deep = load_config(None, ["model.type=cnn", "model.conv_layers=[[16,3,1],[32,5,2],[64,3,1]]"]).model
    with pytest.raises(ValueError) as caught:
        check_model_fits(gym.spaces.Box(0, 1, (10, 10, 4), bool), gym.spaces.Discrete(3), deep)
    assert str(caught.value) == (
        "model.conv_layers=[[16, 3, 1], [32, 5, 2], [64, 3, 1]]: observations of shape (10, 10, 4) are 10 x 10 "
        "pixels, 8 x 8 after layer 1, 2 x 2 after layer 2; layer 3 (a 3 x 3 kernel, stride 1) leaves none; use fewer "
        "or smaller layers (model.conv_layers: [[channels, kernel, stride], ...])"
    )


def test_the_layout_where_the_shape_cannot_tell_is_asked_for_and_then_followed():
    space = gym.spaces.Box(0, 1, (10, 10, 10), bool)  # MinAtar Seaquest: 10 channels of 10 x 10
    auto = load_config(None, ["model.type=cnn", "model.conv_layers=[[16,3,1]]"]).model
    with pytest.raises(ValueError, match=r"^model.channels=auto: observations of shape \(10, 10, 10\) could keep"):
        check_model_fits(space, gym.spaces.Discrete(3), auto)
    last = load_config(None, ["model.type=cnn", "model.conv_layers=[[16,3,1]]", "model.channels=last"]).model
    model = build_model(space, gym.spaces.Discrete(3), last).eval()
    frame = torch.zeros(1, 10, 10, 10)
    frame[0, :, :, 3] = 1.0  # channel 3 lit everywhere, stored last
    by_hand = model.actor_encoder.fc(model.actor_encoder.conv(frame.permute(0, 3, 1, 2)))
    torch.testing.assert_close(model.actor_encoder(frame), by_hand)


@pytest.mark.parametrize("name", list(IMAGES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_matches_eager_after_weight_updates(backend, name):
    model, inputs = make(name)
    tensors = tuple(map(torch.from_numpy, inputs))
    policy = compile_policy(model, backend, example_inputs=tensors, strict=True)
    assert policy.backend == backend
    for step in range(3):  # weights as after learner updates
        if step:
            torch.manual_seed(100 + step)
            state = {k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items()}
            policy.update_weights(state)
            model.load_state_dict(state)
        problem = Float64Reference(model).mismatch(policy(*tensors), *inputs)
        assert problem is None, problem


def test_a_bf16_channels_last_policy_passes_its_own_check(monkeypatch):
    monkeypatch.setattr(forms, "cpu_bf16", lambda: "AMX")  # the form a bf16 CPU gets, emulated where it has none
    model, inputs = make("rgb64")
    checked = CheckedPolicy(copy.deepcopy(model), "eager", inputs, precision="bf16", memory_format="auto", strict=True)
    assert (checked.report.form.precision, checked.report.form.memory_format) == ("bf16", "channels_last")
    assert check_against_eager(checked.policy, model, inputs, "bf16") is None


@pytest.mark.parametrize(
    "kwargs",
    [
        "{height: 10, width: 10, channels: 4, dtype: bool}",
        "{height: 24, width: 20, dtype: float32, channels_last: false}",
    ],
)
def test_a_worker_samples_and_the_learner_updates_on_images(kwargs):
    config = load_config(
        None,
        [
            "env.id=distrl.envs.testing:pixel_cartpole",
            f"env.kwargs={kwargs}",
            "env.vectorization=sync",
            "env.num_envs_per_worker=8",
            "rollout.rollout_length=16",
            "ppo.minibatch_size=64",
            "model.type=cnn",
            "model.conv_layers=[[8,3,1],[8,3,2]]",
            "model.hidden=[32]",
        ],
    )
    worker = RolloutWorker(config)
    _, batch = worker.sample()
    obs_space, _ = probe_spaces(config.env)
    assert batch.obs.shape[2:] == obs_space.shape and batch.obs.dtype == np.float32
    learner = Learner(config, *probe_spaces(config.env))
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    metrics = learner.update(worker.sample())
    assert np.isfinite(metrics["loss_value"]) and any(
        not torch.equal(before[k], v) for k, v in learner.model.state_dict().items() if "conv" in k
    )
    worker.set_weights(learner.get_weights())
    _, batch = worker.sample()  # the worker's policy follows the learner's convolutions (checked against eager)
    assert batch.obs.shape[0] == 17


def test_a_dicts_image_part_takes_the_configured_stack():
    space = gym.spaces.Dict(
        {"camera": gym.spaces.Box(0, 255, (12, 12, 3), np.uint8), "state": gym.spaces.Box(-1, 1, (3,), np.float32)}
    )
    cfg = load_config(None, ["model.conv_layers=[[8,3,1],[16,3,2]]", "model.hidden=[32]"]).model
    model = build_model(space, gym.spaces.Discrete(2), cfg)
    image = model.actor_encoder.encoders[0]
    assert [m.out_channels for m in image.conv if isinstance(m, torch.nn.Conv2d)] == [8, 16]
    assert image.fc[0].in_features == 16 * 4 * 4 and image.channels_last


def test_minatar_ids_register_and_the_shipped_config_fits_them():
    pytest.importorskip("minatar")
    from distrl.envs.factory import resolve_env_id

    config = load_config("configs/minatar_breakout.yaml")
    env = gym.make(resolve_env_id(config.env.id))
    assert env.observation_space.shape == (10, 10, 4) and env.observation_space.dtype == bool
    assert env.action_space.n == 3  # the minimal action set of the -v1 id
    plan = conv_plan(env.observation_space.shape, env.observation_space.dtype, config.model)
    assert plan.channels_last and plan.flat == 16 * 8 * 8 and plan.dense == (128,)
    env.close()


def test_a_minatar_id_without_minatar_names_the_extra(monkeypatch):
    import sys

    from distrl.common.errors import EnvSpecError
    from distrl.envs.factory import resolve_env_id

    monkeypatch.setitem(sys.modules, "minatar", None)  # as if not installed: its import fails by name
    monkeypatch.setitem(sys.modules, "minatar.gym", None)
    with pytest.raises(
        EnvSpecError, match=r"^env.id='MinAtar/Breakout-v1': needs minatar; pip install 'distrl\[minatar\]'$"
    ):
        resolve_env_id("MinAtar/Breakout-v1")
