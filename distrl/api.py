"""distrl from Python: ``train`` a config, ``load_policy`` from a checkpoint. The command line calls these.

    import distrl
    result = distrl.train("configs/cartpole.yaml", overrides={"seed": 1})
    policy = distrl.load_policy(result.best_checkpoint)
    actions, _ = policy.predict(observations)

Used as a library, ``train`` joins a Ray the caller started with ``ray.init()`` (and leaves it
running); a Ray it starts itself it shuts down when the run ends. It logs through the
``distrl`` logger of the standard ``logging`` module and installs signal handlers only when
called from the main thread.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distrl.common.text import fit, fit_command, screen_width, shown
from distrl.config import Config, load_config


class UsageError(Exception):
    """A bad argument (run directory, resume target), said in one line."""


@dataclass(frozen=True)
class TrainResult:
    """What a finished run reports (the fields of its ``summary.json``, which ``summary`` holds whole)."""

    run_dir: Path
    stop_reason: str | None
    env_steps: int
    iterations: int
    wall_s: float
    sps: float
    episode_return_mean: float | None
    solved_at_s: float | None
    checkpoint: Path | None
    best_checkpoint: Path | None
    config: Config = field(repr=False)
    summary: dict = field(repr=False)

    def __str__(self) -> str:
        """What ``print(result)`` shows: the run's end block without the next commands (why it stopped, steps and
        time, the return, the best checkpoint, the run's directory)."""
        return final_report(self, commands=False)

    @classmethod
    def from_summary(cls, run_dir: Path, config: Config, summary: dict) -> TrainResult:
        def path(key: str) -> Path | None:
            return Path(summary[key]) if summary.get(key) else None

        return cls(
            run_dir=Path(run_dir),
            stop_reason=summary["stop_reason"],
            env_steps=summary["env_steps"],
            iterations=summary["iterations"],
            wall_s=summary["wall_s"],
            sps=summary["sps"],
            episode_return_mean=summary["episode_return_mean"],
            solved_at_s=summary["solved_at_s"],
            checkpoint=path("checkpoint"),
            best_checkpoint=path("best_checkpoint"),
            config=config,
            summary=summary,
        )


BEST_BY = {"eval_return_mean": "evaluation", "episode_return_mean": "return"}  # the end block's words for its score


def _stopped(result) -> str:
    """Why the run ended, in words, with the stop rule's value."""
    stop = result.config.stop
    reason = result.stop_reason
    if reason == "env_steps":
        return f"the step budget ({stop.env_steps:,} env steps) reached"
    if reason == "time_s":
        return f"the time budget ({stop.time_s:g} s) reached"
    if reason == "episode_return_mean":
        at = f" at {result.solved_at_s:.1f} s" if result.solved_at_s is not None else ""
        return f"the return target ({stop.episode_return_mean:g}) met{at}"
    if reason == "eval_return_mean":
        return f"the evaluation's target ({stop.eval_return_mean:g}) met"
    if reason == "interrupted":
        return "interrupted; the final checkpoint is written" if result.checkpoint else "interrupted"
    return str(reason)


def _train_on(result) -> str:
    """The override a resume needs to train past the stop that ended the run (none for an interrupted one)."""
    stop = result.config.stop
    if result.stop_reason == "episode_return_mean":
        return " --set stop.episode_return_mean=null"
    if result.stop_reason == "eval_return_mean":
        return " --set stop.eval_return_mean=null"
    if result.stop_reason == "env_steps":
        return f" --set stop.env_steps={2 * stop.env_steps}"
    if result.stop_reason == "time_s":
        return f" --set stop.time_s={2 * stop.time_s:g}"
    return ""


