"""Live progress: a rich bar on the command line's terminal, else a log line every few seconds (job logs,
library use: logger ``distrl.progress`` at INFO)."""

from __future__ import annotations

import sys
import time

from rich.progress import BarColumn, Progress, TextColumn

from distrl.common.log import get_logger
from distrl.config.schema import Config

log = get_logger("progress")


def _fmt_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else f"{seconds // 60}:{seconds % 60:02d}"


def eta_seconds(config: Config, env_steps: int, elapsed_s: float, sps: float) -> float | None:
    """Time left to the nearest of the step and time budgets (a return target has no ETA)."""
    candidates = []
    if config.stop.env_steps is not None and sps > 0:
        candidates.append(max(0.0, (config.stop.env_steps - env_steps) / sps))
    if config.stop.time_s is not None:
        candidates.append(max(0.0, config.stop.time_s - elapsed_s))
    return min(candidates) if candidates else None


class ProgressReporter:
    def __init__(self, config: Config, console=None):
        """``console``: a rich Console the bar may draw on (the CLI's, on a terminal); without one, log lines."""
        self.config = config
        self.console = console
        mode = config.logging.progress
        if mode == "auto" or (mode == "bar" and console is None):
            mode = "bar" if console is not None and console.is_terminal and sys.stdout.isatty() else "lines"
        self.mode = mode
        self.last_line = 0.0
        self.progress = None
        if mode == "bar":
            self.progress = Progress(
                TextColumn("[bold]train"),
                BarColumn(),
                TextColumn("{task.fields[status]}"),
                console=console,
                transient=False,
            )
            self.task = self.progress.add_task("train", total=config.stop.env_steps or None, status="starting")
            self.progress.start()

    def update(self, row: dict) -> None:
        eta = eta_seconds(self.config, row["env_steps"], row["time_s"], row["sps_avg"])
        ret = row["episode_return_mean"]
        status = (
            f"{row['env_steps']:,} steps | {row['sps']:,.0f} steps/s | return {'-' if ret is None else f'{ret:.1f}'}"
            f" | {_fmt_duration(row['time_s'])} elapsed, ETA {_fmt_duration(eta)}"
        )
        if self.progress is not None:
            self.progress.update(self.task, completed=row["env_steps"], status=status)
        elif self.mode == "lines":
            now = time.monotonic()
            if now - self.last_line >= self.config.logging.log_every_s:
                self.last_line = now
                log.info(f"iter {row['iteration']} | {status}")

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
