"""The docs' examples work as written: every config in a YAML block loads and fits a 2-core machine, and the
README's Python runs."""

import re
import subprocess
import sys

import pytest
import yaml

from distrl.config import load_config
from distrl.config.schema import Config
from distrl.driver.placement import shortfalls
from tests.conftest import ROOT

PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]


def blocks(page, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", page.read_text(), re.S)


def config_blocks() -> list[tuple[str, dict]]:
    """The YAML blocks that are configs (only config sections at the top; a summary with '...' left out)."""
    found = []
    for page in PAGES:
        for text in blocks(page, "yaml"):
            data = yaml.safe_load(text)
            if isinstance(data, dict) and set(data) <= set(Config.model_fields) and "..." not in text:
                found.append((page.name, data))
    return found


def test_every_config_in_the_docs_loads_and_fits_two_cores():
    examples = config_blocks()
    assert len(examples) >= 3, examples  # the pages hold configs: a change to the block syntax would skip them
    for page, data in examples:
        config = load_config(data, [])
        assert shortfalls(config, {"CPU": 2.0, "GPU": 0.0}) == [], (page, data)


@pytest.mark.slow
def test_the_readmes_python_runs_as_written(tmp_path):
    (code,) = blocks(ROOT / "README.md", "python")
    # run from a copy of the repository's root (its configs/), in a directory of its own for the runs/ it writes
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    result = subprocess.run(
        [sys.executable, "-c", code + "\nprint('ACTION', action)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "RAY_ADDRESS": "local", "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout.strip().splitlines()
    assert printed[-1] in ("ACTION 0", "ACTION 1"), result.stdout[-2000:]
    assert list((tmp_path / "runs").glob("CartPole-v1-*/checkpoints/ckpt_*.pt"))
    # Its output to a pipe, where no one watches: distrl prints nothing, and print(result) says why the run stopped,
    # its steps, return, best checkpoint and directory, without the next commands a terminal is shown.
    assert printed[0].startswith("done: the return target (475) met at "), printed
    assert any(line.startswith("  best     runs/CartPole-v1-") for line in printed), printed
    assert any(line.startswith("  run      ") and "runs/CartPole-v1-" in line for line in printed), printed
    assert not any(line.startswith("next:") for line in printed), printed