def final_report(result, commands: bool = True, width: int | None = None) -> str:
    """What a run ends with, a line each: why it stopped; this command's steps, time and rate (start-up included,
    where the live bar showed the current rate; a resumed run's totals on a line of their own); the return; the best
    checkpoint and what chose it; where the run is; and the commands that come next, with the run's path. Every
    line fits ``width`` (the terminal's, 80 where unknown), broken at word breaks; a command with a shell
    continuation."""
    command = result.summary.get("this_command") or {
        "env_steps": result.env_steps,
        "wall_s": result.wall_s,
        "sps": result.sps,
        "resumed_at_env_steps": None,
    }
    steps = f"{command['env_steps']:,} env steps in {command['wall_s']:.1f} s ({command['sps']:,.0f} steps/s)"
    ret = result.episode_return_mean
    lines = [f"done: {_stopped(result)}", f"  steps    {steps}"]
    if command["resumed_at_env_steps"] is not None:  # a resumed run: this command's part, then the run's whole
        lines.append(f"  total    {result.env_steps:,} env steps in {result.wall_s:.1f} s (the whole run)")
    lines.append(f"  return   {'-' if ret is None else f'{ret:.1f}'} (mean of the last 100 episodes)")
    score = result.summary.get("best_checkpoint_score")
    if result.best_checkpoint is not None:
        by = BEST_BY.get(result.summary.get("best_checkpoint_metric"), "newest")
        of = f" ({by} {score:.4g})" if score is not None else " (the newest)"
        best = f"  best     {shown(result.best_checkpoint)}"
        room = width or screen_width()
        too_long = room is not None and len(best + of) > room
        lines += [best, " " * 11 + of.strip()] if too_long else [best + of]  # what chose it on a line of its own
    lines.append(f"  run      {shown(result.run_dir)}")
    lines = [fit(line, width) for line in lines]
    if commands and result.checkpoint is not None:
        run = shown(result.run_dir)
        lines.append("next:")
        for next_command in (
            f"  distrl eval {run}",
            f"  distrl export {run} policy.onnx",
            f"  distrl plot {run} --out curve.png",
            f"  distrl train --resume {run}" + _train_on(result),
        ):
            lines.append(fit_command(next_command, width))
    return "\n".join(lines)


