"""Benchmarks are found through the ``pytest_agentbench.benchmarks`` entry-point group, once per process.

The entry points are read on the first call of ``available_benchmarks`` and kept: every later caller (the
options, the plugin, the host probe, the reports) gets the same ``Registered`` and the same benchmark
objects, so an entry point that names a class is instantiated once and keeps its per-run caches.
``reload`` reads the entry points again: for tests that install a benchmark after the first read.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points

from ..core.errors import ConfigError, choose
from .base import Benchmark, Registered

ENTRY_POINT_GROUP = "pytest_agentbench.benchmarks"


def available_benchmarks() -> Registered:
    """Benchmarks keyed by ``--bench`` name, and the ones that failed to load (read once per process).

    The plugin is active in every pytest run of an environment it is installed in, so a broken
    benchmark package must not break unrelated runs: it is only an error when it is asked for.
    """
    return _scan()


def reload() -> Registered:
    """Tests only: forget what was read and read the entry points again (a benchmark installed since)."""
    _scan.cache_clear()
    return _scan()


@cache
def _scan() -> Registered:
    out = Registered()
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:
            out.broken[ep.name] = f"benchmark entry point {ep.name!r} ({ep.value}) failed to load: {exc!r}"
            continue
        bench = obj() if isinstance(obj, type) else obj
        if not isinstance(bench, Benchmark):
            out.broken[ep.name] = (
                f"benchmark entry point {ep.name!r} ({ep.value}) is not a pytest_agentbench.benchmarks.base.Benchmark"
            )
            continue
        out.found[bench.name] = bench
    return out


def get_benchmark(name: str) -> Benchmark:
    registered = available_benchmarks()
    if name in registered.found:
        return registered.found[name]
    if name in registered.broken:
        raise ConfigError(registered.broken[name])
    choose(sorted(registered.found), name, "benchmark (--bench)")
    raise AssertionError("unreachable")
