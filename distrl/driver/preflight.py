"""The checks a run makes before Ray starts (no ray import here: a private Ray's settings are made before it)."""

from __future__ import annotations

from distrl.config import Config
from distrl.envs import probe_run_spaces
from distrl.envs.agents import policy_spaces


def check_before_ray(config: Config) -> tuple:
    """What can be found wrong without Ray, found now (``distrl train`` and every trial of ``distrl tune``): the
    env builds and has spaces distrl supports, the model fits them (a user's encoder module is found), a logging
    feature's package is installed, and
    a strict compile backend is available, and a bf16 policy has the CPU's bf16 instructions. Returns the env's
    spaces."""
    import importlib.util

    from distrl.config import ConfigError
    from distrl.models.fit import check_model_fits

    spaces = probe_run_spaces(config)
    each = list(policy_spaces(config).values()) if config.agents.several else [spaces]
    try:
        for one in each:  # several policies: each one's model, in its agents' spaces
            check_model_fits(*one, config.model)
    except ValueError as exc:
        raise ConfigError([str(exc)]) from None
    log_cfg = config.logging
    if log_cfg.wandb is not None and importlib.util.find_spec("wandb") is None:
        raise ConfigError(
            [f"logging.wandb.project={log_cfg.wandb.project!r}: needs the wandb package; pip install 'distrl[wandb]'"]
        )
    if log_cfg.video_every_iterations:
        from distrl.deploy.video import missing_video_package

        if (missing := missing_video_package()) is not None:
            raise ConfigError([f"logging.video_every_iterations={log_cfg.video_every_iterations}: {missing}"])
    rc = config.rollout.compile
    if rc.strict:
        from distrl.compile import available_backends

        rows = {row["name"]: row for row in available_backends()}
        if rc.backend in rows and not rows[rc.backend]["available"]:
            raise ConfigError(
                [
                    f"rollout.compile.backend={rc.backend}: unavailable here ({rows[rc.backend]['reason']}); "
                    "rollout.compile.strict=true forbids falling back to eager"
                ]
            )
    if rc.precision == "bf16":
        from distrl.common.hardware import cpu_bf16

        if cpu_bf16() is None:
            raise ConfigError(
                [
                    "rollout.compile.precision=bf16: this CPU has no bf16 instructions (AMX or AVX512-BF16), "
                    "where bf16 runs emulated and slower than fp32; allowed here: auto, fp32"
                ]
            )
    return spaces


def check_gpus_of_this_machine(config: Config) -> None:
    """A private Ray holds this machine's GPUs and no others: GPU shares (the learners', the workers') on a machine
    where torch sees no CUDA device are refused now, before Ray starts, instead of waiting on a placement that can
    never happen."""
    ln, r = config.learner, config.rollout
    asked = [
        (f"learner.num_gpus_per_learner={ln.num_gpus_per_learner:g}", ln.num_gpus_per_learner),
        (f"rollout.num_gpus_per_worker={r.num_gpus_per_worker:g}", r.num_gpus_per_worker),
    ]
    asked = [key for key, amount in asked if amount > 0]
    if not asked:
        return
    import torch

    if torch.cuda.device_count() == 0:
        from distrl.config import ConfigError

        raise ConfigError(
            [
                f"{' and '.join(asked)}: this machine has no CUDA GPU (torch {torch.__version__} sees none), "
                "and the run starts a Ray of its own here; allowed: 0, or --address of a cluster with GPUs"
            ]
        )
