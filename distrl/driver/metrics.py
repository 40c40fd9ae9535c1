"""Per-iteration metrics: ``metrics.jsonl`` (one JSON object per line) and TensorBoard scalars."""

from __future__ import annotations

import json
import math
from pathlib import Path


class MetricsWriter:
    def __init__(self, run_dir: Path, tensorboard: bool):
        self.file = open(Path(run_dir) / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115 (open for the run)
        self.tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(log_dir=str(run_dir))

    def write(self, row: dict) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        self.file.write(json.dumps(clean) + "\n")
        if self.tb is not None:
            step = row["env_steps"]
            for key, value in row.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and value is not None:
                    self.tb.add_scalar(key, value, step)

    def flush(self) -> None:
        self.file.flush()
        if self.tb is not None:
            self.tb.flush()

    def close(self) -> None:
        self.file.close()
        if self.tb is not None:
            self.tb.close()
