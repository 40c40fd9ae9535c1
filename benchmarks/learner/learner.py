"""PPO update speed: eager vs inductor modes (and AMP, and for the CNN its memory format), on MLP, CNN and LSTM, on
real rollout batches.

The first update (which compiles) is reported apart from the steady state. A compiled
variant whose first update disagrees with eager's (same weights, same batch) fails the run.

    python benchmarks/learner/learner.py
    python benchmarks/learner/learner.py --models mlp --quick
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import torch

from benchmarks.common import figure, finish, spread, study_machine, study_parser
from distrl.config import load_config
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.rollout import RolloutWorker

ROOT = Path(__file__).resolve().parents[2]
MODELS = {
    "mlp": (ROOT / "configs" / "cartpole.yaml", []),
    "lstm": (ROOT / "configs" / "cartpole_lstm.yaml", []),
    "cnn": (ROOT / "configs" / "breakout.yaml", ["env.num_envs_per_worker=8", "rollout.rollout_length=128"]),
}


def variants(cuda: bool, quick: bool, recurrent: bool, conv: bool) -> list[tuple[str, list[str]]]:
    """Each variant's settings. Every one runs contiguous (NCHW) but those named channels_last, so that the layout
    is compared apart from the rest (``learner.memory_format: auto`` picks channels_last for a CNN on CPU)."""
    out = [("eager", []), ("auto", []), ("inductor default", ["learner.compile=true"])]
    if conv:
        out += [("eager channels_last", ["learner.memory_format=channels_last"])]
    if not quick:
        out += [
            ("inductor max-autotune-no-cudagraphs", ["learner.compile=max-autotune-no-cudagraphs"]),
            ("eager bf16", ["learner.amp=bf16"]),
            ("inductor default bf16", ["learner.compile=true", "learner.amp=bf16"]),
        ]
        if conv:
            out += [
                ("inductor default channels_last", ["learner.compile=true", "learner.memory_format=channels_last"]),
                ("eager bf16 channels_last", ["learner.amp=bf16", "learner.memory_format=channels_last"]),
            ]
        if cuda:
            if not recurrent:  # the config refuses CUDA-graph modes for LSTMs (see distrl/config/schema.py)
                out += [
                    ("inductor reduce-overhead", ["learner.compile=reduce-overhead"]),
                    ("inductor max-autotune", ["learner.compile=max-autotune"]),
                ]
            out.append(("eager fp16", ["learner.amp=fp16"]))

    def pinned(name: str, extra: list[str]) -> list[str]:
        """Each variant exactly as named: the layout, kernels and precision that ``auto`` would otherwise choose;
        ``auto``
        as shipped (its first update times its ways; the row says which it kept)."""
        if name == "auto":
            return extra
        keys = {item.split("=")[0] for item in extra}
        return [
            *extra,
            *(["learner.memory_format=contiguous"] if "channels_last" not in name else []),
            *(["learner.compile=eager"] if "learner.compile" not in keys else []),
            *(["learner.amp=off"] if "learner.amp" not in keys else []),
        ]

    return [(name, pinned(name, extra)) for name, extra in out]


def transfer_rows(model: str, batch) -> list[dict]:
    """Host-to-GPU copy of one batch: pageable numpy memory vs pinned (what the learner uses on CUDA)."""
    arrays = list(batch.arrays().values())
    nbytes = sum(a.nbytes for a in arrays)
    rows = []
    for name, pin in (("pageable", False), ("pinned", True)):
        sources = [torch.from_numpy(a) for a in arrays]
        if pin:
            sources = [t.pin_memory() for t in sources]
        times = []
        for _ in range(20):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for t in sources:
                t.to("cuda", non_blocking=pin)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        median = spread(times)["median"]
        rows.append(
            {
                "model": model,
                "memory": name,
                "batch_mb": nbytes / 1e6,
                "copy_ms": median * 1e3,
                "gb_per_s": nbytes / median / 1e9,
            }
        )
        print(
            f"{model:4s} host->GPU copy, {name:8s}: {median * 1e3:7.2f} ms for {nbytes / 1e6:.1f} MB "
            f"({nbytes / median / 1e9:.1f} GB/s)",
            flush=True,
        )
    return rows


def main(argv=None) -> int:
    parser = study_parser(__doc__, quick="the MLP only, 2 updates", overrides=False)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--updates", type=int, default=5, help="steady-state updates timed per variant")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a learner actor's CPUs)")
    parser.add_argument(
        "--variants", nargs="+", help="only these variants (names as printed, e.g. eager 'inductor default')"
    )
    args = parser.parse_args(argv)
    if args.variants and "eager" not in args.variants:
        parser.error("--variants must include eager (every other variant is compared with it)")
    if args.quick:
        args.models, args.updates = ["mlp"], 2
    torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    device_overrides = ["learner.device=cuda", "learner.num_gpus_per_learner=1"] if cuda else []
    info = study_machine()
    rows, failures, transfers = [], [], []
    for model in args.models:
        path, overrides = MODELS[model]
        # The learner sets torch's threads itself (learner.num_threads): --threads is said to it, or it would undo it.
        overrides = [*overrides, f"learner.num_threads={args.threads}"]
        base = load_config(path, overrides)
        worker = RolloutWorker(base)
        sample = worker.sample()
        if cuda:
            transfers += transfer_rows(model, sample[1])
        eager_first_loss = None
        eager_rate = None
        conv = base.model.type == "cnn"
        chosen = [
            (n, e)
            for n, e in variants(cuda, args.quick, base.model.lstm_size > 0, conv)
            if not args.variants or n in args.variants
        ]
        for name, extra in chosen:
            config = load_config(path, overrides + device_overrides + extra)
            # Each variant compiles from scratch: one process compiling many variants would otherwise hit
            # dynamo's recompile limit and silently run the last ones eagerly.
            torch._dynamo.reset()
            learner = Learner(config, *probe_spaces(config.env))
            start = time.perf_counter()
            first = learner.update(sample)
            first_s = time.perf_counter() - start
            times = []
            for _ in range(args.updates):
                start = time.perf_counter()
                metrics = learner.update(sample)
                if cuda:
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
            stats = spread(times)
            samples = base.batch_size * base.ppo.epochs
            rate = samples / stats["median"]
            chose = learner.describe()
            if name == "eager":
                eager_first_loss, eager_rate = first["loss_value"], rate
            elif (
                "16" not in name
                and chose["precision"] == "fp32"
                and not np.isclose(first["loss_value"], eager_first_loss, rtol=1e-3)
            ):
                failures.append(
                    f"{model} {name}: first-update value loss {first['loss_value']:.6g} vs eager {eager_first_loss:.6g}"
                )
            if not np.isfinite(metrics["loss_value"]):
                failures.append(f"{model} {name}: non-finite loss")
            row = {
                "model": model,
                "variant": name,
                "device": str(learner.device),
                "batch": base.batch_size,
                "epochs": base.ppo.epochs,
                "minibatch": base.ppo.minibatch_size,
                "first_update_s": first_s,
                "update_s": stats["median"],
                "update_s_p25": stats["p25"],
                "update_s_p75": stats["p75"],
                "samples_per_s": rate,
                "speedup_vs_eager": rate / eager_rate,
                "recompiles": metrics["learner_recompiles"],
                "kept": f"{chose['kernels']} kernels, {chose['precision']}, {chose['memory_format']}",
                "trial": chose["trial"],
            }
            rows.append(row)
            print(
                f"{model:4s} {name:38s} first {first_s:6.2f} s, steady {stats['median'] * 1e3:8.1f} ms "
                f"[{stats['p25'] * 1e3:.1f}-{stats['p75'] * 1e3:.1f}], {rate:10,.0f} samples/s, "
                f"x{row['speedup_vs_eager']:.2f} vs eager, recompiles {row['recompiles']}; {row['kept']}"
                + (
                    f"; trial: {[(r['way'], r['step_ms']) for r in row['trial']]}"
                    if row["trial"] and len(row["trial"]) > 1
                    else ""
                ),
                flush=True,
            )
    columns = (
        "model | variant | device | batch | first_update_s: first update s | "
        "update_s: steady update s | samples_per_s: samples/s | "
        "speedup_vs_eager: x eager | recompiles | kept: kernels, precision, layout"
    )

    def chart(path: Path) -> None:
        with figure(path, (9, 4)) as ax:
            labels = [f"{r['model']}\n{r['variant']}" for r in rows]
            ax.bar(range(len(rows)), [r["speedup_vs_eager"] for r in rows])
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=6)
            ax.set_ylabel("PPO update speed-up vs eager")

    name = "learner_gpu" if cuda else "learner"
    if set(args.models) != set(MODELS) and not args.quick:
        name += "_" + "_".join(args.models)
    return finish(name, args, info, rows, columns, chart=chart, failures=failures, transfers=transfers)


if __name__ == "__main__":
    sys.exit(main())
