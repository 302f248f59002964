"""Per-item records, appended to the run's log as each item finishes.

A record has two forms. ``Record`` is the typed, read-only form every part of the package makes and passes
around: the common fields (``benchmark``, ``task``, ``id``, ``split``, ``status``, ``scored``, ``message``) as
attributes, every other field (the benchmark's own, ``model``, ``attempt``, ``duration``, and ``host`` /
``worker``, where the item ran) in ``extra``. A benchmark's ``run_sample`` makes one with ``sample_record`` (its
status checked against ``STATUSES``), the run loop adds the item's identity and timing to it, the writer carries
it to the records file and the report layer and ``summarize`` read it.

``RecordData`` is its JSON object (a plain dict), and stays the form only where a record must be plain data:
the records file's line (``record_line``, ``read_records``), what an xdist report carries in
``user_properties`` (execnet carries plain data only), and the argument of the public
``pytest_agentbench_record`` hook, which users' conftests change in place (the plugin passes the JSON object and
makes the ``Record`` again from what the hook left). ``Record.from_json(data)`` and ``record.to_json()`` give
back the same object, key order included, so the files never change.

Records travel from xdist workers to the controller in the test report's ``user_properties`` under
``RECORD_PROPERTY``, with the item's run files and new model-cache entries under ``DELIVERY_PROPERTY``: the
controller is the only writer of a run.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from .errors import warn_about
from .io import natural_key, write_atomic
from .text import printable
from .types import Sample, attempt_key

RECORD_PROPERTY = "agentbench_record"
# what a worker hands the controller with a record: {"append", "files", "cache", "bytes"} (pytest_plugin/writer.py)
DELIVERY_PROPERTY = "agentbench_delivery"
# a record of an item whose worker died while running it: an error now, but not finished (--bench-resume runs it)
LOST_FIELD = "lost"
# a record of an item whose host lacked what it needs (its value, e.g. "gpu"): an env_error that counts in this
# run, run again by --bench-resume (with such a host among the workers it is placed there)
UNPLACED_FIELD = "unplaced"
PASS = "pass"
# An item stopped by its cost budget (--bench-set max_cost_per_item): not passed, a verdict (never retried, no error).
BUDGET = "budget"
# An item not run because an item it builds on ended without the model's answer (a SciCode step after a step that
# ended in model_error): no verdict on the model, an error of the run, run again by --bench-resume.
BLOCKED = "blocked"
# The record field naming the item a blocked item waited for.
BLOCKED_BY_FIELD = "blocked_by"
STATUSES = (
    "pass",
    "fail",
    "timeout",
    "parse_error",
    "eval_error",
    "model_error",
    "env_error",
    "error",
    BLOCKED,
    BUDGET,
    "skipped",
)
# Errors of the model service or the environment say nothing about the model's ability; summaries show them apart.
INFRA_STATUSES = ("model_error", "env_error", "error", BLOCKED)
# Outcomes that are no verdict on the model: the run counts' Error, what --bench-set max_retries and --bench-resume run
# again.
ERROR_STATUSES = ("model_error", "eval_error", "env_error", "error", BLOCKED)
# Fields that legitimately differ between two runs of the same thing (``*_source``: built now or taken from the
# cache, see docs/runs.md; ``operands_bytes``: the size of the values the scored code sent, whose last digits
# follow the host's numeric kernels, e.g. the BLAS core type OpenBLAS picks on a CPU).
VOLATILE_FIELDS = (
    "duration",
    "worker",
    "host",
    "started",
    "finished",
    "latency",
    "exec_duration",
    "operands_bytes",
    "run_dir",
    "targets_source",
    "capsule_source",
)

R = TypeVar("R", bound=Mapping[str, Any])  # a record of either form

# A record as its JSON object: the records file's line, the hook's argument, what an xdist report carries.
RecordData = dict[str, Any]
# A record in either form, where only reading it matters: a ``Record``, or its JSON object.
RecordLike = Mapping[str, Any]
# The fields every record has (``Record``'s attributes), with the type each holds.
COMMON_FIELDS: dict[str, type] = {
    "benchmark": str,
    "task": str,
    "id": str,
    "split": str,
    "status": str,
    "scored": bool,
    "message": str,
}


@dataclass(frozen=True, eq=False)
class Record(Mapping[str, Any]):
    """One finished record: the common fields typed, the rest (the benchmark's own) in ``extra``.

    Read-only, and a ``Mapping`` of the record's JSON fields (``record["generation"]``, ``record.get("model")``),
    equal to a dict holding the same fields, so code that reads records as mappings reads a ``Record`` alike.
    ``from_json`` keeps what the JSON object held exactly: a common field it lacked (an old or hand-made record)
    stays absent, one of another type (a ``message`` of null) stays in ``extra`` as it was, and ``to_json`` gives
    the keys back in their order (report.html lists a record's fields in that order; the files sort them)."""

    benchmark: str
    task: str
    id: str
    split: str
    status: str
    scored: bool = True
    message: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)  # every other field, in the JSON's order
    absent: frozenset[str] = frozenset()  # common fields the JSON object did not hold
    order: tuple[str, ...] = ()  # the JSON object's key order (empty: common fields first, then ``extra``)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Record:
        common = {k: data[k] for k, kind in COMMON_FIELDS.items() if k in data and type(data[k]) is kind}
        extra = {k: v for k, v in data.items() if k not in common}
        defaults = {k: kind() for k, kind in COMMON_FIELDS.items() if k not in common}
        defaults.pop("scored", None)  # its default is True, as for a record that never said
        return cls(
            **defaults,
            **common,
            extra=extra,
            absent=frozenset(COMMON_FIELDS) - set(common) - set(extra),
            order=tuple(data),
        )

    def to_json(self) -> RecordData:
        """The record's JSON object, exactly what ``from_json`` was given."""
        return {key: self[key] for key in self.keys_in_order()}

    def keys_in_order(self) -> list[str]:
        """The record's field names in its JSON object's order (read as a mapping, a record is not copied)."""
        names = [k for k in COMMON_FIELDS if k not in self.absent and k not in self.extra]
        names.extend(self.extra)
        present = set(names)
        ordered = [k for k in self.order if k in present]
        placed = set(ordered)
        ordered.extend(k for k in names if k not in placed)
        return ordered

    def replaced(self, **changes: Any) -> Record:
        """This record with some fields set (a new ``Record``; this one never changes), exactly as
        ``from_json({**record.to_json(), **changes})`` would make it, without going through the JSON object."""
        typed = {k: v for k, v in changes.items() if k in COMMON_FIELDS and type(v) is COMMON_FIELDS[k]}
        # a common field set to a value of another type is kept in ``extra``, its attribute at its default
        untyped = {k: True if k == "scored" else COMMON_FIELDS[k]() for k in changes if k in COMMON_FIELDS}
        extra = {k: v for k, v in self.extra.items() if k not in typed}
        extra.update((k, v) for k, v in changes.items() if k not in typed)
        order = (*self.order, *(k for k in changes if k not in self.order)) if self.order else ()
        attributes: dict[str, Any] = {**untyped, **typed}
        return replace(self, **attributes, extra=extra, absent=self.absent - set(changes), order=order)

    def beneath(self, first: Mapping[str, Any]) -> Record:
        """This record over the fields of ``first``: the fields it lacks taken from ``first``, the keys in the
        order of ``{**first, **record}``, exactly as ``from_json({**first, **record.to_json()})`` would make it,
        without going through the JSON object (the run loop puts the item's identity under a benchmark's record)."""
        lacking = {k: v for k, v in first.items() if k not in self}
        order = (*first, *(k for k in self.keys_in_order() if k not in first))
        return replace(self.replaced(**lacking), order=order)

    def without(self, *names: str) -> Record:
        """This record without the fields ``names``, exactly as ``from_json`` of its JSON object without them
        would make it (a common field left out is absent, its attribute at its default)."""
        common: dict[str, Any] = {k: True if k == "scored" else COMMON_FIELDS[k]() for k in names if k in COMMON_FIELDS}
        extra = {k: v for k, v in self.extra.items() if k not in names}
        order = tuple(k for k in self.order if k not in names)
        absent = self.absent | (set(names) & set(COMMON_FIELDS))
        return replace(self, **common, extra=extra, absent=frozenset(absent), order=order)

    @property
    def key(self) -> str:
        """The record's key: its sample id, with ``[attemptN]`` when the run repeats attempts (``record_key``)."""
        return record_key(self)

    def __getitem__(self, key: str) -> Any:
        if key in self.extra:
            return self.extra[key]
        if key in COMMON_FIELDS and key not in self.absent:
            return getattr(self, key)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys_in_order())

    def __len__(self) -> int:
        return len(self.keys_in_order())


