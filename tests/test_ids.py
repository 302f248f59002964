"""No private pytest API: items get their ids from pytest's public construction, so the ids
``--collect-only`` prints on the installed pytest are the forms the README documents; a run folder that
stored the older CORE-Bench form (``core-bench/capsule-X``, before pytest 9.2 made items take
``<parent>::<name>``) still resumes with its selection, and ``--deselect`` takes either form."""

from __future__ import annotations

import json
import re

import pytest

from pytest_agentbench.benchmarks.corebench import capsules

from helpers.bench_runs import REPO, SHARED_DATA, read_jsonl, run_dirs
from helpers.capsule_factory import build_capsule_archive


def readme_forms() -> dict[str, str]:
    """The README's id forms, from its "Node ids are `...` and `...`" line: benchmark -> form."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    line = re.search(r"Node ids are (`[^`]+`) and (`[^`]+`)", text)
    assert line, "the README no longer says 'Node ids are `...` and `...`'"
    forms = [form.strip("`") for form in line.groups()]
    return {re.split(r"[/:]", form, maxsplit=1)[0]: form for form in forms}


def form_regex(form: str) -> re.Pattern:
    """``scicode/<problem>::<step>`` -> a regex where each <part> is one name (no '/', ':' or space)."""
    parts = re.split(r"(<[^>]+>)", form)
    return re.compile("".join(r"[^/:\s]+" if p.startswith("<") else re.escape(p) for p in parts) + "$")


def collected(result) -> list[str]:
    return [line.strip() for line in result.stdout.lines if "::" in line and " " not in line.strip()]


def test_the_readme_documents_one_form_per_benchmark():
    assert sorted(readme_forms()) == ["core-bench", "scicode"]


@pytest.mark.parametrize(
    "bench_name, args, count",
    [
        ("scicode", ["--bench=scicode", "--bench-split=validation"], 50 + 3),
        ("core-bench", ["--bench=core-bench", "--bench-split=train"], 45),
    ],
)
@pytest.mark.e2e
@pytest.mark.slow
def test_collect_only_prints_the_readmes_ids(bench, bench_name, args, count):
    result = bench(*args, "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-2000:]
    ids = collected(result)
    pattern = form_regex(readme_forms()[bench_name])
    assert len(ids) >= count - 3 and len(set(ids)) == len(ids), ids[:5]
    wrong = [i for i in ids if not pattern.match(i)]
    assert not wrong, f"ids not of the README's form {readme_forms()[bench_name]}: {wrong[:5]}"


@pytest.mark.e2e
@pytest.mark.slow
def test_scicode_ids_name_the_problem_then_the_step(bench):
    ids = collected(bench("--bench=scicode", "--bench-split=validation", "--bench-ids=70,1", "--collect-only", "-q"))
    assert ids[0] == "scicode/1::1.1" and all(i.startswith(("scicode/1::1.", "scicode/70::70.")) for i in ids)
    attempts = collected(
        bench(
            "--bench=scicode",
            "--bench-split=validation",
            "--bench-ids=1.1",
            "--bench-attempts=2",
            "--collect-only",
            "-q",
        )
    )
    assert attempts == ["scicode/1::1.1[attempt1]", "scicode/1::1.1[attempt2]"]  # the README's attempts form


@pytest.mark.e2e
@pytest.mark.slow
def test_deselect_takes_the_old_and_the_new_corebench_form(bench):
    base = [
        "--bench=core-bench",
        "--bench-split=train",
        "--collect-only",
        "-q",
        "--bench-ids=capsule-7038571,capsule-0201225,capsule-0220918",
    ]
    for given in ("core-bench/capsule-0201225", "core-bench::capsule-0201225"):
        ids = collected(bench(*base, f"--deselect={given}"))
        assert ids == ["core-bench::capsule-7038571", "core-bench::capsule-0220918"], (given, ids)


GOOD = ["capsule-7038571", "capsule-0201225", "capsule-0220918"]


@pytest.mark.e2e
@pytest.mark.slow
def test_a_run_that_stored_the_old_corebench_form_resumes_with_its_selection(pytester, tmp_path, monkeypatch):
    staged = tmp_path / "staged"
    for capsule_id in GOOD:
        build_capsule_archive(staged, capsule_id)
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(SHARED_DATA))
    monkeypatch.setenv(capsules.CAPSULE_URL_ENV, "http://127.0.0.1:9")  # nothing is downloaded here
    pytester.makeini("[pytest]\n")
    common = [
        "--bench=core-bench",
        "--model=oracle",
        "--bench-split=train",
        f"--bench-ids={','.join(GOOD)}",
        f"--bench-capsules-dir={staged}",
        "-p",
        "no:cacheprovider",
    ]
    first = pytester.runpytest_subprocess(*common, "--bench-run-id=old", f"--deselect=core-bench::{GOOD[2]}")
    first.assert_outcomes(passed=2, deselected=1)
    [run] = [p for p in run_dirs(pytester.path, "core-bench") if p.name == "old"]
    # as a run written before this change left it: the old id form in its selection, cut after one record
    settings = json.loads((run / "settings.json").read_text())
    assert settings["_run"]["selection"]["deselect"] == [f"core-bench::{GOOD[2]}"]
    settings["_run"]["selection"]["deselect"] = [f"core-bench/{GOOD[2]}"]
    (run / "settings.json").write_text(json.dumps(settings))
    records = run / "records.jsonl"
    records.write_text(records.read_text().splitlines()[0] + "\n")
    (run / "summary.json").unlink()

    resumed = pytester.runpytest_subprocess(*common[:1], f"--bench-resume={run}", "-p", "no:cacheprovider")
    resumed.assert_outcomes(passed=2, deselected=1)
    assert "1 finished record(s) reused" in resumed.stdout.str()
    assert sorted(r["id"] for r in read_jsonl(records)) == sorted(GOOD[:2])  # each once; the deselected one never
    again = pytester.runpytest_subprocess(
        f"--bench-resume={run}", f"--deselect=core-bench/{GOOD[2]}", "-p", "no:cacheprovider"
    )  # the old form given again is the same selection
    again.assert_outcomes(passed=2, deselected=1)
