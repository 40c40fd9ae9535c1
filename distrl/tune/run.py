"""``distrl.tune``: run a search file's trials of a config with Ray Tune and report the best."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distrl.config import Config, load_config
from distrl.tune.search import SearchSpec, check_trials_configs, load_search, param_space, scheduler
from distrl.tune.trainable import resources_for, run_trial


@dataclass(frozen=True)
class TuneResult:
    """The sweep's outcome: the best trial (by the search's metric and mode, over all its reports) and every trial."""

    experiment_dir: Path
    metric: str
    mode: str
    best_params: dict[str, Any]
    best_value: float | None
    best_trial_dir: Path | None
    best_checkpoint: Path | None
    best_time_s: float | None  # the best trial's running time when it reported its best value
    wall_s: float
    trials: list[dict] = field(repr=False)
    errors: list[str] = field(default_factory=list)


def tune(
    config: str | Path | Mapping | Config,
    search: str | Path | Mapping | SearchSpec,
    *,
    overrides: Sequence[str] | Mapping[str, Any] | None = None,
    storage_path: str | Path | None = None,
    name: str | None = None,
    address=None,
    trusted_envs: Collection[str] = (),
    trusted_models: Collection[str] = (),
) -> TuneResult:
    """Run the trials; the config and the search are checked (every domain's edges) before Ray starts.

    ``storage_path``: where Tune keeps the experiment (default ``runs/tune``), ``name`` its folder.
    Ray as in ``distrl.train``: one this process joined is used and left running; one started here stops.
    """
    from distrl.api import _as_override_list, _target
    from distrl.config.trust import check_code_trust, named_code
    from distrl.driver.preflight import check_before_ray

    launch = time.perf_counter()
    override_list = _as_override_list(overrides)
    spec = search if isinstance(search, SearchSpec) else load_search(search)
    # The config, then the search file's overrides, then the caller's (the command line's --set) on top.
    base = load_config(load_config(config, spec.overrides), override_list)
    if isinstance(config, (str, Path)):
        named = [*trusted_envs, *trusted_models, *named_code(override_list)]
        check_code_trust(base, named, f"config {str(config)!r}")
    check_trials_configs(base, spec)
    check_before_ray(base)
    storage_path = Path(storage_path or "runs/tune").resolve()
    name = name or f"{base.env.id.replace('/', '_').replace(':', '_')}-{time.strftime('%Y%m%d-%H%M%S')}"
    target = _target(address)
    import ray
    from ray import tune as ray_tune

    from distrl.driver.driver import connect_ray

    started_ray = not ray.is_initialized()
    if target is not None:
        connect_ray(target)
    try:
        if target is not None and target.private:  # a private Ray cannot grow: a trial it can never hold is said now
            from distrl.driver.placement import PlacementError, impossible_requests

            for corner in spec.corners() or [{}]:
                problems = impossible_requests(load_config(base, corner))
                if problems:
                    raise PlacementError("one trial needs more than this machine has: " + "; ".join(problems))
        base_tree = base.model_dump(mode="json")
        trainable = ray_tune.with_parameters(run_trial, base=base_tree, checkpoint_every=spec.checkpoint_every)
        if spec.metric.startswith(("eval_", "info_")):  # rows before the first evaluation (or episode) lack it
            os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")  # the schedulers wait for it
        tune_config = ray_tune.TuneConfig(
            metric=spec.metric,
            mode=spec.mode,
            scheduler=scheduler(spec),
            num_samples=spec.num_samples,
            max_concurrent_trials=spec.max_concurrent_trials,
            time_budget_s=spec.time_budget_s,
        )
        run_config = ray_tune.RunConfig(
            name=name, storage_path=str(storage_path), verbose=1, checkpoint_config=_checkpoints(spec)
        )
        # Initial values come from the space; PBT perturbs the same domains (its hyperparam_mutations).
        tuner = ray_tune.Tuner(
            ray_tune.with_resources(trainable, functools.partial(resources_for, base_tree)),
            param_space=param_space(spec),
            tune_config=tune_config,
            run_config=run_config,
        )
        grid = tuner.fit()
        return _result(grid, spec, storage_path / name, time.perf_counter() - launch)
    finally:
        if started_ray and ray.is_initialized():
            ray.shutdown()


def _checkpoints(spec: SearchSpec):
    from ray import tune as ray_tune

    # PBT copies any trial's recent checkpoint into another one: keeping few lets Tune delete one being copied.
    return ray_tune.CheckpointConfig(num_to_keep=None if spec.scheduler.type == "pbt" else 2)


def _result(grid, spec: SearchSpec, experiment_dir: Path, wall_s: float) -> TuneResult:
    trials, errors = [], []
    best = None
    for result in grid:
        params = dict(result.config or {})
        if result.error is not None:
            errors.append(f"{Path(result.path).name}: {str(result.error).strip().splitlines()[-1][:300]}")
        history = result.metrics_dataframe
        value = time_s = None
        if history is not None and spec.metric in history:
            series = history[spec.metric].dropna()
            if len(series):
                index = series.idxmax() if spec.mode == "max" else series.idxmin()
                value = float(series[index])
                time_s = float(history.loc[index, "time_total_s"]) if "time_total_s" in history else None
        trial = {
            "trial": Path(result.path).name,
            "params": params,
            "best_value": value,
            "best_time_s": time_s,
            "iterations": int(history["training_iteration"].max()) if history is not None and len(history) else 0,
            "path": result.path,
            "checkpoint": result.checkpoint.path if result.checkpoint else None,
        }
        trials.append(trial)
        better = value is not None and (
            best is None or (value > best["best_value"] if spec.mode == "max" else value < best["best_value"])
        )
        if better:
            best = trial
    return TuneResult(
        experiment_dir=experiment_dir,
        metric=spec.metric,
        mode=spec.mode,
        best_params=best["params"] if best else {},
        best_value=best["best_value"] if best else None,
        best_trial_dir=Path(best["path"]) if best else None,
        best_checkpoint=Path(best["checkpoint"]) if best and best["checkpoint"] else None,
        best_time_s=best["best_time_s"] if best else None,
        wall_s=wall_s,
        trials=trials,
        errors=errors,
    )
