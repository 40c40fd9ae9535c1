"""Worker inference as a rollout worker does it: real env observations, action sampling included, one thread.

Each call takes the next batch of real observations (never one repeated row), runs the
policy and samples actions with log-probabilities. Speed-ups are against eager measured in
the same process, with two eager baselines: distrl's own worker path (torch forward +
numpy sampling) and the usual torch policy (forward + torch.distributions).

    python benchmarks/policy_call/inference.py --backend onnxrt -bs 64
    python benchmarks/policy_call/inference.py --all                    # every available backend x mode x batch x model
    python benchmarks/policy_call/inference.py --quick                  # seconds; the test suite runs this
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import torch

from benchmarks.common import figure, finish, spread, start_study, study_parser, time_calls
from benchmarks.policies import CNN_MAX_BATCH, MODELS, build, collect_observations, example_inputs
from distrl.compile import EagerPolicy, available_backends, build_inference_policy, check_against_eager
from distrl.compile.dynamo_stats import dynamo_counts


class Caller:
    """One worker step: policy forward on the next batch, then action sampling (numpy)."""

    def __init__(self, policy, model, batches):
        self.policy, self.model, self.batches = policy, model, batches
        self.i = 0
        self.rng = np.random.default_rng(0)
        if model.is_recurrent:
            self.h, self.c = model.initial_state(len(batches[0]))

    def __call__(self):
        obs = self.batches[self.i % len(self.batches)]
        self.i += 1
        if self.model.is_recurrent:
            pd, _, self.h, self.c = self.policy(obs, self.h, self.c)
        else:
            pd, _ = self.policy(obs)
        return self.model.dist.sample_numpy(pd, self.rng)


class TorchDistributionsCaller:
    """The usual torch policy: forward, then torch.distributions sampling and log-probs."""

    def __init__(self, model, batches):
        self.model, self.batches = model, [torch.from_numpy(b) for b in batches]
        self.i = 0
        if model.is_recurrent:
            h, c = model.initial_state(len(batches[0]))
            self.h, self.c = torch.from_numpy(h), torch.from_numpy(c)

    def __call__(self):
        obs = self.batches[self.i % len(self.batches)]
        self.i += 1
        with torch.inference_mode():
            if self.model.is_recurrent:
                pd, _, self.h, self.c = self.model(obs, self.h, self.c)
            else:
                pd, _ = self.model(obs)
            dist = torch.distributions.Categorical(logits=pd)
            actions = dist.sample()
            return actions.numpy(), dist.log_prob(actions).numpy()


class ForwardCaller:
    """The policy's forward alone on the next batch (no sampling): what the runtime itself costs."""

    def __init__(self, forward, model, batches):
        self.forward, self.batches, self.i = forward, batches, 0
        self.state = model.initial_state(len(batches[0])) if model.is_recurrent else ()

    def __call__(self):
        obs = self.batches[self.i % len(self.batches)]
        self.i += 1
        return self.forward(obs, *self.state)


def bare_onnx_runtime(model, example):
    """The reference: the model exported with its weights as initializers (constant-folded), one plain
    ONNX Runtime session, one thread; the fastest this model runs in ONNX Runtime without distrl."""
    import io
    import warnings

    import onnxruntime as ort

    names = ["obs", "h", "c"][: len(example)]
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            tuple(torch.from_numpy(x) for x in example),
            buffer,
            input_names=names,
            dynamic_axes={n: {0: "batch"} for n in names},
            dynamo=False,
            opset_version=17,
        )
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    start = time.perf_counter()
    session = ort.InferenceSession(buffer.getvalue(), options, providers=["CPUExecutionProvider"])
    build_s = time.perf_counter() - start
    return (lambda *inputs: session.run(None, dict(zip(names, inputs)))), build_s


def sync_seconds(policy, model, repeats: int = 5) -> float:
    """Median time of a weight sync (new weights each time), as a worker does one per iteration."""
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    times = []
    for i in range(repeats):
        new = {k: v + np.float32(1e-4 * (i + 1)) if v.dtype.kind == "f" else v for k, v in state.items()}
        start = time.perf_counter()
        policy.update_weights(new)
        times.append(time.perf_counter() - start)
    policy.update_weights(state)
    return float(np.median(times))


