"""A convolutional encoder's plan, without torch: its image's layout, its layers and the size after each.

The model builds its convolutions from this plan (``distrl/models/conv.py``), and the config check reads it to
refuse a stack that does not fit its image before Ray starts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distrl.common.spaces import channels_last_of
from distrl.config.schema import ModelConfig

NATURE_CNN = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # Mnih et al. 2015, for 84 x 84 frames
SMALL_CNN = ((16, 3, 2), (32, 3, 1))  # the default for images under 36 x 36
NATURE_CNN_MIN = 36  # the smallest side the Nature-CNN takes


@dataclass(frozen=True)
class ConvPlan:
    chw: tuple[int, int, int]  # the image as the convolutions take it: channels first
    channels_last: bool  # stored [H, W, C]: moved to [C, H, W] inside the model
    layers: tuple[tuple[int, int, int], ...]  # (channels, kernel, stride)
    dense: tuple[int, ...]  # the dense layers' widths after the convolutions
    scale: float  # what the pixels are multiplied by: 1/255 for uint8, 1 for bool and float
    flat: int  # features out of the last convolution


def pixel_scale(dtype) -> float:
    return 1.0 / 255.0 if np.dtype(dtype) == np.uint8 else 1.0


def conv_plan(shape: tuple[int, ...], dtype, cfg: ModelConfig, what: str = "observations") -> ConvPlan:
    """The plan for an image of ``shape`` (3 dims) under ``cfg``; ``ValueError`` naming the key where the layout
    cannot be told or a layer leaves no pixel."""
    if len(shape) != 3:
        raise ValueError(f"model.type=cnn: needs image observations of 3 dims ([C, H, W] or [H, W, C]), got {shape}")
    last = {"first": False, "last": True}.get(cfg.channels, channels_last_of(tuple(shape)))
    if last is None:
        raise ValueError(
            f"model.channels=auto: {what} of shape {tuple(shape)} could keep their channels first or last; set "
            "model.channels to first or last"
        )
    chw = (shape[2], shape[0], shape[1]) if last else tuple(shape)
    if cfg.conv_layers is not None:
        layers, dense = tuple(tuple(layer) for layer in cfg.conv_layers), tuple(cfg.hidden)
        key = f"model.conv_layers={[list(layer) for layer in layers]}"
    else:
        layers = NATURE_CNN if min(chw[1:]) >= NATURE_CNN_MIN else SMALL_CNN
        dense, key = (cfg.hidden[-1],), "model.conv_layers unset"
    height, width, sizes = chw[1], chw[2], []
    for index, (_, kernel, stride) in enumerate(layers, 1):
        height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
        if height < 1 or width < 1:
            done = ", ".join(f"{h} x {w} after layer {i}" for i, (h, w) in enumerate(sizes, 1))
            raise ValueError(
                f"{key}: {what} of shape {tuple(shape)} are {chw[1]} x {chw[2]} pixels"
                + (f", {done}" if done else "")
                + f"; layer {index} (a {kernel} x {kernel} kernel, stride {stride}) leaves none; use fewer or smaller "
                "layers (model.conv_layers: [[channels, kernel, stride], ...])"
            )
        sizes.append((height, width))
    return ConvPlan(chw, last, layers, dense, pixel_scale(dtype), layers[-1][0] * height * width)
