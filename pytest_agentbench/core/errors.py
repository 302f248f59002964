"""Errors every layer may raise; the pytest plugin turns ``ConfigError`` into a usage error (exit 4)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path

from .text import printable


class ConfigError(Exception):
    """The run is set up wrongly (an option, a missing file, a model that cannot do this benchmark).

    The message names the thing and the fix; it is shown to the user as it is."""


def choose(names: Iterable[str], value: str, what: str) -> str:
    """Return ``value`` when it is one of ``names``, else a ConfigError that lists them."""
    names = list(names)
    if value not in names:
        raise ConfigError(f"unknown {what} {value!r}; valid values: {', '.join(names)}")
    return value


class AgentbenchWarning(UserWarning):
    """Something a run tells its user about without stopping (a torn records line, an agent's unreadable report,
    an item's files a worker could not deliver). ``warn_about`` gives it the location of what it concerns, so
    pytest's warnings summary points at the file or item, never at the plugin's code; hide them with
    ``-W ignore::pytest_agentbench.core.errors.AgentbenchWarning``."""


def warn_about(message: str, where: str | Path) -> None:
    """An ``AgentbenchWarning`` located at ``where`` (a file of the run, or an item's id). Line 0: no line of a data
    file is printed under it (a records line can be long); the message says which line it means."""
    # both are shown in pytest's warnings summary, and both may hold what an agent chose (a path, a report's name)
    warnings.warn_explicit(printable(message), AgentbenchWarning, filename=printable(where, one_line=True), lineno=0)
