"""Memory per weight sync: a rollout worker's resident memory over thousands of syncs, per backend and model.

Each (model, backend) runs in a process of its own: a real ``RolloutWorker`` built from the
shipped config, then ``set_weights`` with new weights (fresh arrays, as Ray delivers them) and
the every-sync check against eager, N times. The process's RSS is read every N/50 syncs; the
slope (bytes per sync, least squares over the syncs after the first 20 %) is what grows with a
run's length. One copy of the weights per sync was the onnxrt leak this measures against.

    python benchmarks/policy_call/soak.py  # mlp, lstm: 2000 syncs; cnn: 500; eager, onnxrt, inductor
    python benchmarks/policy_call/soak.py --quick                                 # mlp only, 200 syncs
    python benchmarks/policy_call/soak.py --one configs/cartpole.yaml onnxrt 300  # one process, one JSON line
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, start_study, study_parser

MODELS = {"mlp": "configs/cartpole.yaml", "lstm": "configs/cartpole_lstm.yaml", "cnn": "configs/breakout.yaml"}
BACKENDS = ("eager", "onnxrt", "inductor")
SYNCS = {"mlp": 2000, "lstm": 2000, "cnn": 500}
SAMPLES = 50
WARMUP_SHARE = 0.2


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0


def soak_one(config_path: str, backend: str, syncs: int) -> dict:
    """Run ``syncs`` weight syncs through one rollout worker in this process; RSS samples and the slope."""
    import numpy as np
    import psutil
    import torch

    from distrl.config import load_config
    from distrl.data.messages import Weights
    from distrl.rollout.worker import RolloutWorker

    config = load_config(
        ROOT / config_path,
        [f"rollout.compile.backend={backend}", "rollout.compile.strict=true", "env.num_envs_per_worker=8"],
    )
    worker = RolloutWorker(config)
    state = {k: v.detach().numpy().copy() for k, v in worker.model.state_dict().items()}
    weight_bytes = sum(v.nbytes for v in state.values())
    process = psutil.Process()
    every = max(1, syncs // SAMPLES)
    rng = np.random.default_rng(0)
    points: list[tuple[int, int]] = []
    for version in range(1, syncs + 1):
        # New arrays each time, as a deserialised object from the learner is: a small step, like an update.
        state = {
            k: (v + 1e-4 * rng.standard_normal(v.shape).astype(v.dtype) if v.dtype.kind == "f" else v.copy())
            for k, v in state.items()
        }
        worker.set_weights(Weights(version, state))
        if version % every == 0:
            points.append((version, process.memory_info().rss))
    start = int(len(points) * WARMUP_SHARE)
    xs, ys = [p[0] for p in points[start:]], [p[1] for p in points[start:]]
    return {
        "backend": backend,
        "backend_used": worker.policy.backend,
        "config": config_path,
        "syncs": syncs,
        "weight_bytes": weight_bytes,
        "sync_checks": worker.policy.sync_checks,
        "rss_start_mb": points[0][1] / 1e6,
        "rss_end_mb": points[-1][1] / 1e6,
        "bytes_per_sync": slope(xs, ys),
        "torch_threads": torch.get_num_threads(),
    }


def soak_in_subprocess(config_path: str, backend: str, syncs: int, timeout: float = 1800) -> dict:
    """``soak_one`` in a fresh Python process (so no other measurement's memory is in its RSS)."""
    result = subprocess.run(
        [sys.executable, __file__, "--one", config_path, backend, str(syncs)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )
    if result.returncode != 0:
        raise RuntimeError(f"soak {config_path} {backend} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = study_parser(__doc__, quick="mlp only, 200 syncs", overrides=False)
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=None)
    parser.add_argument("--backends", nargs="+", choices=list(BACKENDS), default=list(BACKENDS))
    parser.add_argument("--syncs", type=int, default=None, help="syncs per run (default: per model)")
    parser.add_argument("--label", default="", help="a suffix for the results' name (e.g. 'before')")
    parser.add_argument("--one", nargs=3, metavar=("CONFIG", "BACKEND", "SYNCS"), help=argparse.SUPPRESS)
    args, machine = start_study(parser)
    if args.one:
        print(json.dumps(soak_one(args.one[0], args.one[1], int(args.one[2]))))
        return

    models = args.models or (["mlp"] if args.quick else list(MODELS))
    rows = []
    for model in models:
        syncs = args.syncs or (200 if args.quick else SYNCS[model])
        for backend in args.backends:
            row = {"model": model, **soak_in_subprocess(MODELS[model], backend, syncs)}
            row["copies_per_sync"] = row["bytes_per_sync"] / row["weight_bytes"]
            rows.append(row)
            print(
                f"{model:5s} {backend:9s} {syncs:5d} syncs: {row['rss_start_mb']:7.1f} -> {row['rss_end_mb']:7.1f} MB, "
                f"{row['bytes_per_sync'] / 1e3:8.2f} KB/sync ({row['copies_per_sync']:.3f} weight copies)",
                flush=True,
            )
    columns = (
        "model | backend | syncs | weight_bytes: weights (bytes) | "
        "rss_start_mb: RSS start (MB) | rss_end_mb: RSS end (MB) | "
        "bytes_per_sync: bytes/sync | copies_per_sync: weight copies/sync"
    )
    name = "soak" + (f"_{args.label}" if args.label else "")
    return finish(name, args, machine, rows, columns, warmup_share=WARMUP_SHARE)


if __name__ == "__main__":
    sys.exit(main())
