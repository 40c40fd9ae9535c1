"""What a run tells its user: the start-up summary, one metrics row per iteration, and ``summary.json``.

Worker statistics come straight from the workers' ``info`` objects (never relayed by a
learner); learner statistics from the learner's metrics. Both meet here, in the row.
"""

from __future__ import annotations

import numpy as np

from distrl.config import Config
from distrl.data.messages import SampleInfo, UpdateResult, info_metrics
from distrl.driver.connection import RayTarget
from distrl.driver.run_state import RunState
from distrl.envs.kinds import describe_run_env


def backends_in_use(names: list[str]) -> str:
    """The worker policy backend, or every distinct one joined by '+' when workers differ (after a fallback)."""
    return "+".join(sorted(set(names)))


def iteration_row(
    run: RunState, infos: list[SampleInfo], update: UpdateResult, iter_s: float, elapsed_s: float, sps_avg: float
) -> dict:
    """The metrics row of the iteration ``run`` has just counted."""
    row = {
        "iteration": run.iteration,
        "env_steps": run.env_steps,
        "time_s": round(elapsed_s, 4),
        "sps": sum(info.env_steps for info in infos) / max(iter_s, 1e-9),
        "sps_avg": sps_avg,
        "sample_s": float(np.mean([info.sample_s for info in infos])),
        "learn_s": update.learn_s,
        "policy_s": float(np.mean([info.policy_s for info in infos])),
        "env_s": float(np.mean([info.env_s for info in infos])),
        "episode_return_mean": run.return_mean(),
        **{f"{name}/episode_return_mean": mean for name, mean in run.policy_return_means().items()},
        "episode_len_mean": run.length_mean(),
        "episodes": run.episodes,
        "worker_restarts": run.worker_restarts,
        "learner_restarts": run.learner_restarts,
        "env_errors_total": run.env_errors,
        "env_nonfinite_total": run.env_nonfinite,
        "worker_timeouts": run.worker_timeouts,
        "stale_batches": run.stale_batches,
        "stale_steps": run.stale_steps,
        "workers_lost": run.workers_lost,
        "batches_lost": run.batches_lost,
        "policy_backend": backends_in_use([info.policy_backend for info in infos]),
        "worker_recompiles": max(info.recompiles for info in infos),
        "worker_graph_breaks": max(info.graph_breaks for info in infos),
        "weight_sync_checks": sum(info.weight_sync_checks for info in infos),
        "env_errors": sum(info.env_errors for info in infos),
        "env_nonfinite": sum(info.env_nonfinite for info in infos),
        "batch_bytes": sum(info.batch_bytes for info in infos),
        "workers_in_update": len({info.worker_index for info in infos}),
    }
    row.update(_info_row(infos))
    row.update(update.metrics)
    row["learner_batch_bytes"] = update.learner_batch_bytes
    row["learner_version"] = update.version
    return row


def _info_row(infos: list[SampleInfo]) -> dict:
    """``env.info_metrics`` over the iteration's finished episodes (``info_KEY_mean``, min, max, missing), and each
    trained policy's (``NAME/info_KEY_mean`` ...) where several train."""
    values: dict[str, list[float]] = {}
    missing: dict[str, int] = {}
    by_policy: dict[str, tuple[dict, dict]] = {}
    for info in infos:
        parts = [(None, info)] + [(name, part) for name, part in (info.policies or {}).items()]
        for name, part in parts:
            into_values, into_missing = (values, missing) if name is None else by_policy.setdefault(name, ({}, {}))
            for key, seen in part.episode_info.items():
                into_values.setdefault(key, []).extend(seen)
            for key, count in part.info_missing.items():
                into_missing[key] = into_missing.get(key, 0) + count
    row = info_metrics(values, missing)
    for name, (policy_values, policy_missing) in by_policy.items():
        row.update(info_metrics(policy_values, policy_missing, f"{name}/"))
    return row


def _count(n: int | str, thing: str) -> str:
    return f"{n} {thing}" + ("" if str(n) == "1" else "s")


def _placed(placement: dict[str, dict], private: bool = False) -> str:
    """Where the actors run, node by node: ``learner-0, 2 workers on 10.0.0.1; 4 workers on 10.0.0.2`` (a private
    Ray's one node is this machine)."""
    nodes: dict[str, list[str]] = {}
    for name, spot in placement.items():
        nodes.setdefault(spot["node_ip"], []).append(name)
    parts = []
    for ip, names in nodes.items():
        learners = [n for n in names if not n.startswith("worker")]
        workers = len(names) - len(learners)
        shown = learners + ([names[-1] if workers == 1 else _count(workers, "worker")] if workers else [])
        parts.append(f"{', '.join(shown)} on {'this machine' if private else ip}")
    return "; ".join(parts)


