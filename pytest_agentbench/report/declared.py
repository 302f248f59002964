"""What the report layer needs to know of a benchmark, taken from the benchmark or from a summary.json.

A run's summary.json stores its benchmark's gate metrics, headlines and free settings, so comparing
two runs (``python -m pytest_agentbench compare A B``) needs nothing but the two files. Summaries
written before they were stored are read with the benchmark found through the registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..benchmarks.registry import get_benchmark
from ..core.errors import ConfigError

# Headlines of a benchmark that declares none: name -> unit ("task": a task counts when all its scored
# items pass; "item": passed items over scored items, micro-averaged).
DEFAULT_HEADLINES: Mapping[str, str] = {"tasks resolved": "task", "items passed": "item"}
UNITS = ("task", "item")
KEYS = ("gate_metrics", "headlines", "free_settings")  # the summary.json keys written by ``to_summary``


@dataclass(frozen=True)
class Declared:
    gate_metrics: Mapping[str, str] = field(default_factory=dict)  # gate name -> key in summary["metrics"]
    headlines: Mapping[str, str] = field(default_factory=dict)  # gate name -> unit ("task" or "item")
    free_settings: frozenset[str] = frozenset()  # settings a baseline may differ in, beyond the common ones

    @classmethod
    def of(cls, benchmark: Any) -> Declared:
        return cls(dict(benchmark.gate_metrics), dict(benchmark.headlines), frozenset(benchmark.free_settings))

    @property
    def units(self) -> dict[str, str]:
        """The headline metrics compare resamples, and their units (the defaults when none is declared)."""
        return dict(self.headlines or DEFAULT_HEADLINES)

    def unit_of(self, metric: str) -> str:
        """The unit of a gate metric: ``validation.main`` is counted like ``main``; "item" when undeclared."""
        units = self.units
        return units.get(metric.split(".")[-1], units.get(metric, "item"))

    def picture_metrics(self) -> dict[str, str]:
        """The metrics named in the picture's title: the headline gates, else every gate."""
        names = dict(self.gate_metrics)
        return {k: v for k, v in names.items() if k in self.units} or names

    def to_summary(self) -> dict[str, Any]:
        return {
            "gate_metrics": dict(self.gate_metrics),
            "headlines": dict(self.headlines),
            "free_settings": sorted(self.free_settings),
        }


def declared_in(summary: Mapping[str, Any]) -> Declared:
    """The benchmark's declarations stored in a summary; for an older summary, the registered benchmark's
    (nothing when that benchmark is not installed: the summary's float metrics are compared as they are)."""
    if any(key in summary for key in KEYS):
        return Declared(
            dict(summary.get("gate_metrics") or {}),
            dict(summary.get("headlines") or {}),
            frozenset(summary.get("free_settings") or ()),
        )
    name = summary.get("settings", {}).get("benchmark")
    try:
        return Declared.of(get_benchmark(str(name)))
    except ConfigError:
        return Declared()
