"""A pytest plugin of the tests that makes one stage of an item's life fail, as a bug or a broken environment would.

The runs the tests start load it with ``-p helpers.fault_stages`` (with the tests folder on their PYTHONPATH, so
xdist workers load it too). ``FAULT=stage:id[,stage:id...]`` names the stages that raise, for the items of those
sample ids; each stage is the plugin function that does that stage's work, wrapped for the session:

* ``score``: ``run.run_with_retries`` (the sample is run and scored),
* ``record``: ``writer.RecordWriter.build`` (plugins' fields added, the record made plain),
* ``write``: ``writer.record_line`` (the record turned into its line of the records file),
* ``deliver``: ``writer.check_sendable`` (a worker's record checked before it travels to the controller).

Whatever a wrapper raises is the item's problem at that stage; the plugin must turn it into that item's error
record. The package itself ships no hook or variable for this.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from pytest_agentbench.pytest_plugin import run, writer

ORIGINALS: list[tuple[Any, str, Any]] = []  # (owner, attribute, original): restored at unconfigure


def faulty(stage: str, sample_id: str) -> bool:
    return f"{stage}:{sample_id}" in os.environ.get("FAULT", "").split(",")


def raise_fault(stage: str, sample_id: str) -> None:
    raise RuntimeError(f"injected {stage} fault in {sample_id}")


def once_per_item(stage: str, original: Callable[..., Any], id_of: Callable[..., str]) -> Callable[..., Any]:
    """``original`` raising the first time it handles an item ``FAULT`` names for ``stage`` (later calls for
    that item, e.g. writing the error record that replaces it, go through)."""
    fired: set[str] = set()

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        sample_id = id_of(*args, **kwargs)
        if faulty(stage, sample_id) and sample_id not in fired:
            fired.add(sample_id)
            raise_fault(stage, sample_id)
        return original(*args, **kwargs)

    return wrapped


def patch(owner: Any, attribute: str, stage: str, id_of: Callable[..., str]) -> None:
    original = getattr(owner, attribute)
    ORIGINALS.append((owner, attribute, original))
    setattr(owner, attribute, once_per_item(stage, original, id_of))


def pytest_configure(config: Any) -> None:
    patch(run, "run_with_retries", "score", lambda run_, sample, *a, **k: str(sample.id))
    patch(writer.RecordWriter, "build", "record", lambda self, item, data: str(item.sample.id))
    patch(writer, "record_line", "write", lambda record: str(record.get("id")))
    patch(writer, "check_sendable", "deliver", lambda record, delivery: str(record.get("id")))


def pytest_unconfigure(config: Any) -> None:
    while ORIGINALS:
        owner, attribute, original = ORIGINALS.pop()
        setattr(owner, attribute, original)
