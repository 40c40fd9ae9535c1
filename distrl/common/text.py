"""Lines a person reads in a terminal: each fits its width (80 columns where the terminal does not say), broken at
word breaks, never inside a word; a path shown relative to the working directory where that is shorter; a command
broken before an option with a shell continuation, so it still pastes as one command. Output to a file or a pipe
keeps a line per fact, as it was written (what reads it is a program, or a person with a pager)."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from pathlib import Path

DEFAULT_WIDTH = 80


def screen_width(stream=None) -> int | None:
    """The terminal's columns where ``stream`` (stdout) is one (80 where it does not say); None where it is none."""
    stream = stream or sys.stdout
    try:
        if stream.isatty():
            return max(40, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)
    except (AttributeError, ValueError, OSError):
        pass
    return None


def shown(path: str | Path) -> str:
    """``path`` as a command takes it here: relative to the working directory where that is shorter."""
    absolute = Path(path).absolute()
    try:
        relative = os.path.relpath(absolute)
    except ValueError:  # another drive
        return str(absolute)
    return relative if len(relative) < len(str(absolute)) else str(absolute)


def fit(line: str, width: int | None = None, indent: int | None = None) -> str:
    """``line`` broken at word breaks into lines of at most ``width`` (a word longer than that stands alone), each
    after the first indented to ``indent`` (default: where its text starts past a ``label`` column, as in ``  best
    PATH``)."""
    width = width or screen_width()
    if width is None or len(line) <= width:
        return line
    if indent is None:
        stripped = line.lstrip(" ")
        lead = len(line) - len(stripped)
        label, _, rest = stripped.partition(" ")
        indent = lead + len(label) + len(rest) - len(rest.lstrip(" ")) + 1 if rest.strip() else lead + 2
        indent = min(indent, width // 2)
    lines = textwrap.wrap(line, width, subsequent_indent=" " * indent, break_long_words=False, break_on_hyphens=False)
    joined: list[str] = []
    for part in lines:  # a word too long for any line stays where it was: a break before it would gain nothing
        if joined and len(part) > width and " " not in part.strip():
            joined[-1] += " " * max(1, indent - len(joined[-1])) + part.strip()
        else:
            joined.append(part)
    return "\n".join(joined)


def fit_command(command: str, width: int | None = None) -> str:
    """A shell command (with its leading spaces) in lines of at most ``width`` where it can be: broken only before an
    option (``--x``), with `` \\`` at the end of each line but the last, the continuation indented four more."""
    width = width or screen_width()
    if width is None or len(command) <= width:
        return command
    lead = len(command) - len(command.lstrip(" "))
    groups: list[str] = []
    for word in command.split():  # a break comes only before an option; its value and any argument stay with it
        if groups and not word.startswith("-"):
            groups[-1] += " " + word
        else:
            groups.append(word)
    lines, current = [], " " * lead
    for group in groups:
        candidate = current + ("" if current.strip() == "" else " ") + group
        fits_alone = lead + 4 + len(group) + 2 <= width  # a break helps only where the option then fits its line
        if current.strip() and len(candidate) + 2 > width and fits_alone:
            lines.append(current + " \\")
            current = " " * (lead + 4) + group
        else:
            current = candidate
    lines.append(current)
    return "\n".join(lines)