def sample_identity(benchmark: str, sample: Sample) -> dict[str, Any]:
    """The first fields of every record of ``sample``, in their order: which benchmark, task, sample and split,
    and whether it counts in the metrics."""
    return {
        "benchmark": benchmark,
        "task": sample.task_id,
        "id": sample.id,
        "split": sample.split,
        "scored": sample.scored,
    }


def sample_record(benchmark: str, sample: Sample, fields: Mapping[str, Any]) -> Record:
    """A benchmark's record of one sample (what ``run_sample`` returns): the sample's identity (``benchmark``,
    ``task``, ``id``, ``split``, ``scored``), then ``fields`` in their order: the verdict (``status``, one of
    ``STATUSES``; ``message``, text, empty when left out) and the benchmark's own fields. A field of ``fields``
    that is also part of the identity replaces it in place. Raises ValueError for a status outside
    ``STATUSES`` or a common field of the wrong type: a bug of the benchmark, which the run loop records as
    the item's error."""
    data = {**sample_identity(benchmark, sample), **fields}
    data.setdefault("message", "")
    if data.get("status") not in STATUSES:
        raise ValueError(f"{benchmark} {sample.id}: status {data.get('status')!r} is none of {', '.join(STATUSES)}")
    for key, kind in COMMON_FIELDS.items():
        if type(data[key]) is not kind:
            raise ValueError(
                f"{benchmark} {sample.id}: record field {key!r} is {type(data[key]).__name__}, not {kind.__name__}"
            )
    return Record.from_json(data)


