"""MinAtar's suite with one config (``configs/minatar.yaml``, the game a setting) beside the published PPO returns.

Each game is a fresh ``distrl train`` to ``--steps`` env steps (10M, as gymnax-blines trains its PPO checkpoints),
seeds in turns; then the run's best checkpoint (chosen by its greedy evaluation) plays ``--episodes`` greedy episodes.
Reported beside gymnax's README table (its PPO checkpoints' returns) and PureJaxRL's PPO curves at 10M: the mean
return of the last 100 training episodes, the greedy return, each seed, the wall time a run, and the curves.
Needs ``pip install -e ".[minatar]"``.

    python benchmarks/learning/minatar_suite.py                        # Asterix, Breakout, SpaceInvaders; seeds 0-2
    python benchmarks/learning/minatar_suite.py --games Breakout --seeds 0 --steps 2000000
    python benchmarks/learning/minatar_suite.py --quick                # Breakout, 16k env steps, seed 0
    python benchmarks/learning/minatar_suite.py --runs-file runs.jsonl # resumable: each run kept as it ends
    python benchmarks/learning/minatar_suite.py --games Asterix --seeds 0 --set "env.kwargs={sticky_action_prob: 0.0}" \
        --name minatar_suite_asterix_sticky0                           # a variant, written apart

With ``--runs-file`` each finished run is added to the file as a JSON line, and a run already there (the same game,
seed, steps, settings and config text) is read instead of run again: a suite of hours stopped part way goes on from
where it was, and a table of the games done so far is written by naming only those.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import figure, finish, start_study, study_parser
from benchmarks.training import train_and_play

CONFIG = "configs/minatar.yaml"
# game -> (gymnax's PPO return (its README), PureJaxRL's PPO at 10M env steps read off its plots, or None)
PUBLISHED = {
    "Asterix": (15.0, None),
    "Breakout": (28.0, 40.0),
    "SpaceInvaders": (131.0, 170.0),
    "Freeway": (58.0, None),
    "Seaquest": (None, None),
}


def one(game: str, seed: int, steps: int, episodes: int, overrides: list[str]) -> dict:
    items = [f"env.id=MinAtar/{game}-v1", f"seed={seed}", f"stop.env_steps={steps}", *overrides]
    done, greedy = train_and_play(CONFIG, items, episodes, seed=1000 + seed, what=f"{game} seed {seed}")
    reported = [r for r in done.rows if r.get("episode_return_mean") is not None]
    return {
        "game": game,
        "seed": seed,
        "env_steps": done.summary["env_steps"],
        "wall_s": done.summary["wall_s"],
        "return_last_100": done.summary["episode_return_mean"],
        "greedy": greedy,
        "curve": [[r["env_steps"], r["episode_return_mean"]] for r in reported],
    }


def run_key(game: str, seed: int, args) -> dict:
    """What makes two runs the same run: a run in ``--runs-file`` with this key is not run again."""
    config = hashlib.sha256((ROOT / CONFIG).read_bytes()).hexdigest()[:16]
    return {
        "game": game,
        "seed": seed,
        "steps": args.steps,
        "episodes": args.episodes,
        "set": args.overrides,
        "config_sha256": config,
    }


def kept_runs(path: Path | None) -> list[dict]:
    if path is None or not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> int:
    parser = study_parser(__doc__, quick="Breakout, 16k env steps, seed 0, 5 episodes", seeds=[0, 1, 2])
    parser.add_argument("--games", nargs="+", choices=list(PUBLISHED), default=["Asterix", "Breakout", "SpaceInvaders"])
    parser.add_argument("--steps", type=int, default=10_000_000, help="env steps a run")
    parser.add_argument("--episodes", type=int, default=100, help="greedy episodes the best checkpoint plays after")
    parser.add_argument("--runs-file", type=Path, help="JSON lines of finished runs: read, not rerun; new ones added")
    parser.add_argument("--name", default="minatar_suite", help="the results' file name")
    args, machine = start_study(parser)
    if args.quick:
        args.games, args.seeds, args.steps, args.episodes = ["Breakout"], [0], 16_384, 5
    runs, kept = [], kept_runs(args.runs_file)
    for seed in args.seeds:
        for game in args.games if seed % 2 == 0 else args.games[::-1]:
            key = run_key(game, seed, args)
            same = [r for r in kept if r.get("key") == key]
            if same:
                runs.append(same[-1])
            else:
                runs.append({**one(game, seed, args.steps, args.episodes, args.overrides), "key": key})
                if args.runs_file is not None:
                    with args.runs_file.open("a") as out:
                        out.write(json.dumps(runs[-1]) + "\n")
            r = runs[-1]
            print(
                f"{game:13s} seed {seed}: last 100 {r['return_last_100']:.2f}, greedy {r['greedy']:.2f} at "
                f"{r['env_steps']:,} env steps, {r['wall_s']:.0f} s",
                flush=True,
            )
    rows = []
    for game in args.games:
        mine = sorted((r for r in runs if r["game"] == game), key=lambda r: r["seed"])
        gymnax, purejaxrl = PUBLISHED[game]
        rows.append(
            {
                "game": game,
                "last_100": round(statistics.median(r["return_last_100"] for r in mine), 2),
                "greedy": round(statistics.median(r["greedy"] for r in mine), 2),
                "each": ", ".join(f"{r['return_last_100']:.1f} / {r['greedy']:.1f}" for r in mine),
                "gymnax": "" if gymnax is None else gymnax,
                "purejaxrl": "" if purejaxrl is None else purejaxrl,
                "wall_s": round(statistics.median(r["wall_s"] for r in mine)),
            }
        )
    columns = (
        "game | last_100: last 100 episodes (median) | "
        f"greedy: greedy, {args.episodes} episodes (median) | "
        "each: each seed: last 100 / greedy | gymnax: gymnax PPO | "
        "purejaxrl: PureJaxRL PPO at 10M | wall_s: wall s a run (median)"
    )

    def chart(path: Path) -> None:
        with figure(path, (4 * len(args.games), 3.2), dpi=120, ncols=len(args.games), squeeze=False) as axes:
            for ax, game in zip(axes[0], args.games):
                for r in (r for r in runs if r["game"] == game):
                    ax.plot([p[0] for p in r["curve"]], [p[1] for p in r["curve"]], label=f"seed {r['seed']}")
                for value, style, name in zip(PUBLISHED[game], ("--", ":"), ("gymnax", "PureJaxRL")):
                    if value is not None:
                        ax.axhline(value, color="grey", linestyle=style, label=name)
                ax.set_title(f"MinAtar {game}")
                ax.set_xlabel("env steps")
                ax.grid(alpha=0.3)
                ax.legend(fontsize=7)
            axes[0][0].set_ylabel("mean return, last 100 episodes")

    return finish(args.name, args, machine, rows, columns, chart=chart, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
