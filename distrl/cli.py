"""``distrl`` command line: train, eval, export.

User errors (bad config, bad checkpoint, impossible placement) print one line per problem
to stderr and exit with code 2; nothing is written for them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def _default_run_dir(env_id: str) -> Path:
    name = env_id.replace("/", "_").replace(":", "_")
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _cmd_train(args) -> int:
    from distrl.config import load_config
    from distrl.driver import Driver
    from distrl.driver.storage import RunStorage, is_uri
    from distrl.envs import check_env_trust

    if args.config is None and args.resume is None:
        raise _UsageError("train: give a CONFIG file, or --resume RUN_DIR")
    overrides = list(args.set) + ([f"storage.uri={args.storage}"] if args.storage else [])
    storage = None
    if args.resume is not None and is_uri(args.resume):
        # A run mirrored under a storage URI: fetch it into a local directory and go on mirroring there.
        storage = RunStorage(args.resume)
        run_dir = Path(args.run_dir or Path("runs") / args.resume.rstrip("/").rsplit("/", 1)[-1])
        storage.fetch_run(run_dir)
        config_path = args.config or run_dir / "config.yaml"
        overrides.append(f"storage.uri={args.resume.rstrip('/').rsplit('/', 1)[0]}")
    elif args.resume is not None:
        run_dir = Path(args.resume)
        if run_dir.is_file():
            raise _UsageError(f"--resume={args.resume!r}: give the run directory (it holds checkpoints/), not a checkpoint file")
        if not run_dir.is_dir():
            raise _UsageError(f"--resume={args.resume!r}: no such run directory")
        if args.run_dir is not None and Path(args.run_dir) != run_dir:
            raise _UsageError("--run-dir: cannot be combined with --resume RUN_DIR (the run continues in RUN_DIR)")
        config_path = args.config or run_dir / "config.yaml"
    else:
        config_path = args.config
    config = load_config(config_path, overrides)
    check_env_trust(config.env.id, _named_envs(args), f"config {str(config_path)!r}")
    if args.resume is None or not is_uri(args.resume):
        run_dir = Path(args.resume or args.run_dir or _default_run_dir(config.env.id))
    if args.resume is None:
        _check_new_run_dir(run_dir)
    _check_writable(run_dir, "--run-dir")
    if storage is None and config.storage.uri is not None:
        storage = RunStorage(f"{config.storage.uri.rstrip('/')}/{run_dir.name}")
    if storage is not None:
        storage.check_writable()  # before Ray starts: a bad URI or missing permission is one line now
    driver = Driver(config, run_dir, resume=args.resume is not None, storage=storage)
    summary = driver.run(args.target, launch=args.launch)
    ret = summary["episode_return_mean"]
    print(
        f"done: {summary['stop_reason']} | {summary['env_steps']:,} env steps in {summary['wall_s']:.1f} s "
        f"({summary['sps']:,.0f} steps/s) | return {'-' if ret is None else f'{ret:.1f}'} | "
        f"solved at {summary['solved_at_s']} s | {run_dir}"
    )
    return EXIT_INTERRUPTED if summary["stop_reason"] == "interrupted" else 0


def _named_envs(args) -> list[str]:
    """Env ids the user named on this command line (``--set env.id=ID``, ``--trust-env ID``): trusted to import."""
    return [a.partition("=")[2].strip() for a in args.set if a.partition("=")[0].strip() == "env.id"] + args.trust_env


def _check_new_run_dir(run_dir: Path) -> None:
    """A new run never writes into a directory that holds anything: nothing of a user's is overwritten or mixed."""
    if (run_dir / "checkpoints").exists():
        raise _UsageError(f"--run-dir={str(run_dir)!r}: already holds a run; use --resume {run_dir} to continue it")
    if run_dir.is_file():
        raise _UsageError(f"--run-dir={str(run_dir)!r}: is a file; give a new or empty directory")
    if run_dir.is_dir() and any(run_dir.iterdir()):
        held = ", ".join(sorted(p.name for p in run_dir.iterdir())[:4])
        raise _UsageError(f"--run-dir={str(run_dir)!r}: not empty (holds {held}); give a new or empty directory, "
                          f"or --resume it if it holds a run")  # fmt: skip


def _check_writable(directory: Path, key: str) -> None:
    """Write (and remove) a probe file in ``directory`` or its nearest existing parent now, before Ray starts."""
    import tempfile

    existing = directory.resolve()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(20, "a file is in the way")
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".distrl-probe-"):
            pass
    except OSError as exc:
        raise _UsageError(f"{key}={str(directory)!r}: cannot write there ({exc.strerror or exc})") from None


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text}")
    return value


def _cmd_eval(args) -> int:
    from distrl.deploy import evaluate

    returns = evaluate(args.checkpoint, episodes=args.episodes, deterministic=not args.stochastic, seed=args.seed,
                       env_id=args.env, trusted_envs=args.trust_env)  # fmt: skip
    print(f"{len(returns)} episodes: return mean {returns.mean():.2f} std {returns.std():.2f} (min {returns.min():.1f}, max {returns.max():.1f})")
    return 0


