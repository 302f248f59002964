"""Environments where agent commands and tool code run."""
from __future__ import annotations


def build_env(config):
    """The environment selected by ``--bench-env`` (host unless told otherwise)."""
    from .host import HostEnvironment

    return HostEnvironment.from_config(config)
