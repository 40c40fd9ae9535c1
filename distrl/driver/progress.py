"""Live progress: a rich bar on the command line's terminal, else a log line every few seconds (job logs,
library use: logger ``distrl.progress`` at INFO).

The bar starts with the run: until the first update it names the start-up phase the run is in (``phase``) beside a
clock, then it shows steps, return, speed and the time left to whichever stop comes first. Its line fits the
terminal: fields are dropped, least useful first, before anything would be cut; the bar fills toward the stop the
ETA counts down to."""

from __future__ import annotations

import sys
import time
from collections import deque

from rich.progress import Progress, ProgressColumn
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

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


def stop_fractions(config: Config, env_steps: int, elapsed_s: float, ret: float | None, first_ret: float | None):
    """How far the run is toward each of its stops (0 to 1): the step budget, the time budget, and the return target
    (from the first return seen to the target)."""
    stop, done = config.stop, {}
    if stop.env_steps:
        done["steps"] = env_steps / stop.env_steps
    if stop.time_s:
        done["time"] = elapsed_s / stop.time_s
    if stop.episode_return_mean is not None and ret is not None and first_ret is not None:
        span = stop.episode_return_mean - first_ret
        done["return"] = 1.0 if ret >= stop.episode_return_mean else (ret - first_ret) / span if span > 0 else 0.0
    return {which: min(1.0, max(0.0, value)) for which, value in done.items()}


BAR_WIDTH = (10, 40)  # the bar's narrowest and widest


def fitted(fields: list[tuple[int, str]], width: int) -> str:
    """The fields (``(priority, text)``, in their order on the line; the lowest priority goes first) joined by " | "
    in at most ``width`` columns; the first field is cut with an ellipsis only when it alone is too wide."""
    kept = list(fields)
    while len(kept) > 1 and len(" | ".join(text for _, text in kept)) > width:
        kept.remove(min(kept[1:], key=lambda field: field[0]))
    line = " | ".join(text for _, text in kept)
    return line if len(line) <= width else line[: max(0, width - 1)] + "…"


class LineColumn(ProgressColumn):
    """The whole progress line, laid out for the console's width at each refresh (so a resized terminal gets a line
    that fits too): the bar, then the status fields that fit beside it."""

    def __init__(self, reporter: ProgressReporter):
        super().__init__()
        self.reporter = reporter

    def render(self, task) -> Table:
        width = self.reporter.console.width - 1  # the last column left free: a full line would wrap on some terminals
        fields = self.reporter.fields()
        status = fitted(fields, width - BAR_WIDTH[0] - 1)
        bar = max(BAR_WIDTH[0], min(BAR_WIDTH[1], width - len(status) - 1))
        line = Table.grid(padding=(0, 1))
        console = self.reporter.console
        if console.color_system is None or console.no_color:  # monochrome: the done part must differ in its characters
            done = round(bar * self.reporter.fraction)
            drawn = Text("#" * done + "-" * (bar - done))
        else:
            drawn = ProgressBar(total=1.0, completed=self.reporter.fraction, width=bar)
        line.add_row(drawn, Text(status, no_wrap=True))
        return line


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
        self.started = time.monotonic()
        self.phase_text: str | None = "starting"
        self.row: dict | None = None
        self.eta: tuple[float | None, str] = (None, "")  # the newest row's time left, and to which stop
        self.first_return: float | None = None
        self.eval_return: float | None = None
        self.fraction = 0.0
        self.progress = None
        if mode == "bar":
            self.progress = Progress(LineColumn(self), console=console, transient=False)
            self.task = self.progress.add_task("train", total=1.0)
            self.progress.start()

    def phase(self, text: str) -> None:
        """The start-up phase the run is in, on the bar until the first update."""
        self.phase_text = text

    def fields(self) -> list[tuple[int, str]]:
        """The line's fields as ``(priority, text)``: in start-up the phase and its clock, then steps, return,
        speed, time and ETA (the ETA's stop named where there are several)."""
        if self.row is None:
            return [(9, self.phase_text or "starting"), (8, _fmt_duration(time.monotonic() - self.started))]
        row, ret = self.row, self.row["episode_return_mean"]
        eta, which = self.eta
        eta_text = f"ETA {_fmt_duration(eta)}" + (f" ({which})" if which and self.several_stops else "")
        evaluated = [] if self.eval_return is None else [(6, f"eval {self.eval_return:.1f}")]
        return [
            (9, f"{row['env_steps']:,} steps"),
            (7, f"return {'-' if ret is None else f'{ret:.1f}'}"),
            *evaluated,
            (4, f"{row['sps']:,.0f} steps/s"),
            (5, self._elapsed(row["time_s"])),
            (6, eta_text),
        ]

    def update(self, row: dict) -> None:
        ret = row["episode_return_mean"]
        if ret is not None:
            self.trend.append((row["env_steps"], ret))
            if self.first_return is None:
                self.first_return = ret
        self.row, self.phase_text = row, None
        self.eval_return = row.get("eval_return_mean", self.eval_return)  # the newest evaluation's, kept until the next
        self.eta = eta_seconds(self.config, row["env_steps"], row["time_s"], row["sps_avg"], self.trend)
        which = self.eta[1]
        done = stop_fractions(self.config, row["env_steps"], row["time_s"], ret, self.first_return)
        self.fraction = done.get(which, max(done.values(), default=0.0))
        if self.progress is not None:
            self.progress.update(self.task, completed=self.fraction)
        elif self.mode == "lines":
            now = time.monotonic()
            if now - self.last_line >= self.config.logging.log_every_s:
                self.last_line = now
                log.info(f"iter {row['iteration']} | " + " | ".join(text for _, text in self.fields()))

    def _elapsed(self, run_s: float) -> str:
        """This command's time, and a resumed run's whole time beside it."""
        if self.resumed_s is None:
            return f"{_fmt_duration(run_s)} elapsed"
        return f"{_fmt_duration(run_s - self.resumed_s)} elapsed (run {_fmt_duration(run_s)})"

    def close(self) -> None:
        if self.progress is not None:
            if self.row is None:  # stopped in start-up, before any update: leave no bar behind
                self.progress.live.transient = True
            self.progress.stop()
            self.progress = None
