"""The workers' policy exported or compiled once, on the driver, while Ray starts: what every worker reuses.

For ``onnxrt`` the export travels with the build check's answers and the model's spec, so a worker acts without
loading torch (``distrl/compile/shipped.py``).
"""

from __future__ import annotations

from distrl.common.log import get_logger
from distrl.config import Config

log = get_logger("driver")


def worker_artifacts(config: Config, obs_space, action_space) -> dict | None:
    """Export / compile the worker policy once here; None when nothing is shared (each worker then builds its own)."""
    cfg = config.rollout.compile
    if config.agents.several:  # each policy acts on its own slots' batch size: each worker builds its own
        if config.model.encoder is not None:  # a user's encoder built once here: its problems said before any actor
            from distrl.envs.agents import policy_spaces
            from distrl.models import build_model

            for spaces in policy_spaces(config).values():
                build_model(*spaces, config.model)
        return None
    import torch

    from distrl.compile import prepare_artifacts, prepare_shipped
    from distrl.data.memory import example_inputs
    from distrl.models import build_model
    from distrl.models.spec import spec_of

    # One thread, as a worker builds its model: an orthogonal init's QR rounds differently with more threads, and the
    # shipped weights are the workers' version 0 (the learner's, seeded alike, up to that rounding).
    torch.set_num_threads(1)
    with torch.random.fork_rng():
        torch.manual_seed(config.seed)
        model = build_model(obs_space, action_space, config.model).eval()
    example = example_inputs(model, config.env.slots, config.seed)  # the learner's checks use them too
    try:
        artifacts = prepare_artifacts(model, cfg.backend, example, cfg.mode, cfg.precision, cfg.memory_format)
        if not artifacts:  # nothing this backend shares
            return None
        if cfg.backend == "onnxrt":  # the check's answers too
            artifacts.update(prepare_shipped(model, example, cfg.precision, cfg.memory_format))
            artifacts["model_spec"] = spec_of(model)
    except Exception as exc:  # workers will compile for themselves (and fall back if that fails too)
        log.warning(f"shared compile artifacts unavailable ({type(exc).__name__}: {exc}); each worker compiles")
        return None
    return artifacts
