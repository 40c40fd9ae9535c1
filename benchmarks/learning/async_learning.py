"""Learning with the asynchronous pipeline beside the lockstep one: env steps and wall time to each task's target.

CartPole-v1 to a mean return of 475, Acrobot-v1 to -100 and Pendulum-v1 to -250, each with four rollout workers (0.25
CPU each, so they fit a 2-core machine beside the learner) and the shipped settings (Acrobot: CartPole's, with an
entropy bonus), ``rollout.pipeline`` sync and async, PPO, seeds 0-2 (``--seeds``). The async runs measure PPO's
clipped ratio from the learner's policy (``ppo.proximal: learner``, decoupled PPO, as the async configs do; the sync
runs keep the behaviour policy's, which at lag 0 is the same policy). ``--async-algo appo`` (V-trace targets) and
``--async-proximal behaviour`` change the async runs, and ``--updates-ahead X`` their ``rollout.updates_ahead``; their
results are written apart (``async_learning_ALGO_PROXIMAL``, ``..._aheadX``). A run that misses its target within its
budget counts at its budget. Wall time is
given from launch and from the first update (start-up, 12-20 s here, is the same work in both pipelines and its
spread on a shared 2-core machine is seconds). The pipelines of a seed run one after the other, in turns (sync first
on even seeds). Target: async reaches each target in at most 1.2x the env steps of sync (median of 3
seeds) and in less wall time. Writes JSON and Markdown.

``--layout nodes`` runs the same on a two-node Ray cluster on 127.0.0.1 whose nodes have a core each (``taskset``):
the learner, the driver and the coordinator on the head's core, the four workers on the rollout node's, as on a
cluster where the learner has a machine (or a GPU) of its own. No process of one side can then use the other's core
while it idles, as on separate machines; the default layout (one Ray, both cores shared by every process) lets the
workers use the learner's core between updates in both pipelines. The cluster starts once and each run is a driver
that joins it (``--address``), so wall time from launch has no Ray start-up in it.

    python benchmarks/learning/async_learning.py                                       # 3 tasks x 2 pipelines x 3 seeds
    python benchmarks/learning/async_learning.py --layout nodes                        # the same on two one-core nodes
    python benchmarks/learning/async_learning.py --layout nodes --pool A.json B.json   # medians over invocations' runs
    python benchmarks/learning/async_learning.py --tasks Acrobot-v1 --seeds 0 1 2 3    # some tasks: written apart
    python benchmarks/learning/async_learning.py --shipped  # the shipped configs as a user runs them, async beside sync
    python benchmarks/learning/async_learning.py --shipped --tasks breakout --seeds 0  # Breakout as shipped, one worker
    python benchmarks/learning/async_learning.py --quick                               # CartPole, seed 0
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, markdown_table
from benchmarks.tasks import PROXIMAL, TASKS, WORKERS, parse_task_arguments, task_parser
from benchmarks.training import train
from clusters import local_dev_cluster

# --shipped: the shipped configs as a user runs them with four workers (CartPole at the 16 envs per worker the async
# study measured, Pendulum as shipped), nothing else set: ppo.proximal stays at its default in both pipelines.
# Acrobot has no shipped config: benchmarks/tasks.py's task, its proximal left at the default too.
SHIPPED = {
    "CartPole-v1": ("configs/cartpole.yaml", ["env.num_envs_per_worker=16"], 475.0, 1_500_000),
    "Acrobot-v1": TASKS["Acrobot-v1"],
    "Pendulum-v1": ("configs/pendulum.yaml", [], -250.0, 600_000),
    # The model kinds' configs, each at its own target and budget (--tasks names them; not in the default set):
    "cartpole_lstm": ("configs/cartpole_lstm.yaml", [], 400.0, 800_000),
    "cartpole_attention": ("configs/cartpole_attention.yaml", [], 475.0, 800_000),
    "dict_image_cartpole": ("configs/dict_image_cartpole.yaml", [], 475.0, 1_000_000),
    # Breakout as shipped (one worker on a core of its own) at its 100k-step budget, which no run reaches 10 in on two
    # cores: the row compares the returns at the budget (learning Breakout needs millions of steps: a cluster).
    "breakout": ("configs/breakout.yaml", ["rollout.num_workers=1", "rollout.num_cpus_per_worker=1"], 10.0, 100_000),
}

# --layout nodes: the head (the learner's node, and the driver's) on core 0, the rollout node on core 1
NODE_CORES = {"learner": "0", "rollout": "1"}
ON_NODES = ["learner.resources={learner: 1}", "rollout.resources={rollout: 0.25}"]


def on_nodes(cluster: local_dev_cluster.DevCluster | None) -> dict:
    """How a run joins ``cluster`` (``benchmarks.training.train``'s settings): its driver on the learner node's core,
    the learner and the workers on their nodes; nothing where there is no cluster (a private Ray)."""
    return {} if cluster is None else {"cluster": cluster, "cores": NODE_CORES["learner"]}


def run(
    task: str,
    pipeline: str,
    seed: int,
    algo: str,
    proximal: str | None,
    updates_ahead: float = 1.0,
    extra: list[str] = (),
    cluster: local_dev_cluster.DevCluster | None = None,
    shipped: bool = False,
) -> dict:
    """One run; ``proximal`` None leaves ``ppo.proximal`` at its default; ``shipped``: the task as ``SHIPPED`` has
    it."""
    config, overrides, target, budget = (SHIPPED if shipped else TASKS)[task]
    items = [
        *WORKERS,
        *overrides,
        f"rollout.pipeline={pipeline}",
        f"seed={seed}",
        f"stop.episode_return_mean={target}",
        f"stop.env_steps={budget}",
        f"algo={algo}",
        *([f"ppo.proximal={proximal}"] if proximal else []),
    ]
    if updates_ahead != 1.0:
        items.append(f"rollout.updates_ahead={updates_ahead:g}")
    items += extra
    items += ON_NODES if cluster is not None else []
    done = train(config, items, what=f"{task} {pipeline} seed {seed}", timeout=3600, **on_nodes(cluster))
    summary, metrics = done.summary, done.rows
    first_update_s = metrics[0]["time_s"]
    lag = statistics.mean(row["policy_lag_mean"] for row in metrics[1:]) if len(metrics) > 1 else 0.0
    # Why a pipeline needs the steps it needs: how far each update's batches lagged (the spread over updates), how much
    # of the batch PPO's clip held back, how far each update moved the policy, and the learner's share of the time
    # past the first update (1: the workers waited for it throughout).
    later = metrics[1:] or metrics
    past_first = max(metrics[-1]["time_s"] - metrics[0]["time_s"], 1e-9)
    why = {
        "lag_max": round(max(row["policy_lag_mean"] for row in later), 3),
        "clip_frac": round(statistics.mean(row["clip_frac"] for row in metrics), 4),
        "approx_kl": round(statistics.mean(row["approx_kl"] for row in metrics), 5),
        "learner_busy": round(sum(row["learn_s"] for row in metrics[1:]) / past_first, 3),
        "updates": len(metrics),
    }
    solved = summary["stop_reason"] == "episode_return_mean"
    return {
        "task": task,
        "overrides": overrides,
        "pipeline": pipeline,
        "algo": algo,
        "proximal": proximal,
        "updates_ahead": updates_ahead,
        "seed": seed,
        "solved": solved,
        "env_steps": summary["env_steps"],
        "wall_s": summary["solved_at_s"] if solved else summary["wall_s"],
        "first_update_s": first_update_s,
        "return": summary["episode_return_mean"],
        "policy_lag": round(lag, 3),
        "stale_batches": summary.get("stale_batches", 0),
        **why,
    }


def run_all(args: argparse.Namespace, cluster: local_dev_cluster.DevCluster | None) -> list[dict]:
    """Every task's seeds, a seed's two pipelines one after the other."""
    runs = []
    for task in args.tasks:
        for seed in args.seeds:  # the pipelines of one seed side by side: the machine's speed drifts within a run
            for pipeline in ("sync", "async") if seed % 2 == 0 else ("async", "sync"):
                lagged = pipeline == "async"
                proximal = None if args.shipped else args.async_proximal if lagged else PROXIMAL["sync"]
                r = run(
                    task,
                    pipeline,
                    seed,
                    args.async_algo if lagged else "ppo",
                    proximal,
                    args.updates_ahead if lagged else 1.0,
                    [*args.overrides, *(args.async_set if lagged else [])],
                    cluster,
                    args.shipped,
                )
                r["train_s"] = round(r["wall_s"] - r["first_update_s"], 3)
                runs.append(r)
                print(
                    f"{task:12s} {pipeline:5s} seed {seed}: {'solved' if r['solved'] else 'NOT solved'} at "
                    f"{r['env_steps']:,} env steps, {r['wall_s']:.1f} s (return {r['return']:.1f}, "
                    f"policy lag {r['policy_lag']:.2f}, at most {r['lag_max']:.2f}; {r['updates']} updates, clip "
                    f"fraction {r['clip_frac']:.3f}, KL {r['approx_kl']:.4f}, learner busy {r['learner_busy']:.0%})",
                    flush=True,
                )
    return runs


def _pair(med: dict, key: str, digits: int) -> str | None:
    """``sync/async`` medians of ``key`` (None where runs from before it existed lack it)."""
    if med["sync"][key] is None or med["async"][key] is None:
        return None
    return f"{med['sync'][key]:.{digits}f}/{med['async'][key]:.{digits}f}"


def summarize(runs: list[dict]) -> list[dict]:
    """A row of medians per task, async beside sync."""
    rows = []
    for task in dict.fromkeys(r["task"] for r in runs):
        by = {p: [r for r in runs if r["task"] == task and r["pipeline"] == p] for p in ("sync", "async")}
        keys = (
            "env_steps",
            "wall_s",
            "train_s",
            "policy_lag",
            "clip_frac",
            "approx_kl",
            "learner_busy",
            "updates",
            "return",
        )
        med = {
            p: {
                k: statistics.median(r[k] for r in by[p] if k in r) if any(k in r for r in by[p]) else None
                for k in keys
            }
            for p in by
        }  # (runs from before a key existed lack it: --pool)
        solved = {p: sum(r["solved"] for r in by[p]) for p in by}
        rows.append(
            {
                "task": task,
                "seeds": len(by["sync"]),
                "sync env steps": med["sync"]["env_steps"],
                "async env steps": med["async"]["env_steps"],
                "steps async / sync": med["async"]["env_steps"] / med["sync"]["env_steps"],
                "sync wall s": med["sync"]["wall_s"],
                "async wall s": med["async"]["wall_s"],
                "wall async / sync": med["async"]["wall_s"] / med["sync"]["wall_s"],
                "sync train s": med["sync"]["train_s"],
                "async train s": med["async"]["train_s"],
                "train async / sync": med["async"]["train_s"] / med["sync"]["train_s"],
                "async policy lag": med["async"]["policy_lag"],
                "updates sync/async": _pair(med, "updates", 0),
                "clip frac sync/async": _pair(med, "clip_frac", 3),
                "KL sync/async": _pair(med, "approx_kl", 4),
                "learner busy sync/async": _pair(med, "learner_busy", 2),
                "return sync/async": _pair(med, "return", 1),
                "solved sync/async": f"{solved['sync']}/{solved['async']} of {len(by['sync'])}",
            }
        )
    return rows


# What makes two invocations one study: the same machine (its commit aside) and the same settings of the runs.
STUDY_SETTINGS = ("layout", "async_algo", "async_proximal", "updates_ahead", "overrides", "async_set", "shipped")
UNRECORDED = {"shipped": False}  # settings files from before they existed ran with
FORMER_NAMES = {"overrides": "set"}  # --set's settings, as files from before the studies' shared parser name them


def recorded(settings: dict, key: str):
    """A results file's setting ``key``, under its former name where the file is older than the name."""
    if key not in settings and FORMER_NAMES.get(key) in settings:
        return settings[FORMER_NAMES[key]]
    return settings.get(key, UNRECORDED.get(key))


def pool_runs(paths: list[Path], settings: dict) -> tuple[list[dict], dict]:
    """The runs of several results files (data: JSON read, nothing imported) of the tasks ``settings["tasks"]`` names,
    and their machine, its ``commit`` every commit they name; ``ValueError`` (one line) where a file was run on
    another machine or with other settings than the first file (or than ``settings``, this invocation's), defines a
    task otherwise, or repeats a task, pipeline and seed."""
    runs: list[dict] = []
    machine: dict | None = None
    commits: list[str] = []
    for path in paths:
        results = json.loads(Path(path).read_text())
        if machine is None:
            machine = results["machine"]
        for key in machine.keys() | results["machine"].keys():
            if key != "commit" and results["machine"].get(key) != machine.get(key):
                raise ValueError(
                    f"{path} was run on machine.{key}={results['machine'].get(key)!r}, "
                    f"{paths[0]} on {machine.get(key)!r}: only runs of one machine are pooled"
                )
        for key in STUDY_SETTINGS:
            if recorded(results["settings"], key) != settings.get(key):
                raise ValueError(
                    f"{path} has settings.{key}={recorded(results['settings'], key)!r}, this invocation "
                    f"{settings.get(key)!r}: only runs of one study are pooled"
                )
        kept = [r for r in results["runs"] if r["task"] in settings["tasks"]]
        overrides = {r["task"]: r.get("overrides") for r in runs}  # None: a file from before runs recorded them
        for r in kept:
            if r["task"] in overrides and r.get("overrides") != overrides[r["task"]]:
                raise ValueError(
                    f"{path} ran {r['task']} with {r.get('overrides')!r}, the files before it with "
                    f"{overrides[r['task']]!r}: only runs of one task definition are pooled"
                )
        seen = {(r["task"], r["pipeline"], r["seed"]) for r in runs}
        for r in kept:
            if (r["task"], r["pipeline"], r["seed"]) in seen:
                raise ValueError(
                    f"{path} repeats {r['task']} {r['pipeline']} seed {r['seed']}: pool invocations of different seeds"
                )
        runs += kept
        commits += [results["machine"]["commit"]] if results["machine"]["commit"] not in commits else []
    return runs, {**machine, "commit": ", ".join(commits)}


def seed_triples(runs: list[dict]) -> list[dict]:
    """How often target (c) holds at three seeds, the issue's measure: over every three of the seeds run (both
    pipelines of each), the share whose medians meet each task's steps bound (async <= 1.2x sync), its time bound
    (async < sync, from launch), and both; and the share meeting both on every task at once (same seeds)."""
    tasks = list(dict.fromkeys(r["task"] for r in runs))
    by = {(r["task"], r["pipeline"], r["seed"]): r for r in runs}
    seeds = sorted({seed for task, _, seed in by if all((t, p, seed) in by for t in tasks for p in ("sync", "async"))})
    triples = list(itertools.combinations(seeds, 3))
    if len(triples) < 2:
        return []

    def meets(task: str, triple: tuple) -> tuple[bool, bool]:
        med = {
            p: {k: statistics.median(by[(task, p, seed)][k] for seed in triple) for k in ("env_steps", "wall_s")}
            for p in ("sync", "async")
        }
        return (
            med["async"]["env_steps"] <= 1.2 * med["sync"]["env_steps"],
            med["async"]["wall_s"] < med["sync"]["wall_s"],
        )

    met = {(task, triple): meets(task, triple) for task in tasks for triple in triples}
    rows = [
        {
            "task": task,
            "triples": len(triples),
            "steps met": sum(met[(task, t)][0] for t in triples) / len(triples),
            "time met": sum(met[(task, t)][1] for t in triples) / len(triples),
            "both met": sum(all(met[(task, t)]) for t in triples) / len(triples),
        }
        for task in tasks
    ]
    every = sum(all(all(met[(task, t)]) for task in tasks) for t in triples) / len(triples)
    rows.append(
        {
            "task": "every task, same seeds",
            "triples": len(triples),
            "steps met": None,
            "time met": None,
            "both met": every,
        }
    )
    return rows


def main() -> int:
    # --set: a study, written as async_learning_set_...
    parser = task_parser(__doc__)
    parser.add_argument(
        "--async-algo",
        default="ppo",
        choices=["ppo", "appo"],
        help="the async runs' algorithm (sync runs PPO): appo corrects the lag with V-trace",
    )
    parser.add_argument(
        "--async-proximal",
        default=PROXIMAL["async"],
        choices=["behaviour", "learner"],
        help="the async runs' ppo.proximal (sync runs behaviour): learner is decoupled PPO",
    )
    parser.add_argument(
        "--updates-ahead",
        type=float,
        default=1.0,
        help="the async runs' rollout.updates_ahead (0.5: half the next update's batches sampled during "
        "an update, half after it)",
    )
    parser.add_argument(
        "--async-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for the async runs only (a study: written as async_learning_async-set_...)",
    )
    parser.add_argument(
        "--layout",
        default="shared",
        choices=["shared", "nodes"],
        help="shared: one private Ray, every process on both cores; nodes: a learner node and a rollout "
        "node on 127.0.0.1, a core each",
    )
    parser.add_argument(
        "--shipped",
        action="store_true",
        help="the shipped configs as a user runs them (SHIPPED): no task settings, ppo.proximal at its "
        "default in both pipelines (written as async_learning_shipped)",
    )
    parser.add_argument(
        "--pool",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="run nothing: the medians over the runs of these results files (invocations of one study "
        "with different seeds) of the tasks --tasks names, written as their name + _pooled",
    )
    args, machine = parse_task_arguments(parser)
    known = SHIPPED if args.shipped else TASKS
    unknown = [task for task in args.tasks if task not in known]
    if unknown and not args.pool:
        more = "" if args.shipped else "; the model kinds' configs with --shipped"
        parser.error(
            f"--tasks {' '.join(unknown)}: not a task{' of --shipped' if args.shipped else ''} (allowed: "
            f"{', '.join(known)}{more})"
        )
    cluster, pooled = None, []
    if args.pool:
        try:
            pooled, machine = pool_runs(args.pool, vars(args))  # the runs' machine and commits, not this invocation's
        except ValueError as exc:
            print(f"async_learning.py: error: --pool: {exc}", file=sys.stderr)
            sys.exit(2)
    base = tempfile.mkdtemp(prefix="ral_", dir="/tmp") if args.layout == "nodes" and not args.pool else None
    try:
        if base is not None:
            cluster = local_dev_cluster.start(
                rollout_nodes=1,
                rollout_cpus=1,
                learner_cpus=1,
                temp_dir=os.path.join(base, "ray"),
                learner_cores=NODE_CORES["learner"],
                rollout_cores=NODE_CORES["rollout"],
            )
        runs = pooled if args.pool else run_all(args, cluster)
    finally:
        if cluster is not None:
            cluster.shutdown()
        if base is not None:
            shutil.rmtree(base, ignore_errors=True)  # the cluster's private temp dir, logs and all
    rows = summarize(runs)
    columns = (
        "task | sync env steps: sync: env steps | async env steps: async: env steps | "
        "steps async / sync: async / sync steps (target <= 1.2) | "
        "sync wall s: sync: s from launch | async wall s: async: s from launch | "
        "wall async / sync: async / sync time (target < 1) | "
        "sync train s: sync: s from first update | "
        "async train s: async: s from first update | "
        "train async / sync: async / sync, from first update | "
        "async policy lag: async: policy lag (mean of its updates) | "
        "updates sync/async: updates | clip frac sync/async: clip fraction | "
        "KL sync/async: KL an update | "
        "learner busy sync/async: learner busy past the first update | "
        "return sync/async: return at the end | solved sync/async: solved"
    )
    if args.shipped:  # no proximal is set: the name says the algorithm only
        name = "async_learning_shipped" + (f"_{args.async_algo}" if args.async_algo != "ppo" else "")
    else:
        name = (
            "async_learning"
            if (args.async_algo, args.async_proximal) == ("ppo", "learner")
            else f"async_learning_{args.async_algo}_{args.async_proximal}"
        )
    if args.updates_ahead != 1.0:
        name += f"_ahead{args.updates_ahead:g}"
    if args.layout != "shared":
        name += f"_{args.layout}"
    if args.pool:
        name += "_pooled"
    if not args.quick and args.tasks != list(TASKS):  # a study of some tasks: apart from the whole one
        name += "_" + "-".join(task.split("-")[0].lower() for task in args.tasks)
    for flag, items in (("set", args.overrides), ("async-set", args.async_set)):
        for item in items:
            name += f"_{flag}_" + "".join(c if c.isalnum() else "-" for c in item)
    triples = seed_triples(runs)
    table = markdown_table(rows, columns)
    if triples:
        table += "\n\nShare of every three of these seeds whose medians meet target (c):\n\n" + markdown_table(
            triples,
            "task | triples: seed triples | steps met: steps <= 1.2x | time met: time < sync | both met: both",
        )
    return finish(name, args, machine, rows, table=table, settings=vars(args), runs=runs, seed_triples=triples)


if __name__ == "__main__":
    sys.exit(main())
