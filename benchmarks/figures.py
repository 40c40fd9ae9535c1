"""The docs' figures, drawn from the results files the benchmarks write (benchmarks/results/STUDY/*.json).

Rerun a benchmark into its study folder (``--results-dir benchmarks/results/STUDY``), then this script, and the
picture in the docs follows. It trains nothing and reads only JSON; each figure names the machine its data came from.

    python benchmarks/figures.py                      # every figure, into docs/img/
    python benchmarks/figures.py --only mujoco peers  # some of them
    python benchmarks/figures.py --out-dir /tmp/figs  # elsewhere
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import pyplot  # noqa: E402
from distrl.common.files import replace_whole  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "docs" / "img"
SIZE = (8.0, 5.0)  # inches at 100 dpi: 800 x 500 pixels, as `distrl plot` draws by default
COLOURS = {"distrl": "tab:blue", "sb3": "tab:orange", "rllib": "tab:green", "rllib_same": "tab:green"}


def load(relative: str) -> dict:
    return json.loads((RESULTS / relative).read_text())


def running_mean(values: list[float], window: int) -> list[float]:
    """Each point the mean of the ``window`` up to it: a per-report return is too jagged to tell two systems apart."""
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def machine_label(machine: dict) -> str:
    """'2-core AMD EPYC (AVX512-BF16), no GPU': which machine a figure's numbers are from."""
    flags = set(machine.get("cpu_flags") or [])
    cpu = "Intel Xeon" if "Xeon" in machine["cpu"] else "AMD EPYC" if "EPYC" in machine["cpu"] else machine["cpu"]
    if any(flag.startswith("amx") for flag in flags):
        isa = "AMX"
    elif "avx512_bf16" in flags:
        isa = "AVX512-BF16"
    elif "avx512f" in flags:
        isa = "AVX-512"
    else:
        isa = "AVX2 only"
    return f"{machine['cores']}-core {cpu} ({isa}), {machine.get('gpu') or 'no GPU'}"


def finish(fig, title: str, machines: list[dict], path: Path) -> None:
    """The title, the machine (each distinct one, where panels come from several runs) and the file, written whole."""
    fig.suptitle(title)
    commits: dict[str, list[str]] = {}
    for machine in machines:
        found = commits.setdefault(machine_label(machine), [])
        if machine.get("commit") and machine["commit"] not in found:
            found.append(machine["commit"])
    footer = "; ".join(
        label + (f", commit{'s' if len(found) > 1 else ''} {', '.join(found)}" if found else "")
        for label, found in commits.items()
    )
    fig.text(0.99, 0.005, footer, ha="right", va="bottom", fontsize=8, color="0.35")
    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    replace_whole(path, lambda tmp: fig.savefig(tmp, dpi=100), suffix=".png")


def peers(plt, out: Path) -> Path:
    """CartPole: mean return against seconds from launch, every seed of every system."""
    data = load("peers/peers.json")
    fig, ax = plt.subplots(figsize=SIZE)
    labelled = set()
    for row in data["rows"]:
        curve = row.get("curve") or []
        if not curve:
            raise ValueError(f"peers/peers.json: {row['system']} seed {row['seed']} has no curve")
        key = row["key"]
        colour = COLOURS.get(key, "tab:red" if key == "rllib_tuned" else "tab:gray")
        label = None if key in labelled else row["system"]
        labelled.add(key)
        ax.plot([p[0] for p in curve], [p[2] for p in curve], color=colour, alpha=0.8, lw=1.2, label=label)
    ax.axhline(475, color="0.4", ls="--", lw=0.8)
    ax.set_xlabel("seconds from launch (Ray's start included)")
    ax.set_ylabel("mean episode return")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    path = out / "cartpole_peers.png"
    finish(fig, "CartPole-v1 to a mean return of 475, one line a seed", [data["machine"]], path)
    return path


