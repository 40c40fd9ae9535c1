"""distrl beside Sample Factory 2 on Breakout, same machine, same run: env steps per second in the steady state.

Both train Breakout with the Nature CNN (three convolutions, 512 units), 8 env copies in one rollout worker, 128
steps per copy per rollout, updates of 1,024 samples in 4 epochs of minibatch 256, Adam at 2.5e-4, frame skip 4 and
a 4-frame stack on 84x84 grayscale. Both are counted in agent steps, one per action (distrl's env steps; Sample
Factory's frames over its frame skip of 4):

  1. distrl: ``configs/breakout.yaml`` as shipped (ale-py's native vector env, onnxrt worker, the learner's kernels,
     precision and layout as ``auto`` settles them on its first update);
  2. Sample Factory 2.1.1 with its own Atari defaults (``sf_examples.atari``: BreakoutNoFrameskip-v4, its
     ``convnet_atari``, input and return normalisation) and the sizes above (``--num_workers 1
     --num_envs_per_worker 8 --worker_num_splits 2``: its double-buffered sampling), twice: ``async_rl`` off (its
     Atari default: sampling waits for the learner) and on (its general default: the learner trains while the
     workers sample, as distrl's shipped overlap pipeline does). distrl is compared with the faster of the two.

The steady rate is the env steps between the third report (distrl: its third update; Sample Factory: its third
``Fps is`` line) and the last, over the seconds between them: start-up and compiles left out of both.

Sample Factory needs gymnasium < 1.0 and numpy < 2, so it runs from an interpreter of its own (``--sf-python``):

    python3 -m venv ~/sf-venv
    ~/sf-venv/bin/pip install torch sample-factory==2.1.1 "gymnasium<1.0" "numpy<2" "ale-py>=0.9"
    python benchmarks/peers/peers_breakout.py --sf-python ~/sf-venv/bin/python
    python benchmarks/peers/peers_breakout.py --sf-python ~/sf-venv/bin/python --env-steps 30000 --repeats 2

ale-py 0.10+ registers its envs only with gymnasium 1.x; the Sample Factory child registers the v4 ones itself.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, study_machine, study_parser
from benchmarks.training import train

SF_FRAMESKIP = 4  # sf_examples.atari's env_frameskip: its frames are four per agent step
SF_LIMIT_S = 1800.0  # a Sample Factory run is stopped past this (its runner can wait for ever on a child that died)
SYSTEMS = ("distrl", "sample_factory async_rl=False", "sample_factory async_rl=True")
WARMUP_REPORTS = 2  # reports before the steady state: start-up, the first rollouts, compiles
FPS_LINE = re.compile(r"Fps is \(10 sec: [^)]*\)\. Total num frames: (\d+)")

# A file, not -c: Sample Factory's processes are spawned and import the main module again, which registers the envs
# in each of them (ale-py 0.10+ registers its v4 envs itself only under gymnasium 1.x).
SF_CHILD = r"""
import sys
from ale_py.registration import register_v0_v4_envs
register_v0_v4_envs()
if __name__ == "__main__":
    from sf_examples.atari.train_atari import main
    sys.exit(main())
