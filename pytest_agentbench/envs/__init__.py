"""Environments where agent commands and tool code run (``--bench-env host|docker``).

``build_env(settings)`` gives the value of the ``bench_env`` fixture: a factory (``base.EnvFactory``)
whose ``start(workspace, needs_gpu=False, name="")`` returns an ``Environment`` (see ``base.py``) and
whose ``run_python(source, timeout)`` runs one tool script.
"""

from __future__ import annotations

from .base import EnvError, EnvFactory, Environment, EnvSkip
from .options import ENV_KINDS, ENV_OPTIONS, build_env, env_settings

__all__ = ["ENV_KINDS", "ENV_OPTIONS", "EnvError", "EnvFactory", "EnvSkip", "Environment", "build_env", "env_settings"]
