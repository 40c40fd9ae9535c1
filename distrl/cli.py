"""``distrl`` command line: train, eval, export, plot.

User errors (bad config, bad checkpoint, impossible placement) print one line per problem
to stderr and exit with code 2; nothing is written for them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

from distrl.api import UsageError as _UsageError  # one class for the CLI's and the API's argument errors
from distrl.api import check_writable as _check_writable
from distrl.common.checkpoint import CHOICES as CHECKPOINT_CHOICES
from distrl.common.text import fit, shown

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
TRUST_MODEL = "import and call this encoder (package.module:factory) named by the config or checkpoint"


def _cmd_train(args) -> int:
    from distrl.api import final_report, train
    from distrl.common.log import cli_console

    # The live progress bar draws on the terminal, on the console the log lines go to (so they print above it).
    console = cli_console() if sys.stdout.isatty() else None
    result = train(
        args.config,
        overrides=args.set,
        run_dir=args.run_dir,
        storage=args.storage,
        resume=args.resume,
        address=args.address,
        trusted_envs=args.trust_env,
        trusted_models=args.trust_model,
        console=console,
        launch=args.launch,
        verbose=args.verbose,
    )
    print(final_report(result))
    return EXIT_INTERRUPTED if result.stop_reason == "interrupted" else 0


def _cmd_tune(args) -> int:
    from distrl.tune import tune

    result = tune(
        args.config,
        args.search,
        overrides=args.set,
        storage_path=args.storage_path,
        name=args.name,
        address=args.address,
        trusted_envs=args.trust_env,
        trusted_models=args.trust_model,
    )
    print(f"{len(result.trials)} trials in {result.wall_s:.1f} s, experiment {result.experiment_dir}")
    for trial in sorted(
        result.trials,
        key=lambda t: (
            t["best_value"] is None,
            -(t["best_value"] or 0) if result.mode == "max" else (t["best_value"] or 0),
        ),
    ):
        value = "-" if trial["best_value"] is None else f"{trial['best_value']:.2f}"
        at = "" if trial["best_time_s"] is None else f" at {trial['best_time_s']:.1f} s"
        print(f"  {trial['trial']}: {result.metric} {value}{at}, {trial['iterations']} iterations, {trial['params']}")
    for error in result.errors:
        print(f"  error: {error}", file=sys.stderr)
    if result.best_value is None:
        print(f"no trial reported {result.metric}", file=sys.stderr)
        return 1
    print(
        f"best: {result.metric} {result.best_value:.2f} at {result.best_time_s:.1f} s of its run with "
        f"{result.best_params} "
        f"({Path(result.best_trial_dir).name}); checkpoint {result.best_checkpoint}"
    )
    return 1 if result.errors else 0


def _cmd_config_show(args) -> int:
    from distrl.config import load_config
    from distrl.config.describe import describe_config

    config = load_config(args.config, args.set)
    if args.explain:  # building the env imports it: a factory named only by the file is refused first
        from distrl.config.trust import check_code_trust

        check_code_trust(config, _named_code(args), f"config {args.config!r}")
        from distrl.envs.kinds import resolve_agents

        config = resolve_agents(config)  # an N-agent env's slots: its copies x the agents the env has
    print(describe_config(config), flush=True)
    if args.explain:
        from distrl import diagnose

        print("\n# what auto chooses here, and why (a worker and a learner built here)", flush=True)
        for line in diagnose.explain(config):
            print(fit(line, 80, indent=13 if line.startswith(" " * 11) else 11))  # a document, as the YAML above
    return 0


def _named_code(args) -> list[str]:
    """Env factories and encoders the user named on this command line (``--set env.id=ID``, ``--set
    model.encoder=ID``, ``--trust-env ID``, ``--trust-model ID``): trusted to import."""
    from distrl.config.trust import named_code

    return named_code(args.set) + _trusted(args)


def _trusted(args) -> list[str]:
    """The code ids trusted by flag (``--trust-env``, ``--trust-model``)."""
    return [*args.trust_env, *args.trust_model]


def _key_value(text: str) -> str:
    """A ``--set`` argument: one ``key.path=value`` word (``--set ppo.lr 1e-3`` would leave the value behind)."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(
            f"{text!r}: --set takes KEY.PATH=VALUE as one argument, e.g. --set {text or 'ppo.lr'}=VALUE "
            "(no spaces around '='; quote a value with spaces)"
        )
    return text


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text}")
    return value