def start_screen(
    config: Config, run_dir: str, joined: RayTarget, actors, resumed: RunState | None, storage: str | None = None
) -> list[str]:
    """The start-up summary a person reads at a glance: what runs where, one short line each (the reasons for each
    ``auto`` choice are in ``start_details``)."""
    cfg = config
    lines = [f"distrl run {run_dir}" + (f", mirrored to {storage}" if storage else "")]
    lines.append(f"  ray      {joined.describe_short()}")
    workers = _count(cfg.rollout.describe_workers(), "worker")
    agents = cfg.env.agents_per_copy or 1
    slots = f" x {agents} agents" if agents > 1 else ""  # each agent of each copy a slot of the batch
    lines.append(f"  env      {cfg.env.id}: {workers} x {cfg.env.num_envs_per_worker} envs{slots}")
    lstm = f" + {cfg.model.describe_lstm()}" if cfg.model.lstm_size else ""
    counted = actors.learner_info.get("encoder_parameters")
    lines.append(f"  model    {cfg.model.describe_layers(counted)}{lstm}")
    used = backends_in_use([i["backend"] for i in actors.backend_infos])
    requested = actors.backend_infos[0]["requested"]
    if requested not in ("auto", used):  # a backend asked for by name and not given is said at a glance
        used += f" (requested {requested})"
    lines.append(
        f"  rollout  pipeline {cfg.rollout.pipeline}, {cfg.rollout.rollout_length} steps/env, policy backend {used}"
    )
    learners = f"{cfg.learner.num_learners} x {actors.learner_device}"
    lines.append(
        f"  learner  {learners}, batch {cfg.update_size:,} (minibatch {cfg.ppo.minibatch_size:,} x "
        f"{_count(cfg.ppo.epochs, 'epoch')})"
    )
    stops = {
        "env_steps": lambda v: f"{v:,} env steps",
        "time_s": lambda v: f"{v:g} s",
        "episode_return_mean": lambda v: f"return {v:g}",
    }
    chosen = [stops[k](v) for k, v in cfg.stop.model_dump().items() if v is not None]
    lines.append(f"  stop     {' or '.join(chosen) or 'never (Ctrl-C)'}; seed {cfg.seed}")
    lines.append(f"  placed   {_placed(actors.placement, joined.private)}")
    if resumed is not None:
        lines.append(f"  resuming at iteration {resumed.iteration}, {resumed.env_steps:,} env steps")
    return lines