def default_run_dir(env_id: str) -> Path:
    name = env_id.replace("/", "_").replace(":", "_")
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def train(
    config: str | Path | Mapping | Config | None = None,
    *,
    overrides: Sequence[str] | Mapping[str, Any] | None = None,
    run_dir: str | Path | None = None,
    storage: str | None = None,
    resume: str | Path | None = None,
    address=None,
    trusted_envs: Collection[str] = (),
    trusted_models: Collection[str] = (),
    console=None,
    launch: float | None = None,
    progress: bool | None = None,
    verbose: bool = False,
) -> TrainResult:
    """Train until the config's stop rule; returns the run's summary and its checkpoints' paths.

    ``config``: a YAML path, a dict of sections, or a ``Config`` (with ``resume``, optional: the
    run's own config.yaml). ``overrides``: ``["ppo.lr=1e-3", ...]`` or ``{"ppo.lr": 1e-3}``.
    ``run_dir``: a new or empty directory (default ``runs/ENV-TIMESTAMP``). ``storage``: mirror the
    run to ``URI/RUN_NAME`` (a path, s3://, gs://). ``resume``: a run directory or its storage URI
    to continue. ``address``: a Ray cluster to join (default: a Ray this process already
    initialised, else ``RAY_ADDRESS``, else a private one). ``trusted_envs``: env factories
    (``module:callable``) a config file may name and distrl may import; ``trusted_models`` the same for
    encoders (``model.encoder``). A YAML file's env factory and encoder must be named there (or in an
    override); a dict or ``Config`` built by the caller is the caller's own.
    ``progress``: print the start-up summary and the live progress as ``distrl train`` does (a bar on a
    terminal or in a notebook, lines elsewhere); default: where a person watches (a terminal, a notebook).
    False: print nothing. ``verbose``: the start-up summary in full, every ``auto`` choice and why (the run's
    ``setup.txt`` holds it either way). A caller whose logging already handles distrl's records (a handler on the
    ``distrl`` logger or the root one) keeps it.
    Errors a user can fix raise ``ConfigError``, ``UsageError``, ``EnvSpecError`` or ``PlacementError``
    before Ray starts, with nothing written.
    """
    launch = time.perf_counter() if launch is None else launch
    target = _target(address)  # before anything imports ray: it reads its auth settings then
    from distrl.config.trust import check_code_trust, named_code
    from distrl.driver import Driver
    from distrl.driver.storage import RunStorage, is_uri

    overrides = _as_override_list(overrides) + ([f"storage.uri={storage}"] if storage else [])
    fetched = None
    if resume is not None and is_uri(str(resume)):
        # A run mirrored under a storage URI: fetch it into a local directory and go on mirroring there.
        uri = str(resume).rstrip("/")
        fetched = RunStorage(uri)
        run_dir = Path(run_dir or Path("runs") / uri.rsplit("/", 1)[-1])
        fetched.fetch_run(run_dir)
        overrides.append(f"storage.uri={uri.rsplit('/', 1)[0]}")
        config = config if config is not None else run_dir / "config.yaml"
    elif resume is not None:
        resume = Path(resume)
        if resume.is_file():
            raise UsageError(
                f"--resume={str(resume)!r}: give the run directory (it holds checkpoints/), not a checkpoint file"
            )
        if not resume.is_dir():
            raise UsageError(f"--resume={str(resume)!r}: no such run directory")
        if not (resume / "config.yaml").is_file() and not any((resume / "checkpoints").glob("ckpt_*.pt")):
            raise UsageError(
                f"--resume={str(resume)!r}: not a run directory (no config.yaml, no checkpoints/); give the directory "
                "a run was trained into"
            )
        if run_dir is not None and Path(run_dir) != resume:
            raise UsageError("--run-dir: cannot be combined with --resume RUN_DIR (the run continues in RUN_DIR)")
        run_dir = resume
        config = config if config is not None else resume / "config.yaml"
    elif config is None:
        raise UsageError("train: give a CONFIG file, or --resume RUN_DIR")
    cfg = load_config(config, overrides)
    if isinstance(config, (str, Path)):  # a file may have come from anyone: its code must be named
        named = [*trusted_envs, *trusted_models, *named_code(overrides)]
        check_code_trust(cfg, named, f"config {str(config)!r}")
    run_dir = Path(run_dir or default_run_dir(cfg.env.id))
    if resume is None:
        check_new_run_dir(run_dir)
    check_writable(run_dir, "--run-dir")
    run_storage = fetched
    if run_storage is None and cfg.storage.uri is not None:
        run_storage = RunStorage(f"{cfg.storage.uri.rstrip('/')}/{run_dir.name}")
    if run_storage is not None:
        run_storage.check_writable()  # before Ray starts: a bad URI or missing permission is one line now
    import ray

    from distrl.common import log

    started_ray = not ray.is_initialized()
    handler = None
    if progress is False:
        cfg = cfg.model_copy(update={"logging": cfg.logging.model_copy(update={"progress": "off"})})
    elif console is None and not log.caller_handles() and (progress or log.interactive()):
        handler = log.install_cli_handler()  # the CLI's output, for this call
        console = log.cli_console()
    try:
        driver = Driver(cfg, run_dir, console=console, resume=resume is not None, storage=run_storage, verbose=verbose)
        summary = driver.run(target, launch=launch)
    finally:
        if started_ray and ray.is_initialized():  # a Ray this call started goes with it; the caller's stays
            ray.shutdown()
        if started_ray:  # and all of it, even where a stop came while it started (its agents would linger a minute)
            _stop_ray_children()
        if handler is not None:
            log.remove_cli_handler(handler)
    result = TrainResult.from_summary(run_dir, cfg, summary)
    if handler is not None:  # as distrl train ends
        print(final_report(result))
    return result