def _cmd_league(args) -> int:
    from distrl.league.tournament import run_tournament

    _refuse_a_config(args)
    if args.replays is not None:
        _check_writable(Path(args.replays), "--replays")
    table = run_tournament(args.run, games=args.games, out=args.out, replays=args.replays, seed=args.seed)
    print(
        f"{len(table['players'])} players, {table['games_per_pair']} games per pair on {table['game']} "
        f"(Elo fitted, {table['anchor']}):"
    )
    for row in table["players"]:
        print(
            f"  {row['player']:>12} {row['kind']:>8} it {row['iteration']:>5}  Elo {row['elo']:7.1f}  "
            f"W {row['wins']} D {row['draws']} L {row['losses']}  score {row['score']:.3f}"
        )
    out = args.out or Path(args.run) / "league"
    print(f"wrote tournament.json, tournament.md{', elo.png' if table['png'] else ''} in {out}")
    if table.get("replays"):
        print(f"replays: {', '.join(Path(p).name for p in table['replays'])} in {args.replays}")
    return 0


def _eval_league(args) -> int:
    from distrl.deploy.policy import chosen_checkpoint
    from distrl.league.tournament import evaluate_against

    opponent = args.opponent or "heuristic"
    if args.opponent is None:
        print("a league run: its learner plays the game's scripted player (--opponent names another)")
    path, how, _ = chosen_checkpoint(args.checkpoint, args.which)
    matches = evaluate_against(path, opponent, args.episodes, not args.stochastic, args.seed, say=print, how=how)
    for seat in (0, 1):
        scores = [m.score for m in matches if m.seat == seat]
        if scores:
            wins, draws = sum(s == 1.0 for s in scores), sum(s == 0.5 for s in scores)
            print(
                f"seat {seat} ({'first' if seat == 0 else 'second'}): {len(scores)} games against {opponent}: "
                f"won {wins}, drew {draws}, lost {len(scores) - wins - draws} (win rate {wins / len(scores):.3f})"
            )
    wins, points = sum(m.score == 1.0 for m in matches), sum(m.score for m in matches)
    print(f"{len(matches)} games: win rate {wins / len(matches):.3f}, score {points / len(matches):.3f}")
    return 0


