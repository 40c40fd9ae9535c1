"""The results the docs stand on: every results file and picture a page cites exists, every study folder is in the
index and cited by a page, every benchmark command names a script that is there, and the docs' figures draw from the
shipped results files (no training)."""

import re
import struct
import subprocess
import sys
from itertools import product

from tests.conftest import ROOT

RESULTS = ROOT / "benchmarks" / "results"
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
STUDIES = sorted(path.name for path in RESULTS.iterdir() if path.is_dir())
# A results file as a page cites it: benchmarks/results/STUDY/FILE, or STUDY/FILE in backticks.
CITED = re.compile(r"benchmarks/results/([\w.{},*/-]+)|`((?:" + "|".join(map(re.escape, STUDIES)) + r")/[\w.{},*/-]+)`")


def expand(pattern: str) -> list[str]:
    """``a_{1,2}.md`` -> ``a_1.md``, ``a_2.md`` (the pages cite a pair of files so)."""
    parts = re.split(r"\{([^}]*)\}", pattern)
    fixed, choices = parts[0::2], [group.split(",") for group in parts[1::2]]
    return ["".join(f + c for f, c in zip(fixed, picked + ("",))) for picked in product(*choices)]


def citations() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for full, short in CITED.findall(page.read_text()):
            cited = (full or short).rstrip(".,;:)")
            if cited in ("README.md", "STUDY") or not cited:
                continue
            found += [(page.name, path) for path in expand(cited)]
    return found


def test_every_results_file_a_page_cites_exists():
    cited = citations()
    assert len(cited) > 40, cited  # the pages cite their results: a change of form would check nothing
    missing = [
        (page, path)
        for page, path in cited
        if not ((RESULTS / path).exists() if "*" not in path else list(RESULTS.glob(path)))
    ]
    assert not missing, missing


def test_every_study_is_in_the_index_and_cited_by_a_page():
    index = (RESULTS / "README.md").read_text()
    listed = set(re.findall(r"^\| \[`?([\w-]+)`?\]\(([\w-]+)/\)", index, re.M))
    assert {name for name, _ in listed} == set(STUDIES), "the index lists exactly the study folders"
    assert all(name == folder for name, folder in listed)
    cited_studies = {path.split("/")[0] for _, path in citations()}
    assert set(STUDIES) <= cited_studies, f"studies no page cites: {sorted(set(STUDIES) - cited_studies)}"
    assert not [p.name for p in RESULTS.iterdir() if p.is_file() and p.name != "README.md"], "results live in studies"


def test_every_benchmark_command_a_page_or_script_gives_names_a_script_that_is_there():
    texts = [*PAGES, RESULTS / "README.md", *sorted((ROOT / "benchmarks").rglob("*.py"))]
    named = {path for text in texts for path in re.findall(r"benchmarks/[\w/]+\.(?:py|sh)\b", text.read_text())}
    assert len(named) > 30, named  # the pages give the studies' commands: a change of form would check nothing
    assert not sorted(path for path in named if not (ROOT / path).is_file())


def test_every_picture_and_relative_link_on_a_page_exists():
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), (page.name, target)


def png_size(path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", header[16:24])


def test_the_docs_figures_draw_from_the_shipped_results(tmp_path):
    out = tmp_path / "img"
    proc = subprocess.run(
        [sys.executable, "benchmarks/figures.py", "--out-dir", str(out)], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    drawn = {path.name: png_size(path) for path in out.glob("*.png")}
    shown = {
        name for page in PAGES for name in re.findall(r"\]\((?:\.\./)?(?:docs/)?img/([\w-]+\.png)\)", page.read_text())
    }
    assert shown and shown <= set(drawn), (shown, drawn)  # every figure a page shows is one the script draws
    assert drawn["cartpole_peers.png"] == (800, 500) and drawn["mujoco.png"] == (1000, 700)
    shipped = {path.name for path in (ROOT / "docs" / "img").glob("*.png")}
    assert shipped == set(drawn), "docs/img holds the script's figures and nothing else"
