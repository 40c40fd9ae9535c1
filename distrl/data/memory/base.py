"""The ``Memory`` interface: one object per model, stateless itself; the state it describes travels beside it."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class Memory(Protocol):
    """How one kind of model memory reaches the policy.

    ``state`` is whatever the kind carries for ``N`` env copies (None, ``(h, c)``, a window ``[N, W, *obs]``);
    a caller holds it (the worker per env group, ``predict`` per call) and hands it back each step.
    """

    name: str
    input_names: tuple[str, ...]  # the policy's inputs, as an exported graph names them
    output_names: tuple[str, ...]  # the policy's outputs after ``pd_params`` and ``value``

    def initial(self, num_envs: int) -> Any:
        """The state of ``num_envs`` env copies before their first step."""

    def inputs(self, state: Any, obs: np.ndarray, starts: np.ndarray | None) -> tuple[tuple, Any]:
        """The policy's inputs for ``obs [N, *obs]`` with ``starts [N]`` (True: an episode begins at this observation,
        so nothing earlier may reach it; None: none does), and the state as these inputs saw it."""

    def after(self, seen: Any, extra_outputs: tuple) -> Any:
        """The state after the policy acted: ``seen`` (from ``inputs``) and the policy's extra outputs."""

    def batch_layout(self, seq_len: int) -> dict:
        """What ``Batch.empty`` allocates for this kind (``lstm``, ``window``)."""

    def record_start(self, batch, state: Any) -> None:
        """Into a new ``batch``: what the learner needs of the state before its first step."""

    def record_step(self, batch, t: int, state: Any, starts: np.ndarray, seq_len: int, cols=slice(None)) -> None:
        """Into ``batch`` at step ``t`` (which acts): the state before the step and where episodes begin; ``cols``: the
        batch's columns ``state`` and ``starts`` are for (every one; the ready runner's copies at step ``t``)."""

    def example(self, obs_rows: np.ndarray, rng: np.random.Generator | None) -> tuple:
        """Example inputs from ``obs_rows [B * rows_per_example, *obs]`` (export, compile artifacts): any state
        random from ``rng``, zeros without one."""

    def rows_per_example(self) -> int:
        """Observations one example row takes (a window's length; 1 otherwise)."""
