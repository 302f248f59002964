"""Run files (--bench-config): a YAML or JSON file says what the command line would, with precedence
command line > environment > run file > ini > default, and every value keeps the line it came from."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_agentbench.core import runfile
from pytest_agentbench.pytest_plugin.options import all_options

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.fake_openai import FakeOpenAI
from helpers.scicode_builders import MODEL_CONFTEST, write_dataset


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def line_of(path: Path, needle: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


@pytest.fixture
def tiny_data(pytester, shared_data, monkeypatch):
    """The tiny dataset, named by the run files (the environment would win over them)."""
    pytester.makeconftest(MODEL_CONFTEST)
    monkeypatch.delenv("AGENTBENCH_DATA_DIR", raising=False)
    monkeypatch.setenv("AGENTBENCH_OFFLINE", "1")  # a wrong data folder must never reach for the network
    return write_dataset(pytester.path, shared_data)


@pytest.mark.e2e
@pytest.mark.slow
def test_a_run_file_drives_a_whole_run_and_settings_name_each_line(pytester, bench, tiny_data, monkeypatch):
    data, h5 = tiny_data
    monkeypatch.setenv("BREAK_STEPS", "2.2")
    config = write(
        pytester.path / "agentbench.yaml",
        f"""
        bench:
          bench: scicode
          split: validation
          data_dir: {data.name}
          h5: {h5.name}
          allow_custom_data: true
          timeout: 20
        models:
          - name: mutant
        gates:
          fail_under: ["subproblem=50%"]
        pytest:
          k: "not 1.2"
        """,
    )
    result = bench("--bench-config=agentbench.yaml")
    [run] = run_dirs(pytester.path)
    assert run.parent.name == "mutant"
    records = {r["id"]: r["status"] for r in read_jsonl(run / "steps.jsonl")}
    assert records == {"1.1": "pass", "2.1": "pass", "2.2": "fail", "3.1": "pass"}  # -k from the file
    assert "agentbench gates: passed" in result.stdout.str()
    stored = json.loads((run / "settings.json").read_text())["_run"]
    assert stored["sources"]["timeout"] == f"file agentbench.yaml:{line_of(config, 'timeout: 20')}"
    assert stored["sources"]["fail_under"] == f"file agentbench.yaml:{line_of(config, 'fail_under')}"
    assert stored["options"]["timeout"] == 20
    assert stored["selection"]["keyword"] == "not 1.2"
    assert result.ret == 0


@pytest.mark.e2e
@pytest.mark.slow
def test_command_line_beats_environment_beats_run_file_beats_ini(pytester, bench, tiny_data, monkeypatch):
    data, h5 = tiny_data
    pytester.makeini("[pytest]\nagentbench_timeout = 99\nagentbench_tool_loops = 3\nagentbench_progress_interval = 7\n")
    write(
        pytester.path / "run.yaml",
        f"""
        bench: {{bench: scicode, split: validation, data_dir: {data.name}, h5: {h5.name}, allow_custom_data: true,
                timeout: 20, tool_loops: 5, cache_dir: from-file}}
        models: [{{name: mutant}}]
        """,
    )
    monkeypatch.setenv("AGENTBENCH_CACHE_DIR", str(pytester.path / "from-env"))
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--bench-config=run.yaml", "--bench-set=tool_loops=9", "--collect-only", "-q"
    )
    assert result.ret == 0, result.stdout.str()
    header = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--bench-config=run.yaml",
        "--bench-set=tool_loops=9",
        "--bench-run-id=x",
        "--bench-ids=3.1",
    )
    stored = json.loads((pytester.path / "reports/scicode/mutant/x/settings.json").read_text())["_run"]
    assert stored["options"]["tool_loops"] == 9 and stored["sources"]["tool_loops"] == "command line"
    assert stored["options"]["timeout"] == 20 and stored["sources"]["timeout"].startswith("file run.yaml:")
    assert stored["sources"]["cache_dir"] == "environment"
    assert stored["options"]["progress_interval"] == 7 and stored["sources"]["progress_interval"] == "ini"
    assert header.ret == 0, header.stdout.str()


@pytest.mark.parametrize(
    "body,needle,message",
    [
        ("bench:\n  bench: scicode\n  timout: 3\n", "timout", "bench: unknown key 'timout'; valid keys:"),
        ("bench:\n  bench: scicode\n  timeout: -1\n", "timeout", "must be a positive number, got -1"),
        ("bench:\n  bench: scicode\ngates:\n  split: test\n", "split: test", "gates: unknown key 'split'"),
        ("bench: {bench: scicode}\nmodels:\n  - name: a\n    api_key: sk-123\n", "api_key", "never goes in a run file"),
        ("bench: {bench: scicode}\npytest:\n  x: 1\n", "x: 1", "pytest: unknown key 'x'"),
        ("bench: {bench: scicode}\nbenchmarks: 1\n", "benchmarks", "unknown section 'benchmarks'"),
        ("bench: [scicode\n", None, "is not valid YAML"),
        (
            "bench: {bench: scicode, split: validation}\ngates:\n  fail_under: [nope=1]\n",
            "fail_under",
            "unknown scicode metric 'nope' in --bench-fail-under (file agentbench.yaml:3)",
        ),
    ],
)
@pytest.mark.e2e
@pytest.mark.slow
def test_a_bad_run_file_is_a_usage_error_naming_file_and_line(pytester, body, needle, message, monkeypatch):
    monkeypatch.setenv("AGENTBENCH_OFFLINE", "1")
    path = write(pytester.path / "agentbench.yaml", body)
    result = pytester.runpytest("-p", "no:cacheprovider", "--bench-config=agentbench.yaml", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert message in err, err
    where = f"agentbench.yaml:{line_of(path, needle)}" if needle else "agentbench.yaml:"
    assert where in err, err


@pytest.mark.e2e
@pytest.mark.slow
def test_the_key_comes_from_the_variable_the_file_names_and_is_never_written(pytester, bench, tiny_data, monkeypatch):
    data, h5 = tiny_data
    (pytester.path / "conftest.py").unlink()  # the real client, not the test model
    monkeypatch.setenv("MY_ENDPOINT_KEY", "sk-secret-from-env")
    with FakeOpenAI() as server:
        server.api_key = "sk-secret-from-env"
        server.reply("```python\ndef six():\n    return 6\n```")
        write(
            pytester.path / "agentbench.yaml",
            f"""
            bench: {{bench: scicode, split: validation, data_dir: {data.name}, h5: {h5.name},
                    allow_custom_data: true, mode: naive, ids: ["3.1"]}}
            models:
              - name: other
                base_url: http://127.0.0.1:9/v1
              - name: served
                base_url: {server.base_url}
                api_key_env: MY_ENDPOINT_KEY
                params: {{temperature: 0}}
            """,
        )
        result = bench("--bench-config=agentbench.yaml", "--model=served")
        assert result.ret == 0, result.stdout.str()
        asked = [r for r in server.requests if r["path"].endswith("/chat/completions")]
        assert asked and asked[-1]["body"]["temperature"] == 0
    [run] = run_dirs(pytester.path)
    assert [r["status"] for r in read_jsonl(run / "steps.jsonl")] == ["pass"]
    for path in run.rglob("*"):
        if path.is_file():
            assert b"sk-secret-from-env" not in path.read_bytes(), path


@pytest.mark.e2e
@pytest.mark.slow
def test_a_json_run_file_works_and_the_command_line_picks_pytest_flags_first(pytester, tiny_data):
    data, h5 = tiny_data
    (pytester.path / "run.json").write_text(
        json.dumps(
            {
                "bench": {
                    "bench": "scicode",
                    "split": "validation",
                    "data_dir": data.name,
                    "h5": h5.name,
                    "allow_custom_data": True,
                },
                "models": [{"name": "mutant"}],
                "pytest": {"k": "1.1", "deselect": ["scicode/2::2.1"]},
            }
        )
    )
    listed = pytester.runpytest("-p", "no:cacheprovider", "--bench-config=run.json", "--collect-only", "-q")
    assert listed.ret == 0, listed.stdout.str()
    assert "scicode/1::1.1" in listed.stdout.str() and "scicode/2::2.2" not in listed.stdout.str()
    mine = pytester.runpytest("-p", "no:cacheprovider", "--bench-config=run.json", "-k", "2", "--collect-only", "-q")
    out = mine.stdout.str()
    assert "scicode/2::2.2" in out and "scicode/1::1.1" not in out and "scicode/2::2.1" not in out


def test_init_writes_an_example_that_loads_and_never_overwrites(tmp_path):
    command = [sys.executable, "-m", "pytest_agentbench", "init"]
    first = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    loaded = runfile.load(tmp_path / "agentbench.yaml", all_options())
    assert loaded.options["bench"].value == "scicode" and loaded.model_names() == ["gpt-4o"]
    assert loaded.pytest_args["n"].value == 2
    second = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert second.returncode == 1 and "exists" in second.stderr


@pytest.mark.e2e
def test_listing_the_items_of_a_gated_run_file_is_not_judged(pytester, tiny_data):
    data, h5 = tiny_data
    write(
        pytester.path / "agentbench.yaml",
        f"""
        bench: {{bench: scicode, split: validation, data_dir: {data.name}, h5: {h5.name}, allow_custom_data: true}}
        models: [{{name: mutant}}]
        gates: {{fail_under: ["main=90%"], max_errors: 0}}
        """,
    )
    listed = pytester.runpytest("-p", "no:cacheprovider", "--bench-config=agentbench.yaml", "--collect-only", "-q")
    assert listed.ret == pytest.ExitCode.OK, listed.stdout.str()
    assert "gates" not in listed.stdout.str() and "5 tests collected" in listed.stdout.str()
