"""Hooks other plugins (and conftest.py files) may implement, pytest-xdist's ``newhooks.py`` habit.

Registered with ``pluginmanager.add_hookspecs`` in ``pytest_addhooks``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a session without --bench loads the hook specs, not the records module
    from ..core.records import RecordData


def pytest_agentbench_record(record: RecordData, item: Any) -> None:
    """Add fields to (or change) a benchmark item's ``record`` before it is written to the records file.

    Called in the process that ran the item (an xdist worker, or the only process), once per record,
    with the ``BenchItem`` the record belongs to (``item.sample`` is the sample). The return value
    is ignored: change ``record`` in place. Records reused by ``--bench-resume`` are not passed again, nor
    is the error record the xdist controller makes for an item whose worker died (it has no item there).
    """


def pytest_agentbench_summary(summary: dict[str, Any]) -> None:
    """Add fields to (or change) the run's ``summary`` before summary.json and summary.md are written.

    Called once, on the controller, after the metrics, the comparison and the gates are in
    ``summary`` (the fields summary.json holds: ``report.summary.Summary.data``). Keys starting with ``_``
    are not written to summary.json. Change it in place.
    """
