"""``distrl plot``: learning curves of run directories, read from their ``metrics.jsonl`` (data only: nothing in a
run directory is imported or called)."""

from distrl.plot.figure import plot_runs
from distrl.plot.runs import PlotError, RunCurve, group_seeds, load_runs

__all__ = ["PlotError", "RunCurve", "group_seeds", "load_runs", "plot_runs"]