def choice_lines(config: Config, backend_infos: list[dict], learner_info: dict, learner_device: str) -> list[str]:
    """What decides the run's speed, each ``auto`` choice with its reason: the env and its vector env, the workers'
    policy (backend, form, env groups), the learner (step, kernels, precision, layout, threads). ``backend_infos``:
    each worker's ``backend_info()``; ``learner_info``: rank 0's ``describe()``."""
    cfg = config
    lines: list[str] = []
    say = lines.append
    # said once, here: what auto chose and why (a league's game table is its own vector env)
    vectorization = describe_run_env(cfg)
    say(
        f"  env      {cfg.env.id}: {cfg.rollout.describe_workers()} workers x {cfg.env.num_envs_per_worker} envs "
        f"({vectorization}), action_repeat {cfg.env.action_repeat}, normalize {cfg.env.describe_normalize()}"
    )
    lstm = f", {cfg.model.describe_lstm()}" if cfg.model.lstm_size else ""
    counted = (learner_info or {}).get("encoder_parameters")
    say(f"  model    {cfg.model.describe_layers(counted)}, shared_trunk {cfg.model.shared_trunk}{lstm}")
    info = backend_infos[0]
    used = backends_in_use([i["backend"] for i in backend_infos])
    backend = used if used == info["requested"] else f"{used} (requested {info['requested']})"
    shared = ", artifacts shared" if info["shared_artifacts"] else ""
    if all(i.get("without_torch") for i in backend_infos):  # the export and its check shipped
        shared += ", built without torch"
    say(
        f"  rollout  {cfg.rollout.rollout_length} steps/env, pipeline {cfg.rollout.pipeline}, "
        f"{cfg.rollout.num_cpus_per_worker:g} CPU"
        + (f" + {cfg.rollout.num_gpus_per_worker:g} GPU" if cfg.rollout.num_gpus_per_worker else "")
        + f"/worker, policy backend {backend} "
        f"(ready in {info['startup_s']:.2f} s{shared})"
    )
    if cfg.rollout.ready_envs:  # rollout.ready_envs: no groups, each copy acted on as it becomes ready
        say(f"           env copies: {info['env_stepping']} (rollout.ready_envs)")
    else:
        groups = (
            f"{info['env_groups']} groups of {cfg.env.num_envs_per_worker // info['env_groups']} envs"
            if info["env_groups"] > 1
            else "1 group (step, act, step)"
        )
        chosen = f", chosen by auto: {info['env_groups_reason']}" if info["env_groups_reason"] else ""
        say(
            f"           env groups: {groups}"
            + (f", stepped by {info['env_stepping']}" if info["env_groups"] > 1 else "")
            + chosen
        )
    forms = sorted({i["form"] for i in backend_infos})
    if forms != ["fp32, contiguous"] or len(info["timings_us"]) > 1:
        say(f"           policy form: {' + '.join(forms)} ({info['form_reason']})")
    for reason in sorted({i["reason"] for i in backend_infos if i["reason"]}):
        say(f"           {reason}")
    say(
        f"  learner  {cfg.learner.num_learners} x {learner_device}, {cfg.learner.num_gpus_per_learner:g} "
        "GPU/learner, "
        f"batch {cfg.update_size}"
        + (
            f" (async: {cfg.batches_per_update} workers' batches, "
            "as many as their cores sample at once, not a round; rollout.samples_per_update auto)"
            if cfg.rollout.pipeline == "async"
            and cfg.rollout.samples_per_update == "auto"
            and cfg.update_size < cfg.batch_size
            else ""
        )
        + f", minibatch {cfg.ppo.minibatch_size}, "
        f"epochs {cfg.ppo.epochs}, ratio from the {cfg.proximal} policy"
        + (" (ppo.proximal auto, pipeline async)" if cfg.ppo.proximal == "auto" and cfg.proximal == "learner" else "")
    )
    if learner_info:
        how = {"device": "the whole step at once (learner.step device)", "loop": "op by op (learner.step loop)"}
        step = learner_info["step"]
        say(f"           minibatch step: {how.get(step, step)}: {learner_info['step_reason']}")
        lc, info = cfg.learner.compile, learner_info
        mode = (
            f", mode {lc.mode}" + (f", critic {lc.critic_mode}" if lc.critic_mode else "")
            if "inductor" in info["kernels"]
            else ""
        )
        later = ", the faster that matches the loop kept on the first update" if " or " in info["kernels"] else ""
        say(f"           kernels: {info['kernels']}{mode}{later} ({info['kernels_reason']})")
        later = ", the faster that matches the loop kept on the first update" if " or " in info["precision"] else ""
        say(f"           precision: {info['precision']}{later} ({info['precision_reason']})")
        if "memory_format" in learner_info:
            say(f"           memory format: {learner_info['memory_format']} ({learner_info['memory_format_reason']})")
        if "threads" in learner_info:
            say(f"           CPU threads: {learner_info['threads']} ({learner_info['threads_reason']})")
    return lines


def start_details(
    config: Config, run_dir: str, joined: RayTarget, actors, resumed: RunState | None, storage: str | None = None
) -> list[str]:
    """The start-up summary in full: every setting that decides the run's speed and what ``auto`` chose for it, and
    why (``setup.txt`` in the run directory; on the screen with ``--verbose``)."""
    cfg = config
    lines = [f"distrl run {run_dir}" + (f", mirrored to {storage}" if storage else "")]
    say = lines.append
    say(f"  ray      {joined.describe()}")
    lines += choice_lines(cfg, actors.backend_infos, actors.learner_info, actors.learner_device)
    stops = [f"{k}={v}" for k, v in cfg.stop.model_dump().items() if v is not None]
    say(f"  stop     {', '.join(stops)}; seed {cfg.seed}")
    where = "; ".join(
        f"{name} on {spot['node_ip']} (node {spot['node_id'][:8]})"
        + (f" GPU {spot['gpu_ids']}" if spot.get("gpu_ids") else "")
        for name, spot in actors.placement.items()
    )
    say(f"  placed   {where}")
    if resumed is not None:
        say(f"  resuming at iteration {resumed.iteration}, {resumed.env_steps:,} env steps")
    return lines


