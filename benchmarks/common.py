"""Shared benchmark plumbing: machine description, timing statistics, results files."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def machine_info() -> dict:
    """CPU, cores, memory, GPU and the versions that decide the numbers."""
    import numpy
    import torch

    cpu, flags = platform.processor() or "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu in ("unknown", platform.processor()):
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    info = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        # Float32 kernels (and so compiled-vs-eager differences) depend on these.
        "cpu_flags": sorted(f for f in flags if f.startswith(("avx", "amx", "fma"))),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
    }
    for module in ("ray", "onnxruntime", "gymnasium", "intel_extension_for_pytorch"):
        try:
            info[module] = __import__(module).__version__
        except Exception:
            info[module] = None
    if os.environ.get("DISTRL_COMMIT"):  # a copy of the tree on another machine: its .git, if any, may be stale
        info["commit"] = os.environ["DISTRL_COMMIT"]
        return info
    try:
        git = {"capture_output": True, "text": True, "cwd": RESULTS.parent, "check": True}
        info["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], **git).stdout.strip()
        if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], **git).stdout.strip():
            info["commit"] += "+changes"  # tracked files differ from that commit: the figures are not its alone
    except Exception:
        info["commit"] = None
    return info


def stop_cleanly_on_sigterm() -> None:
    """A benchmark stopped with SIGTERM (a timeout, a cancelled job) still runs its ``finally`` blocks, so the cluster
    it started is stopped and its temp dir removed."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def print_machine(info: dict) -> None:
    gpu = info["gpu"] or "no GPU"
    print(
        f"machine: {info['cpu']}, {info['cores']} cores, {info['memory_gb']} GB, {gpu}; python {info['python']}, "
        f"torch {info['torch']}, ray {info['ray']}, onnxruntime {info['onnxruntime']}, gymnasium {info['gymnasium']}"
        + (f", ipex {info['intel_extension_for_pytorch']}" if info.get("intel_extension_for_pytorch") else "")
    )


def spread(values: list[float]) -> dict:
    """Median and inter-quartile range of repeated measurements."""
    values = sorted(values)
    if len(values) >= 4:
        q = statistics.quantiles(values, n=4)
        low, high = q[0], q[2]
    else:
        low, high = values[0], values[-1]
    return {"median": statistics.median(values), "p25": low, "p75": high, "n": len(values)}


def time_calls(fn, min_seconds: float, repeats: int) -> list[float]:
    """Seconds per call, once per repeat; each repeat runs for at least ``min_seconds``."""
    out = []
    for _ in range(repeats):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
        out.append(elapsed / calls)
    return out


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (benchmarks save PNGs; no display is needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextmanager
def figure(path: Path, size: tuple[float, float] = (6, 4), dpi: int = 100, **subplots):
    """The axes of one figure (``subplots``: pyplot's, e.g. ``ncols``), saved to ``path`` once the block ends."""
    plt = pyplot()
    fig, axes = plt.subplots(figsize=size, **subplots)
    try:
        yield axes
        fig.tight_layout()
        fig.savefig(path, dpi=dpi)
    finally:  # a chart that failed is closed, not saved half-drawn
        plt.close(fig)


def metrics_rows(run_dir: Path) -> list[dict]:
    """A run's ``metrics.jsonl`` so far, one dict an update; none before its first update."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def table_columns(columns: str | list[tuple[str, str]]) -> list[tuple[str, str]]:
    """A table's (row key, title) pairs, from a list of them or a header written as the table shows it:
    ``"env | seed | wall_s: wall s"`` (a column titled by its key, or ``key: title``)."""
    if not isinstance(columns, str):
        return list(columns)
    pairs = []
    for column in columns.split(" | "):
        key, _, title = column.partition(": ")
        pairs.append((key.strip(), title.strip() or key.strip()))
    return pairs


def markdown_table(rows: list[dict], columns: str | list[tuple[str, str]]) -> str:
    columns = table_columns(columns)
    head = "| " + " | ".join(title for _, title in columns) + " |"
    rule = "| " + " | ".join("---" for _ in columns) + " |"
    lines = [head, rule]
    for row in rows:
        cells = []
        for key, _ in columns:
            value = row.get(key)
            if isinstance(value, float):
                value = f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
            elif isinstance(value, int) and not isinstance(value, bool):
                value = f"{value:,}"
            cells.append("-" if value is None else str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def study_name(name: str, overrides: list[str]) -> str:
    """A results file's name for a run with ``--set`` overrides: written apart from the plain run's
    (``NAME_set_key-value_...``)."""
    if not overrides:
        return name
    return name + "_set_" + "_".join(re.sub(r"[^A-Za-z0-9]+", "-", item).strip("-") for item in overrides)


def fresh_results_dir() -> Path:
    """A new directory for one invocation's results: ``runs/benchmarks/SCRIPT-TIMESTAMP`` (never the repository's
    ``benchmarks/results``, which only an explicit ``--results-dir`` writes)."""
    script = Path(sys.argv[0]).stem or "benchmark"
    return RESULTS.parents[1] / "runs" / "benchmarks" / f"{script}-{time.strftime('%Y%m%d-%H%M%S')}"


def study_parser(doc: str, quick: str, seeds: list[int] | None = None, overrides: bool = True):
    """A study's argument parser with the options every study shares: ``--quick`` (``quick`` says what it runs),
    ``--seeds`` (where ``seeds`` gives the default), ``--set KEY=VALUE`` for every run (``args.overrides``) and
    ``--results-dir``. The study adds its own options to it."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick)
    if seeds is not None:
        parser.add_argument("--seeds", type=int, nargs="+", default=seeds, help="the seeds, a run each")
    if overrides:
        parser.add_argument(
            "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="a setting of every run"
        )
    add_results_dir_argument(parser)
    return parser


