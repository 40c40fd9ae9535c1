"""The package's structure: the layers in pyproject.toml hold and no module imports itself back
(docs/architecture.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_are_kept():
    # In a process of its own: import-linter configures logging as a command does (other tests read distrl's logs).
    code = (
        "import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(config_filename='pyproject.toml'))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "Contracts: 3 kept, 0 broken." in result.stdout


def test_no_module_of_distrl_imports_itself_back():
    graph = grimp.build_graph("distrl")
    cycles = sorted(
        (a, b)
        for a in graph.modules
        for b in graph.find_modules_directly_imported_by(a)
        if graph.chain_exists(importer=b, imported=a)
    )
    assert cycles == []


@pytest.mark.parametrize(
    "importer, imported",
    [
        ("distrl.config.schema", "distrl.learner"),  # the device step's blockers are the config's
        ("distrl.envs.factory", "distrl.league"),  # a league game's spaces come through the env-kind table
        ("distrl.deploy.policy", "distrl.deploy.evaluate"),
        ("distrl.league.tournament", "distrl.deploy"),
        ("distrl.deploy.policy", "distrl.rollout"),
    ],
)
def test_the_imports_that_once_ran_against_the_layers_are_gone(importer, imported):
    graph = grimp.build_graph("distrl")
    assert not graph.chain_exists(importer=importer, imported=imported, as_packages=True)


def test_every_env_kind_is_an_import_the_linter_sees():
    """The env-kind table holds its modules, so each kind is an edge in the import graph, and no env kind reaches
    up into the league (the games and the learner's seat live in ``distrl/envs/games/``)."""
    import inspect

    from distrl.envs import kinds
    from distrl.envs.kinds import ENV_KINDS

    graph = grimp.build_graph("distrl")
    for name, module in ENV_KINDS.items():
        assert graph.direct_import_exists(importer="distrl.envs.kinds", imported=module.__name__), name
        assert callable(module.runs) and callable(module.probe_run) and callable(module.make_run_vec_env), name
    assert list(ENV_KINDS)[-1] == "gymnasium"  # it runs every config: the last row asked
    assert "import_module" not in inspect.getsource(kinds)  # no kind loaded by a name the linter cannot follow
    assert not graph.chain_exists(importer="distrl.envs", imported="distrl.league", as_packages=True)


def _heavy_imports(modules: list[str], heavy: tuple[str, ...]) -> str:
    """Which of ``heavy`` importing ``modules`` brings in, in a fresh interpreter (as printed there)."""
    code = f"import sys, {', '.join(modules)}; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_the_driver_starts_without_torch():
    """``distrl train`` imports torch in a thread while Ray starts (driver.py): nothing on the way to Ray may import it
    first (the command line, the API, the driver and everything they import at module level)."""
    found = _heavy_imports(
        ["distrl.cli", "distrl.api", "distrl.driver.driver", "distrl.driver.preflight"], ("torch", "onnxruntime")
    )
    assert found == "[]", found


def test_the_coordinators_process_needs_no_torch():
    """Ray loads an actor's class wherever a handle to it is deserialised: the coordinator, which holds every worker's
    handle, imports the worker's actor class. That class and the coordinator's own module import no torch (the
    worker builds itself in its own process), so the coordinator's process never pays torch's import (2-3 s of CPU
    on two cores, before a run's first update; ``distrl/rollout/worker_actor.py``)."""
    found = _heavy_imports(
        ["distrl.rollout.coordinator", "distrl.rollout.worker_actor"], ("torch", "onnxruntime", "gymnasium")
    )
    assert found == "[]", found


def test_a_rollout_workers_modules_need_no_torch():
    """An ``onnxrt`` worker built from the driver's export and check acts without torch (``distrl/compile/shipped.py``):
    the worker's modules, its env runners, its model memory and action sampling import none at module level."""
    found = _heavy_imports(
        [
            "distrl.rollout.worker",
            "distrl.rollout.worker_class",
            "distrl.compile.shipped",
            "distrl.data.memory",
            "distrl.models.spec",
        ],
        ("torch",),
    )
    assert found == "[]", found