def as_mapping(value: object) -> Mapping[str, Any]:
    """A record's nested field when it is a JSON object, else an empty one (a field left out or written otherwise:
    records come from benchmarks, plugins and older runs)."""
    return value if isinstance(value, Mapping) else {}


def as_record(record: Mapping[str, Any]) -> Record:
    """A ``Record`` of either form (a finished record's JSON object, or a ``Record`` already)."""
    return record if isinstance(record, Record) else Record.from_json(record)


def to_json(record: Mapping[str, Any]) -> str:
    data = record.to_json() if isinstance(record, Record) else record if isinstance(record, dict) else dict(record)
    return json.dumps(data, sort_keys=True, default=json_default, ensure_ascii=False)


def json_default(obj: Any) -> Any:
    """``json.dumps(default=...)`` for the values records and summaries hold (records, numpy values, paths, sets)."""
    if isinstance(obj, Mapping):  # a Record (or another mapping that is not a dict): its JSON object
        return dict(obj)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    return repr(obj)


def record_line(record: Mapping[str, Any]) -> bytes:
    """One record as the line the records file holds. Raises for a record that cannot be written (a value that
    refers to itself, text that is not valid UTF-8): that is the item's problem, not the file's."""
    return (to_json(record) + "\n").encode("utf-8")


def plain(record: Mapping[str, Any]) -> RecordData:
    """The record exactly as the records file will hold it (JSON types only: what an xdist report can carry and
    what a later read gives back). Raises as ``record_line`` does."""
    data: RecordData = json.loads(record_line(record))
    return data


def append_record(path: Path, record: Mapping[str, Any]) -> None:
    """Append one record and make it durable before the next item starts (``record_line`` + ``append_line``)."""
    append_line(path, record_line(record))


def append_line(path: Path, line: bytes) -> None:
    """Append one record's line and make it durable before the next item starts.

    Only the controller (or the only process) appends; the lock keeps lines whole should another process
    (a second pytest on the same folder by mistake) append at the same time. The run folder is not created
    here: it was made when the run started, and a folder removed since is an error of the run (OSError), not
    something to hide by starting an empty records file.
    """
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            written = os.write(fd, line)
            if written != len(line):  # a full disk may take part of the line
                raise OSError(f"only {written} of {len(line)} bytes of the record were written")
            os.fsync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def read_records(path: Path) -> list[RecordData]:
    """Records of a (possibly interrupted) run, as JSON objects; a torn last line is dropped with a warning."""
    records: list[RecordData] = []
    if not path.exists():
        return records
    if not stat.S_ISREG(os.stat(path).st_mode):  # a device (a link to /dev/full reads zeros without end) or a FIFO
        raise OSError(f"the records file {path} is not a regular file")
    lines = path.read_bytes().split(b"\n")
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            records.append(json.loads(raw))
        except json.JSONDecodeError:
            where = "torn last line" if number >= len(lines) - 1 else "corrupt line"
            warn_about(f"agentbench: dropped {where} {number} of {path} (an interrupted write)", path)
    return records


def is_lost(record: Mapping[str, Any]) -> bool:
    """True for the record the controller made when the item's worker died: the item has no result yet."""
    return bool(record.get(LOST_FIELD))


def is_unplaced(record: Mapping[str, Any]) -> bool:
    return bool(record.get(UNPLACED_FIELD))


