"""``distrl eval`` of a CartPole run while the machine trains others: its time, idle and beside four trainings.

One CartPole run is trained to 475 first. Then ``distrl eval RUN`` (10 greedy episodes) is timed from launch to exit,
``--repeats`` times idle, then as many times while four ``distrl train configs/cartpole.yaml`` run beside it (each
with a long budget, started first and sampling by the time it is timed). The target: at most 3 s beside the four.

    python benchmarks/evaluation/eval_under_load.py
    python benchmarks/evaluation/eval_under_load.py --quick  # one training beside it, one repeat
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, markdown_table, start_study, study_parser
from benchmarks.training import play, running, train

# a training beside the eval: a long budget, stopped by the study once it has timed its evals
LOAD = ["stop.env_steps=100000000", "stop.episode_return_mean=null", "stop.time_s=600"]


def timed_eval(run_dir: Path) -> float:
    """Seconds from ``distrl eval RUN``'s launch to its exit (10 greedy episodes, its default)."""
    start = time.perf_counter()
    play(run_dir, 10)
    return time.perf_counter() - start


def main() -> int:
    parser = study_parser(__doc__, quick="one training beside it, one repeat")
    parser.add_argument("--beside", type=int, default=4, help="trainings running beside the eval")
    parser.add_argument("--repeats", type=int, default=5)
    args, machine = start_study(parser)
    if args.quick:
        args.beside, args.repeats = 1, 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "cartpole"
        train("configs/cartpole.yaml", args.overrides, keep=run_dir, checkpoints=True)  # what eval plays
        idle = [timed_eval(run_dir) for _ in range(args.repeats)]
        rows.append({"case": "idle", "trainings_beside": 0, "eval_s": statistics.median(idle), "each_s": idle})
        print(json.dumps(rows[-1]), flush=True)
        loads = [Path(tmp) / f"load{i}" for i in range(args.beside)]
        with running("configs/cartpole.yaml", LOAD, loads):
            deadline = time.monotonic() + 300  # until every training beside has reached its first update
            while time.monotonic() < deadline and not all((d / "metrics.jsonl").exists() for d in loads):
                time.sleep(0.5)
            time.sleep(3)
            load = os.getloadavg()[0]
            loaded = [timed_eval(run_dir) for _ in range(args.repeats)]
        case = {"case": f"{args.beside} trainings beside", "trainings_beside": args.beside}
        rows.append({**case, "eval_s": statistics.median(loaded), "each_s": loaded, "load_1min": round(load, 1)})
        print(json.dumps(rows[-1]), flush=True)
    table = markdown_table(rows, "case | eval_s: distrl eval, 10 episodes, median (s) | each_s: each (s)")
    return finish("eval_under_load", args, machine, rows, table=table)


if __name__ == "__main__":
    sys.exit(main())