def _cmd_export(args) -> int:
    from distrl.deploy import export_onnx

    out = Path(args.out)
    if out.is_dir():
        raise _UsageError(f"out={args.out!r}: is a directory; give a file path such as {out / 'policy.onnx'}")
    _check_writable(out.parent if str(out.parent) else Path("."), "out")
    info = export_onnx(args.checkpoint, out, env_id=args.env, trusted_envs=args.trust_env)
    print(f"wrote {info['path']}: inputs {info['inputs']}, outputs {info['outputs']}; max |onnx - torch| = {info['max_abs_diff']:.2e}")
    return 0


def _cmd_diagnose(args) -> int:
    import json

    from rich.console import Console

    from distrl import diagnose
    from distrl.config import load_config
    from distrl.envs import check_env_trust

    config = load_config(args.config, args.set)
    check_env_trust(config.env.id, _named_envs(args), f"config {args.config!r}")
    report = diagnose.run(config, quick=args.quick)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        diagnose.print_report(report, Console(soft_wrap=True))
    return 0


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse, answering a bad argument with one line and exit code 2 (not the usage block)."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="distrl", description="Distributed PPO on Ray.")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a policy from a YAML config")
    train.add_argument("config", nargs="?", help="YAML config (optional with --resume: the run's config.yaml)")
    train.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a config value")
    train.add_argument("--run-dir", help="where to write the run (default runs/ENV-TIMESTAMP)")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its newest checkpoint (a run "
                       "directory, or the run's storage URI, e.g. s3://bucket/runs/NAME, from any machine)")  # fmt: skip
    trust = "import and call this env factory (package.module:callable) named by the config or checkpoint"
    train.add_argument("--trust-env", action="append", default=[], metavar="ID", help=trust)
    train.add_argument("--storage", metavar="URI", help="mirror the run to URI/RUN_NAME: a path, s3://, gs:// "
                       "(sets storage.uri)")  # fmt: skip
    train.add_argument("--address", help="Ray cluster to join; 'local' starts a private Ray (default: RAY_ADDRESS, "
                       "else a live cluster started with `ray start` on this machine, else a private Ray)")  # fmt: skip
    train.set_defaults(func=_cmd_train)

    ev = sub.add_parser("eval", help="play episodes with a trained policy")
    ev.add_argument("checkpoint", help="checkpoint file or run directory")
    ev.add_argument("--episodes", type=_positive_int, default=10)
    ev.add_argument("--env", metavar="ID", help="play in this env instead of the checkpoint's (a factory named here is trusted)")
    ev.add_argument("--trust-env", action="append", default=[], metavar="ID", help=trust)
    ev.add_argument("--stochastic", action="store_true", help="sample actions instead of taking the most likely")
    ev.add_argument("--seed", type=int, default=12345)
    ev.set_defaults(func=_cmd_eval)

    ex = sub.add_parser("export", help="write the trained policy as an ONNX model")
    ex.add_argument("checkpoint", help="checkpoint file or run directory")
    ex.add_argument("out", help="output .onnx path")
    ex.add_argument("--env", metavar="ID", help="build the policy for this env instead of the checkpoint's")
    ex.add_argument("--trust-env", action="append", default=[], metavar="ID", help=trust)
    ex.set_defaults(func=_cmd_export)

    dg = sub.add_parser("diagnose", help="versions, hardware, backends and measured rates for a config")
    dg.add_argument("config", nargs="?", help="YAML config whose env and model to measure (default: CartPole)")
    dg.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE")
    dg.add_argument("--json", action="store_true", help="print the report as JSON")
    dg.add_argument("--quick", action="store_true", help="shorter measurements")
    dg.add_argument("--trust-env", action="append", default=[], metavar="ID", help=trust)
    dg.set_defaults(func=_cmd_diagnose)
    return parser


def main(argv: list[str] | None = None) -> int:
    launch = time.perf_counter()
    args = build_parser().parse_args(argv)
    args.launch = launch
    if args.command == "train":
        from distrl.driver.connection import ConnectionProblem, resolve_target

        try:  # which Ray, decided before anything imports ray (and within seconds, even for a dead cluster)
            args.target = resolve_target(args.address)
        except ConnectionProblem as exc:
            print(f"distrl: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if args.target.private:
            # A private Ray gets token authentication (Ray's default for local clusters). Ray reads this when it
            # is imported, so it is set before anything imports ray; saying so also keeps Ray's notice quiet.
            os.environ.setdefault("RAY_AUTH_MODE", "token")
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # a private run reports nothing off this machine
        # Tasks the driver abandons when a run stops (the next samples) would print Ray's "Unhandled error"
        # dumps ahead of distrl's own one-line answer; every error distrl waits on is reported by distrl.
        os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
    from distrl.common.checkpoint import CheckpointError
    from distrl.config import ConfigError
    from distrl.driver import PlacementError
    from distrl.driver.storage import StorageError
    from distrl.envs import EnvFailure, EnvSpecError

    try:
        return args.func(args)
    except ConfigError as exc:
        for line in exc.lines:
            print(f"distrl: config error: {line}", file=sys.stderr)
        return EXIT_USAGE
    except (CheckpointError, PlacementError, EnvSpecError, EnvFailure, StorageError, _UsageError) as exc:
        print(f"distrl: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("distrl: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
