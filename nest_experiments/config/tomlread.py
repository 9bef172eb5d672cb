"""Strict reading of TOML tables: every key used or reported with its path."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from nest_experiments.errors import ConfigError

T = TypeVar("T")
_REQUIRED: Any = object()


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class Table:
    """A TOML table being read: ``get`` each key, then ``done()`` rejects the rest."""

    def __init__(self, path: str, data: object) -> None:
        if not isinstance(data, Mapping):
            raise ConfigError(path, f"expected a table, got {type(data).__name__} {data!r}")
        self.path = path
        self.data: Mapping[str, Any] = data
        self._known: set[str] = set()

    def get(self, key: str, conv: Callable[[str, Any], T], default: Any = _REQUIRED) -> T:
        """Convert ``data[key]`` with ``conv(path, value)``; missing -> default or error."""
        self._known.add(key)
        if key not in self.data:
            if default is _REQUIRED:
                raise ConfigError(join(self.path, key), "missing (required)")
            return default  # type: ignore[no-any-return]
        return conv(join(self.path, key), self.data[key])

    def table(self, key: str) -> Table:
        self._known.add(key)
        return Table(join(self.path, key), self.data.get(key, {}))

    def has(self, key: str) -> bool:
        return key in self.data

    def mark(self, *keys: str) -> None:
        """Declare keys as known without reading them here."""
        self._known.update(keys)

    def done(self) -> None:
        for key in self.data:
            if key not in self._known:
                raise unknown_key(join(self.path, key), key, self._known)


def unknown_key(path: str, key: str, known: set[str] | list[str]) -> ConfigError:
    close = difflib.get_close_matches(key, sorted(known), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    options = ", ".join(sorted(known)) or "none"
    return ConfigError(path, f"unknown key{hint}; known keys here: {options}")


def as_str(path: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(path, f"expected a non-empty string, got {value!r}")
    return value


def as_bool(path: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(path, f"expected true or false, got {value!r}")
    return value


def as_int(path: str, value: object, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(path, f"expected an integer >= {minimum}, got {value!r}")
    return value


def positive_int(path: str, value: object) -> int:
    return as_int(path, value, minimum=1)


def one_of(choices: tuple[str, ...]) -> Callable[[str, object], str]:
    def conv(path: str, value: object) -> str:
        if value not in choices:
            close = difflib.get_close_matches(str(value), choices, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(path, f"{value!r} is not one of {', '.join(choices)}{hint}")
        return str(value)

    return conv


NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"


def as_name(path: str, value: object, *, max_len: int = 12) -> str:
    """A lowercase identifier safe for namespace, file and interface names."""
    text = as_str(path, value)
    if len(text) > max_len or not text[0].isalpha() or any(c not in NAME_CHARS for c in text):
        raise ConfigError(path, f"{text!r} must be 1-{max_len} characters of a-z, 0-9, _ starting with a letter")
    return text
