"""Environments where agent commands and tool code run (``--bench-env host|docker``).

``build_env(settings)`` gives the value of the ``bench_env`` fixture: a factory (``base.EnvFactory``)
whose ``start(workspace, needs_gpu=False, name="")`` returns an ``Environment`` (see ``base.py``) and
whose ``run_python(source, timeout)`` runs one tool script. The names below load on first use: the plugin
declares ``ENV_OPTIONS`` in every pytest run, which must not import an environment.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import EnvError, EnvFactory, Environment, EnvSkip
    from .options import ENV_KINDS, ENV_OPTIONS, build_env, env_settings

_EXPORTS = {
    "EnvError": "base",
    "EnvFactory": "base",
    "Environment": "base",
    "EnvSkip": "base",
    "ENV_KINDS": "options",
    "ENV_OPTIONS": "options",
    "build_env": "options",
    "env_settings": "options",
}

__all__ = ["ENV_KINDS", "ENV_OPTIONS", "EnvError", "EnvFactory", "EnvSkip", "Environment", "build_env", "env_settings"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
