"""Every benchmark script runs in its --quick mode and writes its results files, so none can rot (peers_breakout.py
needs Sample Factory's environment of its own, which CI does not build: only its --help runs here)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

# Every study, by its file's name: the scripts in benchmarks/QUESTION/ (the library beside them is not a study), but
# for two tools a reader runs on what studies wrote (runs, recordings), which have no quick mode.
TOOLS = {"same_learning", "critic_extrapolation"}
PATHS = {path.stem: path for path in sorted((ROOT / "benchmarks").glob("*/*.py")) if path.stem != "__init__"}
SCRIPTS = [name for name in PATHS if name not in TOOLS]
MINATAR = pytest.mark.skipif(importlib.util.find_spec("minatar") is None, reason="MinAtar is not installed")


def run_script(name, *args, timeout=900):
    return subprocess.run(
        [sys.executable, PATHS[name], *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout
    )


def test_a_study_imports_the_library_beside_it_and_no_other_study():
    import ast

    studies = {f"benchmarks.{path.parent.name}.{name}" for name, path in PATHS.items()}
    leaks = {}
    for name, path in PATHS.items():
        for node in ast.walk(ast.parse(path.read_text())):
            modules = [node.module] if isinstance(node, ast.ImportFrom) else []
            modules += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            leaks.setdefault(name, []).extend(m for m in modules if m in studies)
    leaks = {name: modules for name, modules in leaks.items() if modules}
    assert not leaks, leaks


def test_every_script_answers_help_and_has_a_quick_mode():
    # The scripts' imports are most of each answer's time: four at once.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        results = dict(zip(SCRIPTS, pool.map(lambda name: run_script(name, "--help"), SCRIPTS)))
    failed = {name: r.stderr[-1000:] for name, r in results.items() if r.returncode != 0 or "--quick" not in r.stdout}
    assert not failed, failed
    # every study's shared options come from one parser (benchmarks.common.study_parser)
    apart = [name for name, r in results.items() if "--results-dir" not in r.stdout]
    assert not apart, apart


# Studies whose --quick runs in a test of its own below, which checks more than that it writes its files
OWN_TEST = {
    "inference",
    "sampling",
    "multiagent",
    "cpu_accounting",
    "peers",
    "scale",
    "scale_machine",
    "async_learning",
    "spread_reference",
}
NEEDS_ITS_OWN_ENV = {"peers_breakout"}  # Sample Factory's, which CI does not build: its --help runs above
# The marks of a study's quick run: fast ones none; ``alone`` where the run measures CPU, time or the machine's
# processes and asserts on them
MARKS = {
    "compile_check": [],
    "league_sampling": [],
    "attention": [],
    "straggler": [pytest.mark.slow, pytest.mark.alone],
    "many_workers": [pytest.mark.slow, pytest.mark.alone],
    "reserve_cores": [pytest.mark.slow, pytest.mark.alone],
    "startup": [pytest.mark.slow, pytest.mark.alone],
    "elastic": [pytest.mark.slow, pytest.mark.alone],
    "minatar": [pytest.mark.slow, MINATAR],  # both models trained end to end on MinAtar
    "minatar_suite": [pytest.mark.slow, MINATAR],
}
QUICK = [name for name in SCRIPTS if name not in OWN_TEST | NEEDS_ITS_OWN_ENV]


@pytest.mark.parametrize("name", [pytest.param(name, marks=MARKS.get(name, [pytest.mark.slow])) for name in QUICK])
def test_quick_run_writes_results(name, tmp_path):
    result = run_script(name, "--quick", "--results-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("machine: ")
    (json_file,) = tmp_path.glob("*.json")
    payload = json.loads(json_file.read_text())
    assert payload["machine"]["torch"] and payload["rows"]
    assert (json_file.with_suffix(".md")).read_text().startswith("Machine: ")


def test_every_multiagent_task_and_variant_is_a_config_distrl_takes():
    from benchmarks.learning.multiagent import SKIPPED, TASKS, VARIANTS
    from distrl.config import load_config

    for task, (overrides, _) in TASKS.items():
        for variant, items in VARIANTS.items():
            if items is None or (variant, task) in SKIPPED:
                continue
            config = load_config(ROOT / "configs" / "cartpole.yaml", overrides + items)
            assert config.stop.episode_return_mean is None, (task, variant)  # every run takes its whole budget
    rmappo = TASKS["spread_mappo_world"][0] + VARIANTS["central_obs_lstm"]
    world = load_config(ROOT / "configs" / "cartpole.yaml", rmappo)
    assert world.env.id == "benchmarks.spread:mappo_world" and world.model.lstm_size == 64
    assert world.ppo.normalize_value and world.ppo.value_loss == "huber" and world.agents.critic == "observations"


@pytest.mark.slow
def test_multiagent_quick_run_keeps_its_run_directories_when_asked_and_never_reuses_one(tmp_path):
    runs = tmp_path / "runs"
    result = run_script("multiagent", "--quick", "--results-dir", str(tmp_path / "results"), "--runs-dir", str(runs))
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(next((tmp_path / "results").glob("*.json")).read_text())
    assert [(row["variant"], row["seed"]) for row in payload["rows"]] == [("independent", 0), ("central_obs", 0)]
    for variant in ("independent", "central_obs"):  # what distrl eval and distrl plot read
        run = runs / f"cartpole_team_{variant}_seed0"
        assert json.loads((run / "summary.json").read_text())["env_steps"] >= 20_000
        assert list((run / "checkpoints").glob("*.pt"))
    again = run_script("multiagent", "--quick", "--results-dir", str(tmp_path / "again"), "--runs-dir", str(runs))
    assert again.returncode == 2 and not (tmp_path / "again").exists()
    assert "cartpole_team_independent_seed0, cartpole_team_central_obs_seed0 already there" in again.stderr


@pytest.mark.slow
@pytest.mark.alone
def test_cpu_accounting_adds_up_to_what_the_machine_was_busy(tmp_path):
    result = run_script("cpu_accounting", "--quick", "--results-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    runs = json.loads((tmp_path / "cpu_accounting_quick.json").read_text())["runs"]
    assert [r["pipeline"] for r in runs] == ["sync", "async"]
    for r in runs:
        assert r["updates"] >= 2 and r["cpu_s_per_update"]["Learner"] > 0 and r["cpu_s_per_update"]["RolloutWorker"] > 0
        # What the run's processes used is part of what the whole machine was busy, which is at most its cores (clock
        # ticks over a wall-clock window: a little slack either way; a machine busy throughout reads 2.0003 of 2).
        assert sum(r["cores_busy"].values()) <= r["machine_busy_cores"] + 0.1
        assert r["machine_busy_cores"] <= r["machine_cores"] * 1.01


def test_inference_rows_are_checked_and_sampled_from_real_observations(tmp_path):
    result = run_script("inference", "--quick", "--results-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = json.loads(next(tmp_path.glob("*.json")).read_text())["rows"]
    assert row["backend_used"] == "onnxrt" and row["matches_eager_after_update"] and row["recompiles"] == 0
    assert row["speedup_vs_eager"] > 0 and row["samples_per_s"] == pytest.approx(64 * row["calls_per_s"])
    # The runtime alone, beside a bare ONNX Runtime session measured in the same process, and a weight sync.
    assert 0 < row["forward_us"] < row["us_per_call"] and row["bare_ort_forward_us"] > 0 and row["sync_ms"] > 0


@pytest.mark.slow
def test_peers_quick(tmp_path):
    result = run_script("peers", "--quick", "--results-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert [r["key"] for r in payload["rows"]] == ["distrl", "sb3", "rllib_same", "rllib_tuned"]
    assert all(r["env_steps"] > 0 and r["wall_s"] > 0 for r in payload["rows"])
    for row in payload["rows"]:  # the learning curve the docs' figure draws: [s from launch, env steps, return]
        times, steps = [p[0] for p in row["curve"]], [p[1] for p in row["curve"]]
        assert row["curve"] and times == sorted(times) and steps == sorted(steps) and steps[-1] <= row["env_steps"]
        assert 0 < times[-1] <= row["wall_s"] + 1 and all(isinstance(p[2], (int, float)) for p in row["curve"])
    # Ray's floor and distrl's launch-to-first-batch, measured in the same run.
    assert 0 < payload["targets"]["ray_floor_s"] < payload["targets"]["distrl_first_batch_s"]
    assert payload["rows"][0]["startup"]["first_batch"] == payload["rows"][0]["first_batch_s"]


@pytest.mark.slow
def test_scale_quick_each_learner_fetches_half_and_driver_cpu_is_measured(tmp_path):
    result = run_script("scale", "--quick", "--results-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert [r["workers"] for r in payload["rows"]] == [1, 2]
    for row in payload["rows"]:
        assert row["learner_fetch_bytes"] * 2 == row["batch_bytes"] and row["driver_cpu_ms_per_iter"] > 0
    assert payload["rows"][1]["batch_bytes"] == 2 * payload["rows"][0]["batch_bytes"]


def test_sampling_rows_account_for_the_worker_time(tmp_path):
    result = run_script("sampling", "--quick", "--results-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(next(tmp_path.glob("*.json")).read_text())["rows"]
    assert [(r["backend_used"], r["env_groups"]) for r in rows] == [
        ("eager", 1),
        ("eager", 2),
        ("onnxrt", 1),
        ("onnxrt", 2),
    ]
    for row in rows:
        assert 0 < row["worker_sps"] < row["env_alone_sps"]  # a worker cannot outrun its env
        shares = row["env_share"] + row["policy_share"] + row["bookkeeping_share"]
        assert abs(shares - 1) < 1e-9 and min(row["env_share"], row["policy_share"], row["bookkeeping_share"]) > 0


@pytest.mark.slow
@pytest.mark.alone
def test_scale_machine_quick_measures_distrl_beside_the_env_alone_ceiling(tmp_path):
    result = run_script("scale_machine", "--quick", "--results-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert [r["workers"] for r in payload["rows"]] == [1, 2]
    for row in payload["rows"]:
        assert 0 < row["sps"] < row["env_alone_sps"] and row["learn_s"] > 0 and row["sample_s"] > 0
    assert (tmp_path / "scale_machine_cartpole_quick.png").stat().st_size > 0
    assert (tmp_path / "scale_machine_cartpole_quick.md").read_text().startswith("Machine: ")


def test_gpu_checks_script_says_what_machine_it_is_on_and_that_distrl_imports(tmp_path):
    """benchmarks/gpu_checks.sh with no stage asked: its machine lines and import check, its log written."""
    result = subprocess.run(
        ["bash", "benchmarks/gpu_checks.sh", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "STAGES": ""},
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    log = (tmp_path / "log").read_text()
    assert "=== machine" in log and "ray 2." in log and "=== done" in log and "=== stage" not in log


@pytest.mark.slow
def test_async_learning_quick_on_two_nodes_with_a_core_each(tmp_path):
    """``--layout nodes``: both pipelines run on the two-node cluster, whose processes and temp dir are all gone
    afterwards."""
    import psutil

    before = set(Path("/tmp").glob("ral_*"))
    result = run_script("async_learning", "--quick", "--layout", "nodes", "--results-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads((tmp_path / "async_learning_nodes_quick.json").read_text())
    assert payload["settings"]["layout"] == "nodes"
    assert sorted(r["pipeline"] for r in payload["runs"]) == ["async", "sync"] and payload["rows"]
    assert not [p for p in psutil.process_iter(["cmdline"]) if "/tmp/ral_" in " ".join(p.info["cmdline"] or [])]
    assert set(Path("/tmp").glob("ral_*")) <= before


def _results_file(
    path: Path,
    seeds: list[int],
    async_steps: list[int],
    async_wall: list[float],
    overrides: list[str] | None = None,
    task: str = "CartPole-v1",
    **machine,
) -> Path:
    """An async_learning results file of ``task``'s runs: sync 100 env steps in 10 s at every seed, async as given."""
    runs = []
    for seed, steps, wall in zip(seeds, async_steps, async_wall, strict=True):
        for pipeline, (s, w) in (("sync", (100, 10.0)), ("async", (steps, wall))):
            runs.append(
                {
                    "task": task,
                    "overrides": overrides,
                    "pipeline": pipeline,
                    "seed": seed,
                    "solved": True,
                    "env_steps": s,
                    "wall_s": w,
                    "train_s": w - 5,
                    "policy_lag": float(pipeline == "async"),
                }
            )
    settings = {
        "layout": "shared",
        "async_algo": "ppo",
        "async_proximal": "learner",
        "updates_ahead": 1.0,
        "set": [],
        "async_set": [],
    }
    payload = {
        "machine": {
            "cpu": "X",
            "cores": 2,
            "gpu": None,
            "torch": "t",
            "ray": "r",
            "onnxruntime": "o",
            "commit": path.stem,
            **machine,
        },
        "settings": settings,
        "runs": runs,
    }
    path.write_text(json.dumps(payload))
    return path


