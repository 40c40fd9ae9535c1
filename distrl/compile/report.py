"""What a worker's policy build reports, importable without torch: the form it runs in, the backend in use and why,
and the error ``strict`` raises."""

from __future__ import annotations

from dataclasses import dataclass, field


class CompileError(Exception):
    """A backend failed to build or disagreed with eager, and ``strict`` forbids falling back."""


@dataclass(frozen=True)
class Form:
    """The precision and memory layout a backend runs the torch module in (``distrl/compile/forms.py``)."""

    precision: str = "fp32"
    memory_format: str = "contiguous"

    def __str__(self) -> str:
        return f"{self.precision}, {self.memory_format}"


@dataclass
class BackendReport:
    requested: str
    backend: str  # in use, after any fallback or choice
    reason: str = ""  # why the requested one is not in use (or, for auto, why others were passed over)
    timings_us: dict[str, float] = field(default_factory=dict)  # auto, or forms timed: each one's time per call
    form: Form = field(default_factory=Form)  # the precision and layout in use (forms.py)
    form_reason: str = ""  # why that form
