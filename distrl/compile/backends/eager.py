"""``eager``: the torch module as it is; the baseline every other backend is checked against."""

from __future__ import annotations

import torch

from distrl.compile.backends.base import Built
from distrl.compile.policy import EagerPolicy


class EagerBackend:
    name = "eager"

    def available(self) -> tuple[bool, str]:
        return True, f"torch {torch.__version__}"

    def prepare(self, module, example, mode) -> dict:
        return {}

    def build(self, module, example, mode, options, artifacts) -> Built:
        return Built(EagerPolicy(module))


BACKEND = EagerBackend()
