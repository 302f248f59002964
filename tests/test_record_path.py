"""One ``Record`` travels from a benchmark's ``run_sample`` to the records file: it becomes its JSON object only
where plain data is needed (the public ``pytest_agentbench_record`` hook, the report an xdist worker sends, the
file's line), and is repaired once, when the writer finishes it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_agentbench.core.records import Record

TOYBENCH = Path(__file__).resolve().parent / "toybench"
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
ITEMS = 4  # the toy benchmark's samples


@pytest.mark.parametrize(
    "data,changes",
    [
        ({"benchmark": "b", "task": "t", "id": "1", "split": "s", "status": "pass", "x": 1}, {"status": "fail"}),
        ({"id": 7, "status": "pass", "z": [1]}, {"id": "7", "message": "m", "new": {"a": 1}}),
        ({"message": None, "status": "pass"}, {"message": "now text", "status": 3}),
        ({"x": 1}, {"scored": False, "x": 2, "benchmark": "b"}),
    ],
)
def test_a_replaced_record_is_what_its_json_object_would_make(data, changes):
    record = Record.from_json(data)
    changed = record.replaced(**changes)
    again = Record.from_json({**data, **changes})
    assert changed.to_json() == again.to_json() and list(changed) == list(again) and len(changed) == len(again)
    assert (changed.status, changed.message, changed.id, changed.scored) == (
        again.status,
        again.message,
        again.id,
        again.scored,
    )
    assert changed.absent == again.absent and record.to_json() == data  # the original is unchanged


@pytest.mark.parametrize(
    "first,data",
    [
        ({"benchmark": "b", "task": "t", "id": "1", "model": "m"}, {"benchmark": "b", "status": "pass", "x": 1}),
        ({"id": "1", "scored": False}, {"status": "fail", "scored": True, "message": None}),
        ({"x": 1, "status": "pass"}, {"x": 2}),
        ({}, {"status": "pass"}),
    ],
)
def test_a_record_beneath_fields_is_what_their_merged_json_object_would_make(first, data):
    record = Record.from_json(data)
    merged = record.beneath(first)
    again = Record.from_json({**first, **data})
    assert merged.to_json() == again.to_json() and list(merged) == list(again)
    assert (merged.status, merged.message, merged.id, merged.scored, merged.absent) == (
        again.status,
        again.message,
        again.id,
        again.scored,
        again.absent,
    )


@pytest.mark.parametrize(
    "data,names",
    [
        ({"benchmark": "b", "status": "pass", "x": 1, "text_repaired": 2}, ("text_repaired",)),
        ({"status": "pass", "scored": False, "message": "m"}, ("scored", "message")),
        ({"message": None, "status": "fail"}, ("message", "absent_anyway")),
    ],
)
def test_a_record_without_fields_is_what_its_json_object_without_them_would_make(data, names):
    record = Record.from_json(data)
    less = record.without(*names)
    again = Record.from_json({k: v for k, v in data.items() if k not in names})
    assert less.to_json() == again.to_json() and list(less) == list(again)
    assert (less.status, less.message, less.scored, less.absent) == (
        again.status,
        again.message,
        again.scored,
        again.absent,
    )
    assert less.replaced(new=1).to_json() == {**again.to_json(), "new": 1}


COUNTING_CONFTEST = """
import collections, json, os
from pytest_agentbench.core import records as rec
from pytest_agentbench.core.records import Record

COUNTS = collections.Counter()
AT_FILE = {}
FROM_JSON, TO_JSON, APPEND = Record.from_json.__func__, Record.to_json, rec.append_line


def from_json(cls, data):
    COUNTS["from_json"] += 1
    return FROM_JSON(cls, data)


def to_json(self):
    COUNTS["to_json"] += 1
    return TO_JSON(self)


class CountingJson:
    def __getattr__(self, name):
        return getattr(json, name)

    def dumps(self, *args, **kwargs):
        COUNTS["dumps"] += 1
        return json.dumps(*args, **kwargs)

    def loads(self, *args, **kwargs):
        COUNTS["loads"] += 1
        return json.loads(*args, **kwargs)


def append_line(path, line):
    APPEND(path, line)
    AT_FILE.clear()
    AT_FILE.update(COUNTS)  # what the items cost up to the last record written


Record.from_json, Record.to_json = classmethod(from_json), to_json
rec.json, rec.append_line = CountingJson(), append_line


def pytest_unconfigure(config):
    with open(os.environ["COUNTS_FILE"], "w") as out:
        json.dump(AT_FILE, out)
"""


def test_a_record_changes_form_only_at_the_hook_the_wire_and_the_file(pytester, monkeypatch, tmp_path):
    """Per item, up to the records file: the benchmark's record made (1), the hook's JSON object and the Record
    made from what it left (2, with the plain-data check's JSON text and its reading: 2 more), the writer's
    repaired Record (1), the file's line (2) and the report's JSON object (the last item's after the file): 10 at
    most, 9.5 measured (17.5 when the run loop and the writer changed its form freely, 11.5 while the run loop
    still put the item's identity under it through its JSON object). JSON text is made twice per item: the
    check and the line."""
    site = tmp_path / "site"
    info = site / "toybench-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toybench\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[pytest_agentbench.benchmarks]\ntoy = toybench:benchmark\n")
    path = [str(site), str(TOYBENCH), str(PACKAGE_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    monkeypatch.setenv("COUNTS_FILE", str(tmp_path / "counts.json"))
    pytester.makeconftest(COUNTING_CONFTEST)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--bench=toy", "--model=oracle", f"--bench-report-dir={tmp_path / 'reports'}"
    )
    assert result.ret == 0, result.stdout.str()[-3000:] + result.stderr.str()[-3000:]
    counted = json.loads((tmp_path / "counts.json").read_text())
    assert counted["dumps"] == 2 * ITEMS, counted
    assert sum(counted.values()) <= 10 * ITEMS, counted
