"""Importing the module of a ``module:name`` id the user named (an env factory, an encoder).

A module in the current directory imports as it would for ``python script.py`` there: the directory is added to the
end of ``sys.path`` (after everything installed, so it shadows nothing), in this process and, through Ray's copy of
the driver's path, in its workers; on a cluster the job's working directory carries it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from distrl.common.errors import install_hint


def _in_cwd(top: str) -> bool:
    here = Path.cwd()
    return (here / f"{top}.py").is_file() or (here / top / "__init__.py").is_file()


def _add_cwd(top: str) -> bool:
    """Put the current directory on ``sys.path`` where ``top`` lives there and is not importable otherwise."""
    here = str(Path.cwd())
    if here in sys.path or not _in_cwd(top):
        return False
    sys.path.append(here)
    return True


def import_named_module(module_name: str, what: str, error):
    """``module_name`` imported; ``error(line)`` raised, the line starting ``what``, where it cannot be."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.partition(".")[0]
        if exc.name == top and _add_cwd(top):
            return import_named_module(module_name, what, error)
        raise error(f"{what}: cannot import module {module_name!r} ({exc}){install_hint(exc.name)}") from None
    except ImportError as exc:
        raise error(f"{what}: cannot import module {module_name!r} ({exc})") from None


def find_named_module(module_name: str, what: str, error) -> None:
    """Whether ``module_name`` can be imported, found without running it (a package's ``__init__`` runs), the current
    directory put on ``sys.path`` where it lives there: before Ray starts, so its workers find it too."""
    top = module_name.partition(".")[0]
    try:
        found = importlib.util.find_spec(module_name) is not None
    except ModuleNotFoundError:
        found = False
    if not found and _add_cwd(top):
        return find_named_module(module_name, what, error)
    if not found:
        raise error(f"{what}: cannot import module {module_name!r} (no module named {module_name!r})")