def measure(model_name: str, backend: str, mode: str, batch: int, repeats: int, min_seconds: float) -> dict:
    # Each configuration compiles from scratch: one process compiling many shapes would otherwise hit
    # dynamo's cache-size limit and silently run eager.
    torch._dynamo.reset()
    batches, config = collect_observations(model_name, batch)
    model = build(model_name, config)
    example = example_inputs(model, batches)
    eager_s = spread(time_calls(Caller(EagerPolicy(model), model, batches), min_seconds, repeats))["median"]
    torch_dist_s = spread(time_calls(TorchDistributionsCaller(model, batches), min_seconds, repeats))["median"]
    counts = dynamo_counts()
    start = time.perf_counter()
    policy, report = build_inference_policy(model, backend, example, mode)
    compile_s = time.perf_counter() - start
    caller = Caller(policy, model, batches)
    caller()  # warm-up call outside the timings
    warm = dynamo_counts()
    per_call = time_calls(caller, min_seconds, repeats)
    stats = spread(per_call)
    problem = check_against_eager(policy, model, example) if report.backend != "eager" else None
    # The runtime alone: forward without sampling, beside a bare ONNX Runtime session of the same model.
    bare, bare_build_s = bare_onnx_runtime(model, example)
    eager_forward_s = spread(time_calls(ForwardCaller(EagerPolicy(model), model, batches), min_seconds, repeats))[
        "median"
    ]
    forward_s = spread(time_calls(ForwardCaller(policy, model, batches), min_seconds, repeats))["median"]
    bare_s = spread(time_calls(ForwardCaller(bare, model, batches), min_seconds, repeats))["median"]
    return {
        "model": model_name,
        "backend": backend,
        "backend_used": report.backend,
        "mode": mode,
        "batch": batch,
        "us_per_call": stats["median"] * 1e6,
        "us_p25": stats["p25"] * 1e6,
        "us_p75": stats["p75"] * 1e6,
        "calls_per_s": 1.0 / stats["median"],
        "samples_per_s": batch / stats["median"],
        "eager_us": eager_s * 1e6,
        "torch_distributions_us": torch_dist_s * 1e6,
        "speedup_vs_eager": eager_s / stats["median"],
        "speedup_vs_torch_distributions": torch_dist_s / stats["median"],
        "compile_s": compile_s,
        "forward_us": forward_s * 1e6,
        "eager_forward_us": eager_forward_s * 1e6,
        "bare_ort_forward_us": bare_s * 1e6,
        "forward_vs_bare_ort": bare_s / forward_s,
        "forward_speedup_vs_eager": eager_forward_s / forward_s,
        "bare_ort_build_ms": bare_build_s * 1e3,
        "sync_ms": sync_seconds(policy, model) * 1e3,
        "graphs_compiled": warm["compiled_graphs"] - counts["compiled_graphs"],
        "recompiles": dynamo_counts()["compiled_graphs"] - warm["compiled_graphs"],
        "matches_eager_after_update": problem is None,
        "mismatch": problem,
        "fallback_reason": report.reason,
    }


def plan(args) -> list[tuple[str, str, str, int]]:
    if not args.all:
        return [(args.model, args.backend, args.mode, args.batch_size)]
    backends = [row["name"] for row in available_backends() if row["available"] and row["name"] != "eager"]
    if args.backends:
        backends = [b for b in backends if b in args.backends]
    modes = {"inductor": ["default", "max-autotune-no-cudagraphs"]}
    runs = []
    for model in args.models:
        for batch in args.batch_sizes:
            if model == "cnn" and batch > CNN_MAX_BATCH:
                continue
            for backend in backends:
                for mode in modes.get(backend, ["default"]):
                    runs.append((model, backend, mode, batch))
    return runs


def chart(rows: list[dict]):
    def draw(path: Path) -> None:
        models = sorted({r["model"] for r in rows})
        with figure(path, (5 * len(models), 4), ncols=len(models), squeeze=False) as axes:
            for ax, model in zip(axes[0], models):
                for key in sorted({(r["backend"], r["mode"]) for r in rows if r["model"] == model}):
                    pts = sorted(
                        (r["batch"], r["speedup_vs_eager"])
                        for r in rows
                        if r["model"] == model and (r["backend"], r["mode"]) == key
                    )
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{key[0]} {key[1]}")
                ax.axhline(1.0, color="grey", lw=0.8)
                ax.set_xscale("log", base=2)
                ax.set_title(f"{model}: speed-up vs eager (incl. sampling)")
                ax.set_xlabel("batch")
                ax.legend(fontsize=7)

    return draw


def main(argv=None) -> int:
    parser = study_parser(__doc__, quick="seconds: MLP at batch 64, onnxrt, few repeats", overrides=False)
    parser.add_argument("--backend", default="onnxrt", choices=["eager", "inductor", "onnxrt", "ipex", "auto"])
    parser.add_argument("--mode", default="default")
    parser.add_argument("-bs", "--batch-size", type=int, default=64)
    parser.add_argument("--model", default="mlp", choices=list(MODELS))
    parser.add_argument("--all", action="store_true", help="sweep every available backend x mode x batch x model")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--backends", nargs="+", help="with --all: only these backends")
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 4, 16, 64, 256, 1024])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--min-seconds", type=float, default=0.25, help="minimum duration of one repeat")
    args, info = start_study(parser, argv)
    if args.quick:
        args.all, args.model, args.backend, args.batch_size, args.repeats, args.min_seconds = (
            False,
            "mlp",
            "onnxrt",
            64,
            3,
            0.05,
        )

    torch.set_num_threads(1)  # a rollout worker has one core
    rows, failures = [], []
    for model, backend, mode, batch in plan(args):
        row = measure(model, backend, mode, batch, args.repeats, args.min_seconds)
        # the row's backend as asked, with what auto chose (two rows of one backend would read as a repeat)
        row["backend_shown"] = f"auto: {row['backend_used']}" if backend == "auto" else row["backend_used"]
        rows.append(row)
        print(
            f"{model:4s} {backend:8s} {mode:26s} bs {batch:5d}: {row['us_per_call']:9.1f} us/call "
            f"[{row['us_p25']:.1f}-{row['us_p75']:.1f}], {row['samples_per_s']:12,.0f} samples/s, "
            f"x{row['speedup_vs_eager']:.2f} vs eager, x{row['speedup_vs_torch_distributions']:.2f} vs "
            "torch.distributions, "
            f"compile {row['compile_s']:.2f} s, recompiles {row['recompiles']}; forward {row['forward_us']:.1f} us "
            f"(bare ORT {row['bare_ort_forward_us']:.1f} us: x{row['forward_vs_bare_ort']:.2f}), sync "
            f"{row['sync_ms']:.1f} ms"
            + (
                ""
                if row["backend_used"] == backend
                else f"  [chose {row['backend_used']}]"
                if backend == "auto"
                else f"  [FELL BACK to {row['backend_used']}: {row['fallback_reason']}]"
            ),
            flush=True,
        )
        if not row["matches_eager_after_update"]:
            failures.append(f"{model} {backend} {mode} bs {batch}: {row['mismatch']}")
        if backend in ("inductor", "ipex") and row["backend_used"] == backend and row["graphs_compiled"] == 0:
            failures.append(f"{model} {backend} {mode} bs {batch}: nothing was compiled (dynamo ran eager)")
    columns = (
        "model | backend_shown: backend | mode | batch | us_per_call: us/call | "
        "samples_per_s: samples/s | speedup_vs_eager: x eager | "
        "speedup_vs_torch_distributions: x torch.distributions | "
        "forward_us: forward us | bare_ort_forward_us: bare ORT forward us | "
        "forward_vs_bare_ort: x bare ORT | sync_ms: sync ms | compile_s: compile s | "
        "recompiles"
    )
    name = (
        ("inference" if not args.backends else "inference_" + "_".join(args.backends))
        if args.all
        else f"inference_{args.model}_{args.backend}_{args.mode}_bs{args.batch_size}"
    )
    if args.all and set(args.models) != set(MODELS):  # a sweep of some models: named by them too
        name += "_" + "_".join(args.models)
    return finish(name, args, info, rows, columns, chart=chart(rows) if args.all else None, failures=failures)


if __name__ == "__main__":
    sys.exit(main())