@contextlib.contextmanager
def _episodes_bar():
    """On a terminal, a bar of the episodes played so far (gone when they are done); elsewhere nothing."""
    if not sys.stdout.isatty():
        yield lambda done, total: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("playing"), BarColumn(), MofNCompleteColumn(), TextColumn("episodes"), TimeElapsedColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("eval", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _is_a_config(path: Path) -> bool:
    """Whether ``path`` reads as a config: YAML text whose top level is a mapping (read as data, nothing run)."""
    import yaml

    try:
        return isinstance(yaml.safe_load(path.read_text()), dict)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False


def _refuse_a_config(args) -> None:
    """A YAML given where a trained run goes: say what the command takes, not that the file is no checkpoint."""
    given = Path(getattr(args, "checkpoint", None) or getattr(args, "run", ""))
    if given.suffix in (".yaml", ".yml") and given.is_file() and _is_a_config(given):
        raise _UsageError(
            f"{given}: a config file; {args.command} takes a trained run: its run directory or a checkpoint file "
            f"(train one first: distrl train {given})"
        )


def _is_league_run(path: str, which: str) -> bool:
    """Whether the checkpoint ``distrl eval`` plays is a league run's (its config has a league section)."""
    from distrl.common.checkpoint import load_checkpoint_file

    return (load_checkpoint_file(path, which)[0].get("config") or {}).get("league") is not None


def _cmd_eval(args) -> int:
    from distrl.deploy import evaluate

    _refuse_a_config(args)

    if args.opponent is not None or _is_league_run(args.checkpoint, args.which):
        return _eval_league(args)

    if args.video is not None:
        from distrl.deploy.video import missing_video_package

        if (missing := missing_video_package()) is not None:
            raise _UsageError(f"--video={args.video!r}: {missing}")
        _check_writable(Path(args.video), "--video")
    with _episodes_bar() as progress:
        returns = evaluate(
            args.checkpoint,
            episodes=args.episodes,
            deterministic=not args.stochastic,
            seed=args.seed,
            env_id=args.env,
            trusted_envs=_trusted(args),
            video_dir=args.video,
            say=print,
            policy=args.policy,
            which=args.which,
            progress=progress,
        )
    if args.video is not None:
        print(f"videos: {', '.join(sorted(p.name for p in Path(args.video).glob('*.mp4')))} in {args.video}")
    count = f"{len(returns)} episode" + ("" if len(returns) == 1 else "s")
    print(
        f"{count}: return mean {returns.mean():.2f} std {returns.std():.2f} (min {returns.min():.2f}, "
        f"max {returns.max():.2f})"
    )
    return 0


def _cmd_export(args) -> int:
    from distrl.deploy import export_policies

    _refuse_a_config(args)

    out = Path(args.out)
    if out.is_dir():
        raise _UsageError(f"out={args.out!r}: is a directory; give a file path such as {out / 'policy.onnx'}")
    _check_writable(out.parent if str(out.parent) else Path("."), "out")
    created = not out.absolute().parent.exists()
    written = export_policies(
        args.checkpoint,
        out,
        env_id=args.env,
        trusted_envs=_trusted(args),
        exporter=args.exporter,
        policy=args.policy,
        which=args.which,
    )
    if created:  # as train does for a --run-dir that is not there yet: made, and said
        print(f"created the directory {out.parent}")
    for info in written:
        print(fit(f"wrote {shown(info['path'])} from {shown(info['checkpoint'])} ({info['chosen']})", indent=2))
        print(
            fit(
                f"  checked against torch, max_abs_diff={info['max_abs_diff']:.2e} ({info['exporter']} exporter); "
                f"inputs {','.join(info['inputs'])}; outputs {','.join(info['outputs'])}",
                indent=4,
            )
        )
    return 0


def _size(text: str) -> tuple[int, int]:
    width, _, height = text.lower().partition("x")
    if not (width.isdigit() and height.isdigit() and int(width) >= 100 and int(height) >= 100):
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT in pixels, each at least 100 (e.g. 800x500)")
    return int(width), int(height)


def _cmd_plot(args) -> int:
    from distrl.plot import load_runs, plot_runs

    runs = load_runs(args.runs)
    labels = plot_runs(runs, metric=args.metric, x=args.x, out=args.out, size=args.size, title=args.title)
    if args.out:
        print(fit(f"wrote {args.out}: {args.metric} against {args.x}, " + "; ".join(labels), indent=2))
    return 0


def _cmd_diagnose(args) -> int:
    import json

    from rich.console import Console

    from distrl import diagnose
    from distrl.config import load_config
    from distrl.config.trust import check_code_trust

    config = load_config(args.config, args.set)
    check_code_trust(config, _named_code(args), f"config {args.config!r}")
    console = Console()  # wraps at word breaks to the terminal's width (80 where there is none)
    # on a terminal a spinner names each measurement as it runs (gone when the report prints)
    with console.status("diagnose: starting") as status:
        report = diagnose.run(config, quick=args.quick, phase=lambda text: status.update(f"diagnose: {text}"))
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        diagnose.print_report(report, console)
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, answering a bad argument with one line and exit code 2 (not the usage block)."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="distrl", description="Distributed PPO on Ray.")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser(
        "train",
        help="train a policy from a YAML config",
        epilog="Every config key, its type, default and meaning: distrl config show CONFIG",
    )
    train.add_argument("config", nargs="?", help="YAML config (optional with --resume: the run's config.yaml)")
    train.add_argument(
        "--set", action="append", default=[], type=_key_value, metavar="KEY.PATH=VALUE", help="override a config value"
    )
    train.add_argument("--run-dir", help="where to write the run (default runs/ENV-TIMESTAMP)")
    train.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a run from its newest checkpoint (a run "
        "directory, or the run's storage URI, e.g. s3://bucket/runs/NAME, from any machine)",
    )
    trust = "import and call this env factory (package.module:callable) named by the config or checkpoint"
    train.add_argument("--trust-env", action="append", default=[], metavar="ID", help=trust)
    train.add_argument("--trust-model", action="append", default=[], metavar="ID", help=TRUST_MODEL)
    train.add_argument(
        "--storage", metavar="URI", help="mirror the run to URI/RUN_NAME: a path, s3://, gs:// (sets storage.uri)"
    )
    train.add_argument(
        "--address",
        help="Ray cluster to join; 'local' starts a private Ray (default: RAY_ADDRESS, "
        "else a live cluster started with `ray start` on this machine, else a private Ray)",
    )
    train.add_argument(
        "--verbose",
        action="store_true",
        help="print the start-up summary in full: every auto choice and why (the run's setup.txt has it either way)",
    )
    train.set_defaults(func=_cmd_train)

    tn = sub.add_parser(
        "tune",
        help="search hyperparameters with Ray Tune (ASHA, PBT)",
        epilog="The search file's keys: see configs/tune_cartpole.yaml",
    )
    tn.add_argument("config", help="YAML config of the runs")
    tn.add_argument("search", help="YAML search file: metric, mode, num_samples, scheduler, search_space, overrides")
    tn.add_argument(
        "--set",
        action="append",
        default=[],
        type=_key_value,
        metavar="KEY.PATH=VALUE",
        help="override a config value in every trial",
    )
    tn.add_argument("--storage-path", help="where Tune keeps the experiment (default runs/tune)")
    tn.add_argument("--name", help="the experiment's folder name (default ENV-TIMESTAMP)")
    tn.add_argument("--trust-env", action="append", default=[], metavar="ID", help=trust)
    tn.add_argument("--trust-model", action="append", default=[], metavar="ID", help=TRUST_MODEL)
    tn.add_argument("--address", help="Ray cluster to join (as for train)")
    tn.set_defaults(func=_cmd_tune)

    cf = sub.add_parser("config", help="show a resolved config with every key's type, default and meaning")
    cf_sub = cf.add_subparsers(dest="config_command", required=True)
    show = cf_sub.add_parser("show", help="print the config after overrides, key by key, with descriptions")
    show.add_argument("config", nargs="?", help="YAML config (default: all defaults)")
    show.add_argument(
        "--set", action="append", default=[], type=_key_value, metavar="KEY.PATH=VALUE", help="override a config value"
    )
    show.add_argument(
        "--explain", action="store_true", help="also what each auto setting chooses on this machine, and why"
    )
    show.add_argument("--trust-env", action="append", default=[], metavar="ID", help=trust)
    show.add_argument("--trust-model", action="append", default=[], metavar="ID", help=TRUST_MODEL)
    show.set_defaults(func=_cmd_config_show)

    ev = sub.add_parser("eval", help="play episodes with a trained policy")
    ev.add_argument("checkpoint", help="checkpoint file or run directory (its best checkpoint; see --checkpoint)")
    ev.add_argument(
        "--checkpoint",
        dest="which",
        choices=CHECKPOINT_CHOICES,
        default="best",
        help="of a run directory's checkpoints: the best (by the run's evaluation, else its mean training return; "
        "the default) or the latest",
    )
    ev.add_argument("--episodes", type=_positive_int, default=10, help="episodes (a league run: games) to play")
    ev.add_argument(
        "--env", metavar="ID", help="play in this env instead of the checkpoint's (a factory named here is trusted)"
    )
    ev.add_argument("--trust-env", action="append", default=[], metavar="ID", help=trust)
    ev.add_argument("--trust-model", action="append", default=[], metavar="ID", help=TRUST_MODEL)
    ev.add_argument("--stochastic", action="store_true", help="sample actions instead of taking the most likely")
    ev.add_argument("--seed", type=int, default=12345)
    ev.add_argument("--video", metavar="DIR", help="record each episode as an MP4 in DIR (gymnasium RecordVideo)")
    ev.add_argument(
        "--opponent",
        metavar="NAME",
        help="a league run: play its learner against random, heuristic (the default) or "
        "a snapshot (main@ITERATION), half the games in each seat",
    )
    ev.add_argument(
        "--policy",
        metavar="NAME",
        help="a run of several policies (agents.policies): count the episodes "
        "of this policy's agents (every agent plays with its own policy); default: every agent's",
    )
    ev.set_defaults(func=_cmd_eval)

    lg = sub.add_parser(
        "league", help="a league run's round-robin tournament: Elo table (JSON, MD), Elo over training (PNG)"
    )
    lg.add_argument("run", help="the league run's directory (its newest checkpoint) or a checkpoint file")
    lg.add_argument("--games", type=_positive_int, default=20, help="games per pair, half in each seat (default 20)")
    lg.add_argument("--out", metavar="DIR", help="where to write the table (default RUN/league)")
    lg.add_argument("--replays", metavar="DIR", help="save the games of the two best-rated players there")
    lg.add_argument("--seed", type=int, default=0)
    lg.set_defaults(func=_cmd_league)

    ex = sub.add_parser("export", help="write the trained policy as an ONNX model")
    ex.add_argument("checkpoint", help="checkpoint file or run directory (its best checkpoint; see --checkpoint)")
    ex.add_argument(
        "--checkpoint",
        dest="which",
        choices=CHECKPOINT_CHOICES,
        default="best",
        help="of a run directory's checkpoints: the best (the default) or the latest",
    )
    ex.add_argument("out", help="output .onnx path")
    ex.add_argument("--env", metavar="ID", help="build the policy for this env instead of the checkpoint's")
    ex.add_argument("--trust-env", action="append", default=[], metavar="ID", help=trust)
    ex.add_argument("--trust-model", action="append", default=[], metavar="ID", help=TRUST_MODEL)
    ex.add_argument(
        "--exporter",
        choices=["dynamo", "torchscript"],
        default="dynamo",
        help="torch.onnx.export(dynamo=True), the default, or the TorchScript exporter",
    )
    ex.add_argument(
        "--policy",
        metavar="NAME",
        help="a run of several policies (agents.policies): export this one "
        "(default: each, as OUT_STEM.NAME.onnx beside OUT)",
    )
    ex.set_defaults(func=_cmd_export)

    pl = sub.add_parser(
        "plot",
        help="learning curves of run directories (seeds of one config as their mean and range)",
        epilog="Runs whose configs differ only in the seed are drawn as one line with their range shaded.",
    )
    pl.add_argument("runs", nargs="+", metavar="RUN", help="run directories (each with its metrics.jsonl)")
    pl.add_argument("--metric", default="episode_return_mean", help="a key of metrics.jsonl (default: %(default)s)")
    pl.add_argument(
        "--x", choices=["env_steps", "time_s"], default="env_steps", help="the x axis (default: %(default)s)"
    )
    pl.add_argument("--out", metavar="FILE.png", help="write the plot there (default: show it on the display)")
    pl.add_argument("--size", type=_size, default=(800, 500), metavar="WxH", help="in pixels (default: 800x500)")
    pl.add_argument("--title", help="the plot's title (default: the env and the metric)")
    pl.set_defaults(func=_cmd_plot)

    dg = sub.add_parser("diagnose", help="versions, hardware, backends and measured rates for a config")
    dg.add_argument("config", nargs="?", help="YAML config whose env and model to measure (default: CartPole)")
    dg.add_argument("--set", action="append", default=[], type=_key_value, metavar="KEY.PATH=VALUE")
    dg.add_argument("--json", action="store_true", help="print the report as JSON")
    dg.add_argument("--quick", action="store_true", help="shorter measurements")
    dg.add_argument("--trust-env", action="append", default=[], metavar="ID", help=trust)
    dg.add_argument("--trust-model", action="append", default=[], metavar="ID", help=TRUST_MODEL)
    dg.set_defaults(func=_cmd_diagnose)
    return parser


