"""Live progress: a rich bar on the command line's terminal, else a log line every few seconds (job logs,
library use: logger ``distrl.progress`` at INFO).

The bar starts with the run: until the first update it names the start-up phase the run is in (``phase``), then
it shows steps, speed, return and the time left to whichever stop comes first."""

from __future__ import annotations

import sys
import time
from collections import deque

from rich.progress import BarColumn, Progress, TextColumn

from distrl.common.log import get_logger
from distrl.config.schema import Config

log = get_logger("progress")

RETURN_TREND_ROWS = 10  # the rows a return target's ETA extrapolates over


def _fmt_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "?"
    seconds = int(seconds)
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60}:{seconds % 60:02d}"
    )


def return_eta(target: float, trend: list[tuple[int, float]], sps: float) -> float | None:
    """Seconds to a mean return of ``target`` at the return's recent trend (``(env_steps, return)`` points, a
    least-squares line through them) and ``sps`` env steps a second; None while the return does not rise."""
    if len(trend) < 3 or sps <= 0:
        return None
    steps = [s for s, _ in trend]
    mean_s, mean_r = sum(steps) / len(trend), sum(r for _, r in trend) / len(trend)
    spread = sum((s - mean_s) ** 2 for s in steps)
    if spread == 0:
        return None
    slope = sum((s - mean_s) * (r - mean_r) for s, r in trend) / spread  # return per env step
    latest = trend[-1][1]
    if latest >= target:
        return 0.0
    if slope <= 0:
        return None
    return (target - latest) / slope / sps


def eta_seconds(
    config: Config, env_steps: int, elapsed_s: float, sps: float, trend: list[tuple[int, float]] = ()
) -> tuple[float | None, str]:
    """Time left to the nearest stop: the step budget, the time budget, or the return target at the return's recent
    trend (``trend``: ``(env_steps, mean return)`` points); and which stop that is."""
    candidates = []
    if config.stop.env_steps is not None and sps > 0:
        candidates.append((max(0.0, (config.stop.env_steps - env_steps) / sps), "steps"))
    if config.stop.time_s is not None:
        candidates.append((max(0.0, config.stop.time_s - elapsed_s), "time"))
    if config.stop.episode_return_mean is not None:
        eta = return_eta(config.stop.episode_return_mean, list(trend), sps)
        if eta is not None:
            candidates.append((eta, "return"))
    return min(candidates) if candidates else (None, "")


class ProgressReporter:
    def __init__(self, config: Config, console=None, resumed_s: float | None = None):
        """``console``: a rich Console the bar may draw on (the CLI's, on a terminal); without one, log lines.
        ``resumed_s``: a resumed run's time before this command (its rows' ``time_s`` count the whole run)."""
        self.config = config
        self.resumed_s = resumed_s
        self.console = console
        mode = config.logging.progress
        if mode == "auto" or (mode == "bar" and console is None):
            mode = "bar" if console is not None and console.is_terminal and sys.stdout.isatty() else "lines"
        self.mode = mode
        self.last_line = 0.0
        self.trend: deque[tuple[int, float]] = deque(maxlen=RETURN_TREND_ROWS)
        # The ETA names the stop it counts toward where there is more than one.
        self.several_stops = sum(value is not None for value in config.stop.model_dump().values()) > 1
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

    def phase(self, text: str) -> None:
        """The start-up phase the run is in, on the bar until the first update."""
        if self.progress is not None:
            self.progress.update(self.task, status=text)

    def update(self, row: dict) -> None:
        ret = row["episode_return_mean"]
        if ret is not None:
            self.trend.append((row["env_steps"], ret))
        eta, which = eta_seconds(self.config, row["env_steps"], row["time_s"], row["sps_avg"], self.trend)
        status = (
            f"{row['env_steps']:,} steps | {row['sps']:,.0f} steps/s | return {'-' if ret is None else f'{ret:.1f}'}"
            f" | {self._elapsed(row['time_s'])}, ETA {_fmt_duration(eta)}"
            + (f" ({which})" if which and self.several_stops else "")
        )
        if self.progress is not None:
            self.progress.update(self.task, completed=row["env_steps"], status=status)
        elif self.mode == "lines":
            now = time.monotonic()
            if now - self.last_line >= self.config.logging.log_every_s:
                self.last_line = now
                log.info(f"iter {row['iteration']} | {status}")

    def _elapsed(self, run_s: float) -> str:
        """This command's time, and a resumed run's whole time beside it."""
        if self.resumed_s is None:
            return f"{_fmt_duration(run_s)} elapsed"
        return f"{_fmt_duration(run_s - self.resumed_s)} elapsed (run {_fmt_duration(run_s)})"

    def close(self) -> None:
        if self.progress is not None:
            if self.progress.tasks[0].completed == 0:  # stopped in start-up, before any update: leave no bar behind
                self.progress.live.transient = True
            self.progress.stop()
            self.progress = None