def _stop_ray_children(wait_s: float = 3.0) -> None:
    """End the Ray processes this process started that are still running (its GCS, raylet, dashboard and agents,
    workers): the ones ``ray.shutdown`` did not reach because a stop came while Ray was starting. Only this
    process's own children, and only Ray's (by their command line): never another Ray, nor a caller's own."""
    import psutil

    def is_ray(proc) -> bool:
        try:
            line = " ".join(proc.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return False
        return "/ray/" in line or line.startswith("ray::")

    leftovers = [proc for proc in psutil.Process().children(recursive=True) if is_ray(proc)]
    for proc in leftovers:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(leftovers, timeout=wait_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def _target(address: str | None):
    """Which Ray: None for one this process already joined (connect_ray uses it as it is), else as
    ``resolve_target`` decides, within seconds, before ray is imported (a private Ray's settings are made then)."""
    import sys

    from distrl.driver.connection import prepare_private_ray_environment, resolve_target

    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        return None
    target = resolve_target(address)
    if target.private and "ray" not in sys.modules:  # (a caller who imported ray already chose its settings)
        prepare_private_ray_environment()
    return target


def _as_override_list(overrides) -> list[str]:
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        import yaml

        # A value as YAML flow text reads back as the same value (lists, dicts, null, numbers, strings).
        return [
            f"{key}={yaml.safe_dump(value, default_flow_style=True, width=10**9).strip().removesuffix('...').strip()}"
            for key, value in overrides.items()
        ]
    if isinstance(overrides, str):
        raise UsageError(f"overrides={overrides!r}: give a list of key.path=value strings or a dict")
    return list(overrides)


def check_new_run_dir(run_dir: Path) -> None:
    """A new run never writes into a directory that holds anything: nothing of a user's is overwritten or mixed."""
    if (run_dir / "checkpoints").exists():
        raise UsageError(f"--run-dir={str(run_dir)!r}: already holds a run; use --resume {run_dir} to continue it")
    if run_dir.is_file():
        raise UsageError(f"--run-dir={str(run_dir)!r}: is a file; give a new or empty directory")
    if run_dir.is_dir() and any(run_dir.iterdir()):
        held = ", ".join(sorted(p.name for p in run_dir.iterdir())[:4])
        raise UsageError(
            f"--run-dir={str(run_dir)!r}: not empty (holds {held}); give a new or empty directory, "
            f"or --resume it if it holds a run"
        )


def check_writable(directory: Path, key: str) -> None:
    """Write (and remove) a probe file in ``directory`` or its nearest existing parent now, before Ray starts."""
    import tempfile

    existing = Path(directory).resolve()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(20, "a file is in the way")
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".distrl-probe-"):
            pass
    except OSError as exc:
        raise UsageError(f"{key}={str(directory)!r}: cannot write there ({exc.strerror or exc})") from None


def load_policy(
    checkpoint: str | Path,
    *,
    env_id: str | None = None,
    trusted_envs: Collection[str] = (),
    trusted_models: Collection[str] = (),
    policy: str | None = None,
    which: str = "best",
):
    """The policy in ``checkpoint`` (a file, or a run directory: its best checkpoint, or its newest with ``which``
    latest), acting on numpy observations; ``policy`` names one of a run's several trained policies
    (``agents.policies``).

    Returns a ``distrl.deploy.Policy``: ``predict(obs, state=None, episode_start=None, deterministic=True)
    -> (actions, state)`` as in Stable-Baselines3. The checkpoint is data: nothing in it is executed, an
    env factory it names is imported only when in ``trusted_envs`` (or given as ``env_id``), and an encoder
    (``model.encoder``) only when in ``trusted_models``.
    """
    from distrl.deploy.policy import Policy

    trusted = [*trusted_envs, *trusted_models]
    return Policy.from_checkpoint(checkpoint, env_id=env_id, trusted_envs=trusted, policy=policy, which=which)
