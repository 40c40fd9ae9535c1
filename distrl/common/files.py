"""Files written whole or not at all: a hidden temporary file beside the target, renamed over it once complete."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def replace_whole(path: Path, write: Callable[[Path], None], suffix: str = "") -> None:
    """``write(tmp)`` fills a temporary file beside ``path`` (``suffix`` for writers that go by the name, such as
    matplotlib's ``.png``), then it replaces ``path``; a failed write leaves ``path`` as it was and no temporary."""
    tmp = path.with_name(f".{path.name}.tmp{suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