def summary(
    run: RunState, wall_s: float, train_sps: float, stop: str | None, checkpoint: str | None, worker_backends: list[str]
) -> dict:
    """The content of ``summary.json``."""
    return {
        "env_steps": run.env_steps,
        "iterations": run.iteration,
        "wall_s": round(wall_s, 3),
        "sps": round(run.env_steps / max(wall_s, 1e-9), 1),
        "train_sps": round(train_sps, 1),
        "episode_return_mean": run.return_mean(),
        **({"policy_return_means": run.policy_return_means()} if run.policy_returns else {}),
        "solved_at_s": run.solved_at_s,
        "stop_reason": stop,
        "checkpoint": checkpoint,
        "policy_backend": backends_in_use(worker_backends) if worker_backends else None,
        "worker_backends": worker_backends,
        "worker_restarts": run.worker_restarts,
        "learner_restarts": run.learner_restarts,
        "env_errors": run.env_errors,
        "env_nonfinite": run.env_nonfinite,
        "worker_timeouts": run.worker_timeouts,
        "stale_batches": run.stale_batches,
        "stale_steps": run.stale_steps,
        "workers_lost": run.workers_lost,
        "batches_lost": run.batches_lost,
        "gradient_steps": run.gradient_steps,
        "skipped_steps": run.skipped_steps,
    }


def this_command(run: RunState, resumed_at: RunState | None, command_s: float | None = None) -> dict:
    """What this command did of the run, from the run's counters at its end and where it took the run up (a resumed
    run's ``summary.json`` totals count every command's); ``command_s``: its own time from launch, start-up included
    (which a resumed run's ``time_s`` leaves out)."""
    start = resumed_at or RunState()
    wall_s = command_s if command_s is not None else run.time_s - start.time_s
    return {
        "wall_s": round(wall_s, 3),
        "env_steps": run.env_steps - start.env_steps,
        "iterations": run.iteration - start.iteration,
        "resumed_at_env_steps": start.env_steps if resumed_at else None,
        "sps": round((run.env_steps - start.env_steps) / max(wall_s, 1e-9), 1),
    }


def resumed_rate_line(config: Config, learner_state: dict) -> str:
    """The learning rate a resumed run continues with, and what its schedule does now (``distrl/algo/schedule.py``)."""
    from distrl.algo.schedule import continued  # here: the driver's way to Ray imports no torch (algo/ does)

    state = next(iter(learner_state["policies"].values())) if "policies" in learner_state else learner_state
    steps = int(state["trained_env_steps"])
    last_lr = state["optimizer"]["param_groups"][0]["lr"]
    schedule, change = continued(config.ppo, config.stop.env_steps, state.get("lr_schedule"), steps, float(last_lr))
    rate = schedule.rate(steps)
    if rate == 0.0:  # annealed to 0 already: say how to train on
        course = "annealed to 0 already (ppo.anneal_lr=false trains on at ppo.lr)"
    else:
        course = "held" if schedule.horizon is None else f"falling to 0 at {schedule.horizon:,} env steps"
    return f"  lr       continues at {rate:.3g}, {course}" + (f"\n           {change}" if change else "")


STARTUP_MILESTONES = {
    "imports": "imports",
    "env_probe": "env probe",
    "ray_start": "Ray",
    "artifacts": "export/compile",
    "workers_ready": "workers",
    "actors_ready": "learners",
    "first_batch": "first batch",
    "first_update": "first update",
}


def started_line(timeline: dict[str, float]) -> str:
    """The start-up in one short line: when the first update was done, and how much of that was Ray's own start."""
    ray_s = timeline.get("ray_start", 0.0) - timeline.get("env_probe", 0.0)
    return f"started: first update at {timeline['first_update']:.1f} s from launch (Ray's own start {ray_s:.1f} s)"


def startup_line(timeline: dict[str, float]) -> str:
    """Seconds from launch at which each start-up milestone was reached, in the order they were."""
    reached = sorted((t, STARTUP_MILESTONES[k]) for k, t in timeline.items() if k in STARTUP_MILESTONES)
    overlapped = (
        f"; the policy export took {timeline['export_s']:.1f} s while Ray started" if "export_s" in timeline else ""
    )
    return "start-up (s from launch): " + ", ".join(f"{label} {t:.1f}" for t, label in reached) + overlapped
