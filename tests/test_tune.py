"""distrl tune: Ray Tune trials of distrl runs, each inside its trial's placement group."""

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli

SMALL = ["--set", "env.num_envs_per_worker=16"]


def _search(tmp_path: Path, **changes) -> Path:
    tree = yaml.safe_load(Path("configs/tune_cartpole.yaml").read_text())
    tree.update(changes)
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def _sweep(tmp_path: Path, search: Path, name: str, env_steps: int):
    """``distrl tune`` of the shipped CartPole config with ``search``, its trials under ``tmp_path/tune/name``."""
    result = run_cli(
        "tune",
        "configs/cartpole.yaml",
        str(search),
        "--storage-path",
        str(tmp_path / "tune"),
        "--name",
        name,
        "--set",
        f"stop.env_steps={env_steps}",
        *SMALL,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_asha_sweep_of_four_trials_finishes_on_two_cores(tmp_path):
    search = _search(tmp_path, scheduler={"type": "asha", "max_t": 12, "grace_period": 3, "reduction_factor": 2})
    result = _sweep(tmp_path, search, "sweep", 40000)
    assert "4 trials in" in result.stdout and "best: episode_return_mean" in result.stdout
    trials = sorted(p for p in (tmp_path / "tune" / "sweep").iterdir() if p.is_dir() and p.name.startswith("run_trial"))
    assert len(trials) == 4
    lrs = set()
    for trial in trials:
        placement = json.loads((trial / "run" / "placement.json").read_text())
        groups = {spot["placement_group"] for spot in placement.values()}
        assert len(groups) == 1 and None not in groups, placement  # every actor inside its trial's group
        config = yaml.safe_load((trial / "run" / "config.yaml").read_text())
        assert config["env"]["num_envs_per_worker"] == 16 and config["rollout"]["num_cpus_per_worker"] == 0.5
        lrs.add(config["ppo"]["lr"])
        rows = (trial / "run" / "metrics.jsonl").read_text().splitlines()
        # ASHA's max_t is 12 (the step budget alone would give 20); one more row may land while Tune stops it.
        assert 1 <= len(rows) <= 13
    assert len(lrs) == 4  # sampled per trial
    assert any(list(t.glob("checkpoint_*")) for t in trials)  # checkpoints went through Tune


@pytest.mark.slow
def test_trials_ranked_by_their_evaluation(tmp_path):
    """Two trials ranked by ``eval_return_mean``: rows before a trial's first evaluation lack it (Tune waits for it),
    and the final round, after its last row, is reported too, so every trial has a value."""
    search = _search(
        tmp_path,
        metric="eval_return_mean",
        num_samples=2,
        scheduler={"type": "fifo"},
        search_space={"ppo.lr": {"choice": [1.0e-3, 2.5e-3]}},
    )
    tree = yaml.safe_load(search.read_text())
    tree["overrides"]["eval.every_iterations"] = 3
    search.write_text(yaml.safe_dump(tree))
    result = _sweep(tmp_path, search, "ranked", 24576)
    trials = [line for line in result.stdout.splitlines() if line.startswith("  run_trial_")]
    assert len(trials) == 2 and all("eval_return_mean -" not in line for line in trials), result.stdout[-2000:]
    assert "best: eval_return_mean " in result.stdout


@pytest.mark.slow
def test_pbt_copies_a_strong_trial_into_a_weak_one(tmp_path):
    search = _search(
        tmp_path,
        num_samples=2,
        checkpoint_every=2,
        scheduler={"type": "pbt", "perturbation_interval": 2, "quantile_fraction": 0.5},
        search_space={"ppo.lr": {"loguniform": [1.0e-4, 5.0e-3]}},
    )
    result = run_cli(
        "tune",
        "configs/cartpole.yaml",
        str(search),
        "--storage-path",
        str(tmp_path / "tune"),
        "--name",
        "pbt",
        "--set",
        "stop.env_steps=40000",
        *SMALL,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "Restored on" in result.stdout + result.stderr  # a trial continued from another's checkpoint


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"search_space": {"ppo.lr": {"normal": [0, 1]}}}, "search_space.ppo.lr={'normal': [0, 1]}: give one domain"),
        (
            {"search_space": {"ppo.lr": {"loguniform": [0, 1]}}},
            "search_space.ppo.lr.loguniform=[0, 1]: bounds must be > 0",
        ),
        ({"search_space": {"ppo.nope": {"choice": [1, 2]}}}, "ppo.nope=1: unknown key"),
        ({"search_space": {"ppo.epochs": {"choice": [2, 0]}}}, "ppo.epochs=0"),
        ({"scheduler": {"type": "hyperband"}}, "search scheduler.type='hyperband'"),
        ({"schedular": {}}, "search schedular={}: unknown key"),
    ],
)
def test_a_bad_search_file_is_one_line_before_ray(tmp_path, changes, expected):
    result = run_cli(
        "tune", "configs/cartpole.yaml", str(_search(tmp_path, **changes)), "--storage-path", str(tmp_path / "t")
    )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], lines
    assert not (tmp_path / "t").exists()


def test_a_trial_bigger_than_the_machine_is_one_line(tmp_path):
    result = run_cli(
        "tune",
        "configs/cartpole.yaml",
        "configs/tune_cartpole.yaml",
        "--storage-path",
        str(tmp_path / "t"),
        "--set",
        "rollout.num_cpus_per_worker=8",
    )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "rollout.num_cpus_per_worker=8" in lines[0] and "one trial needs" in lines[0], lines
