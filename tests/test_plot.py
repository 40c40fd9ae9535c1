"""distrl plot on real runs: seeds of one config drawn as one band, a PNG of the size asked for, one-line errors."""

import shutil
import struct

import pytest

from tests.conftest import run_cli

# two updates of 4,096 steps each (a curve of two points), acting eager: no policy export to wait for
SHORT = [
    "stop.env_steps=8192",
    "stop.episode_return_mean=null",
    "env.num_envs_per_worker=32",
    "rollout.compile.backend=eager",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, ray_local):
    """Three short CartPole runs: seeds 0 and 1 of the shipped config, and seed 0 at another learning rate."""
    import distrl

    base = tmp_path_factory.mktemp("plot")
    made = {}
    for name, overrides in {"s0": ["seed=0"], "s1": ["seed=1"], "lr": ["seed=0", "ppo.lr=0.001"]}.items():
        made[name] = base / name
        distrl.train(
            "configs/cartpole.yaml",
            overrides=[*overrides, *SHORT],
            run_dir=str(made[name]),
            progress=False,
        )
    return made


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])  # the IHDR chunk: width, height


def test_plot_draws_seeds_as_one_line_and_each_config_in_the_legend(runs, tmp_path):
    from distrl.plot import group_seeds, load_runs

    out = tmp_path / "curves.png"
    result = run_cli("plot", str(runs["s0"]), str(runs["s1"]), str(runs["lr"]), "--out", str(out), "--size", "640x400")
    assert result.returncode == 0, result.stderr
    assert png_size(out) == (640, 400)
    assert "ppo.lr=0.0025 (2 seeds)" in result.stdout and "ppo.lr=0.001" in result.stdout, result.stdout
    groups = group_seeds(load_runs([str(runs[n]) for n in ("s0", "lr", "s1")]))
    assert [(label, [r.path.name for r in group]) for label, group in groups] == [
        ("ppo.lr=0.0025 (2 seeds)", ["s0", "s1"]),
        ("ppo.lr=0.001", ["lr"]),
    ]
    twice = tmp_path / "s0_again"  # the same seed run twice is not two seeds
    shutil.copytree(runs["s0"], twice)
    assert [label for label, _ in group_seeds(load_runs([str(runs["s0"]), str(twice)]))] == ["s0 (2 runs, seed 0)"]


def test_plot_against_wall_time_and_another_metric(runs, tmp_path):
    out = tmp_path / "entropy.png"
    result = run_cli("plot", str(runs["s0"]), "--x", "time_s", "--metric", "entropy", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert png_size(out) == (800, 500) and "entropy against time_s" in result.stdout


@pytest.mark.parametrize(
    "case, expected",
    [
        ("no metrics", "no metrics.jsonl here"),
        ("missing", "no such run directory"),
        ("metric", "--metric='episode_retrun': no run logged it; did you mean episode_return_mean?"),
        ("out", "--out="),
    ],
)
def test_plot_refuses_in_one_line_and_writes_nothing(runs, tmp_path, case, expected):
    out = tmp_path / "never.png"
    empty = tmp_path / "empty"
    empty.mkdir()
    args = {
        "no metrics": [str(runs["s0"]), str(empty), "--out", str(out)],
        "missing": [str(tmp_path / "nowhere"), "--out", str(out)],
        "metric": [str(runs["s0"]), "--metric", "episode_retrun", "--out", str(out)],
        "out": [str(runs["s0"]), "--out", str(tmp_path / "curves.svg")],
    }[case]
    result = run_cli("plot", *args)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and expected in result.stderr, result.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [empty]
