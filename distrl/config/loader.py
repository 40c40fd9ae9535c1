"""Load a Config from YAML with ``key.path=value`` overrides, and report every problem."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from distrl.common.checkpoint import CheckpointError
from distrl.config.schema import Config


class ConfigError(Exception):
    """A problem the user can fix in their config; each line names the key, value and what is allowed."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads 1e6 and 2.5e-4 as floats (YAML 1.1 insists on a dot)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d[\d_]*)?(?:\.\d*)?[eE][-+]?\d+$|^[-+]?\d[\d_]*\.\d*$|^[-+]?\.\d+$"),
    list("-+0123456789."),
)


def parse_value(text: str) -> Any:
    """Read an override value the way YAML would (numbers, booleans, null, lists); Python's ``none``/``None`` is null
    too (YAML's own spellings are ``null``, ``~`` and nothing)."""
    if text.strip() in ("none", "None"):
        return None
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError:
        return text


def _apply_override(tree: dict, assignment: str) -> None:
    if "=" not in assignment:
        raise ConfigError([f"--set {assignment!r}: expected key.path=value, e.g. --set ppo.lr=3e-4"])
    path, _, text = assignment.partition("=")
    set_key(tree, path, parse_value(text))


def set_key(tree: dict, path: str, value: Any) -> None:
    """Set ``tree[a][b][c] = value`` for ``path`` 'a.b.c', creating sections on the way."""
    keys = path.strip().split(".")
    node = tree
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError([f"--set {path}: '{key}' is a value, not a section"])
        node = child
    node[keys[-1]] = value


def apply_overrides(tree: dict, overrides) -> None:
    """``overrides``: ``key.path=value`` strings (values read as YAML) or a ``{key.path: value}`` dict."""
    if isinstance(overrides, dict):
        for path, value in overrides.items():
            set_key(tree, str(path), value)
        return
    for assignment in overrides:
        _apply_override(tree, assignment)


def _format_error(err: dict) -> list[str]:
    key = ".".join(str(p) for p in err["loc"])
    if err["type"] == "value_error":
        # Messages raised by our own validators already name key and value.
        message = err["msg"].removeprefix("Value error, ")
        return message.split("\n")
    if err["type"] == "extra_forbidden":
        return [f"{key}={err['input']!r}: unknown key"]
    return [f"{key}={err['input']!r}: {err['msg']}"]


def _with_allowed_keys(lines: list[str]) -> list[str]:
    """Add the allowed names to 'unknown key' lines so a typo is easy to fix."""
    out = []
    for line in lines:
        if line.endswith(": unknown key"):
            key = line.split("=", 1)[0]
            section: Any = Config
            for part in key.split(".")[:-1]:
                field = section.model_fields.get(part) if hasattr(section, "model_fields") else None
                section = field.annotation if field is not None else None
            if section is not None and hasattr(section, "model_fields"):
                near = difflib.get_close_matches(key.split(".")[-1], list(section.model_fields), n=1, cutoff=0.6)
                line += f"; did you mean {near[0]}?" if near else ""
                line += f" (allowed: {', '.join(section.model_fields)})"
        out.append(line)
    return out


def config_from_dict(tree: dict) -> Config:
    try:
        return Config.model_validate(tree)
    except ValidationError as exc:
        lines = [line for err in exc.errors() for line in _format_error(err)]
        raise ConfigError(_with_allowed_keys(lines)) from None


def _near_file(path: Path) -> str:
    """``; did you mean DIR/NAME?`` for a YAML file in the same directory (or a ``configs/`` one) whose name is
    near the one given; "" where none is."""
    places = [path.parent] + ([Path("configs")] if path.parent != Path("configs") else [])
    for place in places:
        if not place.is_dir():
            continue
        # by stem: the shared ".yaml" alone would make short names look near
        names = {p.stem: p.name for p in place.iterdir() if p.suffix in (".yaml", ".yml")}
        near = difflib.get_close_matches(path.stem, list(names), n=1, cutoff=0.6)
        if near:
            return f"; did you mean {place / names[near[0]]}?"
    return ""


def load_config(path: str | Path | dict | Config | None, overrides=()) -> Config:
    """Read YAML at ``path`` (None: all defaults; a dict or a Config: that tree), apply ``overrides``
    (``key.path=value`` strings or a ``{key.path: value}`` dict), validate."""
    tree: Any = {}
    if isinstance(path, Config):
        tree = path.model_dump(mode="json")
    elif isinstance(path, dict):
        import copy

        tree = copy.deepcopy(path)
    elif path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError([f"config={str(path)!r}: no such file" + _near_file(path)])
        try:
            tree = yaml.load(path.read_text(), Loader=_Loader)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark else ""
            raise ConfigError(
                [f"config={str(path)!r}: not valid YAML{where}: {getattr(exc, 'problem', exc)}"]
            ) from None
        if tree is None or tree == {}:  # training on bare defaults by accident is worse than a word
            raise ConfigError(
                [f"config={str(path)!r}: the file is empty; give at least one section (env, model, ppo, ...)"]
            )
        if not isinstance(tree, dict):
            raise ConfigError([f"config={str(path)!r}: must be a mapping of sections (env, model, ppo, ...)"])
    apply_overrides(tree, overrides or ())
    return config_from_dict(tree)


def config_to_yaml(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


def checkpoint_config(payload: dict, path: str | Path) -> Config:
    """The config a loaded checkpoint was trained with; ``CheckpointError`` when it is not a valid one."""
    try:
        return config_from_dict(payload["config"])
    except ConfigError as exc:
        raise CheckpointError(f"checkpoint={str(path)!r}: its config is not valid ({exc.lines[0]})") from None
