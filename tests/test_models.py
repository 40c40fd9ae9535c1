"""Model shapes, and the recurrent sequence unroll matching step-by-step calls."""

import gymnasium as gym
import numpy as np
import torch

from distrl.config import load_config
from distrl.models import build_model

BOX = gym.spaces.Box(-1, 1, (5,), np.float32)


def test_feedforward_shapes_discrete_and_box():
    cfg = load_config(None, []).model
    model = build_model(BOX, gym.spaces.Discrete(3), cfg)
    pd, v = model(torch.zeros(4, 5))
    assert pd.shape == (4, 3) and v.shape == (4,)
    model = build_model(BOX, gym.spaces.Box(-2, 2, (2,), np.float32), cfg)
    pd, v = model(torch.zeros(4, 5))
    assert pd.shape == (4, 4) and v.shape == (4,)


def test_cnn_on_uint8_frames():
    cfg = load_config(None, ["model.type=cnn", "model.hidden=[512]", "model.shared_trunk=true"]).model
    model = build_model(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(4), cfg)
    pd, v = model(torch.randint(0, 255, (2, 4, 84, 84), dtype=torch.uint8))
    assert pd.shape == (2, 4) and v.shape == (2,)


def test_layer_norm_normalises_the_input_and_each_layer():
    cfg = load_config(None, ["model.layer_norm=true", "model.activation=relu"]).model
    torch.manual_seed(0)
    model = build_model(BOX, gym.spaces.Discrete(3), cfg)
    obs = torch.randn(6, 5)
    features = model.actor_encoder(obs)
    # Each row of features has mean 0 and variance 1 (the last LayerNorm, at its initial scale 1 and shift 0)...
    torch.testing.assert_close(features.mean(-1), torch.zeros(6), atol=1e-5, rtol=0)
    torch.testing.assert_close(features.var(-1, unbiased=False), torch.ones(6), atol=1e-3, rtol=0)
    # ...and the input's LayerNorm makes the model blind to each observation's own offset and scale.
    pd, value = model(obs)
    pd_moved, value_moved = model(3.0 * obs + torch.arange(6.0)[:, None])
    torch.testing.assert_close(pd_moved, pd, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(value_moved, value, atol=1e-5, rtol=1e-4)
    plain = build_model(BOX, gym.spaces.Discrete(3), load_config(None, ["model.activation=relu"]).model)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in plain.modules())
    # A cnn's dense layers take one each after the convolutions (an image's pixels are not normalised per row).
    cnn = load_config(None, ["model.type=cnn", "model.hidden=[32]", "model.layer_norm=true"]).model
    model = build_model(gym.spaces.Box(0, 255, (4, 36, 36), np.uint8), gym.spaces.Discrete(4), cnn)
    assert [type(m) for m in model.actor_encoder.fc] == [torch.nn.Linear, torch.nn.Tanh, torch.nn.LayerNorm]
    pd, value = model(torch.randint(0, 255, (2, 4, 36, 36), dtype=torch.uint8))
    assert pd.shape == (2, 4) and value.shape == (2,)


def assert_unroll_equals_steps(model, obs, starts, h0, c0):
    """``forward_sequence`` over ``obs[T, B, ...]`` is ``forward`` step by step, the states zeroed at ``starts``."""
    pd_seq, v_seq = model.forward_sequence(obs, h0, c0, starts)
    h, c = h0, c0
    for step in range(obs.shape[0]):
        keep = (~starts[step]).float()[:, None]
        pd, v, h, c = model(obs[step], h * keep, c * keep)
        torch.testing.assert_close(pd, pd_seq[step])
        torch.testing.assert_close(v, v_seq[step])


def test_lstm_sequence_equals_step_by_step_with_resets():
    cfg = load_config(None, ["model.lstm_size=8", "model.shared_trunk=true"]).model
    torch.manual_seed(0)
    model = build_model(BOX, gym.spaces.Discrete(2), cfg)
    steps, batch = 6, 3
    starts = torch.zeros(steps, batch, dtype=torch.bool)
    starts[2, 0] = starts[4, 2] = True
    h0, c0 = torch.randn(batch, 8), torch.randn(batch, 8)
    assert_unroll_equals_steps(model, torch.randn(steps, batch, 5), starts, h0, c0)


def test_separate_recurrent_towers_unroll_step_by_step_and_keep_the_actor_off_the_critics_part():
    # MAPPO's recurrent policy and critic: an LSTM core each, the memory the actor's state then the critic's.
    space = gym.spaces.Dict({"actor": BOX, "critic": gym.spaces.Box(-1, 1, (7,), np.float32)})
    cfg = load_config(None, ["model.lstm_size=8", "model.shared_trunk=false"]).model
    torch.manual_seed(0)
    model = build_model(space, gym.spaces.Discrete(3), cfg)
    assert model.lstm_size == 16 and model.critic_lstm is not None
    assert [arr.shape for arr in model.initial_state(4)] == [(4, 16), (4, 16)]
    steps, batch = 5, 3
    obs = torch.randn(steps, batch, 12)  # the flattened Dict: "actor" (5), then "critic" (7)
    starts = torch.zeros(steps, batch, dtype=torch.bool)
    starts[1, 2] = starts[3, 0] = True
    h0, c0 = torch.randn(batch, 16), torch.randn(batch, 16)
    assert_unroll_equals_steps(model, obs, starts, h0, c0)
    # The actor reads neither the critic's part nor the critic's state; the critic reads both.
    other = obs[0].clone()
    other[:, 5:] += 1.0
    h, c = h0.clone(), c0.clone()
    h2, c2 = h.clone(), c.clone()
    h2[:, 8:] += 1.0
    pd, v, h_out, _ = model(obs[0], h, c)
    pd_other, v_other, h_other, _ = model(other, h2, c2)
    torch.testing.assert_close(pd, pd_other)
    torch.testing.assert_close(h_out[:, :8], h_other[:, :8])
    assert not torch.allclose(v, v_other) and not torch.allclose(h_out[:, 8:], h_other[:, 8:])
