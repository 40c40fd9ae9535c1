"""The driver: creates the actors, owns the training loop, metrics, checkpoints and stop conditions.

Batches travel from workers to learners as ObjectRefs (the driver never holds their
data); weights go out as the learner's return value, one object-store entry per update
that every worker reads.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.markup import escape
import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from rich.console import Console

from distrl.config import Config, config_to_yaml
from distrl.driver.checkpoint import load_checkpoint, save_checkpoint
from distrl.driver.metrics import MetricsWriter
from distrl.driver.placement import (
    PlacementError,
    impossible_requests,
    learner_placement_group,
    wait_until_ready,
    worker_options,
)
from distrl.driver.progress import ProgressReporter
from distrl.envs import EnvFailure, probe_spaces
from distrl.learner import Learner
from distrl.rollout import RolloutWorker

RETURN_WINDOW = 100


@dataclass
class Counters:
    iteration: int = 0
    env_steps: int = 0
    time_s: float = 0.0  # wall time of earlier segments of a resumed run
    episodes: int = 0
    solved_at_s: float | None = None
    recent_returns: collections.deque = field(default_factory=lambda: collections.deque(maxlen=RETURN_WINDOW))
    recent_lengths: collections.deque = field(default_factory=lambda: collections.deque(maxlen=RETURN_WINDOW))

    def state(self) -> dict:
        return {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "time_s": self.time_s,
            "episodes": self.episodes,
            "solved_at_s": self.solved_at_s,
            "recent_returns": list(self.recent_returns),
            "recent_lengths": list(self.recent_lengths),
        }

    @classmethod
    def from_state(cls, state: dict) -> Counters:
        counters = cls(
            iteration=int(state["iteration"]),
            env_steps=int(state["env_steps"]),
            time_s=float(state["time_s"]),
            episodes=int(state["episodes"]),
            solved_at_s=state["solved_at_s"],
        )
        counters.recent_returns.extend(state["recent_returns"])
        counters.recent_lengths.extend(state["recent_lengths"])
        return counters

    def return_mean(self) -> float | None:
        return float(np.mean(self.recent_returns)) if self.recent_returns else None


def connect_ray(address: str | None) -> bool:
    """Join the cluster at ``address`` / RAY_ADDRESS, or start Ray in-process. Returns True when local."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=True)
        return False
    # Local development: everything on loopback.
    ray.init(include_dashboard=False, log_to_driver=True, configure_logging=False, _node_ip_address="127.0.0.1")
    return True