def start_study(parser, argv: list[str] | None = None) -> tuple[argparse.Namespace, dict]:
    """A study's arguments and machine: parsed, printed, and a SIGTERM that still runs the study's clean-up."""
    args = parser.parse_args(argv)
    return args, study_machine()


def study_machine() -> dict:
    """The machine a study runs on, printed, and a SIGTERM that still runs the study's clean-up: ``start_study``'s
    second half, for a study that checks its arguments between the two."""
    stop_cleanly_on_sigterm()
    machine = machine_info()
    print_machine(machine)
    return machine


def add_results_dir_argument(parser) -> None:
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=fresh_results_dir(),
        help="where to write results (default: a new runs/benchmarks/SCRIPT-TIMESTAMP; the repository's tables are "
        "--results-dir benchmarks/results)",
    )


def write_results(
    name: str,
    payload: dict,
    table: str,
    chart=None,
    failures: list[str] | None = None,
    quick: bool = False,
    results_dir: Path | None = None,
) -> bool:
    """Write NAME.json, .md and .png; refuse (and return False) when a correctness check failed."""
    if failures:
        print(f"NOT writing results: {len(failures)} correctness check(s) failed:", file=sys.stderr)
        for failure in failures:
            print(f"  - {failure}", file=sys.stderr)
        return False
    if quick:
        name += "_quick"
    results_dir = Path(results_dir) if results_dir is not None else fresh_results_dir()
    results_dir.mkdir(parents=True, exist_ok=True)
    machine = payload["machine"]
    header = (
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['gpu'] or 'no GPU'}; torch {machine['torch']}, "
        f"ray {machine['ray']}, onnxruntime {machine['onnxruntime']}; commit {machine['commit']}.\n\n"
    )
    (results_dir / f"{name}.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    (results_dir / f"{name}.md").write_text(header + table + "\n")
    if chart is not None:
        chart(results_dir / f"{name}.png")
    print(f"wrote {results_dir / name}.json, .md" + (", .png" if chart is not None else ""))
    return True


def finish(
    name: str,
    args: argparse.Namespace,
    machine: dict,
    rows: list[dict],
    columns: str | list[tuple[str, str]] | None = None,
    *,
    table: str | None = None,
    chart=None,
    failures: list[str] | None = None,
    **data,
) -> int:
    """Write a study's results as its ``--quick`` and ``--results-dir`` say: the machine, ``args``, ``data`` and
    ``rows`` as JSON, ``rows`` as a Markdown table of ``columns`` (or ``table``), ``chart(path)``'s PNG. The study's
    exit code: 1, and nothing written, when a correctness check failed (``failures``)."""
    payload = {"machine": machine, "args": vars(args), **data, "rows": rows}
    table = markdown_table(rows, columns) if table is None else table
    return 0 if write_results(name, payload, table, chart, failures, args.quick, args.results_dir) else 1


# Ray's own start in a fresh process (import ray, ray.init, one task's round trip): the floor no Ray program is under.
RAY_FLOOR_CHILD = r"""
import json, time
launch = time.perf_counter()
import ray
imported = time.perf_counter() - launch
ray.init(address="local", include_dashboard=False, configure_logging=False, log_to_driver=False)
started = time.perf_counter() - launch
ray.get(ray.remote(lambda: 1).remote())
floor = time.perf_counter() - launch
print("RESULT " + json.dumps({"import_s": imported, "init_s": started - imported, "floor_s": floor}))
ray.shutdown()
"""


def child(code: str, spec: dict | None = None) -> dict:
    """Run ``code`` in a fresh Python process; its last ``RESULT {json}`` line."""
    args = [sys.executable, "-c", code] + ([json.dumps(spec)] if spec is not None else [])
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"child run failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])
