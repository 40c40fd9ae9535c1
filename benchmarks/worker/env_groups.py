"""Double-buffered workers (``rollout.env_groups``) in a real ``distrl train`` run: a worker's sampling rate against
the env alone, and the learning itself, with the env copies in one group and in two.

For each pipeline asked (``--pipelines``), the config runs once per way of stepping (``--stepping``), one after the
other: ``rollout.env_groups=1`` (step, act, step), ``=2`` (one group's envs step while the policy acts for the
other's) and, for ale-py's envs, ``rollout.ready_envs`` at half the copies (the policy acts for whichever half of
the copies is ready first, while the rest step). Reported per run:

- a worker's sampling rate: its batch (``num_envs_per_worker x rollout_length`` env steps) over its ``sample_s``,
  median of the iterations after the first two, with the learner beside it as the pipeline has it (sync: idle while
  the workers sample; overlap and async: updating meanwhile);
- that rate's share of one process stepping the same vector env alone (random actions, one thread, the worker's
  own env: ``benchmarks/env_alone.py``), and of the env at its own best (ale-py's thread pool over every
  core, all copies a step or its async mode's first half ready, where the env has one);
- whether the runs with one and two groups learned the same: every metric of every row that is not a time is
  compared. The groups fill the batch one vector env fills (``tests/test_env_groups.py``), so in sync and overlap
  the rows are identical; in async which batch lands first varies, so there only the returns are reported. Ready
  copies step in the order they finish, so their run's returns are reported, not compared.

    python benchmarks/worker/env_groups.py  # Breakout as shipped, sync and overlap
    python benchmarks/worker/env_groups.py --quick  # Breakout, sync, one and two groups, 4 iterations
    python benchmarks/worker/env_groups.py --config configs/cartpole.yaml --set env.vectorization=async
"""

from __future__ import annotations

import os
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, start_study, study_name, study_parser
from benchmarks.env_alone import env_alone_aggregate
from benchmarks.sampling_cases import STEPPING, stepping_label, stepping_settings
from benchmarks.training import train

WARMUP_ITERATIONS = 2
TIMES = re.compile(r"(_s|^sps.*|^time.*|_per_s|_bytes)$")  # what differs from run to run without the learning differing


