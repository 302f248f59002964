"""The controller's two books of a run: the plan (what the session selected to run) and the ledger (what it got).

The plugin's reporter fills both: the plan once the selection is known (its own collection, or under xdist a
worker's), the ledger as each item's record arrives and, at the end, with the finished records a resumed run
reused. ``build_summary`` reads both: a planned item without a record is ``not_run``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.records import Record, as_record, record_key


@dataclass
class RunPlan:
    """The items the session selected (after -k, -m and --deselect), each as the record it starts from (its
    identity, what its benchmark knows before it runs, and ``skipped`` for a prefilled step). ``items`` is None
    until the selection is known, and stays None when the session only lists items."""

    items: list[Record] | None = None

    @property
    def known(self) -> bool:
        return self.items is not None

    def select(self, items: Iterable[Record]) -> None:
        self.items = list(items)

    def __len__(self) -> int:
        return len(self.items or ())

    def __bool__(self) -> bool:
        return bool(self.items)


class Ledger:
    """The run's finished records, one per item key (its id, and attempt when attempts repeat): a record that
    arrives again for the same key (an item run again) replaces the earlier one."""

    def __init__(self) -> None:
        self.by_key: dict[str, Record] = {}

    def add(self, record: Mapping[str, Any]) -> Record:
        """Enter one record (its JSON object from a report, or a ``Record``); returns it as a ``Record``."""
        entered = as_record(record)
        self.by_key[record_key(entered)] = entered
        return entered

    def reuse(self, finished: Iterable[Mapping[str, Any]]) -> None:
        """Records a resumed run reused: entered unless this session delivered the item's record again."""
        for record in finished:
            self.by_key.setdefault(record_key(record), as_record(record))

    def records(self) -> list[Record]:
        return list(self.by_key.values())

    def __contains__(self, key: object) -> bool:
        return key in self.by_key

    def __iter__(self) -> Iterator[Record]:
        return iter(self.by_key.values())

    def __len__(self) -> int:
        return len(self.by_key)

    def __bool__(self) -> bool:
        return bool(self.by_key)
