"""Reading one YAML mapping of the config: allowed keys, types and `${ENV}` interpolation.

Kept apart from the section parsers so every section reports errors the same
way: the key's path, what was expected, what was found, on one line.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

from router.exceptions import ConfigError

ENV_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


class Section:
    """Reads one mapping of the config file and remembers where it is, for messages."""

    def __init__(self, data: Any, where: str, allowed: tuple[str, ...]):
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
        unknown = sorted(set(data) - set(allowed))
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(allowed)})")
        self.data, self.where = data, where

    def get(self, key: str, default: Any = None, kind: type | tuple[type, ...] | None = None) -> Any:
        value = self.data.get(key, default)
        if value is not None and kind is not None and not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise ConfigError(f"{self.where}.{key}: expected {names}, got {value!r}")
        return value

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.get(key, default, str)
        if value not in choices:
            raise ConfigError(f"{self.where}.{key}: {value!r} is not one of {', '.join(choices)}")
        return value

    def positive(self, key: str, default: float | int | None, kind: type = int) -> Any:
        value = self.get(key, default, (int, float) if kind is float else int)
        if value is not None and value <= 0:
            raise ConfigError(f"{self.where}.{key}: must be > 0, got {value!r}")
        return value

    def non_negative(self, key: str, default: int) -> int:
        value = self.get(key, default, int)
        if value < 0:
            raise ConfigError(f"{self.where}.{key}: must be >= 0, got {value!r}")
        return value

    def mapping(self, key: str) -> dict[str, Any]:
        value = self.get(key, {}, Mapping)
        return {str(k): v for k, v in value.items()}


def interpolate(value: Any, where: str = "config") -> Any:
    """Replace ${VAR} and ${VAR:-default} in every string of a parsed YAML tree."""
    if isinstance(value, str):
        def sub(m: re.Match) -> str:
            name, default = m.group(1), m.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            raise ConfigError(f"{where}: environment variable {name} is not set")
        return ENV_PATTERN.sub(sub, value)
    if isinstance(value, Mapping):
        return {k: interpolate(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value
