"""The installed plugin's version: in records, comparability keys and ``pytest_agentbench.__version__``."""

from __future__ import annotations


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # why: reading metadata costs ~0.1 s a start

    try:
        return version("pytest-agentbench")
    except PackageNotFoundError:  # a source tree on sys.path, not installed
        return "0+unknown"
