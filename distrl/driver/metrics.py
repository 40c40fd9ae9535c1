"""Per-iteration metrics: ``metrics.jsonl`` (one JSON object per line), TensorBoard scalars, Weights & Biases.

TensorBoard and W&B get the keys in the groups SB3 and CleanRL users read: ``rollout/`` (what
the agent achieves), ``train/`` (the PPO update), ``perf/`` (speed), ``compile/`` (the compiled
policies' health) and ``faults/`` (restarts and env errors). metrics.jsonl keeps the flat keys.
"""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

from distrl.config.schema import Config

GROUPS = {
    "rollout": (
        "episode_return_mean",
        "episode_len_mean",
        "episodes",
        "env_steps",
        "policy_lag_mean",
        "stale_batches",
        "stale_steps",
        "workers_active",
        "workers_in_update",
    ),
    "train": (
        "loss_policy",
        "loss_value",
        "entropy",
        "approx_kl",
        "clip_frac",
        "grad_norm",
        "gradient_steps",
        "lr",
        "explained_variance",
        "kl_early_stop",
        "skipped_updates",
        "skipped_steps",
        "learner_version",
    ),
    "perf": (
        "sps",
        "sps_avg",
        "sample_s",
        "learn_s",
        "policy_s",
        "env_s",
        "time_s",
        "iteration",
        "batch_bytes",
        "learner_batch_bytes",
        "driver_cpu_s",
    ),
    "compile": ("worker_recompiles", "worker_graph_breaks", "weight_sync_checks", "learner_recompiles"),
    "faults": (
        "worker_restarts",
        "learner_restarts",
        "env_errors",
        "env_errors_total",
        "env_nonfinite",
        "env_nonfinite_total",
        "worker_timeouts",
        "workers_lost",
        "batches_lost",
        "eval_failures",
    ),
}
TAGS = {key: f"{group}/{key}" for group, keys in GROUPS.items() for key in keys}


def tag(key: str) -> str:
    """The grouped name of a metrics key (``league_*`` under ``league/``, ``eval_*`` under ``eval/``, ``info_*``
    (``env.info_metrics``) under ``info/``; a key no group names yet under ``other/``)."""
    if key in TAGS:
        return TAGS[key]
    for prefix in ("league", "eval", "info"):
        if key.startswith(f"{prefix}_"):
            return f"{prefix}/{key.removeprefix(prefix + '_')}"
    return f"other/{key}"


def scalars(row: dict) -> dict[str, float]:
    """The row's numbers under their grouped names (booleans as 0/1, non-finite and None left out)."""
    out = {}
    for key, value in row.items():
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, (int, float)) and math.isfinite(value):
            out[tag(key)] = value
    return out


class MetricsWriter:
    def __init__(self, run_dir: Path, config: Config):
        run_dir = Path(run_dir)
        self.file = open(run_dir / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115 (open for the run)
        self.tb = None
        if config.logging.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(log_dir=str(run_dir))
        self.wandb = _start_wandb(run_dir, config) if config.logging.wandb is not None else None

    def write(self, row: dict) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        self.file.write(json.dumps(clean) + "\n")
        grouped = scalars(row)
        step = row["env_steps"]
        if self.tb is not None:
            for name, value in grouped.items():
                self.tb.add_scalar(name, value, step)
        if self.wandb is not None:
            self.wandb.log(grouped, step=step)

    def flush(self) -> None:
        self.file.flush()
        if self.tb is not None:
            self.tb.flush()

    def close(self) -> None:
        self.file.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def _start_wandb(run_dir: Path, config: Config):
    """A W&B run for this distrl run; a resumed distrl run continues the same W&B run (its id is kept in RUN_DIR)."""
    import wandb

    w = config.logging.wandb
    id_file = run_dir / "wandb_run_id"
    run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
    id_file.write_text(run_id + "\n")
    return wandb.init(
        project=w.project,
        entity=w.entity,
        mode=w.mode,
        group=w.group,
        tags=list(w.tags) or None,
        name=run_dir.name,
        id=run_id,
        resume="allow",
        dir=str(run_dir),
        config=config.model_dump(mode="json"),
    )