"""


def steady_rate(points: list[tuple[float, int]]) -> float | None:
    """Env steps per second between the report after the warm-up and the last; ``points``: (seconds, env steps)."""
    if len(points) <= WARMUP_REPORTS + 1:
        return None
    (t0, s0), (t1, s1) = points[WARMUP_REPORTS], points[-1]
    return (s1 - s0) / (t1 - t0) if t1 > t0 else None


def run_distrl(env_steps: int, seed: int, overrides: list[str]) -> dict:
    items = [f"stop.env_steps={env_steps}", f"seed={seed}", *overrides]
    done = train("configs/breakout.yaml", items, what=f"distrl seed {seed}", timeout=3600)
    rows, wall = done.rows, done.wall_s
    points = [(r["time_s"], r["env_steps"]) for r in rows]
    return {
        "system": "distrl",
        "seed": seed,
        "env_steps": rows[-1]["env_steps"],
        "wall_s": wall,
        "steady_sps": steady_rate(points),
        "reports": len(points),
        "learn_s": statistics.median(r["learn_s"] for r in rows[WARMUP_REPORTS:] or rows),
        "return": rows[-1].get("episode_return_mean"),
    }


def run_sample_factory(python: str, env_steps: int, seed: int, async_rl: bool) -> dict:
    tmp = tempfile.mkdtemp(prefix="sf_breakout_")
    args = [
        "--env=atari_breakout",
        f"--experiment=breakout_{seed}",
        f"--train_dir={tmp}",
        "--device=cpu",
        f"--seed={seed}",
        "--num_workers=1",
        "--num_envs_per_worker=8",
        "--worker_num_splits=2",
        "--rollout=128",
        "--batch_size=256",
        "--num_batches_per_epoch=4",
        "--num_epochs=4",
        f"--train_for_env_steps={env_steps * SF_FRAMESKIP}",
        "--with_wandb=False",
        "--save_every_sec=100000",
        "--save_best_every_sec=100000",
        "--experiment_summaries_interval=100000",
        f"--train_for_seconds={int(SF_LIMIT_S)}",
        f"--async_rl={async_rl}",
    ]
    points: list[tuple[float, int]] = []
    child = Path(tmp) / "sf_breakout.py"
    child.write_text(SF_CHILD)
    started = time.perf_counter()
    proc = subprocess.Popen(
        [python, str(child), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )
    tail: list[str] = []
    try:
        for line in proc.stdout:
            tail = (tail + [line])[-40:]
            match = FPS_LINE.search(line)
            if match and int(match.group(1)) > 0:
                points.append((time.perf_counter() - started, int(match.group(1)) // SF_FRAMESKIP))
            if "Traceback" in line or time.perf_counter() - started > SF_LIMIT_S:  # its runner waits on a dead child
                break
        if proc.poll() is None:
            time.sleep(5.0)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)
    if proc.wait() != 0 and not points:
        raise RuntimeError("Sample Factory failed:\n" + "".join(tail + list(proc.stdout or [])[-20:]))
    return {
        "system": f"sample_factory async_rl={async_rl}",
        "seed": seed,
        "env_steps": points[-1][1] if points else 0,
        "wall_s": time.perf_counter() - started,
        "steady_sps": steady_rate(points),
        "reports": len(points),
        "learn_s": None,
        "return": None,
    }


def sf_version(python: str) -> str | None:
    code = (
        "import importlib.metadata as m; print(m.version('sample-factory'), m.version('gymnasium'), m.version('torch'))"
    )
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return proc.stdout.strip() or None


def main() -> int:
    # --set: distrl's settings on top of configs/breakout.yaml
    parser = study_parser(__doc__, quick="one short run each (8,192 agent steps)")
    parser.add_argument("--sf-python", required=False, help="an interpreter with Sample Factory 2 installed")
    parser.add_argument("--env-steps", type=int, default=20_480, help="agent steps per run")
    parser.add_argument("--repeats", type=int, default=1, help="runs per system, interleaved")
    args = parser.parse_args()
    if not args.sf_python:
        parser.error("--sf-python: the interpreter of an environment with Sample Factory 2 (see --help)")
    version = sf_version(args.sf_python)
    if version is None:
        parser.error(f"--sf-python={args.sf_python}: Sample Factory does not import there")
    if args.quick:
        args.env_steps, args.repeats = 8_192, 1
    machine = study_machine()
    print(f"Sample Factory, gymnasium, torch there: {version}", flush=True)
    rows = []
    for seed in range(args.repeats):
        for name in SYSTEMS:  # interleaved: a drift of the machine reaches all
            row = (
                run_distrl(args.env_steps, seed, args.overrides)
                if name == "distrl"
                else run_sample_factory(args.sf_python, args.env_steps, seed, name.endswith("True"))
            )
            rows.append(row)
            rate = "-" if row["steady_sps"] is None else f"{row['steady_sps']:,.0f}"
            print(
                f"{name:30s} seed {seed}: {rate} env steps/s steady ({row['reports']} reports), "
                f"{row['env_steps']:,} env steps in {row['wall_s']:.0f} s",
                flush=True,
            )
    medians = {
        name: statistics.median([r["steady_sps"] for r in rows if r["system"] == name and r["steady_sps"]] or [0])
        for name in SYSTEMS
    }
    best_sf = max(medians[name] for name in SYSTEMS[1:])
    ratio = medians["distrl"] / best_sf if best_sf else None
    print(
        "steady env steps/s, medians: "
        + ", ".join(f"{name} {value:,.0f}" for name, value in medians.items())
        + (f"; distrl {ratio:.2f}x the faster Sample Factory" if ratio else ""),
        flush=True,
    )
    columns = (
        "system | seed | steady_sps: env steps/s (steady) | env_steps: env steps | "
        "wall_s: wall s | learn_s: distrl learner s/update | return: distrl final return"
    )
    failures = [
        f"{r['system']} seed {r['seed']}: too few reports for a steady rate" for r in rows if r["steady_sps"] is None
    ]
    return finish(
        "peers_breakout",
        args,
        machine,
        rows,
        columns,
        failures=failures,
        sample_factory=version,
        medians=medians,
        distrl_over_sample_factory=ratio,
    )


if __name__ == "__main__":
    sys.exit(main())
