"""What ``distrl eval RUN`` plays of a league run by default (its best checkpoint) against the run's newest.

One real ``distrl train`` of the shipped connect four league (600 s by default), with its evaluation as shipped (it
chooses the best checkpoint); then both checkpoints play distrl's own scripted player and the 1-ply judge
(``benchmarks/league/league.py``), greedily, ``--games`` a seat, on the same seeds. The target: the best at least
as strong as the newest against the scripted player in both seats.

    python benchmarks/league/league_best.py          # 600 s, 200 games a seat
    python benchmarks/league/league_best.py --quick  # 40 s, 20 games a seat (a smoke run)
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, markdown_table, start_study, study_parser
from benchmarks.league_runs import judge_row, train_league


def seat_rates(path: Path, opponent: str, games: int) -> dict:
    """The checkpoint's learner, greedily, against a baseline: its win rate and score in each seat."""
    from distrl.league.tournament import evaluate_against

    matches = evaluate_against(path, opponent, 2 * games, deterministic=True, seed=7)
    row = {}
    for seat in (0, 1):
        scores = [m.score for m in matches if m.seat == seat]
        row[f"{opponent}_seat{seat}"] = sum(s == 1.0 for s in scores) / len(scores)
        row[f"{opponent}_score_seat{seat}"] = sum(scores) / len(scores)
    return row


def main() -> int:
    parser = study_parser(__doc__, quick="40 s of training, 20 games a seat")
    parser.add_argument("--config", default="configs/league_connect4.yaml")
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--games", type=int, default=200, help="games per seat against each player")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep-run", type=Path, help="train into this directory and keep it")
    args, machine = start_study(parser)
    if args.quick:
        args.seconds, args.games = 40, 20

    from distrl.deploy.policy import chosen_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.keep_run or Path(tmp) / "run"
        summary = train_league(
            args.config, run_dir, args.seconds, 25, [f"seed={args.seed}", "checkpoint.keep=3", *args.overrides]
        )
        rows = []
        for which in ("best", "latest"):
            path, how, _ = chosen_checkpoint(run_dir, which)
            iteration = int(path.stem.split("_")[1])
            row = {
                "checkpoint": "best (distrl eval's default)" if which == "best" else "newest",
                "iteration": iteration,
            }
            row["chosen_by"] = how
            row.update(seat_rates(path, "heuristic", args.games))
            row.update({k: v for k, v in judge_row(path, args.games, quiet=True).items() if k.startswith("judge_seat")})
            rows.append(row)
            print(json.dumps(row), flush=True)
        evals = [
            (r["eval_iteration"], r["eval_return_mean"])
            for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
            if "eval_return_mean" in r
        ]
    best, newest = rows
    held = all(best[f"heuristic_score_seat{s}"] >= newest[f"heuristic_score_seat{s}"] for s in (0, 1))
    print(f"best at least as strong as the newest against the scripted player in both seats: {held}")
    columns = (
        "checkpoint | iteration | heuristic_seat0: vs scripted, 1st (wins) | "
        "heuristic_seat1: vs scripted, 2nd (wins) | heuristic_score_seat0: score, 1st | "
        "heuristic_score_seat1: score, 2nd | judge_seat0: vs 1-ply judge, 1st | "
        "judge_seat1: vs 1-ply judge, 2nd"
    )
    table = (
        f"`{args.config}`, {args.seconds:g} s of training (seed {args.seed}, {summary['env_steps']:,} env steps); "
        f"{args.games} games a seat, greedy. Best chosen: {best['chosen_by']}.\n\n" + markdown_table(rows, columns)
    )
    kept = ("env_steps", "wall_s", "iterations", "best_checkpoint_metric", "best_checkpoint_score", "final_eval")
    summary = {key: summary.get(key) for key in kept}  # the run's summary without its league's whole record
    return finish(
        f"league_best_seed{args.seed}",
        args,
        machine,
        rows,
        table=table,
        summary=summary,
        evaluations=evals,
        best_holds=held,
    )


if __name__ == "__main__":
    sys.exit(main())
