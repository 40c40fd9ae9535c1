"""What every encoder and head is built from: the activations by name, and the layers' initialisation."""

from __future__ import annotations

from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU}


def orthogonal_init(layer: nn.Module, gain: float) -> nn.Module:
    # Orthogonal init with zero bias, as in the PPO implementation details (Huang et al. 2022).
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer
