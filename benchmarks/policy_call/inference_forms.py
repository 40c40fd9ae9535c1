"""A worker policy's forward in each form (``rollout.compile.precision`` x ``memory_format``), one thread, beside ONNX
Runtime (the default backend, fp32) on the same real observations.

For each model and batch: onnxrt, then every backend that runs torch kernels (eager, inductor, ipex where installed)
in fp32 and bf16, contiguous and channels-last (layouts only for convolutional models). Each form is built as a worker
builds it and checked against eager fp32 (bf16 within bf16's rounding); a form that fails its check is reported, not
timed. Then what the settings' ``auto`` picks here: ``rollout.compile.backend=auto`` with precision and layout auto.
bf16 is timed only on a CPU with bf16 instructions (AMX, AVX512-BF16) unless ``--bf16-anyway`` (emulated: slow).

    python benchmarks/policy_call/inference_forms.py  # Nature-CNN on Breakout, batches 8 and 32
    python benchmarks/policy_call/inference_forms.py --models cnn mlp --batch-sizes 8 32 128
    python benchmarks/policy_call/inference_forms.py --quick  # seconds: the MLP at batch 16, eager and onnxrt
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from benchmarks.common import finish, spread, study_machine, study_parser, time_calls
from benchmarks.policies import build, collect_observations, example_inputs
from distrl.common.hardware import cpu_bf16, has_convolutions
from distrl.compile import available_backends, build_inference_policy
from distrl.compile.backends import BACKENDS
from distrl.compile.backends.base import Form
from distrl.compile.forms import build_candidate


def forms_to_time(model, bf16: bool) -> list[Form]:
    layouts = ["contiguous", "channels_last"] if has_convolutions(model) else ["contiguous"]
    precisions = ["fp32", "bf16"] if bf16 else ["fp32"]
    return [Form(p, layout) for p in precisions for layout in layouts]


def forward_us(policy, batches, min_seconds: float, repeats: int) -> float:
    """Median microseconds per forward over distinct real batches."""
    state = {"i": 0}

    def call():
        inputs = batches[state["i"] % len(batches)]
        state["i"] += 1
        policy(*inputs)

    for _ in range(3):
        call()
    return spread(time_calls(call, min_seconds, repeats))["median"] * 1e6


def measure(
    model_name: str, batch: int, backends: list[str], bf16: bool, min_seconds: float, repeats: int
) -> list[dict]:
    observations, config = collect_observations(model_name, batch)
    model = build(model_name, config)
    example = example_inputs(model, observations)
    batches = [example_inputs(model, [obs]) for obs in observations]
    rows = []
    for backend in backends:
        forms = [Form()] if not BACKENDS[backend].runs_torch else forms_to_time(model, bf16)
        for form in forms:
            torch._dynamo.reset()
            start = time.perf_counter()
            candidate = build_candidate(backend, form, model, example, "default", {}, {})
            row = {
                "model": model_name,
                "batch": batch,
                "backend": backend,
                "precision": form.precision,
                "memory_format": form.memory_format,
                "build_s": time.perf_counter() - start,
                "check": candidate.problem or "passed",
            }
            if candidate.problem is None:
                row["us"] = forward_us(candidate.policy, batches, min_seconds, repeats)
            rows.append(row)
    onnx = next((r["us"] for r in rows if r["backend"] == "onnxrt" and "us" in r), None)
    for row in rows:
        row["x_onnxrt"] = onnx / row["us"] if onnx and "us" in row else None
    torch._dynamo.reset()
    start = time.perf_counter()
    policy, report = build_inference_policy(model, "auto", example, precision="auto", memory_format="auto")
    rows.append(
        {
            "model": model_name,
            "batch": batch,
            "backend": f"auto: {report.backend}",
            "precision": report.form.precision,
            "memory_format": report.form.memory_format,
            "build_s": time.perf_counter() - start,
            "check": "passed",
            "us": forward_us(policy, batches, min_seconds, repeats),
        }
    )
    rows[-1]["x_onnxrt"] = onnx / rows[-1]["us"] if onnx else None
    for row in rows:
        us = f"{row['us']:9.1f} us" if "us" in row else "   (not timed)"
        x = f"x{row['x_onnxrt']:.2f} onnxrt" if row.get("x_onnxrt") else ""
        print(
            f"{model_name:4s} bs {batch:4d} {row['backend']:16s} {row['precision']:4s} {row['memory_format']:13s} {us} "
            f"{x:14s} "
            f"build {row['build_s']:.1f} s, check {row['check'][:120]}",
            flush=True,
        )
    return rows


def main(argv=None) -> int:
    parser = study_parser(__doc__, quick="seconds: the MLP at batch 16, eager and onnxrt", overrides=False)
    parser.add_argument("--models", nargs="+", default=["cnn"], choices=["cnn", "mlp", "lstm"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[8, 32])
    parser.add_argument("--backends", nargs="+", help="only these (default: every available one but auto)")
    parser.add_argument("--bf16-anyway", action="store_true", help="time bf16 on a CPU without bf16 instructions too")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--min-seconds", type=float, default=0.3, help="minimum duration of one repeat")
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.batch_sizes, args.backends, args.repeats, args.min_seconds = (
            ["mlp"],
            [16],
            ["eager", "onnxrt"],
            3,
            0.05,
        )
    torch.set_num_threads(1)  # a rollout worker has one core
    info = study_machine()
    info["cpu_bf16"] = cpu_bf16()
    print(f"bf16 instructions: {info['cpu_bf16'] or 'none'}")
    available = [row["name"] for row in available_backends() if row["available"] and not BACKENDS[row["name"]].chooses]
    backends = [b for b in ["onnxrt", *available] if b in available and (not args.backends or b in args.backends)]
    backends = list(dict.fromkeys(backends))
    rows = []
    for model in args.models:
        for batch in args.batch_sizes:
            rows += measure(
                model, batch, backends, bool(info["cpu_bf16"]) or args.bf16_anyway, args.min_seconds, args.repeats
            )
    failures = [
        f"{r['model']} bs {r['batch']} {r['backend']} {r['precision']} {r['memory_format']}: {r['check']}"
        for r in rows
        if r["check"] != "passed"
    ]
    columns = (
        "model | batch | backend | precision | memory_format: layout | us: us/forward | "
        "x_onnxrt: x onnxrt | build_s: build s | check"
    )
    return finish("inference_forms", args, info, rows, columns, failures=failures)


if __name__ == "__main__":
    sys.exit(main())
