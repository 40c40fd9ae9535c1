"""The picture: one line per config, the mean of its seeds with their range shaded (a single run: its own line)."""

from __future__ import annotations

import difflib
from pathlib import Path

import numpy as np

from distrl.common.errors import install_hint
from distrl.common.files import replace_whole
from distrl.plot.runs import X_AXES, PlotError, RunCurve, group_seeds

GRID_POINTS = 200


def _pyplot(show: bool):
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise PlotError(
            "distrl plot draws with matplotlib, which is not installed" + install_hint("matplotlib")
        ) from None
    if not show:
        matplotlib.use("Agg")  # a file only: no display needed
    import matplotlib.pyplot as plt

    if show and matplotlib.get_backend().lower() == "agg":
        raise PlotError("no display to show the plot on here; write it to a file with --out FILE.png")
    return plt


def _seed_band(runs: list[RunCurve], x: str, metric: str):
    """The seeds on one grid of x, up to where the shortest seed ends: mean, min and max."""
    curves = [run.points(x, metric) for run in runs]
    curves = [(xs, ys) for xs, ys in curves if xs]
    if len(curves) == 1:
        xs, ys = curves[0]
        return np.asarray(xs), np.asarray(ys), None, None
    start = max(xs[0] for xs, _ in curves)
    end = min(xs[-1] for xs, _ in curves)
    grid = np.linspace(start, end, GRID_POINTS) if end > start else np.asarray([start])
    values = np.stack([np.interp(grid, xs, ys) for xs, ys in curves])
    return grid, values.mean(axis=0), values.min(axis=0), values.max(axis=0)


def plot_runs(
    runs: list[RunCurve],
    metric: str = "episode_return_mean",
    x: str = "env_steps",
    out: str | None = None,
    size: tuple[int, int] = (800, 500),
    title: str | None = None,
) -> list[str]:
    """Draws ``metric`` against ``x`` for the runs (seeds of a config as one band) to ``out`` (a PNG), or shows it
    when ``out`` is None. Returns the legend's labels."""
    if x not in X_AXES:
        raise PlotError(f"--x={x!r}: not an axis the runs log; use one of {', '.join(X_AXES)}")
    missing = [run for run in runs if metric not in run.keys]
    if len(missing) == len(runs):
        known = sorted(set.intersection(*(run.keys for run in runs)) - set(X_AXES))
        near = difflib.get_close_matches(metric, known, n=1)
        hint = f"did you mean {near[0]}?" if near else f"every run has: {', '.join(known)}"
        raise PlotError(f"--metric={metric!r}: no run logged it; {hint}")
    if missing:
        raise PlotError(f"--metric={metric!r}: not logged by {', '.join(str(run.path) for run in missing)}")
    if out is not None and not out.lower().endswith(".png"):
        raise PlotError(f"--out={out!r}: the plot is written as PNG; name a .png file")
    if out is not None and not Path(out).absolute().parent.is_dir():
        raise PlotError(f"--out={out!r}: no such directory {str(Path(out).absolute().parent)!r}")
    plt = _pyplot(show=out is None)
    dpi = 100
    fig, ax = plt.subplots(figsize=(size[0] / dpi, size[1] / dpi), dpi=dpi)
    labels = []
    for label, group in group_seeds(runs):
        grid, mean, low, high = _seed_band(group, x, metric)
        (line,) = ax.plot(grid, mean, label=label, linewidth=1.5)
        if low is not None:
            ax.fill_between(grid, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
        labels.append(label)
    env = next((run.config.get("env", {}).get("id") for run in runs if isinstance(run.config.get("env"), dict)), None)
    ax.set_title(title or (f"{env}: {metric}" if env else metric))
    ax.set_xlabel(X_AXES[x])
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    try:
        if out is None:
            plt.show()
        else:  # a reader never sees half a picture
            replace_whole(Path(out), lambda tmp: fig.savefig(tmp, dpi=dpi, format="png"), suffix=".png")
    finally:
        plt.close(fig)
    return labels
