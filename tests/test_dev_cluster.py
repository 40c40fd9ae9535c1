"""The dev cluster's `ray start`: a start that timed out on a busy machine is cleaned up and tried again; any
other failure is reported at once."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT))
from clusters.local_dev_cluster import SLOW_START, ray_start


def flaky_command(tmp_path, fails: int, message: str) -> list[str]:
    """A process that fails ``fails`` times with ``message`` on stderr, then succeeds; it counts its runs in a file."""
    counter = tmp_path / "runs"
    code = (f"import pathlib, sys; p = pathlib.Path({str(counter)!r}); n = int(p.read_text()) if p.exists() else 0; "
            f"p.write_text(str(n + 1)); sys.exit(0) if n >= {fails} else sys.exit(print({message!r}, file=sys.stderr) or 1)")  # fmt: skip
    return [sys.executable, "-c", code]


def test_a_start_that_timed_out_is_cleaned_up_and_tried_again(tmp_path):
    cleaned = []
    ray_start(flaky_command(tmp_path, 2, f"Exception: The current node {SLOW_START}."), {}, lambda: cleaned.append(1), pause_s=0)
    assert (tmp_path / "runs").read_text() == "3" and cleaned == [1, 1]


def test_a_start_that_keeps_timing_out_raises_after_its_attempts(tmp_path):
    cleaned = []
    with pytest.raises(subprocess.CalledProcessError) as caught:
        ray_start(flaky_command(tmp_path, 5, f"The current node {SLOW_START}."), {}, lambda: cleaned.append(1), attempts=3, pause_s=0)
    assert SLOW_START in caught.value.stderr
    assert (tmp_path / "runs").read_text() == "3" and cleaned == [1, 1]


def test_any_other_failure_raises_at_once(tmp_path):
    with pytest.raises(subprocess.CalledProcessError):
        ray_start(flaky_command(tmp_path, 1, "ValueError: port 6379 already in use"), {}, lambda: pytest.fail("cleaned"))
    assert (tmp_path / "runs").read_text() == "1"
