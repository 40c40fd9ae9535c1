"""What a worker policy backend provides (one implementation per file in this folder)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from torch import nn

from distrl.compile.policy import InferencePolicy
from distrl.compile.report import Form

__all__ = ["Backend", "Built", "Form"]


@dataclass
class Built:
    """A backend's policy, and for a backend that chooses among others, what it measured."""

    policy: InferencePolicy
    timings_us: dict[str, float] = field(default_factory=dict)
    notes: str = ""  # why candidates were passed over
    form: Form = field(default_factory=Form)  # a chooser's pick's form


class Backend(Protocol):
    name: str

    def available(self) -> tuple[bool, str]:
        """Whether it can run here, and why (not): versions, a missing compiler or package."""

    def prepare(self, module: nn.Module, example: tuple[np.ndarray, ...], mode: str) -> dict:
        """Artifacts built once (on the driver) that every worker can reuse; ``{}`` when there is nothing to share."""

    def build(
        self, module: nn.Module, example: tuple[np.ndarray, ...], mode: str, options: dict, artifacts: dict
    ) -> Built:
        """The policy a worker acts with; ``example`` is a real batch. Its ``update_weights`` swaps weights in."""
