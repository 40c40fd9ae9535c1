"""RLlib's connect-four self-play example beside distrl's league, to each one's first win-rate threshold.

RLlib's ``examples/multi_agent/self_play_with_open_spiel.py`` (OpenSpiel's connect_four, PPO,
``main`` against the random player, both seats) freezes its first copy of ``main`` when the
win rate in its training episodes passes ``--win-rate-threshold`` (0.95). This script runs it
as shipped with one env runner (this machine has 2 cores), time-stamps its output, and reports
the time from launch to that moment. distrl's figure on the same terms comes from a league
run's ``metrics.jsonl``: the first iteration whose training games against random were won at
>= 0.95 (``league_win_random``), from launch: a run the study trains first (``--seconds`` of
``configs/league_connect4.yaml``), or one given (``--distrl-run``).

    pip install -e ".[peers,league]"  # RLlib and OpenSpiel (its example), PettingZoo (distrl's league)
    python benchmarks/league/league_rllib.py
    python benchmarks/league/league_rllib.py --distrl-run RUN_DIR  # a run of configs/league_connect4.yaml
    python benchmarks/league/league_rllib.py --quick  # distrl 20 s, RLlib 75 s (a smoke run)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, markdown_table, metrics_rows, start_study, study_parser
from benchmarks.training import train

THRESHOLD = 0.95
CONFIG = "configs/league_connect4.yaml"


def rllib_time_to_threshold(limit_s: float) -> dict:
    import ray.rllib

    script = Path(ray.rllib.__file__).parent / "examples" / "multi_agent" / "self_play_with_open_spiel.py"
    args = [
        sys.executable,
        "-u",
        str(script),
        "--num-env-runners=1",
        "--num-episodes-human-play=0",
        f"--win-rate-threshold={THRESHOLD}",
        "--min-league-size=3",
    ]
    start = time.perf_counter()
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "RAY_ADDRESS": "local"},
    )
    found, iterations, last_rate = None, 0, None
    try:
        for line in proc.stdout:
            if time.perf_counter() - start > limit_s:
                break
            match = re.search(r"Iter=(\d+) win-rate=([\d.]+)", line)
            if match:
                iterations, last_rate = int(match.group(1)), float(match.group(2))
            if "adding new opponent" in line:
                found = round(time.perf_counter() - start, 1)
                break
    finally:
        proc.kill()
        proc.wait()
    return {"time_s": found, "iterations": iterations, "last_win_rate": last_rate, "limit_s": limit_s}


def distrl_time_to_threshold(run: Path) -> dict:
    rows = metrics_rows(run)
    for row in rows:
        if row.get("league_win_random", 0) >= THRESHOLD:
            return {"time_s": round(row["time_s"], 1), "iterations": row["iteration"], "env_steps": row["env_steps"]}
    return {"time_s": None, "iterations": rows[-1]["iteration"] if rows else 0}


def main() -> int:
    parser = study_parser(__doc__, quick="distrl 20 s, RLlib 75 s")
    parser.add_argument("--distrl-run", type=Path, help="a run of configs/league_connect4.yaml (default: train one)")
    parser.add_argument("--seconds", type=float, default=600, help="the league run's training time, where trained")
    parser.add_argument("--limit", type=float, default=900, help="seconds RLlib may take")
    args, machine = start_study(parser)
    if args.quick:
        args.seconds, args.limit = 20, 75
    with tempfile.TemporaryDirectory() as tmp:
        run = args.distrl_run
        if run is None:
            run = Path(tmp) / "league"
            items = [f"stop.time_s={args.seconds}", *args.overrides]
            train(CONFIG, items, keep=run, what=f"{CONFIG} for {args.seconds:g} s")
        rows = [{"system": f"distrl ({CONFIG})", **distrl_time_to_threshold(run)}]
    print(rows[0], flush=True)
    rows.append({"system": "RLlib self_play_with_open_spiel.py (1 env runner)", **rllib_time_to_threshold(args.limit)})
    print(rows[1], flush=True)
    table = markdown_table(
        rows, f"system | time_s: s to win rate {THRESHOLD} vs random | iterations | env_steps: env steps"
    )
    return finish("league_rllib", args, machine, rows, table=table, threshold=THRESHOLD)


if __name__ == "__main__":
    sys.exit(main())
