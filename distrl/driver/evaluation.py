"""Evaluation during training: a checkpoint's policy played on env copies of its own by an actor beside the run.

As Stable-Baselines3's ``EvalCallback`` and RLlib's evaluation env runners do: every ``eval.every_iterations``
iterations (or ``eval.every_s`` seconds) the driver writes a checkpoint and hands its policy to the eval actor, which
plays ``eval.episodes`` episodes (greedy by default, its own seeds, ``eval.env_kwargs`` over the env's) while the
workers and learners go on; its result lands in the metrics row of the iteration during which it came in, and, where
evaluation chooses the run's best checkpoint (``eval.best``), decides it. In a league run the policy plays the game
against fixed opponents (the scripted player, uniform random moves) in both seats: comparable from the first
iteration to the last, as the league's own opponents are not.

One evaluation at a time: one that is due while another runs is skipped. The actor runs on the driver's node on no
resources and at the workers' niceness (it plays now and then, and yields to the learner); its steps are not the
run's. An actor that dies, fails or runs past ``eval.timeout_s`` is counted (``eval_failures``) and replaced at the
next evaluation: the run never stops for it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from distrl.common.log import get_logger
from distrl.config.evaluation import EVAL_SEED_OFFSET
from distrl.data.messages import EvalResult

log = get_logger("driver")


def policy_weights(learner_state: dict) -> dict:
    """What evaluation needs of a learner state: each policy's model and observation statistics (not its optimiser)."""
    if "policies" in learner_state:
        return {"policies": {name: policy_weights(part) for name, part in learner_state["policies"].items()}}
    return {"model": learner_state["model"], "obs_norm": learner_state.get("obs_norm")}


class Evaluator:
    """What the eval actor runs (a plain class: tests drive it in-process). Its env copies are built with it and
    kept; every evaluation starts them from the same seeds, so checkpoints are compared on the same
    episodes."""

    def __init__(self, config, niceness: int = 0):
        """Everything an evaluation needs but the weights, ready before the first (torch, the env copies)."""
        import torch  # noqa: F401  (loaded before its thread count is set)

        from distrl.common.priority import raise_niceness

        self.config = config
        self.league = config.league is not None
        self._envs, self._views, self._names = None, None, ()
        raise_niceness(niceness)
        if not self.league:
            from distrl.deploy.evaluate import eval_envs
            from distrl.envs.agents import policy_map

            cfg = config.eval
            self._names = policy_map(config).names if config.agents.several else ()
            self._envs, self._views = eval_envs(
                config, self._names, min(cfg.num_envs, cfg.count(False)), cfg.env_kwargs
            )

    def evaluate(self, iteration: int, weights: dict, scale: int = 1) -> EvalResult:
        """Play the policy of ``weights`` (``policy_weights``) of the checkpoint at ``iteration``; ``scale``: that
        many times the episodes, from seeds of their own (the final round: ``eval.final_scale``)."""
        from distrl.common.threads import use_torch_threads

        use_torch_threads(1)  # on the thread that runs torch here; one core's share, as a worker's
        start = time.perf_counter()
        cfg = self.config.eval
        seed = self.config.seed + EVAL_SEED_OFFSET + (scale > 1) * EVAL_SEED_OFFSET
        if self.league:
            from distrl.league.tournament import against_fixed

            played = against_fixed(
                self.config, weights["model"], cfg.opponents, scale * cfg.count(True), cfg.deterministic, seed
            )
            matches = [m for games in played.values() for m in games]
            return EvalResult(
                iteration,
                [2.0 * m.score - 1.0 for m in matches],  # the sparse reward the learner trains on: 1, 0, -1
                [len(m.record.get("moves", ())) for m in matches],
                time.perf_counter() - start,
                {name: float(np.mean([m.score for m in games])) for name, games in played.items()},
            )
        from distrl.deploy.evaluate import counted, play_episodes
        from distrl.deploy.policy import Policy

        names = self._names
        players = (
            [Policy.from_state(self.config, weights["policies"][name], name) for name in names]
            if names
            else [Policy.from_state(self.config, weights)]
        )
        for k, player in enumerate(players):
            player.seed(seed + k)
        played = play_episodes(
            players,
            self._views,
            scale * cfg.count(False),
            cfg.deterministic,
            seed,
            counted(names, None),
            info_keys=tuple(self.config.env.info_metrics),
        )
        took = time.perf_counter() - start
        return EvalResult(
            iteration, played.returns, played.lengths, took, episode_info=played.info, info_missing=played.info_missing
        )

    def close(self) -> None:
        if self._envs is not None:
            self._envs.close()


