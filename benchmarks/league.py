"""Connect four by self-play on this machine: time to beat the random and the scripted player, both seats.

One real ``distrl train configs/league_connect4.yaml`` (10 minutes by default), a checkpoint every
few iterations; then every checkpoint's learner plays the random and the heuristic player,
``--games`` per seat, greedily (its most likely legal move). A threshold counts as reached at the
first checkpoint (time from launch) where the win rate in *both* seats passes it: >= 95 % against
random, >= 60 % against the heuristic (targets of the league issue). Last, ``distrl league``'s
round robin on the run: the learner's Elo beside every earlier snapshot's.

    python benchmarks/league.py                  # 600 s of training, 100 games per seat and checkpoint
    python benchmarks/league.py --seconds 120 --games 40
    python benchmarks/league.py --quick          # 60 s, 10 games per seat
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import add_results_dir_argument, machine_info, markdown_table, print_machine, write_results  # noqa: E402

THRESHOLDS = {"random": 0.95, "heuristic": 0.60}


def train(config: str, run_dir: Path, seconds: float, every: int) -> dict:
    args = [sys.executable, "-m", "distrl", "train", config, "--run-dir", str(run_dir), "--set", f"stop.time_s={seconds}",
            "--set", f"checkpoint.every_iterations={every}", "--set", "checkpoint.keep=1000"]  # fmt: skip
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "RAY_ADDRESS": "local"})
    if result.returncode != 0:
        raise RuntimeError(f"training failed:\n{result.stderr[-3000:]}")
    return json.loads((run_dir / "summary.json").read_text())


def checkpoint_rows(run_dir: Path, games: int) -> list[dict]:
    import torch

    from distrl.league.tournament import evaluate_against

    rows = []
    for path in sorted((run_dir / "checkpoints").glob("ckpt_*.pt")):
        counters = torch.load(path, weights_only=True)["counters"]
        row = {"iteration": counters["iteration"], "time_s": round(counters["time_s"], 1), "env_steps": counters["env_steps"]}
        for opponent in THRESHOLDS:
            matches = evaluate_against(path, opponent, 2 * games, deterministic=True, seed=counters["iteration"])
            for seat in (0, 1):
                scores = [m.score for m in matches if m.seat == seat]
                row[f"{opponent}_seat{seat}"] = sum(s == 1.0 for s in scores) / len(scores)
        rows.append(row)
        print(f"it {row['iteration']:5d} {row['time_s']:7.1f} s  random {row['random_seat0']:.2f}/{row['random_seat1']:.2f}  "
              f"heuristic {row['heuristic_seat0']:.2f}/{row['heuristic_seat1']:.2f}", flush=True)  # fmt: skip
    return rows


def first_reached(rows: list[dict], opponent: str) -> dict | None:
    for row in rows:
        if min(row[f"{opponent}_seat0"], row[f"{opponent}_seat1"]) >= THRESHOLDS[opponent]:
            return row
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/league_connect4.yaml")
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--games", type=int, default=100, help="games per seat and opponent at each checkpoint")
    parser.add_argument("--every", type=int, default=10, help="iterations between checkpoints")
    parser.add_argument("--keep-run", type=Path, help="train into this directory and keep it")
    parser.add_argument("--quick", action="store_true", help="60 s of training, 10 games per seat (a smoke run)")
    add_results_dir_argument(parser)
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.games, args.every = 60, 10, 5
    machine = machine_info()
    print_machine(machine)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.keep_run or Path(tmp) / "run"
        start = time.perf_counter()
        summary = train(args.config, run_dir, args.seconds, args.every)
        print(f"trained {summary['env_steps']:,} env steps in {summary['wall_s']:.0f} s ({time.perf_counter() - start:.0f} s "
              f"with start-up and shutdown); Elo {summary['league']['elo']}", flush=True)  # fmt: skip
        rows = checkpoint_rows(run_dir, args.games)
        from distrl.league.tournament import run_tournament

        table = run_tournament(run_dir, games=20, out=Path(tmp) / "tournament")
    learner = next(r for r in table["players"] if r["player"] == "main")
    earlier = [r for r in table["players"] if r["kind"] == "snapshot"]
    reached = {opponent: first_reached(rows, opponent) for opponent in THRESHOLDS}
    result = {
        "config": args.config, "seconds": args.seconds, "games_per_seat": args.games, "thresholds": THRESHOLDS,
        "env_steps": summary["env_steps"], "sps": summary["sps"], "elo_in_training": summary["league"]["elo"],
        "time_to": {k: (v["time_s"] if v else None) for k, v in reached.items()},
        "env_steps_to": {k: (v["env_steps"] if v else None) for k, v in reached.items()},
        "final": rows[-1] if rows else None,
        "tournament_elo": {r["player"]: r["elo"] for r in table["players"]},
        "learner_above_every_snapshot": all(learner["elo"] > r["elo"] for r in earlier),
    }  # fmt: skip
    for opponent, row in reached.items():
        said = f"{row['time_s']} s ({row['env_steps']:,} env steps)" if row else "not within the run"
        print(f"win rate >= {THRESHOLDS[opponent]:.0%} against {opponent} in both seats: {said}")
    print(f"tournament: learner Elo {learner['elo']:.0f}, best earlier snapshot "
          f"{max((r['elo'] for r in earlier), default=float('nan')):.0f}; above every earlier snapshot: "
          f"{result['learner_above_every_snapshot']}")  # fmt: skip
    md = markdown_table([{"what": f"win rate >= {THRESHOLDS[o]:.0%} vs {o}, both seats", "time_s": result["time_to"][o],
                          "env_steps": result["env_steps_to"][o]} for o in THRESHOLDS],
                        [("what", "threshold"), ("time_s", "s from launch"), ("env_steps", "env steps")])  # fmt: skip
    md += "\n\n" + markdown_table(rows, [("iteration", "iteration"), ("time_s", "s"), ("env_steps", "env steps"),
                                         ("random_seat0", "vs random, 1st"), ("random_seat1", "vs random, 2nd"),
                                         ("heuristic_seat0", "vs heuristic, 1st"), ("heuristic_seat1", "vs heuristic, 2nd")])  # fmt: skip
    md += "\n\n" + markdown_table(table["players"], [("player", "player"), ("kind", "kind"), ("iteration", "iteration"),
                                                     ("elo", "tournament Elo"), ("score", "score")])  # fmt: skip
    write_results("league_connect4", {"machine": machine, "result": result, "rows": rows, "tournament": table}, md,
                  quick=args.quick, results_dir=args.results_dir)  # fmt: skip


if __name__ == "__main__":
    main()
