"""Checkpoints: written atomically (temp file, fsync, rename), read with ``weights_only=True``."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

CHECKPOINT_FORMAT = "distrl-checkpoint-v1"
BEST_FILE = "best.json"  # beside the checkpoints: the run's best the moment it changes (``write_best``)


class CheckpointError(Exception):
    """A checkpoint that is missing, corrupt or not distrl's."""


def checkpoint_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def checkpoint_path(run_dir: Path, iteration: int) -> Path:
    return checkpoint_dir(run_dir) / f"ckpt_{iteration:07d}.pt"


def save_checkpoint(run_dir: Path, iteration: int, payload: dict, keep: int, protect: Collection[Path] = ()) -> Path:
    """Write ``checkpoints/ckpt_{iteration}.pt`` so that a crash at any point leaves the previous one intact.

    Keeps the newest ``keep``, and those in ``protect`` (the best so far, one waiting for its evaluation) whatever
    their age."""
    directory = checkpoint_dir(run_dir)
    directory.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(run_dir, iteration)
    import torch  # here, not at import: the driver loads torch in a thread while Ray starts

    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp_", suffix=".pt")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format": CHECKPOINT_FORMAT, **payload}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    prune(run_dir, keep, protect)
    return final


def prune(run_dir: Path, keep: int, protect: Collection[Path] = ()) -> None:
    """Delete all but the newest ``keep`` checkpoints and those in ``protect``."""
    kept = {Path(p) for p in protect}
    for old in list_checkpoints(run_dir)[:-keep]:
        if old not in kept:
            old.unlink(missing_ok=True)


def list_checkpoints(run_dir: Path) -> list[Path]:
    return sorted(checkpoint_dir(run_dir).glob("ckpt_*.pt"))


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint file, or the newest one in a run directory."""
    path = Path(path)
    if path.is_dir():
        found = list_checkpoints(path)
        if not found:
            raise CheckpointError(f"checkpoint={str(path)!r}: no checkpoints/ckpt_*.pt in this run directory")
        return found[-1]
    if not path.is_file():
        raise CheckpointError(f"checkpoint={str(path)!r}: no such file or run directory")
    return path


def load_checkpoint(path: str | Path) -> dict:
    """Load a distrl checkpoint; never unpickles arbitrary objects.

    For a run directory whose newest checkpoint is corrupt (a disk fault, a copy cut short),
    the newest intact one is used, with a warning on stderr naming both files.
    """
    return load_checkpoint_file(path)[0]


CHOICES = ("best", "latest")  # which of a run directory's checkpoints: `distrl eval RUN --checkpoint latest`


METRIC_WORDS = {  # how a best checkpoint's metric reads in a sentence ("the run's best, ...")
    "episode_return_mean": "mean training return",
    "eval_return_mean": "evaluation's mean return",
}


@dataclass
class BestCheckpoint:
    """The run's best checkpoint, as every checkpoint names it (its ``best``: ``state``)."""

    score: float  # the metric's value for this checkpoint
    iteration: int
    metric: str = "episode_return_mean"  # what chose it: the mean training return, or an evaluation's

    def path(self, run_dir: Path) -> Path:
        return checkpoint_path(run_dir, self.iteration)

    def describe(self) -> str:
        """``mean training return 487.2`` and the like."""
        return f"{METRIC_WORDS.get(self.metric, self.metric)} {self.score:.4g}"

    def state(self) -> dict:
        return {"metric": self.metric, "score": self.score, "iteration": self.iteration}

    @classmethod
    def from_state(cls, state: dict) -> BestCheckpoint:
        if "score" not in state:  # written before evaluation chose bests: the training return chose it
            return cls(float(state["episode_return_mean"]), int(state["iteration"]))
        return cls(float(state["score"]), int(state["iteration"]), str(state["metric"]))

    @classmethod
    def of(cls, payload: dict, run_dir: Path | None = None) -> BestCheckpoint | None:
        """The best a checkpoint names (None: none, as in checkpoints written before they did); in ``run_dir``, the
        newer word of its ``best.json`` where that names a checkpoint still on disk (an evaluation's result can make a
        checkpoint the best after newer ones were written, which name the best as it was).

        A league run's best chosen by its training return is no best (that return is against ever stronger opponents;
        league runs of earlier distrl named one so): its newest plays instead."""
        best = cls.from_state(payload["best"]) if payload.get("best") is not None else None
        if run_dir is not None and (noted := read_best(run_dir)) is not None and noted.path(run_dir).is_file():
            best = noted
        if best is not None and best.metric == "episode_return_mean":
            if (payload.get("config") or {}).get("league") is not None:
                return None
        return best


def write_best(run_dir: Path, best: BestCheckpoint) -> None:
    """``checkpoints/best.json``: the run's best as soon as it changes, written whole (a temp file, then a rename)."""
    directory = checkpoint_dir(run_dir)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{BEST_FILE}.tmp"
    tmp.write_text(json.dumps(best.state()) + "\n")
    os.replace(tmp, directory / BEST_FILE)


def read_best(run_dir: Path) -> BestCheckpoint | None:
    """What ``checkpoints/best.json`` names (read as data); None where there is none or it is not one."""
    try:
        return BestCheckpoint.from_state(json.loads((checkpoint_dir(run_dir) / BEST_FILE).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_checkpoint_file(path: str | Path, which: str = "latest") -> tuple[dict, Path]:
    """``load_checkpoint``, and the file it read. In a run directory: its newest intact checkpoint (``latest``, what a
    resume continues), or the best one (``best``: by the run's evaluation, or its mean training return, which every
    checkpoint names; the newest where none is named, as in checkpoints written before they did)."""
    if which not in CHOICES:
        raise CheckpointError(f"checkpoint={which!r}: not one of {', '.join(CHOICES)}")
    path = Path(path)
    newest = resolve_checkpoint(path)
    if not path.is_dir():
        return _load_file(newest), newest
    payload, file = _newest_intact(path, newest)
    best = BestCheckpoint.of(payload, path)
    if which == "best" and best is not None and best.path(path) != file:
        chosen = best.path(path)
        try:
            if not chosen.is_file():
                raise CheckpointError(f"{str(chosen)!r} is not in the run directory")
            return _load_file(chosen), chosen
        except CheckpointError as exc:
            print(f"distrl: warning: the best checkpoint: {exc}; using the newest, {str(file)!r}", file=sys.stderr)
    return payload, file


def _newest_intact(run_dir: Path, newest: Path) -> tuple[dict, Path]:
    for candidate in reversed(list_checkpoints(run_dir)):
        try:
            payload = _load_file(candidate)
        except CheckpointError:
            continue
        if candidate != newest:
            print(
                f"distrl: warning: {str(newest)!r} is not a loadable checkpoint; using the newest intact one, "
                f"{str(candidate)!r}",
                file=sys.stderr,
            )
        return payload, candidate
    return _load_file(newest), newest  # none intact: the newest's own error


def _load_file(file: Path) -> dict:
    import torch

    try:
        payload = torch.load(file, map_location="cpu", weights_only=True)
    except Exception:  # weights_only unpickling of arbitrary bytes fails in many ways; all mean "not ours"
        raise CheckpointError(
            f"checkpoint={str(file)!r}: not a loadable distrl checkpoint (corrupt, truncated, or holding objects "
            "other than tensors and plain data; nothing in it was executed)"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"checkpoint={str(file)!r}: not a distrl checkpoint (format {CHECKPOINT_FORMAT} expected)"
        )
    return payload
