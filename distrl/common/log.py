"""distrl's log: the standard ``logging`` module, logger ``distrl``.

The command line installs one handler that writes to stdout, through rich on a terminal. ``distrl.train``
installs the same for the length of its call where a person watches (a terminal, a notebook) and the caller set
no handler of their own (``progress=False``: none; a caller's own handlers and levels are left as they are).
"""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger("distrl")


def get_logger(name: str) -> logging.Logger:
    """A child of the ``distrl`` logger, e.g. ``distrl.driver``."""
    return logger.getChild(name)


_console = None  # the command line's rich Console on a terminal: log lines and the live bar share it


def cli_console():
    """The rich Console the command line's handler writes to (None: not on a terminal, or no handler). The live
    progress bar draws on this one, so that a log line printed while it runs goes above it, not onto it."""
    return _console


def install_cli_handler(stream=None, level: int = logging.INFO) -> logging.Handler:
    """The command line's handler: messages as they are (no level or time prefix), rich on a terminal."""
    global _console
    stream = stream or sys.stdout
    if stream.isatty():
        from rich.console import Console
        from rich.logging import RichHandler

        _console = Console(file=stream)
        handler: logging.Handler = RichHandler(
            console=_console, show_time=False, show_path=False, show_level=False, markup=False, rich_tracebacks=False
        )
    else:
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(message)s"))
    handler.distrl_saved = (logger.level, logger.propagate, _console)  # what remove_cli_handler puts back
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False  # the CLI owns the output; a root handler would print every line twice
    return handler


def remove_cli_handler(handler: logging.Handler) -> None:
    """Take back ``install_cli_handler`` (``distrl.train``'s progress, for the length of one call)."""
    global _console
    level, propagate, previous = getattr(handler, "distrl_saved", (logging.NOTSET, True, None))
    logger.removeHandler(handler)
    logger.setLevel(level)
    logger.propagate = propagate
    _console = previous


def caller_handles() -> bool:
    """Whether the caller already sends distrl's records somewhere: a handler on the ``distrl`` logger, or on the
    root logger it propagates to (``logging.basicConfig``)."""
    return bool(logger.handlers) or (logger.propagate and bool(logging.getLogger().handlers))


def interactive() -> bool:
    """Whether a person watches this process's output: stdout is a terminal, or it runs in a Jupyter kernel."""
    if sys.stdout.isatty():
        return True
    shell = sys.modules.get("IPython")
    ipython = getattr(shell, "get_ipython", lambda: None)() if shell is not None else None
    return ipython is not None and type(ipython).__name__ == "ZMQInteractiveShell"