def env_best(config_path: str, overrides: list[str], seconds: float) -> tuple[float, str] | None:
    """The env at its own best on this machine, and how: ale-py's vector env with its thread pool over every core,
    stepping all copies at once or (its async mode, EnvPool's) half of them, whichever ready first (``batch_size``);
    the faster of the two. None for an env without such a mode."""
    import time

    import gymnasium as gym
    import numpy as np

    from distrl.config import load_config
    from distrl.envs.factory import is_atari, resolve_env_id

    cfg = load_config(config_path, overrides).env
    if not is_atari(cfg.id):
        return None
    cores, n = os.cpu_count() or 1, cfg.num_envs_per_worker
    rates = {}
    for batch in sorted({n, max(1, n // 2)}, reverse=True):
        envs = gym.make_vec(
            resolve_env_id(cfg.id),
            num_envs=n,
            vectorization_mode="vector_entry_point",
            num_threads=cores,
            batch_size=batch,
            **{"reward_clipping": False, **cfg.kwargs},
        )
        envs.reset(seed=0)
        actions = np.ones(batch, dtype=np.int64)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            envs.step(actions)
            steps += batch
        envs.close()
        rates[batch] = steps * cfg.action_repeat / (time.perf_counter() - start)
    batch = max(rates, key=rates.get)
    how = f"ale-py, {cores} threads, " + ("all copies a step" if batch == n else f"the first {batch} of {n} ready")
    return rates[batch], how


def run(config_path: str, overrides: list[str], pipeline: str, way: str, iterations: int, learner=()) -> dict:
    """A run stepping its env copies the way ``way``; ``learner``: settings that pin its learner's kernels and
    precision (where ``auto`` would time them on the first update, and a loaded machine could choose otherwise)."""
    from distrl.config import load_config

    copies = load_config(config_path, overrides).env.num_envs_per_worker
    items = [*overrides, f"rollout.pipeline={pipeline}", *stepping_settings(way, copies), *learner]
    base = load_config(config_path, items)
    per_worker = base.env.num_envs_per_worker * base.rollout.rollout_length * base.env.action_repeat
    steps = base.update_size * base.env.action_repeat * iterations
    stop = [f"stop.env_steps={steps}", "stop.episode_return_mean=null"]
    run = train(config_path, [*stop, *items], what=f"{pipeline} {stepping_label(way, copies)}", timeout=3600)
    rows, summary = run.rows, run.summary
    setup = run.setup.splitlines()  # the start-up summary in full
    steady = rows[WARMUP_ITERATIONS:] or rows[-1:]
    sample_s = statistics.median(r["sample_s"] for r in steady)
    line = next((s.strip() for s in setup if s.strip().startswith(("env groups", "env copies"))), "")
    return {
        "pipeline": pipeline,
        "env_groups": STEPPING[way][0],
        "stepping": stepping_label(way, copies),
        "sample_s": sample_s,
        "worker_sampling_sps": per_worker / sample_s,
        "policy_s": statistics.median(r["policy_s"] for r in steady),
        "env_s": statistics.median(r["env_s"] for r in steady),
        "learn_s": statistics.median(r["learn_s"] for r in steady),
        "sps": statistics.median(r["sps"] for r in steady),
        "return": summary.get("episode_return_mean"),
        "rows": rows,
        "start_line": line,
        "learner_chose": summary.get("learner_step") or {},
    }


def pinned(learner: dict) -> list[str]:
    """Settings for the kernels and precision a run's learner chose (its summary's ``learner_step``)."""
    amp = {"fp32": "off"}.get(learner.get("precision"), learner.get("precision"))
    kernels = learner.get("kernels")
    return [f"learner.compile.backend={kernels}"] * bool(kernels) + [f"learner.amp={amp}"] * bool(amp)


def learned_alike(rows_1: list[dict], rows_2: list[dict]) -> tuple[bool, list[str]]:
    """Whether two runs' rows agree on every metric that is not a time; the keys that differ."""
    differ = sorted(
        {
            key
            for a, b in zip(rows_1, rows_2)
            for key in a.keys() | b.keys()
            if not TIMES.search(key) and a.get(key) != b.get(key)
        }
    )
    return len(rows_1) == len(rows_2) and not differ, differ


def main() -> int:
    parser = study_parser(__doc__, quick="sync, one and two groups, 4 iterations, the learner eager fp32")
    parser.add_argument("--config", default="configs/breakout.yaml")
    parser.add_argument("--pipelines", nargs="+", default=["sync", "overlap"], choices=["sync", "overlap", "async"])
    parser.add_argument(
        "--stepping",
        nargs="+",
        default=list(STEPPING),
        choices=list(STEPPING),
        help="1 and 2 env groups, and half the copies acted on as they become ready (ale-py's envs)",
    )
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--env-seconds", type=float, default=8.0, help="seconds of each env-alone measurement")
    args, machine = start_study(parser)
    if args.quick:  # one and two groups; the learner pinned (no first-update trial of its kernels and precision)
        args.pipelines, args.iterations, args.env_seconds, args.stepping = ["sync"], 4, 2.0, ["1", "2"]
    settings = [*(["learner.compile.backend=eager", "learner.amp=off"] if args.quick else []), *args.overrides]
    alone = env_alone_aggregate(args.config, args.overrides, 1, args.env_seconds)
    best, how = env_best(args.config, args.overrides, args.env_seconds) or (None, "")
    print(
        f"env alone, one process, one thread: {alone:,.0f} env steps/s"
        + (f"; at its best ({how}): {best:,.0f}" if best else ""),
        flush=True,
    )
    from distrl.config import load_config
    from distrl.envs.factory import is_atari

    ways = [w for w in args.stepping if w != "ready" or is_atari(load_config(args.config, args.overrides).env.id)]
    rows, failures = [], []
    for pipeline in args.pipelines:
        done = {}
        for way in ways:
            # The runs after the first take its learner's choice: the rows compared differ in their env stepping only
            learner = pinned(done[ways[0]]["learner_chose"]) if done else []
            result = run(args.config, settings, pipeline, way, args.iterations, learner)
            done[way] = result
            result.update(
                env_alone_sps=alone,
                share_of_env_alone=result["worker_sampling_sps"] / alone,
                share_of_env_best=result["worker_sampling_sps"] / best if best else None,
            )
            print(
                f"{pipeline:8s} {result['stepping']}: a worker samples "
                f"{result['worker_sampling_sps']:,.0f} env steps/s "
                f"({result['share_of_env_alone']:.2f} of the env alone), sample {result['sample_s']:.3f} s "
                f"(policy {result['policy_s']:.3f}, waiting on the env {result['env_s']:.3f}), learner "
                f"{result['learn_s']:.3f} s/update, run {result['sps']:,.0f} env steps/s, return {result['return']}; "
                f"{result['start_line']}",
                flush=True,
            )
        same, differ = learned_alike(done["1"]["rows"], done["2"]["rows"]) if {"1", "2"} <= done.keys() else (None, [])
        for way, result in done.items():
            result["speedup"] = done["1"]["sample_s"] / result["sample_s"] if "1" in done else None
            result["rows_identical"] = same if pipeline != "async" and way == "2" else None
            rows.append({k: v for k, v in result.items() if k not in ("rows", "learner_chose")})
            if way != "1" and "1" in done:
                print(
                    f"{pipeline:8s} sampling {result['stepping']} / 1 group: {result['speedup']:.2f}x faster",
                    flush=True,
                )
        if same is not None:
            print(
                f"{pipeline:8s} rows of the runs with 1 and 2 groups: "
                + (
                    "not compared (async)"
                    if pipeline == "async"
                    else "identical"
                    if same
                    else f"DIFFER in {differ[:6]}"
                ),
                flush=True,
            )
        if same is False and pipeline != "async":
            failures.append(f"{pipeline}: the runs with 1 and 2 env groups learned differently ({differ[:6]})")
    columns = (
        "pipeline | stepping: env copies | "
        "worker_sampling_sps: a worker's env steps/s while sampling | "
        "share_of_env_alone: of the env alone (1 thread) | "
        "share_of_env_best: of the env at its best | sample_s: sample s | "
        "policy_s: policy s | env_s: waiting on the env s | speedup: sampling speed-up | "
        "learn_s: learner s/update | sps: run env steps/s | return | "
        "rows_identical: rows identical to 1 group"
    )
    name = study_name("env_groups_" + Path(args.config).stem, args.overrides)
    return finish(
        name, args, machine, rows, columns, failures=failures, env_alone_sps=alone, env_best_sps=best, env_best_how=how
    )


if __name__ == "__main__":
    sys.exit(main())
