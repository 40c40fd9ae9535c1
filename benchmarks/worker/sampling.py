"""Sampling per worker core: the env alone (random actions, the physical ceiling) against a full
``RolloutWorker.sample`` with each policy backend, one thread, in one process, with the env copies in one group
and in two (``rollout.env_groups``: one group's envs step while the policy acts for the other's) and, for ale-py's
envs, with half the copies acted on as they become ready (``rollout.ready_envs``).

For each case it reports env steps/s per core and where a worker's time goes: the vector env's
step, the policy (forward and action sampling) and the rest (bookkeeping: writing the batch,
episode statistics, observation handling). Correctness-gated like every benchmark: a worker
whose compiled policy fell back to eager is reported as such, and with ``strict`` a mismatch
fails the run.

    python benchmarks/worker/sampling.py  # CartPole MLP (64 envs), CartPole-LSTM, CartPole as 48 envs and as
                                               # 16 copies of 3 agents, Breakout CNN (8, 32 envs)
    python benchmarks/worker/sampling.py --cases breakout_cnn_8 --backends onnxrt --stepping 1 2 ready
    python benchmarks/worker/sampling.py --quick  # seconds; the test suite runs this
    python benchmarks/worker/sampling.py --cases cartpole_mlp_64 --backends onnxrt --stepping 1 --bare-loop
                                               # and the floor of any step-by-step loop on this core (bare_loop_rate)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import torch

from benchmarks.common import finish, markdown_table, start_study, study_parser
from benchmarks.sampling_cases import CASES, STEPPING, case_config, stepping_label
from distrl.compile import available_backends
from distrl.envs import make_run_vec_env
from distrl.envs.factory import is_atari
from distrl.rollout import make_worker
from distrl.rollout.env_runner import EnvGroups


def env_alone(config, min_seconds: float) -> float:
    """Env steps/s of the worker's vector env (its thread count: ale-py's pool otherwise spans every core) stepped
    with pre-drawn random actions: the ceiling for this core."""
    envs = make_run_vec_env(config, num_threads=max(1, int(config.rollout.num_cpus_per_worker)))
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    space = envs.action_space
    actions = (
        [space.sample() for _ in range(64)]
        if not hasattr(space, "nvec")
        else [rng.integers(0, space.nvec) for _ in range(64)]
    )
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_seconds or steps < 4 * envs.num_envs:
        envs.step(actions[steps // envs.num_envs % 64])
        steps += envs.num_envs
    elapsed = time.perf_counter() - start
    envs.close()
    return steps * config.env.action_repeat / elapsed


def worker_rate(config, min_seconds: float) -> dict:
    worker = make_worker(config)
    worker.sample()  # warm-up: first calls, lazy allocations
    totals = {"sample_s": 0.0, "policy_s": 0.0, "env_s": 0.0, "env_steps": 0}
    start = time.perf_counter()
    while time.perf_counter() - start < min_seconds or totals["env_steps"] == 0:
        info, _ = worker.sample()
        for key in totals:
            totals[key] += getattr(info, key)
    worker.close()
    other = totals["sample_s"] - totals["policy_s"] - totals["env_s"]
    return {
        "backend_used": worker.policy.backend,
        "worker_sps": totals["env_steps"] / totals["sample_s"],
        "env_share": totals["env_s"] / totals["sample_s"],
        "policy_share": totals["policy_s"] / totals["sample_s"],
        "bookkeeping_share": other / totals["sample_s"],
        "policy_us_per_step": totals["policy_s"]
        / (totals["env_steps"] / config.env.slots / config.env.action_repeat)
        * 1e6,
    }


def bare_loop_rate(config, min_seconds: float) -> float | None:
    """Env steps/s of the least a step-by-step worker can do: the worker's own policy call on its own vector env's
    observations (its memory carried), the greedy action, the env's step, and nothing else: no sampling, no batch, no
    episode statistics, no timers. What no bookkeeping can beat on this core with this policy; episode starts are not
    tracked (the memory's state is never reset), which changes what an LSTM computes, not what it costs. None for a
    worker whose copies are not one group stepped in turn (several groups, copies acted on as they become ready,
    several policies over one env's slots)."""
    worker = make_worker(config)
    if not isinstance(worker.runner, EnvGroups) or len(worker.runner.runners) != 1:
        worker.close()
        return None
    runner, policy = worker.runner.runners[0], worker.policy
    dist = runner.dist
    envs, space = runner.envs, runner.envs.single_action_space
    raw, state, mask = runner.raw_obs, runner.state, runner.action_mask
    starts = np.zeros(runner.num_envs, dtype=bool)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_seconds or steps < 4 * runner.num_envs:
        inputs, seen = runner.memory.inputs(state, runner.observe(raw), starts)
        pd_params, _value, *extra = policy(*inputs)
        state = runner.memory.after(seen, tuple(extra))
        raw, _reward, _terminated, _truncated, info = envs.step(
            dist.env_actions(dist.greedy_numpy(pd_params, mask), space)
        )
        mask = info.get("action_mask", mask)
        steps += runner.num_envs
    elapsed = time.perf_counter() - start
    worker.close()
    return steps * config.env.action_repeat / elapsed


def main(argv=None) -> int:
    parser = study_parser(__doc__, quick="seconds: CartPole MLP, eager and onnxrt", overrides=False)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--backends", nargs="+", help="default: every available one (auto included)")
    parser.add_argument("--min-seconds", type=float, default=3.0, help="time per measurement")
    parser.add_argument(
        "--stepping",
        nargs="+",
        default=["1", "2"],
        choices=list(STEPPING),
        help="1 and 2 env groups (1: step, act, step; 2: one group steps while the policy acts for the "
        "other), ready: half the copies acted on as they become ready (ale-py's envs only)",
    )
    parser.add_argument(
        "--bare-loop",
        action="store_true",
        help="also each backend's bare loop (policy, greedy action, env step: nothing else), one group",
    )
    args, info = start_study(parser, argv)
    backends = args.backends or [row["name"] for row in available_backends() if row["available"]]
    if args.quick:
        args.cases, backends, args.min_seconds = ["cartpole_mlp_64"], ["eager", "onnxrt"], 0.3

    torch.set_num_threads(1)
    rows, bare, failures = [], [], []
    for case in args.cases:
        plain = case_config(case, "eager")
        ceiling = env_alone(plain, args.min_seconds)
        print(f"{case:18s} env alone       : {ceiling:12,.0f} env steps/s", flush=True)
        ways = [w for w in args.stepping if w != "ready" or is_atari(plain.env.id)]
        for backend, way in [(b, w) for b in backends for w in ways]:
            config = case_config(case, backend, way)
            groups, stepping = STEPPING[way][0], stepping_label(way, config.env.num_envs_per_worker)
            try:
                row = worker_rate(config, args.min_seconds)
            except Exception as exc:  # strict: a backend that fails its check against eager fails the run
                failures.append(f"{case} {backend} {stepping}: {type(exc).__name__}: {exc}")
                continue
            row.update(
                case=case,
                backend=backend,
                env_groups=groups,
                stepping=stepping,
                env_alone_sps=ceiling,
                share_of_ceiling=row["worker_sps"] / ceiling,
            )
            rows.append(row)
            print(
                f"{case:18s} {backend:8s} -> {row['backend_used']:8s} {stepping}: {row['worker_sps']:12,.0f} env "
                "steps/s "
                f"({row['share_of_ceiling']:.0%} of env alone); env {row['env_share']:.0%}, policy "
                f"{row['policy_share']:.0%} "
                f"({row['policy_us_per_step']:.0f} us/step), bookkeeping {row['bookkeeping_share']:.0%}",
                flush=True,
            )
        for backend in backends if args.bare_loop else []:
            sps = bare_loop_rate(case_config(case, backend), args.min_seconds)
            if sps is None:
                print(f"{case:18s} {backend:8s} bare loop: not measured (a policy per runner)", flush=True)
                continue
            bare.append(
                {
                    "case": case,
                    "backend": backend,
                    "bare_sps": sps,
                    "env_alone_sps": ceiling,
                    "share_of_ceiling": sps / ceiling,
                }
            )
            print(
                f"{case:18s} {backend:8s} bare loop (policy, greedy action, env step): {sps:12,.0f} env steps/s "
                f"({sps / ceiling:.0%} of env alone)",
                flush=True,
            )
    columns = (
        "case | backend_used: backend | stepping | env_alone_sps: env alone steps/s | "
        "worker_sps: worker steps/s | share_of_ceiling: of env alone | env_share: env | "
        "policy_share: policy | bookkeeping_share: bookkeeping | "
        "policy_us_per_step: policy us/step"
    )
    table = markdown_table(rows, columns)
    if bare:
        table += (
            "\n\nBare loops (the worker's policy call, the greedy action and the env's step, nothing else; "
            "one group):\n\n"
        )
        table += markdown_table(
            bare,
            (
                "case | backend | env_alone_sps: env alone steps/s | "
                "bare_sps: bare loop steps/s | share_of_ceiling: of env alone"
            ),
        )
    return finish("sampling", args, info, rows, table=table, failures=failures, bare_loops=bare)


if __name__ == "__main__":
    sys.exit(main())
