"""``distrl config show``: the resolved config as YAML, each key commented with its type, default and meaning."""

from __future__ import annotations

import re
import textwrap
import typing

import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined


def _type_name(annotation) -> str:
    """A short, readable type: ``int > 0``, ``'native' | 'sync' | 'async'``, ``list[int > 0]``, ``float | null``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        base, *meta = args
        return _type_name(base) + _bounds(meta)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " | ".join("null" if a is type(None) else _type_name(a) for a in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in args)}]"
    if isinstance(annotation, type):
        return annotation.__name__
    return re.sub(r"typing\.", "", str(annotation))


def _bounds(metadata) -> str:
    """' > 0', ' >= 0, <= 1': the numeric constraints in pydantic field metadata."""
    bounds = []
    for m in metadata:
        for item in [m, *getattr(m, "metadata", [])]:
            for attr, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
                value = getattr(item, attr, None)
                if value is not None:
                    bounds.append(f"{sym} {value}")
    return " " + ", ".join(bounds) if bounds else ""


def _default(field) -> object:
    if field.default is not PydanticUndefined:
        return field.default.model_dump(mode="json") if isinstance(field.default, BaseModel) else field.default
    if field.default_factory is not None:
        value = field.default_factory()
        return value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    return None


def _plain(value):
    """Models (also inside lists, e.g. league.curriculum's stages) as plain data; tuples as lists."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _scalar(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10**9).strip().removesuffix("...").strip()


def describe_config(config: BaseModel, width: int = 80) -> str:
    """The config as YAML, each key with a comment: its type, default, ``(set)`` where the config changed it, and
    its description. A comment that would take the line past ``width`` goes above its key instead, wrapped at word
    breaks (still YAML: a comment is a comment)."""
    lines: list[str] = []

    def keyed(pad: str, key: str, note: str) -> None:
        if not note or len(f"{pad}{key}  # {note}") <= width:
            lines.append(f"{pad}{key}  # {note}" if note else f"{pad}{key}")
            return
        wrapped = textwrap.wrap(note, max(20, width - len(pad) - 2), break_long_words=False, break_on_hyphens=False)
        lines.extend(f"{pad}# {part}" for part in wrapped)
        lines.append(f"{pad}{key}")

    def walk(model: BaseModel, indent: int) -> None:
        for name, field in type(model).model_fields.items():
            value = getattr(model, name)
            pad = "  " * indent
            if isinstance(value, BaseModel):
                keyed(pad, f"{name}:", field.description or "")
                walk(value, indent + 1)
                continue
            dumped = _plain(value)
            default = _default(field)
            note = f"{_type_name(field.annotation)}{_bounds(field.metadata)}; default {_scalar(default)}"
            if dumped != default:
                note += " (set)"
            if field.description:
                note += f"; {field.description}"
            keyed(pad, f"{name}: {_scalar(dumped)}", note)

    walk(config, 0)
    return "\n".join(lines)