@dataclass
class Pending:
    iteration: int
    path: Path  # its checkpoint, kept on disk until the result is in
    ref: ray.ObjectRef
    started: float


class Evaluation:
    """The driver's side: when an evaluation is due, the actor, the one in flight, and what came of it."""

    def __init__(self, config, counters):
        self.config = config
        self.counters = counters  # the run's RunState: eval_failures counted there, kept across a resume
        league = config.league is not None
        self.every = config.eval.interval(league)
        self.every_s = config.eval.every_s
        self.actor = None
        self.pending: Pending | None = None
        self._last_start = time.perf_counter()

    def due(self, iteration: int) -> bool:
        """Whether the checkpoint at ``iteration`` is to be evaluated (never while one is in flight)."""
        if self.pending is not None:
            return False
        by_count = self.every > 0 and iteration % self.every == 0
        by_time = self.every_s is not None and time.perf_counter() - self._last_start >= self.every_s
        return by_count or by_time

    @property
    def protected(self) -> list[Path]:
        """Checkpoints pruning must keep: the one waiting for its result."""
        return [self.pending.path] if self.pending is not None else []

    def start(self) -> None:
        """Start the eval actor where none runs (after the run's first update: not in the start-up's way)."""
        if self.actor is None:
            here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
            self.actor = (
                ray.remote(Evaluator)
                .options(num_cpus=0, scheduling_strategy=here)
                .remote(self.config, self.config.rollout.worker_niceness)
            )

    def submit(self, iteration: int, learner_state: dict, path: Path, scale: int = 1) -> None:
        self.start()
        self._last_start = time.perf_counter()
        ref = self.actor.evaluate.remote(iteration, policy_weights(learner_state), scale)
        self.pending = Pending(iteration, Path(path), ref, self._last_start)

    def poll(self, wait_s: float = 0.0) -> EvalResult | None:
        """The result in flight, once it is in (within ``wait_s``); None while it runs, or when it failed (counted,
        its actor replaced at the next evaluation)."""
        if self.pending is None:
            return None
        ready, _ = ray.wait([self.pending.ref], timeout=wait_s)
        if not ready:
            waited = time.perf_counter() - self.pending.started
            if waited > self.config.eval.timeout_s:
                self._failed(f"no result after {waited:.0f} s (eval.timeout_s={self.config.eval.timeout_s:g})")
            return None
        try:
            result = ray.get(self.pending.ref)
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
            self._failed(str(exc).strip().splitlines()[-1][:200])
            return None
        self.pending = None
        return result

    def wait(self) -> EvalResult | None:
        """The result in flight, waited for (up to ``eval.timeout_s``); None where none is."""
        return self.poll(self.config.eval.timeout_s)

    def run_now(self, iteration: int, learner_state: dict, path: Path, scale: int = 1) -> EvalResult | None:
        """Evaluate the checkpoint at ``iteration`` with ``scale`` times the episodes, and wait for it (the final
        round; ``wait`` for one in flight first); once more on a new actor where the first try fails (counted)."""
        for _ in range(2):
            self.submit(iteration, learner_state, path, scale)
            result = self.wait()
            if result is not None:
                return result
        return None

    def _failed(self, why: str) -> None:
        self.counters.eval_failures += 1
        log.warning(
            f"evaluation of iteration {self.pending.iteration} failed ({why}); counted as eval_failures "
            f"({self.counters.eval_failures}), the run goes on and the next evaluation starts a new actor"
        )
        self.pending = None
        self.close()

    def close(self) -> None:
        if self.actor is not None:
            try:  # its envs closed first: a vector env torn down by the kill says so on the run's screen
                ray.get(self.actor.close.remote(), timeout=5)
            except Exception:  # gone, or busy past the wait: killed as it is
                pass
            try:
                ray.kill(self.actor, no_restart=True)
            except Exception:  # already gone
                pass
            self.actor = None
