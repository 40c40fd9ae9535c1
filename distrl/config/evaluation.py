"""The ``eval`` section: evaluation during training, on env copies of its own, and the best checkpoint it chooses.

No torch here: the config validates before anything heavy loads.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]

AUTO_EPISODES, AUTO_GAMES = 10, 100  # what `episodes: auto` means: episodes, or a league run's games per opponent
LEAGUE_EVERY = 10  # what `every_iterations: auto` means in a league run: its best is chosen by evaluation
EVAL_SEED_OFFSET = 1_000_003  # eval's env seeds start this far from the run's seed: never the training envs' seeds


class EvalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    every_iterations: NonNegativeInt | Literal["auto"] = Field(
        "auto",
        description="evaluate a checkpoint of the policy every this many iterations; 0: off; auto: every "
        f"{LEAGUE_EVERY} in a league run (its best is chosen by evaluation), off otherwise",
    )
    every_s: PositiveFloat | None = Field(
        None, description="also evaluate once this many seconds have passed since the last evaluation began"
    )
    episodes: PositiveInt | Literal["auto"] = Field(
        "auto",
        description=f"episodes per evaluation; a league run's games against each opponent, half in each seat; auto: "
        f"{AUTO_EPISODES}, or {AUTO_GAMES} games in a league run (one game's result is a coarse measure)",
    )
    deterministic: bool = Field(True, description="the most likely action (greedy); false samples, as in training")
    num_envs: PositiveInt = Field(16, description="env copies stepped at once (at most episodes)")
    env_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments over env.kwargs for the evaluation's envs"
    )
    opponents: list[Literal["heuristic", "random"]] = Field(
        default_factory=lambda: ["heuristic"],
        min_length=1,
        description="a league run: the fixed players evaluation plays against (the game's scripted player, "
        "uniform random moves); the score is the mean over them",
    )
    final: bool = Field(
        True,
        description="at the run's end, its newest checkpoint and its best so far each play final_scale times the "
        "episodes on seeds of their own, and the better is the run's best: the newest can be the best, and a best "
        "chosen among many evaluations, partly for its luck, is judged again",
    )
    final_scale: PositiveInt = Field(4, description="the final evaluations' episodes, as a multiple of episodes")
    timeout_s: PositiveFloat = Field(
        600.0, description="an evaluation that takes longer is abandoned and its actor restarted (a fault)"
    )
    best: Literal["auto", "eval", "episode_return_mean", "newest"] = Field(
        "auto",
        description="what chooses the best checkpoint (eval, export and load_policy use it): auto is the "
        "evaluation's mean return when evaluation is on, else the mean training return (a league run: the newest, "
        "since its training return is against ever stronger opponents)",
    )

    @field_validator("every_iterations", "episodes", mode="before")
    @classmethod
    def _number_or_auto(cls, value: Any, info) -> Any:
        """One line for either form (a plain union would report the number's failure and the literal's both)."""
        least = 0 if info.field_name == "every_iterations" else 1
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= least):
            return value
        raise ValueError(f"eval.{info.field_name}={value!r}: must be a whole number, {least} or more, or auto")

    def count(self, league: bool) -> int:
        """Episodes per evaluation (a league run's games per opponent)."""
        if self.episodes == "auto":
            return AUTO_GAMES if league else AUTO_EPISODES
        return self.episodes

    def interval(self, league: bool) -> int:
        """Iterations between evaluations (0: off unless ``every_s``)."""
        if self.every_iterations == "auto":
            return LEAGUE_EVERY if league else 0
        return self.every_iterations

    def enabled(self, league: bool) -> bool:
        return self.interval(league) > 0 or self.every_s is not None

    def best_by(self, league: bool) -> str:
        """``eval``, ``episode_return_mean`` or ``newest``: what the run's best checkpoint is chosen by."""
        if self.best != "auto":
            return self.best
        if self.enabled(league):
            return "eval"
        return "newest" if league else "episode_return_mean"

    def describe(self, league: bool) -> str:
        """One line for the start-up summary."""
        if not self.enabled(league):
            return "off"
        when = [f"every {self.interval(league)} iterations"] if self.interval(league) else []
        if self.every_s is not None:
            when.append(f"every {self.every_s:g} s")
        what = f"{self.count(league)} {'games per opponent' if league else 'episodes'}"
        how = "greedy" if self.deterministic else "sampled"
        against = f" against {', '.join(self.opponents)}" if league else ""
        return f"{' or '.join(when)}, {what}{against}, {how}"