def test_async_learning_pools_one_study_and_tables_how_often_three_seeds_meet_the_target(tmp_path):
    """``--pool``: the runs of invocations with different seeds, their medians, and the share of every three seeds
    whose medians meet target (c); files of another machine, of another definition of a task, or a seed run twice,
    are refused in one line (exit 2); ``--tasks`` pools those tasks' runs alone, written apart."""
    first = _results_file(tmp_path / "a.json", [0, 1], [100, 100], [9.0, 9.0])
    second = _results_file(tmp_path / "b.json", [2, 3], [130, 130], [11.0, 11.0])
    result = run_script("async_learning", "--pool", str(first), str(second), "--results-dir", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-3000:]
    pooled = json.loads((tmp_path / "out" / "async_learning_pooled.json").read_text())
    assert len(pooled["runs"]) == 8 and pooled["machine"]["commit"] == "a, b"
    # Of the four triples, the two with seeds 0 and 1 have async medians of 100 steps in 9 s: both bounds met
    cartpole, every = pooled["seed_triples"]
    assert cartpole == {"task": "CartPole-v1", "triples": 4, "steps met": 0.5, "time met": 0.5, "both met": 0.5}
    assert every["both met"] == 0.5
    acrobot = _results_file(
        tmp_path / "acrobot.json", [0, 1], [100, 100], [9.0, 9.0], ["ppo.ent_coef=0.01"], "Acrobot-v1"
    )
    result = run_script(
        "async_learning",
        "--pool",
        str(first),
        str(acrobot),
        "--tasks",
        "Acrobot-v1",
        "--results-dir",
        str(tmp_path / "out"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    pooled = json.loads((tmp_path / "out" / "async_learning_pooled_acrobot.json").read_text())
    assert {r["task"] for r in pooled["runs"]} == {"Acrobot-v1"} and len(pooled["runs"]) == 4
    other = _results_file(tmp_path / "c.json", [4], [100], [9.0], cores=16)
    redefined = _results_file(tmp_path / "d.json", [5], [100], [9.0], overrides=["ppo.ent_coef=0.01"])
    for files, words in (
        ([first, other], "machine.cores=16"),
        ([first, first], "repeats CartPole-v1 sync seed 0"),
        ([first, redefined], "ran CartPole-v1 with ['ppo.ent_coef=0.01'], the files before it with None"),
    ):
        refused = run_script("async_learning", "--pool", *map(str, files), "--results-dir", str(tmp_path / "no"))
        assert refused.returncode == 2 and words in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
        assert "Traceback" not in refused.stderr and not (tmp_path / "no").exists()


@pytest.mark.slow
@pytest.mark.parametrize("when", ["its cluster starts", "its run trains"])
def test_a_benchmark_stopped_with_sigterm_stops_its_cluster_and_removes_its_temp_dir(when):
    """``elastic.py`` (its cluster, then its training run on it) stopped while its cluster starts or mid-run: no
    process of either is left, nor its temp dir."""
    import os
    import signal
    import time

    import psutil

    before = set(Path("/tmp").glob("rel_*"))
    proc = subprocess.Popen(
        [sys.executable, "benchmarks/faults/elastic.py", "--quick", "--results-dir", "/nonexistent"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    def ours() -> list[str]:
        lines = [" ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])]
        return [line for line in lines if "/tmp/rel_" in line and not any(str(b) in line for b in before)]

    sign = (
        "/tmp/rel_" if when == "its cluster starts" else "-m distrl train"
    )  # the first process of the cluster, or the run
    deadline = time.monotonic() + 300
    while not any(sign in line for line in ours()):
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=120) == 143
    assert ours() == [] and set(Path("/tmp").glob("rel_*")) <= before


def test_same_learning_compares_rows_key_by_key_timings_aside(tmp_path):
    from benchmarks.learning.same_learning import TIMING_KEYS, first_difference

    rows = [{"iteration": 1, "loss_value": 0.5, "learner_version": 1}, {"iteration": 2, "loss_value": 0.25}]
    assert first_difference(rows, [dict(r) for r in rows]) is None
    assert first_difference(rows, rows[:1]) == "2 rows against 1"
    changed = [rows[0], {"iteration": 2, "loss_value": 0.26}]
    assert first_difference(rows, changed) == "row 1 (2): loss_value 0.25 against 0.26"
    assert {"learn_s", "sample_s", "time_s", "sps"} <= TIMING_KEYS and "loss_value" not in TIMING_KEYS
    machine = {"commit": "abc"}
    for name, case_rows in (("a", rows), ("b", rows), ("c", changed)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"machine": machine, "cases": {"case": [case_rows]}}))
    same = run_script("same_learning", "--compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), timeout=120)
    assert same.returncode == 0 and "case: identical (2 rows" in same.stdout, same.stdout + same.stderr
    differ = run_script("same_learning", "--compare", str(tmp_path / "a.json"), str(tmp_path / "c.json"), timeout=120)
    assert differ.returncode == 1 and "case: DIFFERENT: row 1 (2): loss_value" in differ.stdout


def test_spread_reference_scales_a_per_agent_return_to_mappos_and_checks_it_on_the_world(tmp_path):
    from benchmarks.spread import mappo_return

    # 25 steps of 3 agents: 6 x the per-agent return, less the 75 touches of each agent with itself.
    assert mappo_return(0.0) == -75 and mappo_return(-20.0) == -195
    scaled = run_script("spread_reference", "--scale", "-20.2", timeout=120)
    assert scaled.returncode == 0 and "MAPPO's scale -196.2" in scaled.stdout
    pytest.importorskip("mpe2")  # installed apart (.ci/run): its pygame-ce would overwrite pygame
    result = run_script(
        "spread_reference", "--quick", "--policies", "random", "assignment", "--results-dir", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads((tmp_path / "spread_reference_quick.json").read_text())["rows"]
    assert [(row["world"], row["policy"]) for row in rows] == [
        ("mpe2", "random"),
        ("mpe2", "assignment"),
        ("mappo", "random"),
        ("mappo", "assignment"),
    ]
    for random, assignment in (rows[:2], rows[2:]):
        # MAPPO's return read off the world's positions each step is the formula's, episode by episode.
        assert random["largest_gap"] < 1e-6 and assignment["largest_gap"] < 1e-6
        assert random["mappo_return"] == pytest.approx(mappo_return(random["return"]))
        assert assignment["return"] > random["return"] + 10  # the scripted team covers the landmarks
    # The same episodes' seeds in MAPPO's world: its landmarks nearer the centre, the team's distances shorter.
    assert rows[3]["return"] > rows[1]["return"]


def test_mappo_world_places_landmarks_as_mappos_mpe_and_leaves_the_rest_to_mpe2():
    pytest.importorskip("mpe2")
    import numpy as np
    from mpe2 import simple_spread_v3

    from benchmarks.spread import mappo_world

    theirs = mappo_world(N=3, max_cycles=25, continuous_actions=False)
    ours = simple_spread_v3.parallel_env(N=3, max_cycles=25, continuous_actions=False)
    for seed in range(50):
        theirs.reset(seed=seed)
        ours.reset(seed=seed)
        marks = [[mark.state.p_pos for mark in env.unwrapped.world.landmarks] for env in (theirs, ours)]
        agents = [[agent.state.p_pos for agent in env.unwrapped.world.agents] for env in (theirs, ours)]
        np.testing.assert_allclose(marks[0], 0.8 * np.asarray(marks[1]))  # the same draw, in [-0.8, 0.8]
        np.testing.assert_array_equal(agents[0], agents[1])
    assert theirs.observation_space("agent_0") == ours.observation_space("agent_0")
    assert theirs.state().shape == ours.state().shape


def test_mappo_world_with_shared_reward_gives_every_agent_the_teams_mean_and_nothing_else_changes():
    pytest.importorskip("mpe2")
    import numpy as np

    from benchmarks.spread import mappo_world

    shared = mappo_world(shared_reward=True, N=3, max_cycles=25, continuous_actions=False)
    own = mappo_world(N=3, max_cycles=25, continuous_actions=False)
    rng = np.random.default_rng(0)
    for seed in range(3):
        obs_shared, _ = shared.reset(seed=seed)
        obs_own, _ = own.reset(seed=seed)
        touched = False
        while own.agents:
            actions = {agent: int(rng.integers(5)) for agent in own.agents}
            obs_shared, rewards_shared, *ends_shared = shared.step(actions)
            obs_own, rewards_own, *ends_own = own.step(actions)
            assert ends_shared[:2] == ends_own[:2] and list(obs_shared) == list(obs_own)
            for agent in obs_own:
                np.testing.assert_array_equal(obs_shared[agent], obs_own[agent])
            team = np.mean(list(rewards_own.values()))
            assert rewards_shared == {agent: pytest.approx(team) for agent in rewards_own}
            touched |= len(set(rewards_own.values())) > 1  # a step where the agents' own rewards differ
        assert shared.agents == own.agents == []
    assert touched  # (a collision happened: the check above compared unequal rewards, not only equal ones)
    assert shared.unwrapped is not shared and shared.state().shape == own.state().shape


def test_a_benchmark_writes_a_fresh_directory_unless_told_to_write_the_repositorys_tables():
    import argparse

    from benchmarks.common import RESULTS, add_results_dir_argument

    parser = argparse.ArgumentParser()
    add_results_dir_argument(parser)
    default = parser.parse_args([]).results_dir
    assert default.parent == ROOT / "runs" / "benchmarks" and not default.exists() and default != RESULTS
    assert parser.parse_args(["--results-dir", "benchmarks/results"]).results_dir == Path("benchmarks/results")


@pytest.mark.slow
def test_league_check_passes_on_the_shipped_config_and_fails_on_a_learner_that_barely_trained(tmp_path):
    from benchmarks.league.league import CHECK_ENV_STEPS, CHECK_FLOOR

    result = run_script("league", "--check", "--results-dir", str(tmp_path / "full"))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    (row,) = json.loads((tmp_path / "full" / "league_connect4_check.json").read_text())["rows"]
    assert CHECK_ENV_STEPS <= row["env_steps"] < CHECK_ENV_STEPS + 16_384  # the budget, to the round
    assert (row["floor_seat0"], row["floor_seat1"]) == CHECK_FLOOR
    assert row["judge_seat0"] >= CHECK_FLOOR[0] and row["judge_seat1"] >= CHECK_FLOOR[1]
    # The same check on a learner stopped after two rounds: far below the floor, so the check says so.
    weak = run_script("league", "--check", "--set", "stop.env_steps=16384", "--results-dir", str(tmp_path / "weak"))
    assert weak.returncode == 1 and "league check FAILED" in weak.stderr, weak.stderr[-3000:]
    assert "Traceback" not in weak.stderr


def test_the_one_ply_judge_wins_blocks_and_never_hands_over_a_win_on_top():
    """Connect four, from the mover's side (plane 0 its stones, row 5 the bottom): the opponent holds three in row 4
    (columns 0-2), so a stone in the centre column's free bottom cell would let them complete it on top. The league's
    own scripted player plays the centre often; the judge never does, yet wins or blocks where it can."""
    import numpy as np

    from benchmarks.league_runs import one_ply_judge
    from distrl.envs.games.connect_four import heuristic

    board = np.zeros((6, 7, 2), np.float32)
    board[5, [0, 2], 0] = board[5, 1, 1] = 1  # the bottom row: ours, theirs, ours
    board[4, [0, 1, 2], 1] = 1  # their three above it; (4, 3) wins for them once (5, 3) is taken
    obs, rng = np.repeat(board[None], 400, axis=0), np.random.default_rng(0)
    assert not (one_ply_judge(obs, None, rng) == 3).any() and (heuristic(obs, None, rng) == 3).any()
    win = board.copy()
    win[5, 1] = [1, 0]  # our three in the bottom row: column 3 wins now
    assert (one_ply_judge(win[None], None, rng) == 3).all()


def test_a_studys_training_command_puts_its_settings_after_the_runners_defaults():
    from benchmarks.training import NO_CHECKPOINTS, command
    from distrl.config import load_config

    cmd, env = command("configs/cartpole.yaml", ["checkpoint.every_iterations=7", "seed=3"], "somewhere")
    assert cmd[1:6] == ["-m", "distrl", "train", "configs/cartpole.yaml", "--run-dir"] and env["RAY_ADDRESS"] == "local"
    items = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--set"]
    assert items[-2:] == ["checkpoint.every_iterations=7", "seed=3"] and NO_CHECKPOINTS in items
    config = load_config(ROOT / "configs" / "cartpole.yaml", items)  # as distrl reads them: the study's last
    assert config.checkpoint.every_iterations == 7 and config.seed == 3 and not config.logging.tensorboard
    kept, _ = command("configs/cartpole.yaml", [], "somewhere", checkpoints=True)
    assert NO_CHECKPOINTS not in kept
