"""One-line descriptions of exceptions, for messages that must stay one line."""

from __future__ import annotations


def describe_error(exc: BaseException, limit: int = 300) -> str:
    """An exception in one line: its type and the first line of its message, cut at ``limit`` characters."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:limit] if text else ''}"
