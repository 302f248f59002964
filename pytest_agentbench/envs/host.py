"""The host environment: a sandboxed workspace on this machine."""
from __future__ import annotations


class HostEnvironment:
    name = "host"

    def __init__(self, config) -> None:
        self.config = config

    @classmethod
    def from_config(cls, config) -> "HostEnvironment":
        return cls(config)
