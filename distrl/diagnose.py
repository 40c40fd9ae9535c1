"""``distrl diagnose``: the checks to run first when training is slow.

Versions, CPU features, GPU, memory, which worker backends work here, and measured rates
for the config's own env and model: env steps/s, policy latency per backend (p50/p95/p99,
action sampling included, one thread as in a worker) and one PPO update.
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
from rich.markup import escape


def _versions() -> dict[str, str | None]:
    out = {"python": platform.python_version()}
    for module in (
        "torch",
        "ray",
        "gymnasium",
        "numpy",
        "onnxruntime",
        "onnx",
        "intel_extension_for_pytorch",
        "ale_py",
    ):
        try:
            out[module] = __import__(module).__version__
        except Exception:
            out[module] = None
    return out


def _cpu() -> dict:
    import torch

    model, flags = platform.processor() or "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    wanted = ["avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile"]
    return {
        "model": model,
        "cores": os.cpu_count(),
        "features": [f for f in wanted if f in flags],
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "torch_threads": torch.get_num_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
    }


def _memory() -> dict:
    import psutil

    vm = psutil.virtual_memory()
    return {"total_gb": round(vm.total / 2**30, 1), "available_gb": round(vm.available / 2**30, 1)}


def _gpu() -> dict | None:
    import torch

    if not torch.cuda.is_available():
        return None
    info = {
        "name": torch.cuda.get_device_name(0),
        "count": torch.cuda.device_count(),
        "bf16": torch.cuda.is_bf16_supported(),
    }
    if shutil.which("nvidia-smi"):
        query = "utilization.gpu,memory.used,memory.total"
        res = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"], capture_output=True, text=True
        )
        if res.returncode == 0:
            util, used, total = (x.strip() for x in res.stdout.splitlines()[0].split(","))
            info.update(utilization_pct=float(util), memory_used_mb=float(used), memory_total_mb=float(total))
    return info


def _percentiles(samples_s: list[float]) -> dict:
    us = np.asarray(samples_s) * 1e6
    return {
        "p50_us": float(np.percentile(us, 50)),
        "p95_us": float(np.percentile(us, 95)),
        "p99_us": float(np.percentile(us, 99)),
    }


def measure(config, seconds: float = 0.5, phase=lambda text: None) -> dict:
    """Env rate, per-backend policy latency and one PPO update for ``config``'s env and model; ``phase(text)`` is
    told what is being measured."""
    import torch

    from distrl.compile import available_backends, build_inference_policy, checks_against_eager
    from distrl.envs import make_run_vec_env
    from distrl.learner.policy_set import learner_class
    from distrl.rollout import make_worker

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    phase(f"stepping {config.env.id} with random actions")
    if config.league is not None:  # the learner's seat of a two-player game, against the random player
        from distrl.envs.games import random_actions
        from distrl.envs.games.seat import LeagueVecEnv

        envs = LeagueVecEnv(config)
        envs.set_plan({"shares": {"random": 1.0}, "env_kwargs": dict(config.league.stages()[0].env_kwargs)})
        act = lambda mask: random_actions(envs.single_action_space, mask, rng, envs.num_envs)  # noqa: E731 (legal moves)
    else:
        envs = make_run_vec_env(config)
        act = lambda mask: envs.action_space.sample()  # noqa: E731
    _, info = envs.reset(seed=0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        _, _, _, _, info = envs.step(act(info.get("action_mask")))
        steps += envs.num_envs
    env_sps = steps / (time.perf_counter() - start)
    envs.close()

    worker = make_worker(config)
    example = worker.runner.policy_inputs()
    rng = np.random.default_rng(0)
    latency = {}
    for row in available_backends():
        if row["chooses"]:  # auto: its choice is one of the rows measured here
            continue
        if not row["available"]:
            latency[row["name"]] = {"available": False, "reason": row["reason"]}
            continue
        phase(f"building and timing the {row['name']} policy")
        policy, report = build_inference_policy(worker.model, row["name"], example)
        if report.backend != row["name"]:
            latency[row["name"]] = {"available": False, "reason": report.reason}
            continue
        for _ in range(5):
            policy(*example)
        times, start = [], time.perf_counter()
        while time.perf_counter() - start < seconds:
            tick = time.perf_counter()
            pd = policy(*example)[0]
            worker.dist.sample_numpy(pd, rng)
            times.append(time.perf_counter() - tick)
        # The compiled-vs-eager check workers apply at every sync: how close, and what it allows here.
        # (An output that is exactly 0 in float64 and float32, e.g. a new MLP on an empty board, has tolerance 0.)
        worst = max(
            checks_against_eager(policy(*example), worker.model, example),
            key=lambda c: c.error / c.tolerance if c.tolerance > 0 else (0.0 if c.error == 0 else math.inf),
        )
        check = {"difference": worst.difference, "error": worst.error, "tolerance": worst.tolerance}
        latency[row["name"]] = {"available": True, "batch": len(example[0]), **_percentiles(times), "check": check}

    phase("sampling a batch and timing one PPO update")
    sample = worker.sample()
    learner = learner_class(config)(config, worker.model_obs_space, worker.envs.single_action_space)
    learner.update(sample)
    start = time.perf_counter()
    learner.update(sample)
    update_s = time.perf_counter() - start
    return {
        "env_steps_per_s": env_sps,
        "policy_latency": latency,
        "learner_update_s": update_s,
        "learner_samples_per_s": config.batch_size / config.rollout.min_workers * config.ppo.epochs / update_s,
        "learner_device": str(learner.device),
    }


def _vectorization(config) -> str:
    """The vector env, in the start-up summary's words."""
    from distrl.envs.kinds import describe_run_env

    return describe_run_env(config)


