"""What a new user meets in the first hour, as they meet it: every screen in an 80-column terminal, the README's
Python snippet run as a script, a private Ray that listens on loopback only, Ctrl-C while Ray starts."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, under_a_terminal

SHORT = [
    "--set",
    "stop.env_steps=24576",
    "--set",
    "stop.episode_return_mean=null",
    "--set",
    "rollout.compile.backend=eager",
]
DISTRL = [sys.executable, "-m", "distrl"]
BAR = ("━", "╺", "╸")  # how a frame of the live bar begins


def lines_of(text: str) -> list[str]:
    return [line.rstrip() for line in re.split(r"[\r\n]+", text)]


def assert_fits(text: str, columns: int = 80) -> None:
    lines = lines_of(text)
    assert all(len(line) <= columns for line in lines), max(lines, key=len)
    assert "…" not in text, text[-2000:]


@pytest.mark.slow
def test_every_screen_fits_an_80_column_terminal(tmp_path):
    """train into its default, timestamped run directory, then resumed (in a terminal without colours), eval,
    export, plot, config show --explain and diagnose: no line past 80 columns, no word cut. A resumed run's clock
    goes on where it stopped (its start-up is not the run's time); a monochrome bar's done part is drawn apart."""
    config = str(ROOT / "configs" / "cartpole.yaml")
    text = under_a_terminal([*DISTRL, "train", config, *SHORT], columns=80, cwd=tmp_path)
    assert_fits(text)
    (run,) = (tmp_path / "runs").iterdir()
    assert re.fullmatch(r"CartPole-v1-\d{8}-\d{6}", run.name)
    # At most 12 lines before the first progress line; the bar live from the start, naming each start-up phase
    # beside a clock; the log lines above it; the end block: why it stopped, steps, return, best, where, what next.
    lines = lines_of(text)
    first_progress = next(i for i, line in enumerate(lines) if line.startswith(BAR) and " steps | " in line)
    printed = [line for line in lines[:first_progress] if line.strip() and not line.startswith(BAR)]
    assert printed[0] == f"distrl run runs/{run.name}" and len(printed) <= 12, printed
    assert printed[-1].startswith("started: first update at "), printed
    for phase in ("starting Ray, building the eager policy | 0:0", "starting 1 worker | 0:", "the first batch"):
        assert any(line.startswith(BAR) and phase in line for line in lines), (phase, text[-3000:])
    block = [line for line in lines[lines.index("done: the step budget (24,576 env steps) reached") :] if line]
    assert block[1].startswith("  steps    24,576 env steps in ") and "None" not in text, block
    assert block[3] == f"  best     runs/{run.name}/checkpoints/ckpt_0000003.pt", block
    assert block[4].startswith("           (return ") and block[4].endswith(")"), block  # on a line of its own
    assert block[5] == f"  run      runs/{run.name}" and block[6] == "next:", block
    assert f"  distrl eval runs/{run.name}" in block and f"  distrl plot runs/{run.name} --out curve.png" in block
    resume = " ".join(line.strip().removesuffix("\\").strip() for line in block[block.index("next:") + 4 :])
    assert resume == f"distrl train --resume runs/{run.name} --set stop.env_steps=49152", block
    before = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]

    again = under_a_terminal(
        [*DISTRL, "train", "--resume", f"runs/{run.name}", "--set", "stop.env_steps=49152"],
        columns=80,
        cwd=tmp_path,
        env={"NO_COLOR": "1"},
    )
    assert_fits(again)
    assert any(line.startswith("  total    49,152 env steps in ") for line in lines_of(again)), again[-1500:]
    starting = [line for line in lines_of(again) if "starting Ray" in line]
    assert starting and all(line.startswith("-") for line in starting), starting  # not a full bar at 0 %
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    gaps = [b["time_s"] - a["time_s"] for a, b in zip(rows, rows[1:])]
    resumed_gap = gaps[len(before) - 1]
    assert 0 < resumed_gap < 3 * max(gaps[: len(before) - 1]) + 1, (resumed_gap, gaps)

    for args in (
        ["eval", f"runs/{run.name}"],
        ["export", f"runs/{run.name}", "policy.onnx"],
        ["plot", f"runs/{run.name}", "--out", "curve.png"],
        ["config", "show", config, "--explain"],
        ["diagnose", config, "--quick"],
    ):
        shown = under_a_terminal([*DISTRL, *args], columns=80, cwd=tmp_path)
        assert_fits(shown)
        assert shown.strip(), args


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


@pytest.mark.slow
def test_a_private_ray_listens_on_loopback_only_and_sigterm_stops_the_run(tmp_path):
    """A run's own Ray, read from the machine's socket table while it trains: every port its processes listen on is
    on 127.0.0.1. Then SIGTERM (`kill`): the run stops as interrupted, its summary written, not ended by the
    handler Ray's start puts on SIGTERM (a stack printed, exit -15)."""
    proc = subprocess.Popen(
        [
            *DISTRL,
            "train",
            "configs/cartpole.yaml",
            "--run-dir",
            str(tmp_path / "run"),
            "--set",
            "stop.env_steps=400000",
            "--set",
            "stop.episode_return_mean=null",
        ],
        cwd=ROOT,
        env={**os.environ, "RAY_ADDRESS": "local"},
        stdout=(tmp_path / "out.txt").open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "run" / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        pids = {p.pid for p in _tree(proc.pid)}
        listening = [
            (c.laddr.ip, c.laddr.port, c.pid)
            for c in psutil.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.pid in pids
        ]
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    printed = (tmp_path / "out.txt").read_text()
    assert code == 130 and "SIGTERM: stopping" in printed and "SIGTERM received" not in printed, printed[-3000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["stop_reason"] == "interrupted"
    assert len(listening) >= 4  # the GCS, the raylet, the actors' workers
    assert all(ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1") for ip, _, _ in listening), listening


@pytest.mark.slow
@pytest.mark.alone  # "while Ray starts" is a time after launch: another test's load moves the phase it lands in
@pytest.mark.parametrize("after_s", [4.0])
def test_ctrl_c_while_ray_starts_leaves_none_of_its_processes(tmp_path, after_s):
    """SIGINT during start-up: the run exits 130, and within seconds no process of its Ray (the GCS, the raylet,
    the dashboard and its agents) is left, found by the run's own Ray temp dir."""
    temp = Path(os.environ["RAY_TMPDIR"]) / f"cc{int(after_s * 10)}"
    temp.mkdir()
    proc = subprocess.Popen(
        [*DISTRL, "train", "configs/cartpole.yaml", "--run-dir", str(tmp_path / "run")],
        cwd=ROOT,
        env={**os.environ, "RAY_ADDRESS": "local", "RAY_TMPDIR": str(temp)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(after_s)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130, proc.stderr.read()[-3000:]

    def ours() -> list[int]:
        found = []
        for p in psutil.process_iter(["cmdline"]):
            if str(temp) in " ".join(p.info["cmdline"] or []):
                found.append(p.pid)
        return found

    deadline = time.monotonic() + 5
    while ours() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not ours()