class Driver:
    def __init__(self, config: Config, run_dir: Path, console: Console | None = None, resume: bool = False):
        self.config = config
        self.run_dir = Path(run_dir)
        self.console = console or Console(soft_wrap=True)
        self.resume = resume
        self.run_id = uuid.uuid4().hex[:8]
        self.counters = Counters()
        self.learner_state: dict | None = None
        self.incarnations: dict[int, str] = {}
        self.worker_restarts = 0
        self.env_errors = 0
        if resume:
            payload = load_checkpoint(self.run_dir)
            self.counters = Counters.from_state(payload["counters"])
            self.learner_state = payload["learner"]

    # --- set-up -------------------------------------------------------------------------
    def _prepare_artifacts(self, obs_space, action_space):
        """Export / compile the worker policy once here; workers load the result from the object store."""
        cfg = self.config.rollout.compile
        if cfg.backend in ("eager", "ipex"):
            return None
        import torch

        from distrl.compile import prepare_artifacts
        from distrl.models import build_model

        model = build_model(obs_space, action_space, self.config.model).eval()
        n = self.config.env.num_envs_per_worker
        obs = np.stack([obs_space.sample() for _ in range(n)])
        if obs.dtype != np.uint8:
            obs = obs.astype(np.float32)
        example = (obs,)
        if model.is_recurrent:
            example += model.initial_state(n)
        torch.set_num_threads(1)
        try:
            artifacts = prepare_artifacts(model, cfg.backend, example, cfg.mode)
        except Exception as exc:  # workers will compile for themselves (and fall back if that fails too)
            self.console.print(f"[yellow]shared compile artifacts unavailable ({escape(f'{type(exc).__name__}: {exc}')}); each worker compiles[/yellow]")
            return None
        return ray.put(artifacts)

    def _create_actors(self) -> None:
        cfg = self.config
        obs_space, action_space = probe_spaces(cfg.env)
        # Held for the whole run: a restarted worker is constructed again from this same reference.
        self.artifacts_ref = self._prepare_artifacts(obs_space, action_space)
        world = cfg.learner.num_learners
        timeout = cfg.cluster.placement_timeout_s
        say = self.console.print
        # The learners of one run are placed together, as one placement group.
        self.placement_group = learner_placement_group(cfg)
        wait_until_ready({f"learner placement group ({world} bundles)": self.placement_group.ready()}, timeout, say)
        learner_cls = ray.remote(Learner)
        self.learners = [
            learner_cls.options(
                name=f"distrl-{self.run_id}-learner-{rank}",
                num_cpus=cfg.learner.num_cpus_per_learner,
                num_gpus=cfg.learner.num_gpus_per_learner,
                resources=dict(cfg.learner.resources) or None,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.placement_group, placement_group_bundle_index=rank),
            ).remote(cfg, obs_space, action_space, rank, world)
            for rank in range(world)
        ]
        worker_cls = ray.remote(RolloutWorker)
        self.workers = [
            worker_cls.options(name=f"distrl-{self.run_id}-worker-{i}", **worker_options(cfg)).remote(
                cfg, i, self.counters.iteration, self.artifacts_ref
            )
            for i in range(cfg.rollout.num_workers)
        ]
        ready = {f"learner-{rank}": learner.device_name.remote() for rank, learner in enumerate(self.learners)}
        ready |= {f"worker-{i}": worker.backend_info.remote() for i, worker in enumerate(self.workers)}
        wait_until_ready(ready, timeout, say)
        if world > 1:
            address, port = ray.get(self.learners[0].rendezvous_address.remote())
            ray.get([learner.init_distributed.remote(address, port) for learner in self.learners])
        if self.learner_state is not None:
            state_ref = ray.put(self.learner_state)
            ray.get([learner.load_state.remote(state_ref) for learner in self.learners])
        self.learner_device = ray.get(ready["learner-0"])  # already resolved by wait_until_ready
        self.backend_info = ray.get(ready["worker-0"])
        names = [f"learner-{r}" for r in range(world)] + [f"worker-{i}" for i in range(cfg.rollout.num_workers)]
        spots = ray.get([actor.placement.remote() for actor in self.learners + self.workers])
        self.placement = {name: {"actor": f"distrl-{self.run_id}-{name}", **spot} for name, spot in zip(names, spots)}

    def _print_summary(self, local: bool) -> None:
        cfg = self.config
        c = self.console
        c.print(f"[bold]distrl[/bold] run {self.run_dir} ({'local Ray' if local else 'cluster ' + str(ray.get_runtime_context().gcs_address)})")
        c.print(
            f"  env      {cfg.env.id}: {cfg.rollout.num_workers} workers x {cfg.env.num_envs_per_worker} envs "
            f"({cfg.env.vectorization}), action_repeat {cfg.env.action_repeat}, normalize_obs {cfg.env.normalize_obs}"
        )
        lstm = f", lstm {cfg.model.lstm_size}" if cfg.model.lstm_size else ""
        c.print(f"  model    {cfg.model.type} {cfg.model.hidden} {cfg.model.activation}, shared_trunk {cfg.model.shared_trunk}{lstm}")
        info = self.backend_info
        backend = info["backend"] if info["backend"] == info["requested"] else f"{info['backend']} (requested {info['requested']})"
        shared = ", artifacts shared" if info["shared_artifacts"] else ""
        c.print(
            f"  rollout  {cfg.rollout.rollout_length} steps/env, pipeline {cfg.rollout.pipeline}, "
            f"{cfg.rollout.num_cpus_per_worker:g} CPU/worker, policy backend {backend} "
            f"(ready in {info['startup_s']:.2f} s{shared})"
        )
        if info["reason"]:
            c.print(f"           [yellow]{escape(info['reason'])}[/yellow]")
        lc = cfg.learner.compile
        compiled = "eager" if lc.backend == "eager" else f"{lc.backend} {lc.mode}" + (f"/critic {lc.critic_mode}" if lc.critic_mode else "")
        c.print(
            f"  learner  {cfg.learner.num_learners} x {self.learner_device}, {cfg.learner.num_gpus_per_learner:g} GPU/learner, "
            f"{compiled}, AMP {cfg.learner.amp}, batch {cfg.batch_size}, minibatch {cfg.ppo.minibatch_size}, "
            f"epochs {cfg.ppo.epochs}"
        )
        stops = [f"{k}={v}" for k, v in cfg.stop.model_dump().items() if v is not None]
        c.print(f"  stop     {', '.join(stops)}; seed {cfg.seed}")
        where = "; ".join(
            f"{name} on {spot['node_ip']} ({spot['node_id'][:8]})" + (f" GPU {spot['gpu_ids']}" if spot.get("gpu_ids") else "")
            for name, spot in self.placement.items()
        )
        c.print(f"  placed   {where}")
        if self.resume:
            c.print(f"  resuming at iteration {self.counters.iteration}, {self.counters.env_steps:,} env steps")

    # --- the loop ----------------------------------------------------------------------
    def _stop_reason(self, elapsed: float) -> str | None:
        stop = self.config.stop
        ret = self.counters.return_mean()
        if stop.episode_return_mean is not None and ret is not None and len(self.counters.recent_returns) >= RETURN_WINDOW:
            if ret >= stop.episode_return_mean:
                return "episode_return_mean"
        if stop.env_steps is not None and self.counters.env_steps >= stop.env_steps:
            return "env_steps"
        if stop.time_s is not None and elapsed >= stop.time_s:
            return "time_s"
        return None

    def _track_faults(self, metrics: dict) -> None:
        for index, incarnation in metrics["worker_incarnations"]:
            known = self.incarnations.setdefault(index, incarnation)
            if known != incarnation:
                self.worker_restarts += 1
                self.incarnations[index] = incarnation
                self.console.print(f"[yellow]worker-{index} was restarted (restart {self.worker_restarts}); it resumed with the current weights[/yellow]")
        self.env_errors += metrics["env_errors"]
        for message in metrics["env_error_messages"][:1]:
            self.console.print(f"[yellow]env error (reset and masked): {escape(message)}[/yellow]")

    def _record(self, metrics: dict, iter_s: float, elapsed: float, loop_steps: int, loop_s: float) -> dict:
        self._track_faults(metrics)
        c = self.counters
        c.iteration += 1
        c.env_steps += metrics["env_steps"]
        c.episodes += len(metrics["episode_returns"])
        c.recent_returns.extend(metrics["episode_returns"])
        c.recent_lengths.extend(metrics["episode_lengths"])
        ret = c.return_mean()
        target = self.config.stop.episode_return_mean
        if c.solved_at_s is None and target is not None and ret is not None and ret >= target:
            c.solved_at_s = round(elapsed, 3)
        row = {
            "iteration": c.iteration,
            "env_steps": c.env_steps,
            "time_s": round(elapsed, 4),
            "sps": metrics["env_steps"] / max(iter_s, 1e-9),
            "sps_avg": loop_steps / max(loop_s, 1e-9),
            "sample_s": metrics["sample_s"],
            "learn_s": metrics["learn_s"],
            "policy_s": metrics["policy_s"],
            "episode_return_mean": ret,
            "episode_len_mean": float(np.mean(c.recent_lengths)) if c.recent_lengths else None,
            "episodes": c.episodes,
            "worker_restarts": self.worker_restarts,
            "env_errors_total": self.env_errors,
        }
        for key, value in metrics.items():
            if key not in row and not isinstance(value, list):
                row[key] = value
        return row

    def _checkpoint(self) -> Path:
        learner_state = ray.get(self.learners[0].state.remote())
        payload = {"counters": self.counters.state(), "learner": learner_state, "config": self.config.model_dump(mode="json")}
        return save_checkpoint(self.run_dir, self.counters.iteration, payload, self.config.checkpoint.keep)

    def run(self, address: str | None = None, launch: float | None = None) -> dict:
        """Train until a stop condition; ``launch`` (perf_counter) is when the command started."""
        launch = time.perf_counter() if launch is None else launch
        local = connect_ray(address)
        problems = impossible_requests(self.config)
        if problems and local:  # a local Ray cannot grow: say so now
            raise PlacementError("; ".join(problems))
        for problem in problems:  # an autoscaling cluster may still provide it: wait, visibly
            self.console.print(f"[yellow]not yet available, waiting for the autoscaler: {escape(problem)}[/yellow]")
        self._create_actors()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(config_to_yaml(self.config))
        (self.run_dir / "placement.json").write_text(json.dumps(self.placement, indent=2) + "\n")
        if self.resume:
            self._truncate_metrics()
        self._print_summary(local)
        metrics_writer = MetricsWriter(self.run_dir, self.config.logging.tensorboard)
        progress = ProgressReporter(self.config, self.console)
        previous_sigterm = signal.signal(signal.SIGTERM, _raise_interrupt)
        stop_reason = None
        failure: EnvFailure | None = None
        loop_start = time.perf_counter()
        loop_steps_start = self.counters.env_steps
        try:
            stop_reason = self._loop(launch, loop_start, loop_steps_start, metrics_writer, progress)
        except KeyboardInterrupt:
            stop_reason = "interrupted"
        except EnvFailure as exc:  # Ray re-raises the worker's EnvFailure as a subclass of it
            failure = EnvFailure(str(getattr(exc, "cause", None) or exc).strip().splitlines()[-1])
            stop_reason = "env_failure"
        finally:
            progress.close()
            signal.signal(signal.SIGTERM, previous_sigterm)
        wall = self.counters.time_s + (time.perf_counter() - launch)
        self.counters.time_s = wall
        checkpoint = self._checkpoint()
        metrics_writer.close()
        loop_s = time.perf_counter() - loop_start
        summary = {
            "env_steps": self.counters.env_steps,
            "iterations": self.counters.iteration,
            "wall_s": round(wall, 3),
            "sps": round(self.counters.env_steps / max(wall, 1e-9), 1),
            "train_sps": round((self.counters.env_steps - loop_steps_start) / max(loop_s, 1e-9), 1),
            "episode_return_mean": self.counters.return_mean(),
            "solved_at_s": self.counters.solved_at_s,
            "stop_reason": stop_reason,
            "checkpoint": str(checkpoint),
            "policy_backend": self.backend_info["backend"],
            "worker_restarts": self.worker_restarts,
            "env_errors": self.env_errors,
        }
        tmp = self.run_dir / ".summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2) + "\n")
        os.replace(tmp, self.run_dir / "summary.json")
        for actor in self.workers + self.learners:
            ray.kill(actor)
        ray.util.remove_placement_group(self.placement_group)
        if failure is not None:
            raise failure
        return summary

    def _truncate_metrics(self) -> None:
        """Drop metrics rows written after the checkpoint a resumed run restarts from."""
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return
        keep = [line for line in path.read_text().splitlines() if line and json.loads(line)["iteration"] <= self.counters.iteration]
        tmp = path.with_name(".metrics.jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in keep))
        os.replace(tmp, path)

    def _loop(self, launch, loop_start, loop_steps_start, metrics_writer, progress) -> str:
        cfg = self.config
        overlap = cfg.rollout.pipeline == "overlap"
        weights_ref = self.learners[0].get_weights.remote()
        batch_refs = [w.sample.remote(weights_ref) for w in self.workers]
        while True:
            iter_start = time.perf_counter()
            results = [
                learner.update_and_get_weights.options(num_returns=2).remote(*batch_refs) for learner in self.learners
            ]
            metrics_ref, new_weights_ref = results[0]
            # overlap: sample the next batch with the weights the learner is updating away from (lag 1);
            # sync: queue it on the new weights, so workers start the moment the update lands.
            batch_refs = [w.sample.remote(weights_ref if overlap else new_weights_ref) for w in self.workers]
            weights_ref = new_weights_ref
            metrics = ray.get(metrics_ref)
            if len(results) > 1:
                ray.get([m for m, _ in results[1:]])
            now = time.perf_counter()
            elapsed = self.counters.time_s + (now - launch)
            row = self._record(
                metrics,
                now - iter_start,
                elapsed,
                self.counters.env_steps + metrics["env_steps"] - loop_steps_start,
                now - loop_start,
            )
            metrics_writer.write(row)
            progress.update(row)
            reason = self._stop_reason(elapsed)
            if reason is not None:
                return reason
            every = cfg.checkpoint.every_iterations
            if every and self.counters.iteration % every == 0:
                self._checkpoint_at(elapsed)

    def _checkpoint_at(self, elapsed: float) -> None:
        # Counters.time_s holds earlier segments only; a checkpoint records the full elapsed time.
        saved = self.counters.time_s
        self.counters.time_s = elapsed
        try:
            self._checkpoint()
        finally:
            self.counters.time_s = saved


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
