"""Package exports loaded on first use (PEP 562), so importing a package does not import all its parts.

The CLI decides which Ray to use before Ray reads its environment, checks a config before torch is
imported, and a coordinator process never loads torch: each needs one part of a package, not all.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package`` that imports ``exports[name]`` (a module) on first use of ``name``."""

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(exports[name]), name)

    return __getattr__
