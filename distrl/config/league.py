"""The ``league`` section of a run's config: self-play against a league of snapshots and scripted baselines.

No torch here: the config validates before anything heavy loads.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

UnitInterval = Annotated[float, Field(ge=0, le=1)]
PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]

GAME_PREFIXES = ("pettingzoo/", "distrl/")  # league games' env ids: PettingZoo's registry, distrl's own games
BASELINES = ("random", "heuristic")  # every game has both: uniform over legal moves, and its scripted player
GROUPS = ("latest", "snapshots", *BASELINES)  # what matchmaking and curriculum stages draw opponents from


def is_game_id(env_id: str) -> bool:
    """Whether ``env_id`` names a two-player league game rather than a gymnasium env."""
    return env_id.startswith(GAME_PREFIXES)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)


class MatchmakingConfig(_Section):
    latest: UnitInterval = Field(
        0.35, description="share of games against the learning policy itself (mirror self-play)"
    )
    snapshots: UnitInterval = Field(0.5, description="share of games against earlier snapshots, drawn by PFSP")
    baselines: UnitInterval = Field(0.15, description="share of games against the scripted baselines, drawn by PFSP")
    pfsp: Literal["hard", "variance", "linear", "uniform"] = Field(
        "hard",
        description="prioritised fictitious self-play weighting of an opponent by the learner's win rate x "
        "against it (AlphaStar): hard (1-x)^p, variance x(1-x), linear 1-x, uniform 1",
    )
    pfsp_exponent: Annotated[float, Field(gt=0)] = Field(2.0, description="p of the hard weighting")
    win_rate_decay: Annotated[float, Field(gt=0, le=1)] = Field(
        0.99,
        description="at each game against an opponent, the weight of the earlier ones is multiplied by this, in "
        "the win rates that PFSP, snapshots and promotion read (a window of about 1/(1-decay) games)",
    )

    @model_validator(mode="after")
    def _some_share(self) -> MatchmakingConfig:
        if self.latest + self.snapshots + self.baselines <= 0:
            raise ValueError("league.matchmaking: latest, snapshots and baselines are all 0; give one a share")
        return self


class EloConfig(_Section):
    k: Annotated[float, Field(gt=0)] = Field(16.0, description="Elo K-factor: the most one game moves a rating")
    initial: float = Field(
        1000.0, description="rating of a new learner; the random baseline is held at it (the anchor)"
    )


class PromotionRule(_Section):
    win_rate: UnitInterval = Field(
        0.8,
        description="promote once the learner's win rate against this stage's opponents "
        "reaches this (draws count half)",
    )
    min_games: PositiveInt = Field(200, description="games in this stage before a promotion is considered")


class CurriculumStage(_Section):
    name: str = Field(..., min_length=1)
    opponents: list[Literal["latest", "snapshots", "random", "heuristic"]] = Field(
        default_factory=lambda: list(GROUPS), min_length=1, description="opponent groups this stage draws from"
    )
    env_kwargs: dict[str, Any] = Field(default_factory=dict, description="game keyword arguments in this stage")
    heuristic: dict[str, Any] = Field(
        default_factory=dict,
        description="the scripted baseline's settings in this stage, e.g. {noise: 0.5}: that "
        "share of its moves is random (a weaker opponent)",
    )
    promote: PromotionRule | None = Field(None, description="when to move to the next stage; none: the last stage")


class RewardConfig(_Section):
    sparse: bool = Field(True, description="only the game's result (+1 win, -1 loss, 0 draw); false adds shaping")
    shaping: dict[str, float] = Field(
        default_factory=dict,
        description="coefficient per shaping term of the game "
        "(distrl/Duel-v0: push, centre); used when sparse is false",
    )


class LeagueConfig(_Section):
    snapshot_every: NonNegativeInt = Field(
        10, description="freeze a copy of the learning policy every this many iterations; 0: only by snapshot_win_rate"
    )
    snapshot_win_rate: UnitInterval | None = Field(
        0.7,
        description="also freeze a copy once the learner's win rate against the newest snapshot reaches this "
        "(RLlib's self-play example's rule); null: only every snapshot_every",
    )
    snapshot_against: Literal["newest", "pool"] = Field(
        "newest",
        description="whose games snapshot_win_rate counts: the newest snapshot's (RLlib's rule), or every "
        "snapshot's in the pool since the newest was taken (weighted as matchmaking draws them)",
    )
    snapshot_min_games: PositiveInt = Field(
        100,
        description="games against the newest snapshot (or the pool, since "
        "the newest was taken) before the win rate counts",
    )
    max_snapshots: PositiveInt = Field(30, description="snapshots kept in the pool; the oldest goes first")
    matchmaking: MatchmakingConfig = MatchmakingConfig()
    elo: EloConfig = EloConfig()
    curriculum: list[CurriculumStage] = Field(
        default_factory=list, description="stages in order; empty: one stage drawing from every group"
    )
    reward: RewardConfig = RewardConfig()
    both_seats: bool = Field(True, description="the learner takes each seat in turn (first and second player)")

    @model_validator(mode="after")
    def _checks(self) -> LeagueConfig:
        problems = []
        if self.snapshot_every == 0 and self.snapshot_win_rate is None:
            problems.append(
                "league.snapshot_every=0 and league.snapshot_win_rate=null: no snapshot would ever be taken"
            )
        names = [stage.name for stage in self.curriculum]
        if len(set(names)) != len(names):
            problems.append(f"league.curriculum: stage names must differ, got {names}")
        for i, stage in enumerate(self.curriculum[:-1]):
            if stage.promote is None:
                problems.append(
                    f"league.curriculum[{i}].promote: stage {stage.name!r} is not the last, so it needs a "
                    "promotion rule (win_rate, min_games)"
                )
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def stages(self) -> list[CurriculumStage]:
        """The curriculum, or its one implied stage."""
        return list(self.curriculum) or [CurriculumStage(name="league")]
