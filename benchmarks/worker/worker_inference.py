"""Where a worker's policy should run on a GPU node: in the worker itself (``rollout.num_gpus_per_worker`` with the
``cuda`` backend, as RLlib's ``num_gpus_per_env_runner``), or in one inference actor per node that batches its
workers' observations (Sample Factory's policy workers, SEED RL's central inference).

What each way adds to one step of a group of env copies, measured on this machine:

- the env's own step of the group: what an inference round trip must hide under (with two env groups, one group's
  step runs while the other's actions are fetched);
- the policy called in the worker, on each backend available here (the CPU backends; ``cuda`` where CUDA is);
- a Ray round trip to an actor on this node that carries the group's observations and brings back outputs of the
  policy's shapes: what a central inference actor adds to every step before its own forward, which is left out
  (the actor returns ready arrays), so the figure is a floor.

    python benchmarks/worker/worker_inference.py          # CartPole MLP (64 envs), Breakout CNN (4 and 8 envs)
    python benchmarks/worker/worker_inference.py --quick  # seconds; the test suite runs this
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
# Before anything imports Ray, which reads them then: a distrl run's settings for its private Ray.
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np
import torch

from benchmarks.common import finish, spread, study_machine, study_parser, time_calls
from benchmarks.sampling_cases import case_config
from distrl.compile import available_backends
from distrl.compile.build import build_inference_policy
from distrl.data.memory import memory_for
from distrl.envs import make_vec_env
from distrl.models import build_model

CASES = {  # name: (sampling.py's case, env copies in the group)
    "cartpole_mlp_64": ("cartpole_mlp_64", 64),
    "breakout_cnn_4": ("breakout_cnn_8", 4),
    "breakout_cnn_8": ("breakout_cnn_8", 8),
}


class Echo:
    """The far end of a round trip: takes a step's inputs, returns arrays of the policy's output shapes."""

    def __init__(self, outputs: list[np.ndarray]):
        self.outputs = outputs

    def act(self, *inputs: np.ndarray) -> list[np.ndarray]:
        return self.outputs


def measure(name: str, backends: list[str], seconds: float, repeats: int) -> dict:
    import ray

    base, copies = CASES[name]
    config = case_config(base, "eager")
    config = config.model_copy(update={"env": config.env.model_copy(update={"num_envs_per_worker": copies})})
    envs = make_vec_env(config.env, num_threads=1)
    obs, _ = envs.reset(seed=0)
    actions = [envs.action_space.sample() for _ in range(64)]
    turn = iter(range(10**9))
    env_s = time_calls(lambda: envs.step(actions[next(turn) % 64]), seconds, repeats)
    model_obs_space = getattr(envs, "structured_observation_space", None) or envs.single_observation_space
    model = build_model(model_obs_space, envs.single_action_space, config.model).eval()
    envs.close()
    inputs = memory_for(model).example(obs if obs.dtype == np.uint8 else obs.astype(np.float32), None)
    row = {
        "case": name,
        "copies": copies,
        "obs_kb": sum(x.nbytes for x in inputs) / 1e3,
        "env_step_us": spread(env_s)["median"] * 1e6,
    }
    for backend in backends:
        policy, report = build_inference_policy(model, backend, inputs, strict=True)
        row[f"{backend}_us"] = (
            spread(time_calls(lambda policy=policy: policy(*inputs), seconds, repeats))["median"] * 1e6
        )
    outputs = [np.asarray(o).copy() for o in build_inference_policy(model, "eager", inputs)[0](*inputs)]
    echo = ray.remote(num_cpus=0)(Echo).remote(outputs)
    ray.get(echo.act.remote(*inputs))
    row["round_trip_us"] = (
        spread(time_calls(lambda: ray.get(echo.act.remote(*inputs)), seconds, repeats))["median"] * 1e6
    )
    row["round_trip_of_env_step"] = row["round_trip_us"] / row["env_step_us"]
    ray.kill(echo)
    return row


def main(argv=None) -> int:
    parser = study_parser(__doc__, quick="seconds: CartPole, eager and onnxrt", overrides=False)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--backends", nargs="+", help="default: every available one but auto")
    parser.add_argument("--seconds", type=float, default=1.0, help="time per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    backends = args.backends or [r["name"] for r in available_backends() if r["available"] and not r["chooses"]]
    if args.quick:
        args.cases, backends, args.seconds, args.repeats = ["cartpole_mlp_64"], ["eager", "onnxrt"], 0.2, 3
    torch.set_num_threads(1)
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        info = study_machine()
        rows = []
        for name in args.cases:
            row = measure(name, backends, args.seconds, args.repeats)
            rows.append(row)
            calls = ", ".join(f"{b} {row[f'{b}_us']:,.0f}" for b in backends)
            print(
                f"{name:16s} ({row['obs_kb']:,.0f} kB in): env step {row['env_step_us']:,.0f} us; in the worker: "
                f"{calls} us; "
                f"Ray round trip {row['round_trip_us']:,.0f} us ({row['round_trip_of_env_step']:.2f}x the env step)",
                flush=True,
            )
    finally:
        ray.shutdown()
    columns = [
        ("case", "case"),
        ("obs_kb", "inputs kB"),
        ("env_step_us", "env step us"),
        *[(f"{b}_us", f"{b} in the worker us") for b in backends],
        ("round_trip_us", "Ray round trip us"),
        ("round_trip_of_env_step", "round trip / env step"),
    ]
    return finish("worker_inference", args, info, rows, columns)


if __name__ == "__main__":
    sys.exit(main())
