"""The league inside a run's driver, an observer of its training loop: the matchmaking plan each round, results
in, snapshots, stages, metrics.

Why the driver holds the league and not an actor of its own: every input it needs already comes
to the driver (each worker's ``info`` carries its finished games), its decisions are made once
per iteration and cost microseconds, and its state must go into the driver's checkpoints; an
actor would add a round trip per iteration and a second place for the run's state to live.
What does travel is bulky only once per snapshot: its weights, put into the object store when
taken and fetched by a worker the first time a plan names it.
"""

from __future__ import annotations

import ray

from distrl.league.league import League, Member


class LeagueRun:
    """A loop observer (``distrl/driver/loops/host.py: LoopObserver``): the driver's loop calls it, by these names."""

    name = "league"  # its state's key in checkpoints, its summary's in summary.json

    def __init__(self, config, state: dict | None, say):
        self.config = config
        self.league = League.from_state(config.league, state) if state is not None else League(config.league)
        self.say = say
        self._refs: dict[str, ray.ObjectRef] = {}  # snapshot weights in the object store

    def start(self, weights_ref) -> None:
        """Make the initial policy the league's first snapshot (a new run)."""
        if not self.league.snapshots:
            self._snapshot(0, weights_ref, "the initial policy")

    def worker_plan(self) -> ray.ObjectRef:
        """This round's matchmaking plan for the workers (``LeagueVecEnv.set_plan``)."""
        shares = self.league.shares()
        stage = self.league.current_stage
        weights = {m.name: self._ref(m) for m in self.league.snapshots if shares.get(m.name, 0) > 0}
        return ray.put(
            {
                "shares": shares,
                "weights": weights,
                "env_kwargs": dict(stage.env_kwargs),
                "heuristic": dict(stage.heuristic),
                "stage": self.league.stage,
            }
        )

    def after_iteration(self, infos: list[dict], iteration: int, weights_ref) -> dict:
        """Fold the round's games in, take a snapshot or change stage when due; the metrics row's league keys."""
        results = [result for info in infos for result in info.league_results]
        self.league.record(results)
        reason = self.league.wants_snapshot(iteration)
        if reason is not None:
            self._snapshot(iteration, weights_ref, reason)
        promoted = self.league.maybe_promote(iteration)
        if promoted is not None:
            self.say(promoted)
        return self.league.metrics(results)

    def _snapshot(self, iteration: int, weights_ref, reason: str) -> None:
        member = self.league.add_snapshot(iteration, ray.get(weights_ref).model)
        for name in [n for n in self._refs if n not in self.league.members]:
            del self._refs[name]
        self.say(
            f"league: snapshot {member.name} ({reason}); Elo {member.rating:.0f}, {len(self.league.snapshots)} in the "
            "pool"
        )

    def _ref(self, member: Member) -> ray.ObjectRef:
        if member.name not in self._refs:
            self._refs[member.name] = ray.put(member.weights)
        return self._refs[member.name]

    def state(self) -> dict:
        return self.league.state()

    def summary(self) -> dict:
        return self.league.summary()