def runs_again_on_resume(record: Mapping[str, Any]) -> bool:
    """An item with no result yet (its worker died, or its host lacked what it needs): not run, for every count."""
    return is_lost(record) or is_unplaced(record)


def ended_in_error(record: Mapping[str, Any]) -> bool:
    """A record that is no verdict on the model (``ERROR_STATUSES``: a model, environment or harness error, a
    blocked item): --bench-resume runs its item again, with the run's own settings."""
    return record.get("status") in ERROR_STATUSES


def comparable(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record without the fields that differ between identical runs (timings, worker names)."""
    return {k: (comparable(v) if isinstance(v, Mapping) else v) for k, v in record.items() if k not in VOLATILE_FIELDS}


def sort_key(record: Mapping[str, Any]) -> tuple[list[Any], Any]:
    """Records in natural id order (77.3 before 77.10), attempts in order."""
    return natural_key(record.get("id", "")), record.get("attempt") or 0


def record_key(record: Mapping[str, Any]) -> str:
    """The key of a record: its sample id, with ``[attemptN]`` when the run repeats attempts (--bench-attempts)."""
    return attempt_key(str(record["id"]), record.get("attempt"))


def latest_by_id(records: Iterable[R]) -> dict[str, R]:
    """One record per sample id (and attempt), the last one winning (a re-run item replaces its earlier record)."""
    out: dict[str, R] = {}
    for record in records:
        out[record_key(record)] = record
    return out


def count_statuses(records: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    counts = {s: 0 for s in STATUSES}
    for record in records:
        counts[record["status"]] = counts.get(record["status"], 0) + 1
    return {k: v for k, v in counts.items() if v}


def rewrite_records(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Replace the log by exactly ``records`` (atomically), e.g. to cut a torn last line before appending."""
    write_atomic(path, "".join(to_json(r) + "\n" for r in records), durable=True)


# Accounting keys read from ``record["generation"]`` (every benchmark's harness uses these names).
USAGE_KEYS = ("model_calls", "tool_calls", "prompt_tokens", "completion_tokens", "cache_hits", "request_retries")


def usage_of(record: Mapping[str, Any]) -> dict[str, float]:
    """Model accounting of one record; ``tokens`` is prompt plus completion (or ``total_tokens`` when given)."""
    generation = record.get("generation") or {}
    out = {k: generation.get(k) or 0 for k in USAGE_KEYS if isinstance(generation.get(k) or 0, (int, float))}
    total = generation.get("total_tokens")
    out["tokens"] = (
        total if isinstance(total, (int, float)) else out.get("prompt_tokens", 0) + out.get("completion_tokens", 0)
    )
    return out


def usage_totals(records: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    totals: dict[str, float] = {k: 0 for k in (*USAGE_KEYS, "tokens")}
    for record in records:
        for key, value in usage_of(record).items():
            totals[key] += value
    return totals


def counts_text(counts: Mapping[str, int]) -> str:
    """Status counts in the one format every report uses: ``3 pass, 1 fail, 1 model_error`` (status order)."""
    order = [*STATUSES, *sorted(set(counts) - set(STATUSES))]
    return ", ".join(f"{counts[s]} {s}" for s in order if counts.get(s))


def usage_text(totals: Mapping[str, float]) -> str:
    """Model usage in one line: calls that reached the endpoint (a cache hit is not one), tokens, cache hits,
    and tool calls when there were any. A replay reads ``0 model calls, ... N cache hits``."""
    hits = totals.get("cache_hits", 0) or 0
    calls = max(0, (totals.get("model_calls", 0) or 0) - hits)
    parts = [f"{calls:g} model calls", f"{totals.get('tokens', 0) or 0:g} tokens", f"{hits:g} cache hits"]
    if totals.get("tool_calls"):
        parts.append(f"{totals['tool_calls']:g} tool calls")
    if totals.get("request_retries"):  # requests the client retried (429, 5xx): a strained endpoint
        parts.append(f"{totals['request_retries']:g} request retries")
    return ", ".join(parts)


def junit_properties(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The few values a CI dashboard shows for an item (never the whole record: junitxml writes str(value)), each
    one printable line."""
    return [(name, printable(value, one_line=True)) for name, value in _junit_values(record)]


def _junit_values(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [
        ("benchmark", str(record.get("benchmark", ""))),
        ("task", str(record.get("task", ""))),
        ("step", str(record.get("id", ""))),
        ("status", str(record.get("status", ""))),
        ("duration", str(record.get("duration", 0.0))),
        ("tokens", str(int(usage_of(record)["tokens"]))),
    ]
