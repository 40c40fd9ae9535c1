"""What every encoder and head is built from: the activations by name, the layers' initialisation, and a stack of
dense layers."""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU}


def orthogonal_init(layer: nn.Module, gain: float) -> nn.Module:
    # Orthogonal init with zero bias, as in the PPO implementation details (Huang et al. 2022).
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def dense_layers(width: int, sizes: Sequence[int], activation: str, layer_norm: bool) -> list[nn.Module]:
    """Linear layers of ``sizes`` after an input of ``width``, each followed by the activation and, with
    ``layer_norm``, a LayerNorm over its features (MAPPO's MLP layers)."""
    layers: list[nn.Module] = []
    for size in sizes:
        layers += [orthogonal_init(nn.Linear(width, size), math.sqrt(2)), ACTIVATIONS[activation]()]
        if layer_norm:
            layers.append(nn.LayerNorm(size))
        width = size
    return layers
