"""The convolutional encoder: a plan's convolutions (ReLU after each), then its dense layers.

``distrl/models/image.py`` makes the plan (the layout, the layers, the pixel scale) from the config and the image's
space; the Nature-CNN is one such plan. Its modules keep the Nature-CNN's names (``conv``, ``fc``), so a
checkpoint of either default loads as it did.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from distrl.models.image import ConvPlan
from distrl.models.layers import dense_layers, orthogonal_init


class ConvEncoder(nn.Module):
    """Images ``[B, C, H, W]`` (or ``[B, H, W, C]`` where the plan says channels last) to features ``[B, F]``."""

    def __init__(self, plan: ConvPlan, activation: str, layer_norm: bool = False):
        super().__init__()
        layers: list[nn.Module] = []
        channels = plan.chw[0]
        for out, kernel, stride in plan.layers:
            layers += [orthogonal_init(nn.Conv2d(channels, out, kernel, stride=stride), math.sqrt(2)), nn.ReLU()]
            channels = out
        self.conv = nn.Sequential(*layers, nn.Flatten())
        self.fc = nn.Sequential(*dense_layers(plan.flat, plan.dense, activation, layer_norm))
        self.out_dim = plan.dense[-1]
        self.channels_last = plan.channels_last
        self.scale = plan.scale

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.to(self.fc[0].weight.dtype)  # the weights' dtype: the compile check runs a float64 copy
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        if self.scale != 1.0:
            x = x * self.scale
        return self.fc(self.conv(x))
