"""Actor-critic networks with plain tensor-in, tensors-out ``forward`` so every backend can compile or export them.

Shapes: ``B`` batch, ``T`` time. Feed-forward: ``forward(obs[B, ...]) -> (pd_params[B, P], value[B])``; an
attention model with a window of ``W`` takes ``obs[B, W, ...]``, the env's last ``W`` observations.
Recurrent: ``forward(obs, h[B, H], c[B, H]) -> (pd_params, value, h, c)``, and
``forward_sequence`` for truncated BPTT in the learner. With separate towers (``model.shared_trunk: false``) the actor
and the critic each have an LSTM core of ``model.lstm_size`` (MAPPO's recurrent policy and critic): ``H`` is twice
that, the actor's state first.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from distrl.common.spaces import ObsPart, flat_observation_space, is_structured, obs_layout
from distrl.config.schema import ModelConfig
from distrl.models.conv import ConvEncoder
from distrl.models.distributions import ActionDist
from distrl.models.fit import critic_only_parts, critic_parts_problem
from distrl.models.image import conv_plan
from distrl.models.layers import dense_layers, orthogonal_init


class MLPEncoder(nn.Module):
    """Dense layers over a flat vector; with ``layer_norm``, a LayerNorm over the input's features first and after
    each layer (MAPPO's feature normalisation and MLP layers)."""

    def __init__(self, obs_dim: int, hidden: list[int], activation: str, layer_norm: bool = False):
        super().__init__()
        norm = [nn.LayerNorm(obs_dim)] if layer_norm else []
        self.net = nn.Sequential(*norm, *dense_layers(obs_dim, hidden, activation, layer_norm))
        self.out_dim = hidden[-1]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # The weights' dtype, not a fixed float32: the compile check runs a float64 copy.
        return self.net(obs.flatten(1).to(self.net[0].weight.dtype))


class StructuredEncoder(nn.Module):
    """An encoder per part of a Dict or Tuple observation, their features concatenated (SB3's CombinedExtractor,
    with an MLP per vector part). The input is gymnasium's flattening of the observation ``[B, flatdim]``
    (``distrl/common/spaces.py``): each part is sliced out by its offset, images reshaped (channels first)."""

    def __init__(self, parts: list[ObsPart], cfg: ModelConfig):
        super().__init__()
        self.parts = [(p.offset, p.size, p.shape, p.image) for p in parts]
        encoders = []
        for part in parts:
            if part.image:  # the encoder moves channels last to first itself
                encoders.append(
                    ConvEncoder(conv_plan(part.shape, part.space.dtype, cfg), cfg.activation, cfg.layer_norm)
                )
            else:
                encoders.append(MLPEncoder(part.size, cfg.hidden, cfg.activation, cfg.layer_norm))
        self.encoders = nn.ModuleList(encoders)
        self.out_dim = sum(e.out_dim for e in encoders)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = []
        for (offset, size, shape, image), encoder in zip(self.parts, self.encoders):
            x = obs[:, offset : offset + size]
            if image:  # every size a Python constant: the exported graph computes no shapes at run time
                x = x.reshape(-1, *shape)
            features.append(encoder(x))
        return torch.cat(features, dim=-1)


def _encoder(obs_space: gym.Space, cfg: ModelConfig, leave_out: tuple[str, ...] = ()) -> nn.Module:
    """The encoder of ``obs_space``; a Dict's or Tuple's parts named in ``leave_out`` are not read (the actor's)."""
    if cfg.encoder is not None:
        from distrl.models.user import build_user_encoder

        return build_user_encoder(obs_space, cfg, leave_out)
    if is_structured(obs_space):
        return StructuredEncoder([part for part in obs_layout(obs_space) if part.name not in leave_out], cfg)
    if cfg.type == "attention":
        from distrl.models.attention import AttentionEncoder

        if cfg.window:  # a window of the last vector observations
            return AttentionEncoder(
                cfg.window, int(np.prod(obs_space.shape)), cfg.d_model, cfg.heads, cfg.layers, cfg.causal, cfg.pool
            )
        return AttentionEncoder(
            obs_space.shape[0], obs_space.shape[1], cfg.d_model, cfg.heads, cfg.layers, cfg.causal, cfg.pool
        )
    if cfg.type == "cnn":
        return ConvEncoder(conv_plan(obs_space.shape, obs_space.dtype, cfg), cfg.activation, cfg.layer_norm)
    return MLPEncoder(int(np.prod(obs_space.shape)), cfg.hidden, cfg.activation, cfg.layer_norm)


class ActorCritic(nn.Module):
    def __init__(self, obs_space: gym.Space, action_space: gym.Space, cfg: ModelConfig):
        super().__init__()
        self.dist = ActionDist.for_space(action_space)
        # What forward takes: the observation space itself, or a Dict's or Tuple's flattening (common/spaces.py).
        self.observation_space = obs_space
        self.input_space = flat_observation_space(obs_space)
        # The memory carried between steps: one core's state, or the actor's then the critic's with separate towers.
        self.core_size = cfg.lstm_size
        self.lstm_size = cfg.lstm_size * (1 if cfg.shared_trunk else 2)
        # Attention over a window: forward takes [B, window, *obs] (``distrl.data.memory.WindowMemory`` builds it).
        self.window = cfg.window if cfg.type == "attention" else 0
        self.shared_trunk = cfg.shared_trunk
        # An asymmetric actor-critic: the critic alone reads the parts named in model.critic_parts.
        problem = critic_parts_problem(obs_space, cfg)
        if problem:
            raise ValueError(problem)
        self.critic_only = tuple(critic_only_parts(obs_space, cfg))
        self.actor_encoder = _encoder(obs_space, cfg, self.critic_only)
        self.critic_encoder = None if cfg.shared_trunk else _encoder(obs_space, cfg)
        feat = self.actor_encoder.out_dim
        # The critic's own encoder may read more parts than the actor's (model.critic_parts): its width, not the
        # actor's.
        critic_width = feat if self.critic_encoder is None else self.critic_encoder.out_dim
        self.critic_lstm = None
        if self.core_size:
            self.lstm = _lstm(feat, self.core_size)
            if self.critic_encoder is not None:
                self.critic_lstm = _lstm(critic_width, self.core_size)
            feat = critic_width = self.core_size
        out = self.dist.action_dim
        self.policy_head = orthogonal_init(nn.Linear(feat, out), 0.01)
        self.value_head = orthogonal_init(nn.Linear(critic_width, 1), 1.0)
        if self.dist.kind == "gaussian":
            self.log_std = nn.Parameter(torch.full((out,), cfg.init_log_std))

    @property
    def is_recurrent(self) -> bool:
        return self.lstm_size > 0

    @property
    def memory(self) -> str:
        """What the policy carries between steps, a row of ``distrl.data.memory.MEMORY_KINDS``."""
        return "lstm" if self.is_recurrent else "window" if self.window else "none"

    def _pd_params(self, features: torch.Tensor) -> torch.Tensor:
        head = self.policy_head(features)
        if self.dist.kind == "gaussian":
            return torch.cat([head, self.log_std.expand_as(head)], dim=-1)
        return head

    def forward(self, obs: torch.Tensor, h: torch.Tensor | None = None, c: torch.Tensor | None = None):
        features = self.actor_encoder(obs)
        if not self.is_recurrent:
            critic_features = features if self.critic_encoder is None else self.critic_encoder(obs)
            return self._pd_params(features), self.value_head(critic_features).squeeze(-1)
        if self.critic_lstm is None:
            h, c = _step(self.lstm, features, h, c)
            return self._pd_params(h), self.value_head(h).squeeze(-1), h, c
        size = self.core_size
        actor_h, actor_c = _step(self.lstm, features, h[:, :size], c[:, :size])
        critic_h, critic_c = _step(self.critic_lstm, self.critic_encoder(obs), h[:, size:], c[:, size:])
        value = self.value_head(critic_h).squeeze(-1)
        return self._pd_params(actor_h), value, torch.cat([actor_h, critic_h], -1), torch.cat([actor_c, critic_c], -1)

    def forward_sequence(
        self, obs: torch.Tensor, h: torch.Tensor, c: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Unroll over ``obs[T, B, ...]`` from state ``h, c [B, H]``, zeroing the state where ``starts[T, B]``.

        Returns ``pd_params [T, B, P]`` and ``values [T, B]``.
        """
        steps, batch = obs.shape[:2]
        flat = obs.reshape(steps * batch, *obs.shape[2:])
        keep = (1.0 - starts.float()).unsqueeze(-1)
        features = self.actor_encoder(flat).reshape(steps, batch, -1)
        if self.critic_lstm is None:
            hidden = _unroll(self.lstm, features, h, c, keep)
            return self._pd_params(hidden), self.value_head(hidden).squeeze(-1)
        size = self.core_size
        actor_hidden = _unroll(self.lstm, features, h[:, :size], c[:, :size], keep)
        critic_features = self.critic_encoder(flat).reshape(steps, batch, -1)
        critic_hidden = _unroll(self.critic_lstm, critic_features, h[:, size:], c[:, size:], keep)
        return self._pd_params(actor_hidden), self.value_head(critic_hidden).squeeze(-1)

    def initial_state(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        zeros = np.zeros((batch, self.lstm_size), dtype=np.float32)
        return zeros, zeros.copy()


def _lstm(width: int, size: int) -> nn.LSTM:
    lstm = nn.LSTM(width, size)
    for name, param in lstm.named_parameters():
        if "bias" in name:
            nn.init.zeros_(param)
        else:
            nn.init.orthogonal_(param, 1.0)
    return lstm


def _step(lstm: nn.LSTM, features: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
    """One step of ``lstm`` from ``h, c [B, H]``: the new ``h, c``."""
    _, (h, c) = lstm(features.unsqueeze(0), (h.unsqueeze(0), c.unsqueeze(0)))
    return h.squeeze(0), c.squeeze(0)


def _unroll(lstm: nn.LSTM, features: torch.Tensor, h: torch.Tensor, c: torch.Tensor, keep: torch.Tensor):
    """``lstm`` over ``features [T, B, F]`` from ``h, c [B, H]``, the state zeroed where ``keep [T, B, 1]`` is 0:
    the hidden outputs ``[T, B, H]``."""
    h, c = h.unsqueeze(0), c.unsqueeze(0)
    outputs = []
    for t in range(features.shape[0]):
        h, c = h * keep[t], c * keep[t]
        out, (h, c) = lstm(features[t : t + 1], (h, c))
        outputs.append(out)
    return torch.cat(outputs, dim=0)


def build_model(obs_space: gym.Space, action_space: gym.Space, cfg: ModelConfig) -> ActorCritic:
    return ActorCritic(obs_space, action_space, cfg)
