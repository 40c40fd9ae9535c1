"""Exceptions raised before Ray is imported, and one-line descriptions of exceptions."""

from __future__ import annotations


def describe_error(exc: BaseException, limit: int = 300) -> str:
    """An exception in one line: its type and the first line of its message, cut at ``limit`` characters."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:limit] if text else ''}"


# The optional packages a config can need, and the extra of distrl's that installs each (pyproject.toml).
EXTRAS = {
    "pettingzoo": "multiagent",
    "mpe2": "multiagent",
    "ale_py": "atari",
    "minatar": "minatar",
    "cv2": "atari",
    "mujoco": "mujoco",
    "moviepy": "video",
    "pygame": "video",
    "wandb": "wandb",
    "matplotlib": "plot",
}


def install_hint(module: str | None) -> str:
    """What installs a missing ``module`` (as ``ModuleNotFoundError.name`` gives it): the distrl extra that brings
    it; empty for a module no extra brings (the user's own, a typo)."""
    top = (module or "").partition(".")[0]
    return f"; pip install 'distrl[{EXTRAS[top]}]'" if top in EXTRAS else ""


class PlacementError(Exception):
    """The cluster cannot give the actors the resources the config asks for (here, not in driver/placement.py,
    so that the command line can catch it without importing ray)."""


class RunStalled(Exception):
    """A wait of the driver's passed its bound (a learner that never answers, a coordinator that hangs)."""


class OwnCodeError(Exception):
    """distrl's own code failed inside an env's step (a league opponent choosing its move): the env guard passes it
    on instead of resetting the env and counting an env error, so a bug stops the run with its message."""


class EnvFailure(Exception):
    """An env keeps failing; training cannot go on. ``errors``: the failed env calls it counted.

    Here, not in ``distrl/envs/guard.py``, so that the sample coordinator's process need not import gymnasium."""

    def __init__(self, message: str, errors: int = 0):
        super().__init__(message, errors)  # both in args, so the count survives pickling through Ray
        self.message, self.errors = message, errors

    def __str__(self) -> str:
        return self.message


class EnvSpecError(Exception):
    """env.id names nothing that can be built (a league game's ``GameError`` too: one line, exit 2)."""