def main(argv: list[str] | None = None) -> int:
    launch = time.perf_counter()
    args = build_parser().parse_args(argv)
    args.launch = launch
    if args.command == "plot":  # reads files only: none of the training stack's imports
        from distrl.plot import PlotError

        try:
            return args.func(args)
        except PlotError as exc:
            print(f"distrl plot: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if args.command in ("train", "tune"):  # (which Ray: decided by distrl.train / distrl.tune before ray is imported)
        from distrl.common.log import install_cli_handler

        install_cli_handler()
        # Tasks the driver abandons when a run stops (the next samples) would print Ray's "Unhandled error"
        # dumps ahead of distrl's own one-line answer; every error distrl waits on is reported by distrl.
        os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
    from distrl.common.checkpoint import CheckpointError
    from distrl.common.errors import RunStalled
    from distrl.config import ConfigError
    from distrl.driver import PlacementError
    from distrl.driver.connection import ConnectionProblem
    from distrl.driver.storage import StorageError
    from distrl.envs import EnvFailure, EnvSpecError

    try:
        return args.func(args)
    except ConfigError as exc:
        for line in exc.lines:
            print(f"distrl: config error: {line}", file=sys.stderr)
        return EXIT_USAGE
    except (
        CheckpointError,
        PlacementError,
        EnvSpecError,
        EnvFailure,
        StorageError,
        ConnectionProblem,
        RunStalled,
        _UsageError,
    ) as exc:
        print(f"distrl: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("distrl: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


# Commands that read a checkpoint and have written all they write (atomically) when they return: their process
# ends without the interpreter's teardown of torch's modules, which costs a few tenths of a second of a command that
# takes two (docs/performance.md, distrl eval on a busy machine).
QUICK_EXIT = ("eval", "export")


def run() -> None:
    """The ``distrl`` command: ``main`` as a process, which ends at once after a command in ``QUICK_EXIT``."""
    argv = sys.argv[1:]
    code = main(argv)
    if argv and argv[0] in QUICK_EXIT:
        import logging

        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    run()
