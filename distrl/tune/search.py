"""The search file of ``distrl tune``: what to vary, how to schedule trials, what to optimise. Data only.

    metric: episode_return_mean      # any key of a metrics row
    mode: max
    num_samples: 4
    scheduler: {type: asha, max_t: 30, grace_period: 4, reduction_factor: 2}
    search_space:                    # any config key -> a domain
      ppo.lr: {loguniform: [3.0e-4, 3.0e-3]}
      ppo.epochs: {choice: [2, 4]}
    overrides: {stop.env_steps: 150000}   # every trial

Domains: uniform / loguniform [low, high], randint [low, high) , choice [values], grid [values].
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from distrl.config import ConfigError, load_config

DOMAINS = ("uniform", "loguniform", "randint", "choice", "grid")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SchedulerSpec(_Strict):
    type: Literal["asha", "pbt", "fifo"] = Field(
        "asha",
        description="ASHA stops weak trials early; PBT copies strong "
        "trials' checkpoints into weak ones and perturbs their settings",
    )
    max_t: int = Field(100, gt=0, description="asha: iterations a trial may run at most")
    grace_period: int = Field(4, gt=0, description="asha: iterations before a trial can be stopped")
    reduction_factor: float = Field(2, gt=1, description="asha: 1/reduction_factor of trials go on at each rung")
    perturbation_interval: int = Field(5, gt=0, description="pbt: iterations between exploit/explore steps")
    quantile_fraction: float = Field(0.25, gt=0, le=0.5, description="pbt: the bottom fraction copies the top one")


class SearchSpec(_Strict):
    metric: str = Field("episode_return_mean", description="the metrics row key to optimise")
    mode: Literal["max", "min"] = "max"
    num_samples: int = Field(4, gt=0, description="trials (times each grid point)")
    max_concurrent_trials: int | None = Field(None, gt=0, description="None: as many as the cluster holds")
    time_budget_s: float | None = Field(None, gt=0)
    checkpoint_every: int = Field(
        5, gt=0, description="iterations between checkpoints handed to Tune (PBT exploits them)"
    )
    scheduler: SchedulerSpec = SchedulerSpec()
    search_space: dict[str, dict[str, list]] = Field(default_factory=dict)
    overrides: dict[str, Any] = Field(default_factory=dict, description="config keys set in every trial")

    @model_validator(mode="after")
    def _domains(self):
        for key, domain in self.search_space.items():
            if len(domain) != 1 or next(iter(domain)) not in DOMAINS:
                raise ValueError(
                    f"search_space.{key}={domain}: give one domain, one of {', '.join(DOMAINS)}, "
                    f"e.g. {{loguniform: [1.0e-4, 1.0e-3]}}"
                )
            kind, values = next(iter(domain.items()))
            if kind in ("uniform", "loguniform", "randint"):
                if (
                    len(values) != 2
                    or not all(isinstance(v, (int, float)) for v in values)
                    or not values[0] < values[1]
                ):
                    raise ValueError(f"search_space.{key}.{kind}={values}: give [low, high] numbers with low < high")
                if kind == "loguniform" and values[0] <= 0:
                    raise ValueError(f"search_space.{key}.loguniform={values}: bounds must be > 0")
                if kind == "randint" and not all(isinstance(v, int) for v in values):
                    raise ValueError(f"search_space.{key}.randint={values}: bounds must be whole numbers")
            elif not values:
                raise ValueError(f"search_space.{key}.{kind}=[]: give at least one value")
        if self.scheduler.type == "pbt" and any("grid" in d for d in self.search_space.values()):
            raise ValueError("scheduler.type=pbt: grid domains cannot be perturbed; use choice")
        return self

    def corners(self) -> list[dict[str, Any]]:
        """Values at the edges of every domain (each choice, both bounds), combined: each must make a valid config."""
        options = {}
        for key, domain in self.search_space.items():
            kind, values = next(iter(domain.items()))
            options[key] = [values[0], values[1] - 1] if kind == "randint" else list(values)
        keys = list(options)
        combos = itertools.product(*(options[k] for k in keys))
        return [dict(zip(keys, combo)) for combo, _ in zip(combos, range(64))]  # enough to catch a bad key or range


def load_search(path: str | Path | dict) -> SearchSpec:
    """Read and validate a search file (or dict); ConfigError lines name the key, the value and what is allowed."""
    if isinstance(path, dict):
        tree = path
    else:
        path = Path(path)
        if not path.is_file():
            raise ConfigError([f"search={str(path)!r}: no such file"])
        try:
            tree = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise ConfigError([f"search={str(path)!r}: not valid YAML: {getattr(exc, 'problem', exc)}"]) from None
        if not isinstance(tree, dict):
            raise ConfigError([f"search={str(path)!r}: must be a mapping (metric, mode, scheduler, search_space, ...)"])
    try:
        return SearchSpec.model_validate(tree)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"])
            if err["type"] == "value_error":
                lines.append(err["msg"].removeprefix("Value error, "))
            elif err["type"] == "extra_forbidden":
                allowed = ", ".join(
                    SchedulerSpec.model_fields if key.startswith("scheduler.") else SearchSpec.model_fields
                )
                lines.append(f"search {key}={err['input']!r}: unknown key (allowed: {allowed})")
            else:
                lines.append(f"search {key}={err['input']!r}: {err['msg']}")
        raise ConfigError(lines) from None


def check_trials_configs(base, search: SearchSpec) -> None:
    """Every corner of the search space makes a valid config of ``base``: one line per problem, before Ray."""
    for corner in search.corners() or [{}]:
        try:
            load_config(base, corner)
        except ConfigError as exc:
            where = f" (search_space values {corner})" if corner else ""
            raise ConfigError([line + where for line in exc.lines]) from None


def param_space(search: SearchSpec) -> dict[str, Any]:
    """Ray Tune's search space (imports ray.tune)."""
    from ray import tune

    make = {
        "uniform": lambda v: tune.uniform(*v),
        "loguniform": lambda v: tune.loguniform(*v),
        "randint": lambda v: tune.randint(*v),
        "choice": tune.choice,
        "grid": tune.grid_search,
    }
    return {key: make[kind](values) for key, domain in search.search_space.items() for kind, values in domain.items()}


def scheduler(search: SearchSpec):
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, PopulationBasedTraining

    s = search.scheduler
    if s.type == "asha":
        return ASHAScheduler(
            time_attr="training_iteration",
            max_t=s.max_t,
            grace_period=s.grace_period,
            reduction_factor=s.reduction_factor,
        )
    if s.type == "pbt":
        return PopulationBasedTraining(
            time_attr="training_iteration",
            perturbation_interval=s.perturbation_interval,
            quantile_fraction=s.quantile_fraction,
            hyperparam_mutations=param_space(search),
        )
    return FIFOScheduler()
