"""Errors every layer may raise; the pytest plugin turns ``ConfigError`` into a usage error (exit 4)."""

from __future__ import annotations

from collections.abc import Iterable


class ConfigError(Exception):
    """The run is set up wrongly (an option, a missing file, a model that cannot do this benchmark).

    The message names the thing and the fix; it is shown to the user as it is."""


def choose(names: Iterable[str], value: str, what: str) -> str:
    """Return ``value`` when it is one of ``names``, else a ConfigError that lists them."""
    names = list(names)
    if value not in names:
        raise ConfigError(f"unknown {what} {value!r}; valid values: {', '.join(names)}")
    return value
