"""Structured observations (gymnasium ``Dict`` and ``Tuple`` spaces) as one flat vector, and the layout to undo it.

A Dict or Tuple observation crosses the whole pipeline (vector env, batches, shards, normalisation, every
worker backend) as gymnasium's own flattening (``gymnasium.spaces.flatten``: each part flattened in the
space's order, Discrete parts one-hot), so nothing between the env and the model needs a second code path.
The model reads the layout (``obs_layout``) and gives each part its own encoder: a CNN for image parts, an
MLP for the others. ``distrl.load_policy`` and the exported ONNX model take the parts by name.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np

STRUCTURED = (gym.spaces.Dict, gym.spaces.Tuple)


@dataclass(frozen=True)
class ObsPart:
    """One part of a structured observation: where it sits in the flat vector and how to read it back."""

    name: str  # the Dict key, or the Tuple index as a string
    offset: int  # first element in the flat vector
    size: int  # elements in the flat vector (gymnasium.spaces.flatdim)
    shape: tuple[int, ...]  # the part's own shape (Box), or (size,) for anything flattened to a vector
    image: bool  # a uint8 Box of 3 dims: encoded by a CNN
    channels_last: bool  # an image stored [H, W, C] (moved to [C, H, W] inside the model)
    space: gym.Space


def action_space_problem(space: gym.Space) -> str | None:
    """Why a policy cannot act in ``space`` (None: it can): the action spaces the models' heads take."""
    if isinstance(space, gym.spaces.Discrete) or (
        isinstance(space, (gym.spaces.Box, gym.spaces.MultiDiscrete)) and len(space.shape) == 1
    ):
        return None
    return f"action space {space} is not supported (Discrete, 1-d MultiDiscrete or 1-d Box)"


def is_structured(space: gym.Space) -> bool:
    return isinstance(space, STRUCTURED)


def _parts(space: gym.Space) -> list[tuple[str, gym.Space]]:
    if isinstance(space, gym.spaces.Dict):
        return list(space.spaces.items())
    return [(str(i), sub) for i, sub in enumerate(space.spaces)]


def channels_last_of(shape: tuple[int, ...]) -> bool | None:
    """Whether an image of 3 dims keeps its channels last ``[H, W, C]`` rather than first ``[C, H, W]``, read from
    its shape as SB3 reads it: the smallest axis, the first or the last, is the channels. None where the shape
    cannot tell (the first and last axes are the same size, or the middle one is the smallest)."""
    first, middle, last = shape
    if first == last or middle < min(first, last):
        return None
    return last < first


def _is_image(space: gym.Space) -> tuple[bool, bool]:
    """(image, channels_last) for a Box part: uint8 with 3 dims (channels first where the shape cannot tell; the
    model's ``model.channels`` says otherwise)."""
    if not (isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3):
        return False, False
    return True, bool(channels_last_of(space.shape))


def obs_layout(space: gym.Space) -> list[ObsPart]:
    """The parts of a Dict or Tuple space in gymnasium's flattening order (empty for any other space)."""
    if not is_structured(space):
        return []
    parts, offset = [], 0
    for name, sub in _parts(space):
        size = int(gym.spaces.flatdim(sub))
        image, channels_last = _is_image(sub)
        shape = tuple(sub.shape) if isinstance(sub, gym.spaces.Box) else (size,)
        parts.append(ObsPart(name, offset, size, shape, image, channels_last, sub))
        offset += size
    return parts


def flat_observation_space(space: gym.Space) -> gym.Space:
    """The space the pipeline carries: the flattened Box of a Dict or Tuple, any other space as it is."""
    return gym.spaces.flatten_space(space) if is_structured(space) else space


def image_part_mask(space: gym.Space) -> np.ndarray | None:
    """``[flatdim]`` bool, True on the elements of image parts (observation normalisation leaves pixels alone);
    None when no part is an image."""
    parts = obs_layout(space)
    if not any(p.image for p in parts):
        return None
    mask = np.zeros(sum(p.size for p in parts), dtype=bool)
    for part in parts:
        mask[part.offset : part.offset + part.size] = part.image
    return mask


def _flatten_part(space: gym.Space, x, batch: int) -> np.ndarray:
    """A batch of one part's values as ``[batch, flatdim]``, as ``gymnasium.spaces.flatten`` flattens one."""
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return np.asarray(x).reshape(batch, -1)
    if isinstance(space, gym.spaces.Discrete):
        out = np.zeros((batch, int(space.n)), dtype=space.dtype)
        out[np.arange(batch), np.asarray(x).reshape(batch) - int(space.start)] = 1
        return out
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
        x = np.asarray(x).reshape(batch, -1) - space.start
        return np.concatenate([np.eye(int(n), dtype=space.dtype)[x[:, i]] for i, n in enumerate(space.nvec)], axis=1)
    return np.stack([gym.spaces.flatten(space, _index(x, i)) for i in range(batch)])  # nested: gymnasium, row by row


def _index(x, i: int):
    if isinstance(x, dict):
        return {k: _index(v, i) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_index(v, i) for v in x)
    return np.asarray(x)[i]


def flatten_batch(space: gym.Space, obs, optional: tuple[str, ...] = ()) -> tuple[np.ndarray, bool]:
    """A structured observation, or a batch of them (each part with a leading batch axis), as ``[batch, flatdim]``
    float32 (uint8 when every part is uint8); and whether it was a single observation. A Dict's parts named in
    ``optional`` may be left out: they are zeros (the critic's parts, which the actor does not read)."""
    parts = obs_layout(space)
    if isinstance(space, gym.spaces.Dict):
        given = set(obs) if isinstance(obs, dict) else set()
        if not isinstance(obs, dict) or not set(space.spaces) - set(optional) <= given <= set(space.spaces):
            got = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
            raise ValueError(f"observation: expected a dict with keys {sorted(space.spaces)}, got {got}")
        values = [obs.get(p.name) for p in parts]
    else:
        if not isinstance(obs, (tuple, list)) or len(obs) != len(parts):
            raise ValueError(f"observation: expected a tuple of {len(parts)} parts, got {type(obs).__name__}")
        values = list(obs)
    first, first_value = next((p, v) for p, v in zip(parts, values) if v is not None)
    single = _is_single(first.space, first_value)
    batch = 1 if single else len(np.asarray(first_value)) if not isinstance(first_value, (dict, tuple)) else None
    if batch is None:
        raise ValueError("observation: nested parts need a single observation or a list of them")
    flat = []
    for part, value in zip(parts, values):
        if value is None:  # an optional part left out
            flat.append(np.zeros((batch, part.size), np.float32))
            continue
        array = _flatten_part(part.space, value, batch)
        if array.shape != (batch, part.size):
            raise ValueError(f"observation[{part.name!r}]: shape {np.shape(value)} does not fit {part.space}")
        flat.append(array)
    dtype = flat_observation_space(space).dtype
    out = np.concatenate(flat, axis=1).astype(np.uint8 if dtype == np.uint8 else np.float32, copy=False)
    return out, single


def _is_single(space: gym.Space, value) -> bool:
    """Whether ``value`` is one observation of the part ``space`` (not a batch of them)."""
    if isinstance(space, gym.spaces.Discrete):
        return np.ndim(value) == 0
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)):
        return np.shape(value) == tuple(space.shape)
    return True
