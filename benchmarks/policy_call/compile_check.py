"""The compiled-vs-eager check on this CPU: legitimate float32 differences, the tolerance, and the margin to a stale
policy.

For every model and worker backend, on real observations and after several weight updates,
it records how far the compiled policy's outputs are from eager float32 (``difference``) and
from a float64 run (``error``), eager's own float32 error, and the tolerance the check
applies (``distrl/compile/check.py``). Beside it, the error of a policy acting one optimiser
step behind (lr 2.5e-4 per weight): the check must refuse that one, so ``stale / allowed``
must stay well above 1 while ``error / allowed`` stays below it. Run it on a new CPU kind
before trusting the check there.

    python benchmarks/policy_call/compile_check.py          # every model x backend, batches 1, 16, 64
    python benchmarks/policy_call/compile_check.py --quick  # MLP, onnxrt, batch 16; the test suite runs this
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import torch

from benchmarks.common import finish, start_study, study_parser
from benchmarks.policies import MODELS, collect_observations
from distrl.compile import EagerPolicy, Float64Reference, available_backends, build_inference_policy, check_output
from distrl.envs import make_vec_env
from distrl.models import build_model


def one_step_behind(state: dict, generator: torch.Generator, lr: float = 2.5e-4) -> dict:
    return {k: v + lr * torch.randn(v.shape, generator=generator).sign() for k, v in state.items()}


def measure(model_name: str, backend: str, batch: int, updates: int) -> dict:
    """Worst legitimate error over ``updates`` weight updates, and the smallest stale-policy error, relative to the
    tolerance."""
    torch._dynamo.reset()  # a fresh dynamo cache per row, so no row silently runs eager past the recompile limit
    batches, config = collect_observations(model_name, batch)
    envs = make_vec_env(config.env)
    torch.manual_seed(0)
    model = build_model(envs.single_observation_space, envs.single_action_space, config.model).eval()
    envs.close()

    def inputs(obs):
        if model.is_recurrent:
            rng = np.random.default_rng(len(obs))
            h = rng.uniform(-1, 1, (len(obs), model.lstm_size)).astype(np.float32)
            return obs, h, rng.uniform(-1, 1, h.shape).astype(np.float32)
        return (obs,)

    policy, report = build_inference_policy(model, backend, inputs(batches[0]), strict=True)
    reference = Float64Reference(model)
    generator = torch.Generator().manual_seed(1)
    worst = {"difference": 0.0, "error": 0.0, "eager_error": 0.0, "tolerance": np.inf, "error_over_allowed": 0.0}
    stale_ratio = np.inf
    for update in range(updates):
        state = {k: v + 0.02 * torch.randn(v.shape, generator=generator) for k, v in model.state_dict().items()}
        policy.update_weights({k: v.numpy() for k, v in state.items()})
        if not policy.shares_module:
            model.load_state_dict(state)
        example = inputs(batches[update % len(batches)])
        eager, ref = EagerPolicy(model)(*example), reference(*example)
        for i, (got, e, r) in enumerate(zip(policy(*example), eager, ref)):
            check = check_output(i, got, e, r, reference.reductions)
            ratio = check.error / check.tolerance
            if ratio >= worst["error_over_allowed"]:
                worst = {
                    "difference": check.difference,
                    "error": check.error,
                    "eager_error": check.eager_error,
                    "tolerance": check.tolerance,
                    "error_over_allowed": ratio,
                    "output": i,
                }
        # The same inputs, with a copy of the policy's model one optimiser step behind.
        stale = copy.deepcopy(model)
        stale.load_state_dict(one_step_behind(model.state_dict(), generator))
        # Refused when any output is off: the margin is the largest ratio over outputs, the smallest over updates.
        checks = [
            check_output(i, got, e, r, reference.reductions)
            for i, (got, e, r) in enumerate(zip(EagerPolicy(stale)(*example), eager, ref))
        ]
        stale_ratio = min(stale_ratio, max(c.error / c.tolerance for c in checks))
    return {
        "model": model_name,
        "backend": report.backend,
        "batch": batch,
        "updates": updates,
        **worst,
        "stale_over_allowed": stale_ratio,
    }


def main(argv=None) -> int:
    parser = study_parser(__doc__, quick="seconds: MLP, onnxrt, batch 16, 3 updates", overrides=False)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 16, 64])
    parser.add_argument("--updates", type=int, default=10, help="weight updates measured per row")
    args, info = start_study(parser, argv)
    torch.set_num_threads(1)
    backends = [r["name"] for r in available_backends() if r["available"] and r["name"] != "eager" and not r["chooses"]]
    plan = [(m, b, bs) for m in args.models for b in backends for bs in args.batch_sizes]
    if args.quick:
        plan, args.updates = [("mlp", "onnxrt", 16)], 3
    rows, failures = [], []
    for model_name, backend, batch in plan:
        row = measure(model_name, backend, batch, args.updates)
        rows.append(row)
        print(
            f"{model_name:4s} {backend:8s} bs {batch:3d}: max |compiled - eager| {row['difference']:.3g}, "
            f"error vs float64 {row['error']:.3g} (eager's {row['eager_error']:.3g}), allowed {row['tolerance']:.3g}: "
            f"{row['error_over_allowed']:.3f} of it; one step behind: {row['stale_over_allowed']:,.0f}x allowed",
            flush=True,
        )
        if row["error_over_allowed"] > 1:
            failures.append(f"{model_name} {backend} bs {batch}: a correct policy exceeds the tolerance")
        if row["stale_over_allowed"] <= 1:
            failures.append(f"{model_name} {backend} bs {batch}: a policy one step behind passes the check")
    columns = (
        "model | backend | batch | difference: max |compiled - eager| | "
        "eager_error: eager error vs f64 | error: compiled error vs f64 | "
        "tolerance: allowed | error_over_allowed: error / allowed | "
        "stale_over_allowed: one step behind / allowed"
    )
    return finish("compile_check", args, info, rows, columns, failures=failures)


if __name__ == "__main__":
    sys.exit(main())
