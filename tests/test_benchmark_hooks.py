"""Every hook the plugin calls on a benchmark or its run is declared on ``Benchmark`` / ``BenchRun`` with a
default, and the plugin calls it unconditionally: a benchmark of another package that defines none of the
optional hooks runs, resumes and is reported with the defaults; a run that is no ``BenchRun`` is each item's
error naming the fix."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_agentbench.benchmarks.base import Benchmark, BenchRun
from pytest_agentbench.core import records as rec
from pytest_agentbench.core.types import Sample

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_agentbench"
SAMPLE = Sample(id="t.1", task_id="t", split="dev")


def test_the_optional_hooks_have_their_defaults():
    bench, run = Benchmark(), BenchRun()
    record = rec.Record.from_json({"benchmark": "b", "task": "t", "id": "t.1", "split": "dev", "status": "pass"})
    assert bench.revise_record(record) is record
    assert bench.not_run_fields(SAMPLE, {}) == {}
    assert bench.first_call_misses({}, {}, [], [SAMPLE], object()) == []
    assert run.prepare_sample(SAMPLE) is None
    assert run.close() is None
    assert run.unscored() == []
    with pytest.raises(NotImplementedError):
        run.run_sample(SAMPLE)


def hooks_found_by_getattr(path: Path) -> list[str]:
    """``getattr(<a benchmark or a run>, "name", ...)`` calls in ``path``: a hook looked for, not declared."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"):
            continue
        target = ast.unparse(node.args[0]) if node.args else ""
        if "benchmark" in target or target.split(".")[-1] in ("run", "bench_run"):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_plugin_looks_for_no_hook():
    layers = ("pytest_plugin", "report", "backends", "cli")
    found = [
        hit for layer in layers for path in (PACKAGE / layer).rglob("*.py") for hit in hooks_found_by_getattr(path)
    ]
    assert found == []


BARE = '''
"""A benchmark of another package that declares nothing optional: no revise_record, not_run_fields,
first_call_misses on the benchmark; no prepare_sample, close or unscored on its run."""

from pytest_agentbench.benchmarks.base import Benchmark, BenchRun
from pytest_agentbench.core.records import sample_record
from pytest_agentbench.core.types import Sample, Task


class BareRun(BenchRun):
    def run_sample(self, sample):
        return sample_record("bare", sample, {"status": "pass" if sample.id != "t.2" else "fail", "answer": sample.id})


class NotARun:
    def run_sample(self, sample):
        return {"status": "pass"}


class Bare(Benchmark):
    name = "bare"
    splits = ("dev",)
    default_split = "dev"

    def load_tasks(self, opts, split):
        return [Task(id="t", split=split, samples=[Sample(id=f"t.{n}", task_id="t", split=split) for n in (1, 2, 3)])]

    def open_run(self, spec, model, env):
        import os

        return NotARun() if os.environ.get("BARE_DUCK") else BareRun()

    def summarize(self, records, settings):
        passed = sum(r["status"] == "pass" for r in records)
        return {"metrics": {"bare": passed / max(1, len(records))}, "terminal": [f"bare: {passed}"], "markdown": ""}


benchmark = Bare()
'''


@pytest.fixture
def bare_site(tmp_path: Path) -> Path:
    """The bare benchmark installed as a distribution: its module and a dist-info with its entry point."""
    site = tmp_path / "site"
    info = site / "barebench-1.0.dist-info"
    info.mkdir(parents=True)
    (site / "barebench.py").write_text(textwrap.dedent(BARE), encoding="utf-8")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: barebench\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[pytest_agentbench.benchmarks]\nbare = barebench:benchmark\n")
    return site


def run_bare(site: Path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    import os

    path = os.pathsep.join([str(site), str(PACKAGE.parent), *filter(None, [os.environ.get("PYTHONPATH")])])
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    environ.update(PYTHONPATH=path, **env)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--bench=bare", "--model=oracle", *args]
    return subprocess.run(argv, cwd=cwd, env=environ, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # two whole runs; the fast loop keeps the refusal below
def test_a_benchmark_without_optional_hooks_runs_and_resumes_with_the_defaults(bare_site, tmp_path):
    reports = tmp_path / "reports"
    first = run_bare(bare_site, tmp_path, f"--bench-report-dir={reports}", "--bench-run-id=r", "-k", "not t.3")
    out = first.stdout + first.stderr
    assert first.returncode == 1, out[-3000:]  # t.2 fails, nothing worse
    run_dir = reports / "bare" / "oracle" / "r"
    records = {r["id"]: r for r in rec.read_records(run_dir / "records.jsonl")}
    assert {k: r["status"] for k, r in records.items()} == {"t.1": "pass", "t.2": "fail"}, out[-3000:]
    assert records["t.1"]["answer"] == "t.1"  # the record as the run made it (revise_record's default)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["metrics"]["bare"] == 0.5

    resumed = run_bare(bare_site, tmp_path, f"--bench-resume={run_dir}", "-k", "t", "--bench-set=resume_merge=true")
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 1, out[-3000:]
    records = {r["id"]: r for r in rec.read_records(run_dir / "records.jsonl")}
    assert {k: r["status"] for k, r in records.items()} == {"t.1": "pass", "t.2": "fail", "t.3": "pass"}


def test_a_run_that_is_no_benchrun_is_an_error_naming_the_fix(bare_site, tmp_path):
    """As any failure to open the run (a usage error of the fixture): each item ends in an error that says why."""
    reports = tmp_path / "reports"
    done = run_bare(bare_site, tmp_path, f"--bench-report-dir={reports}", "--bench-run-id=d", BARE_DUCK="1")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    records = rec.read_records(reports / "bare" / "oracle" / "d" / "records.jsonl")
    assert sorted(r["id"] for r in records) == ["t.1", "t.2", "t.3"] and {r["status"] for r in records} == {"error"}
    why = "bare's open_run returned a NotARun, not a BenchRun: make its run class subclass "
    assert why + "pytest_agentbench.benchmarks.base.BenchRun" in out, out[-3000:]
