"""Typed, validated, frozen run configuration."""

from distrl.config.loader import ConfigError, config_from_dict, config_to_yaml, load_config, parse_value
from distrl.config.schema import Config

__all__ = ["Config", "ConfigError", "config_from_dict", "config_to_yaml", "load_config", "parse_value"]