def run(config, quick: bool = False, phase=lambda text: None) -> dict:
    """The report: versions, CPU, memory, GPU, and what ``measure`` measures; ``phase(text)`` is told each step."""
    from distrl.envs.kinds import resolve_agents

    config = resolve_agents(config)  # an N-agent env's slots: its copies x the agents the env has
    phase("reading versions and hardware")
    report = {"versions": _versions(), "cpu": _cpu(), "memory": _memory(), "gpu": _gpu()}
    report["measured"] = measure(config, seconds=0.1 if quick else 0.5, phase=phase)
    lc, rc = config.learner.compile, config.rollout.compile
    report["active"] = {
        "worker backend": rc.backend,
        "learner compile": f"{lc.backend} {lc.mode}" if lc.backend == "inductor" else lc.backend,
        "learner AMP": config.learner.amp,
        "pipeline": config.rollout.pipeline,
        "vectorization": _vectorization(config),
        "normalize": config.env.describe_normalize(),
    }
    return report


def print_report(report: dict, console) -> None:
    """The report a line per part, each label in a column of its own and its text wrapped at word breaks beside it,
    so that every line fits the console's width (80 where it is not a terminal)."""
    from rich.table import Table

    def say(label: str, text: str, indent: str = "") -> None:
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=9, style="bold", no_wrap=True)
        if indent:
            grid.add_column(width=len(indent), no_wrap=True)
        grid.add_column(overflow="fold")
        grid.add_row(label, *([indent] if indent else []), escape(text))
        console.print(grid)

    v = report["versions"]
    say("versions", ", ".join(f"{k} {val}" for k, val in v.items() if val))
    missing = [k for k, val in v.items() if val is None]
    if missing:
        say("", f"not installed: {', '.join(missing)}")
    cpu = report["cpu"]
    say(
        "cpu",
        f"{cpu['model']}, {cpu['cores']} cores, features {' '.join(cpu['features']) or '-'}, "
        f"torch capability {cpu['torch_cpu_capability']}, mkldnn {cpu['mkldnn']}",
    )
    mem = report["memory"]
    say("memory", f"{mem['available_gb']} GB free of {mem['total_gb']} GB")
    gpu = report["gpu"]
    if gpu is None:
        say("gpu", "none (learners run on CPU)")
    else:
        util = (
            f", utilisation {gpu.get('utilization_pct')}%, memory "
            f"{gpu.get('memory_used_mb')}/{gpu.get('memory_total_mb')} MB"
            if "utilization_pct" in gpu
            else ""
        )
        say("gpu", f"{gpu['count']} x {gpu['name']}, bf16 {gpu['bf16']}{util}")
    m = report["measured"]
    say("env", f"{m['env_steps_per_s']:,.0f} env steps/s (one vector env, random actions)")
    say("policy", "latency per call incl. action sampling, one thread:")
    eager = m["policy_latency"]["eager"].get("p50_us")
    for name, row in m["policy_latency"].items():
        if row["available"]:
            speed = f", x{eager / row['p50_us']:.2f} vs eager" if eager else ""
            check = row["check"]
            agrees = (
                ""
                if name == "eager"
                else (
                    f"; |x - eager| {check['difference']:.2g}, error vs float64 "
                    f"{check['error']:.2g} of {check['tolerance']:.2g} allowed"
                )
            )
            say(
                "",
                f"batch {row['batch']}: p50 {row['p50_us']:.1f} us, p95 {row['p95_us']:.1f} us, "
                f"p99 {row['p99_us']:.1f} us{speed}{agrees}",
                indent=f"{name:9s}",
            )
        else:
            say("", f"unavailable: {row['reason']}", indent=f"{name:9s}")
    say(
        "learner",
        f"one PPO update {m['learner_update_s'] * 1e3:.1f} ms on {m['learner_device']} "
        f"({m['learner_samples_per_s']:,.0f} samples/s)",
    )
    say("active", ", ".join(f"{k}: {val}" for k, val in report["active"].items()))


def explain(config) -> list[str]:
    """Every ``auto`` choice a run of ``config`` makes on this machine, with its reason, in the words of the run's
    ``setup.txt``: a worker and a learner built here, without Ray (``distrl config show --explain``)."""
    from distrl.driver.report import choice_lines
    from distrl.learner.policy_set import learner_class
    from distrl.rollout import make_worker

    worker = make_worker(config)
    learner = learner_class(config)(config, worker.model_obs_space, worker.envs.single_action_space)
    described = learner.describe()
    lines = choice_lines(config, [worker.backend_info()], described, described["device"])
    worker.envs.close()
    return lines