def mujoco(plt, out: Path) -> Path:
    """Each MuJoCo env: distrl's and SB3's training curves beside CleanRL's and RL Zoo's published scores."""
    data = load("mujoco/mujoco.json")
    envs = [row["env"] for row in data["rows"]]
    fig, axes = plt.subplots(2, 2, figsize=(10.0, 7.0))
    for ax, env in zip(axes.flat, envs):
        published = next(row for row in data["rows"] if row["env"] == env)
        for system in ("distrl", "sb3"):
            runs = [r for r in data["runs"] if r["env"] == env and r["system"] == system and not r.get("variant")]
            for i, run in enumerate(runs):
                label = f"{'distrl' if system == 'distrl' else 'SB3, RL Zoo settings'} ({len(runs)} seeds)"
                ax.plot(
                    [p[0] / 1e6 for p in run["curve"]],
                    [p[1] for p in run["curve"]],
                    color=COLOURS[system],
                    lw=1.0,
                    alpha=0.85,
                    label=label if i == 0 else None,
                )
        for key, style in (("CleanRL", "--"), ("RL Zoo", ":")):
            if isinstance(published.get(key), (int, float)):
                ax.axhline(published[key], color="0.25", ls=style, lw=1.0, label=f"{key} published")
        ax.set_title(env, fontsize=10)
        ax.set_xlabel("env steps (millions)")
        ax.set_ylabel("mean return, last 100 episodes")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    path = out / "mujoco.png"
    finish(fig, "MuJoCo at 1M env steps: distrl beside SB3 and the published PPO", [data["machine"]], path)
    return path


def spread(plt, out: Path) -> Path:
    """MPE simple_spread at MAPPO's optimiser settings: distrl beside RLlib, a panel of seeds."""
    files = [
        "multiagent/multiagent_spread_mappo_xeon_amx.json",
        "multiagent/multiagent_spread_mappo_seed1_xeon_amx.json",
        "multiagent/multiagent_spread_mappo_seed2_xeon_amx.json",
        "multiagent/multiagent_spread_mappo_seed3_xeon_amx.json",
    ]
    fig, ax = plt.subplots(figsize=SIZE)
    labelled, machines = set(), []
    for name in files:
        data = load(name)
        machines.append(data["machine"])
        for row in data["rows"]:
            system = "rllib" if row["variant"] == "rllib" else "distrl"
            label = None if system in labelled else ("RLlib 2.60 PPO" if system == "rllib" else "distrl")
            labelled.add(system)
            ax.plot(
                [p[0] / 1e6 for p in row["curve"]],
                running_mean([p[1] for p in row["curve"]], 50),
                color=COLOURS[system],
                lw=1.0,
                alpha=0.8,
                label=label,
            )
    ax.set_xlabel("agent steps (millions)")
    ax.set_ylabel("mean return per agent (running mean of 50 reports)")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    path = out / "spread.png"
    finish(fig, "MPE simple_spread, 3 agents, MAPPO's settings: one line a seed", machines, path)
    return path


def sampling(plt, out: Path) -> Path:
    """A Breakout worker's sampling rate as a share of its env stepped alone, by way of stepping."""
    data = load("sampling/sampling_ready_breakout_xeon_amx.json")
    cases = sorted({row["case"] for row in data["rows"]}, key=lambda case: int(case.rsplit("_", 1)[1]))
    ways = ["1 group", "2 groups", "ready"]
    fig, ax = plt.subplots(figsize=SIZE)
    width = 0.25
    for j, way in enumerate(ways):
        shares = []
        for case in cases:
            # the results name ready copies "the first 4 of 8 ready"
            row = next(
                r for r in data["rows"] if r["case"] == case and (r["stepping"] == way or r["stepping"].endswith(way))
            )
            shares.append(row["worker_sps"] / row["env_alone_sps"])
        xs = [i + (j - 1) * width for i in range(len(cases))]
        label = "half the copies ready" if way == "ready" else way
        bars = ax.bar(xs, shares, width, label=label)
        ax.bar_label(bars, fmt="%.2f", fontsize=8)
    ax.axhline(1.0, color="0.3", ls="--", lw=0.8, label="the env alone (one process, one thread)")
    ax.set_xticks(range(len(cases)), [f"{case.rsplit('_', 1)[1]} Breakout copies" for case in cases])
    ax.set_ylabel("worker's env steps/s, share of the env alone")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3, axis="y")
    path = out / "sampling_stepping.png"
    finish(fig, "One onnxrt worker against its env alone, by way of stepping", [data["machine"]], path)
    return path


