"""A tree of tensors as it travels between distrl's processes: every tensor as a numpy array.

Ray pickles a torch tensor's bytes into the message (a cost that grows with the state: a CNN's with Adam's moments
is tens of MB, docs/faults.md), where a numpy array goes out of band: copied once into the object
store and read there without a copy. So the learner's snapshot after each update (``Learner.snapshot``) crosses as
arrays, and the tensors are rebuilt where they are needed (a checkpoint, a rebuilt learner). The arrays are wrapped,
so the tree comes back exactly as it was (a numpy array of the original stays one)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# torch is imported where a tensor is met, not here: the driver imports this before Ray starts, and torch's import
# (seconds) runs in a thread meanwhile (driver.py).


@dataclass(frozen=True)
class TensorArray:
    """A CPU tensor's data, carried as a numpy array."""

    array: np.ndarray


def to_wire(tree):
    """``tree`` with each tensor as a ``TensorArray`` (moved to the CPU; dtypes numpy lacks, e.g. bfloat16, stay
    tensors)."""
    import torch

    if isinstance(tree, torch.Tensor):
        tensor = tree.detach().cpu()
        try:
            return TensorArray(tensor.contiguous().numpy())
        except TypeError:  # no numpy dtype for it
            return tensor
    if isinstance(tree, (dict, list, tuple)):
        return _rebuilt(tree, to_wire)
    return tree


def _rebuilt(tree, convert):
    """A dict, list or tuple of the same type with ``convert`` applied to each value (a module's state_dict, an
    OrderedDict, keeps its ``_metadata``)."""
    if isinstance(tree, dict):
        out = type(tree)((key, convert(value)) for key, value in tree.items())
        if hasattr(tree, "_metadata"):
            out._metadata = tree._metadata
        return out
    values = [convert(value) for value in tree]
    return type(tree)(*values) if hasattr(tree, "_fields") else type(tree)(values)  # a namedtuple takes its fields


def from_wire(tree):
    """``to_wire`` undone: each ``TensorArray`` a tensor of its own (a copy: an array read from the object store is
    read-only); anything else as it is."""
    if isinstance(tree, TensorArray):
        import torch

        return torch.from_numpy(np.array(tree.array))
    if isinstance(tree, (dict, list, tuple)):
        return _rebuilt(tree, from_wire)
    return tree
