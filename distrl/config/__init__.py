"""Typed, validated, frozen run configuration."""

from distrl.config.loader import (
    ConfigError,
    checkpoint_config,
    config_from_dict,
    config_to_yaml,
    load_config,
    parse_value,
)
from distrl.config.schema import Config

__all__ = [
    "Config",
    "ConfigError",
    "checkpoint_config",
    "config_from_dict",
    "config_to_yaml",
    "load_config",
    "parse_value",
]