def workers(plt, out: Path) -> Path:
    """Throughput against the number of workers: 48 IO-bound workers on 2 cores, and CPU-bound workers on 2 cores."""
    many = load("scale/many_workers.json")
    scale = load("scale/scale.json")
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 4.5))
    solo = next(row for row in many["rows"] if row["workers"] == 1)["sps"]
    counts = [row["workers"] for row in many["rows"]]
    left.plot(counts, [row["sps"] for row in many["rows"]], "o-", color=COLOURS["distrl"], label="distrl, async")
    left.plot(counts, [solo * n for n in counts], "--", color="0.4", label="one worker's rate x workers")
    left.set_title("CartPole behind a 20 ms env step (IO-bound)", fontsize=10)
    left.set_xlabel("rollout workers")
    left.set_ylabel("env steps/s")
    left.legend(fontsize=8)
    left.grid(alpha=0.3)
    rows = scale["rows"]
    n = [row["workers"] for row in rows]
    right.plot(n, [row["worker_sample_sps"] * row["workers"] for row in rows], "o-", color=COLOURS["distrl"])
    right.set_title("CartPole, sampling only (CPU-bound, 2 cores)", fontsize=10)
    right.set_xlabel("rollout workers")
    right.set_ylabel("env steps/s sampled, all workers")
    right.set_ylim(bottom=0)
    right.grid(alpha=0.3)
    path = out / "workers.png"
    finish(fig, "Throughput against rollout workers", [many["machine"], scale["machine"]], path)
    return path


def elastic(plt, out: Path) -> Path:
    """An async run's throughput while a rollout node is lost and another joins."""
    data = load("faults/elastic.json")
    series = data["series"]
    fig, ax = plt.subplots(figsize=SIZE)
    times = [point["time_s"] for point in series]
    window = 9  # updates: a running median, as the raw per-update rate is jagged
    smooth = [statistics.median(p["sps"] for p in series[max(0, i - window + 1) : i + 1]) for i in range(len(series))]
    ax.plot(times, smooth, color=COLOURS["distrl"], label=f"env steps/s (median of {window} updates)")
    twin = ax.twinx()
    twin.step(times, [p["workers"] for p in series], where="post", color="0.5", lw=1.0, label="workers answering")
    twin.set_ylabel("workers answering")
    twin.set_ylim(0, max(p["workers"] for p in series) + 1)
    for event, at in data["events"].items():
        ax.axvline(at, color="tab:red", ls=":", lw=1.0)
        ax.text(at, ax.get_ylim()[1] * 0.98, f" {event}", color="tab:red", fontsize=8, va="top")
    ax.set_xlabel("seconds from launch")
    ax.set_ylabel("env steps/s")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    lines = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="lower left")
    path = out / "elastic.png"
    finish(fig, "CartPole, async: a rollout node lost, then one added", [data["machine"]], path)
    return path


FIGURES = {
    "peers": peers,
    "mujoco": mujoco,
    "spread": spread,
    "sampling": sampling,
    "workers": workers,
    "elastic": elastic,
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=sorted(FIGURES), help="these figures only")
    parser.add_argument("--out-dir", type=Path, default=OUT, help="where the PNGs go (default: docs/img)")
    args = parser.parse_args(argv)
    plt = pyplot()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name in args.only or FIGURES:
        path = FIGURES[name](plt, args.out_dir)
        plt.close("all")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
