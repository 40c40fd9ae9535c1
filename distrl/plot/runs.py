"""Run directories as curves: each run's metric against env steps or wall time, and runs of one config grouped as
seeds of it (their configs equal but for the seed)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import yaml

X_AXES = {"env_steps": "env steps", "time_s": "wall time (s)"}
# keys that say where and how a run was kept, not what it learned: runs differing only in these are seeds of one config
NOT_THE_CONFIG = ("seed", "checkpoint", "logging", "storage")


class PlotError(Exception):
    """A run directory or metric the plot cannot use: one line for the user."""


@dataclass
class RunCurve:
    path: Path
    config: dict  # the run's config.yaml as data ({} when the run has none)
    rows: list[dict] = field(repr=False)

    @cached_property
    def keys(self) -> set[str]:
        """The metrics this run logged as numbers."""
        return {k for row in self.rows for k, v in row.items() if _is_number(v)}

    @cached_property
    def learning_config(self) -> dict[str, str]:
        """The config, flattened to dotted keys, without what says only where and how the run was kept."""
        return {k: v for k, v in _flat(self.config).items() if k.partition(".")[0] not in NOT_THE_CONFIG}

    def points(self, x: str, metric: str) -> tuple[list[float], list[float]]:
        pairs = [(row[x], row[metric]) for row in self.rows if _is_number(row.get(x)) and _is_number(row.get(metric))]
        return [p[0] for p in pairs], [p[1] for p in pairs]


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value  # (NaN is not a point)


def _read_rows(metrics: Path) -> list[dict]:
    rows = []
    lines = metrics.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):  # a run stopped mid-write leaves at most its last line cut short
                break
            raise PlotError(f"{metrics}: line {number} is not JSON") from None
        if isinstance(row, dict):
            rows.append(row)
    return rows


def load_runs(paths: list[str]) -> list[RunCurve]:
    """Each path's metrics rows and config; a path that is not a run directory with metrics is refused."""
    runs = []
    for text in paths:
        path = Path(text)
        metrics = path / "metrics.jsonl"
        if not path.is_dir():
            raise PlotError(f"{text}: no such run directory")
        if not metrics.is_file():
            raise PlotError(f"{text}: no metrics.jsonl here (a run directory has one from its first update)")
        rows = _read_rows(metrics)
        if not rows:
            raise PlotError(f"{text}: metrics.jsonl has no rows yet (the run has not finished an update)")
        config_file = path / "config.yaml"
        try:
            config = yaml.safe_load(config_file.read_text()) if config_file.is_file() else {}
        except yaml.YAMLError:
            config = {}
        runs.append(RunCurve(path, config if isinstance(config, dict) else {}, rows))
    return runs


def _flat(config: dict, prefix: str = "") -> dict[str, str]:
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, name + "."))
        else:
            out[name] = json.dumps(value, sort_keys=True, default=str)
    return out


def group_seeds(runs: list[RunCurve]) -> list[tuple[str, list[RunCurve]]]:
    """Runs grouped by config (seeds of one config together), in the order first named, each with a label: the
    config keys its group differs in from the others, or the run directory's name where that says nothing."""
    groups: dict[str, list[RunCurve]] = {}
    for run in runs:
        key = json.dumps(run.learning_config, sort_keys=True) if run.config else f"(no config) {run.path}"
        groups.setdefault(key, []).append(run)
    members = list(groups.values())
    configs = [group[0].learning_config for group in members]
    differing = sorted({k for c in configs for k in c if len({json.dumps(d.get(k)) for d in configs}) > 1})
    labelled = []
    for group, config in zip(members, configs):
        said = [f"{k}={json.loads(config[k]) if k in config else None}" for k in differing]
        label = ", ".join(said) if said and len(", ".join(said)) <= 60 else group[0].path.name
        if len(group) > 1:  # runs of one config: seeds, unless a seed ran more than once
            seeds = len({run.config.get("seed") for run in group})
            many = f"{seeds} seeds" if seeds > 1 else f"seed {group[0].config.get('seed')}"
            label += f" ({many})" if seeds == len(group) else f" ({len(group)} runs, {many})"
        labelled.append((label, group))
    return labelled
