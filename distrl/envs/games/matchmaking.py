"""Who the learner plays: win rates against each opponent, PFSP weights, and each opponent's share of games.

Prioritised fictitious self-play (Vinyals et al. 2019, AlphaStar): an opponent against which
the learner's win rate is ``x`` is drawn in proportion to ``f(x)``: ``hard`` ``(1 - x)^p``
focuses on the opponents it still loses to, ``variance`` ``x (1 - x)`` on even games. Groups
(the learner itself, earlier snapshots, scripted baselines) get fixed shares of the games, as
OpenAI Five mixed 80 % latest with 20 % past selves; within a group PFSP decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from distrl.config.league import BASELINES, MatchmakingConfig


def pfsp_weight(win_rate: float, kind: str, exponent: float = 2.0) -> float:
    """PFSP's weight of an opponent the learner beats at ``win_rate`` (draws count half)."""
    if kind == "hard":
        return (1.0 - win_rate) ** exponent
    if kind == "variance":
        return win_rate * (1.0 - win_rate)
    if kind == "linear":
        return 1.0 - win_rate
    return 1.0


@dataclass
class WinRates:
    """The learner's score against each opponent, with older games decayed (``decay`` per new game against it).

    ``rate`` starts from one virtual draw, so an opponent never played counts as even (0.5).
    """

    decay: float
    weight: dict[str, float] = field(default_factory=dict)  # decayed games
    points: dict[str, float] = field(default_factory=dict)  # decayed score

    def record(self, opponent: str, score: float) -> None:
        self.weight[opponent] = self.weight.get(opponent, 0.0) * self.decay + 1.0
        self.points[opponent] = self.points.get(opponent, 0.0) * self.decay + score

    def rate(self, opponent: str) -> float:
        return (self.points.get(opponent, 0.0) + 0.5) / (self.weight.get(opponent, 0.0) + 1.0)

    def state(self) -> dict:
        return {"weight": dict(self.weight), "points": dict(self.points)}

    @classmethod
    def from_state(cls, decay: float, state: dict) -> WinRates:
        return cls(decay, dict(state["weight"]), dict(state["points"]))


def opponent_shares(
    snapshots: list[str], allowed: list[str], rates: WinRates, cfg: MatchmakingConfig
) -> dict[str, float]:
    """Probability of each opponent for the next game: ``latest``, snapshot names, ``random``, ``heuristic``.

    ``allowed``: the groups the current curriculum stage draws from (``latest``, ``snapshots``, ``random``,
    ``heuristic``). A group with no member (no snapshot yet) or not allowed gives its share to the others in
    proportion; if every remaining share is 0, the remaining groups share equally.
    """
    groups = {
        "latest": (cfg.latest, ["latest"] if "latest" in allowed else []),
        "snapshots": (cfg.snapshots, list(snapshots) if "snapshots" in allowed else []),
        "baselines": (cfg.baselines, [b for b in BASELINES if b in allowed]),
    }
    groups = {name: (share, members) for name, (share, members) in groups.items() if members}
    if not groups:
        raise ValueError(f"no opponent to draw from (allowed {allowed}, {len(snapshots)} snapshots)")
    total = sum(share for share, _ in groups.values())
    out: dict[str, float] = {}
    for share, members in groups.values():
        group_share = share / total if total > 0 else 1.0 / len(groups)
        weights = [pfsp_weight(rates.rate(m), cfg.pfsp, cfg.pfsp_exponent) for m in members]
        if sum(weights) <= 0:  # the learner beats all of them every time: equal weights
            weights = [1.0] * len(members)
        for member, weight in zip(members, weights):
            out[member] = out.get(member, 0.0) + group_share * weight / sum(weights)
    return out
