"""Same learning before and after a change: record each case's metrics rows, then compare two recordings.

A change that should not change what is learned (moving code, a new option left off) must leave every key of every
metrics row as it was, timings aside. This runs the cases below with ``distrl train``, keeps each run's rows without
their timing keys, and ``--compare`` says, case by case, whether two recordings are identical (and where they first
differ when not).

    python benchmarks/learning/same_learning.py --out /tmp/before.json                      # at the old commit
    python benchmarks/learning/same_learning.py --out /tmp/after.json                       # at the new one
    python benchmarks/learning/same_learning.py --compare /tmp/before.json /tmp/after.json

The lockstep cases are deterministic per seed. The async case with one worker is too as long as the worker never
receives new weights mid-sample at a different step: the stream stages weights the moment an update lands, so its
rows can differ from run to run on a loaded machine; record it twice at the old commit to see (``--repeat``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import machine_info
from benchmarks.training import TIMING_KEYS, train

ROOT = Path(__file__).resolve().parents[2]
# Keys that measure time or the machine, not learning.

CASES = {
    "cartpole_overlap_1worker": ("configs/cartpole.yaml", ["stop.env_steps=163840", "seed=0"]),
    "cartpole_sync_2workers": (
        "configs/cartpole.yaml",
        [
            "rollout.pipeline=sync",
            "rollout.num_workers=2",
            "rollout.num_cpus_per_worker=0.5",
            "env.num_envs_per_worker=32",
            "stop.env_steps=163840",
            "seed=0",
        ],
    ),
    "cartpole_lstm": ("configs/cartpole_lstm.yaml", ["stop.env_steps=65536", "seed=0"]),
    "cartpole_async_1worker": ("configs/cartpole.yaml", ["rollout.pipeline=async", "stop.env_steps=163840", "seed=0"]),
    # A league run: matchmaking, snapshots (at iterations 10 and 20) and learned opponents in the workers' games.
    "league_duel": ("configs/league_duel.yaml", ["stop.env_steps=196608", "seed=0"]),
}


def run_case(config: str, overrides: list[str]) -> list[dict]:
    rows = train(config, overrides, what=f"{config} {overrides}").rows
    return [{k: v for k, v in row.items() if k not in TIMING_KEYS} for row in rows]


def first_difference(a: list[dict], b: list[dict]) -> str | None:
    if len(a) != len(b):
        return f"{len(a)} rows against {len(b)}"
    for index, (row_a, row_b) in enumerate(zip(a, b)):
        for key in sorted(set(row_a) | set(row_b)):
            if row_a.get(key) != row_b.get(key):
                return f"row {index} ({row_a.get('iteration')}): {key} {row_a.get(key)!r} against {row_b.get(key)!r}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where to write this recording (JSON)")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--repeat", type=int, default=1, help="runs per case (more than one: say whether runs agree)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args(argv)
    if args.compare:
        before, after = (json.loads(p.read_text()) for p in args.compare)
        same = True
        for case in before["cases"]:
            if case not in after["cases"]:
                print(f"{case}: not in {args.compare[1]}")
                continue
            difference = first_difference(before["cases"][case][0], after["cases"][case][0])
            rows = len(before["cases"][case][0])
            print(
                f"{case}: {'identical' if difference is None else 'DIFFERENT: ' + difference} ({rows} rows; "
                f"commits {before['machine']['commit']} / {after['machine']['commit']})"
            )
            same = same and difference is None
        return 0 if same else 1
    if args.out is None:
        parser.error("--out or --compare is required")
    recording = {"machine": machine_info(), "cases": {}}
    for case in args.cases:
        config, overrides = CASES[case]
        runs = [run_case(config, overrides) for _ in range(args.repeat)]
        recording["cases"][case] = runs
        agree = all(first_difference(runs[0], other) is None for other in runs[1:])
        print(f"{case}: {len(runs[0])} rows" + ("" if args.repeat == 1 else f"; runs agree: {agree}"), flush=True)
    args.out.write_text(json.dumps(recording, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
