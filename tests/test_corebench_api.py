"""CORE-Bench as plain Python: its declarations, solver choice, and scoring one report without pytest."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_agentbench.benchmarks.base import Benchmark
from pytest_agentbench.benchmarks.corebench import (
    CORE_BENCH_OPTIONS,
    CoreBench,
    benchmark,
    choose_solver,
    dataset,
    run,
    score_report,
)
from pytest_agentbench.benchmarks.corebench.scorer import question_totals
from pytest_agentbench.core.options import OptionError

from helpers.bench_runs import SHARED_DATA  # honours $AGENTBENCH_DATA_DIR
from helpers.capsule_factory import corebench_options, host_network_ready

DATA = SHARED_DATA
REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- declarations


def test_benchmark_declares_everything_the_core_needs():
    assert isinstance(benchmark, CoreBench) and isinstance(benchmark, Benchmark)
    assert set(benchmark.markers) == {"core_bench", "gpu"}
    assert benchmark.gate_metrics == {
        "accuracy": "capsule_accuracy",
        "written": "written_task_accuracy",
        "vision": "figure_task_accuracy",
        "questions": "question_accuracy",
    }
    assert benchmark.headlines == {"accuracy": "item"}
    assert "env" in benchmark.free_settings and "difficulty" not in benchmark.free_settings


def test_options_keep_their_flags_ini_keys_and_defaults():
    table = {o.name: (o.spelling, o.ini, o.default, o.owner) for o in CORE_BENCH_OPTIONS}
    assert table == {
        "difficulty": ("--bench-difficulty", "agentbench_difficulty", "hard", "core-bench"),
        "capsules_dir": ("--bench-capsules-dir", "agentbench_capsules_dir", None, "core-bench"),
        "hints": ("--bench-set hints", "agentbench_hints", True, "core-bench"),
        "upstream_abort": ("--bench-set upstream_abort", "agentbench_upstream_abort", False, "core-bench"),
        "workspace_root": (
            "--bench-set workspace_root",
            "agentbench_workspace_root",
            "/capsule/environment",
            "core-bench",
        ),
        "dataset_path": ("--bench-set dataset_path", "agentbench_dataset_path", None, "core-bench"),
        "preinstalled_input_dir": (
            "--bench-set preinstalled_input_dir",
            "agentbench_preinstalled_input_dir",
            None,
            "core-bench",
        ),
        "docker_dind": ("--bench-set docker_dind", "agentbench_docker_dind", False, "core-bench"),
        "review": ("--bench-review", "agentbench_review", None, "core-bench"),
        "agent_steps": ("--bench-set agent_steps", "agentbench_agent_steps", 40, "core-bench"),
        "agent_time": ("--bench-set agent_time", "agentbench_agent_time", 8100.0, "core-bench"),
        "agent_tokens": ("--bench-set agent_tokens", "agentbench_agent_tokens", None, "core-bench"),
        "agent_command_timeout": (
            "--bench-set agent_command_timeout",
            "agentbench_agent_command_timeout",
            600.0,
            "core-bench",
        ),
        "agent": ("--bench-agent", "agentbench_agent", "builtin", "core-bench"),
        "agent_command": ("--bench-set agent_command", "agentbench_agent_command", None, "core-bench"),
    }
    assert [o.negative_flag for o in CORE_BENCH_OPTIONS if o.negatable] == ["--no-bench-hints"]


def test_configure_gives_the_effective_settings(tmp_path):
    opts = corebench_options(
        DATA, tmp_path, ini={"agent_steps": "7", "hints": "false", "agent_tokens": "1000"}, cli={"agent_time": "60"}
    )
    settings = benchmark.configure(opts, "train")
    assert settings["agent_steps"] == 7 and settings["agent_time"] == 60.0 and settings["agent_tokens"] == 1000
    assert settings["hints"] is False and settings["env"] == "host"
    assert settings["capsule_url"] == "https://corebench.cs.princeton.edu/capsules"
    json.dumps(settings)  # goes into summary.json


@pytest.mark.parametrize(
    "cli, ini, message",
    [
        ({"agent_steps": "zero"}, {}, "--bench-set agent_steps must be a positive integer, got 'zero'"),
        ({"agent_steps": "0"}, {}, "--bench-set agent_steps must be a positive integer, got '0'"),
        ({}, {"agent_time": "-5"}, "ini agentbench_agent_time must be a positive number, got '-5'"),
        ({"agent_command_timeout": "nan"}, {}, "--bench-set agent_command_timeout"),
        ({"difficulty": "extreme"}, {}, "valid values: easy, medium, hard"),
    ],
)
def test_bad_values_name_their_source(tmp_path, cli, ini, message):
    with pytest.raises(OptionError, match=message.replace("(", r"\(")):
        corebench_options(DATA, tmp_path, cli=cli, ini=ini)


# --------------------------------------------------------------------------- the solver is chosen once


class Client:
    def complete(self, messages, **kwargs):
        raise AssertionError("not called here")


class Factory:
    kind = "host"
    keep_workspaces = True

    def start(self, workspace, **kwargs):
        raise AssertionError("not called here")


def test_choose_solver():
    assert isinstance(choose_solver(SimpleNamespace(is_oracle=True, complete=print), None), run.OracleSolver)
    own = SimpleNamespace(run_agent=lambda **kw: None, complete=print)
    assert isinstance(choose_solver(own, None), run.ClientSolver)
    agent = choose_solver(Client(), Factory())
    assert isinstance(agent, run.AgentSolver) and agent.kind == "host" and agent.keep_workspaces is True
    assert choose_solver(Client(), None).message == "the bench_env fixture gave no environment factory with start()"
    assert choose_solver(SimpleNamespace(name="gpt-x"), None).message == "model gpt-x has no CORE-Bench agent yet"


# --------------------------------------------------------------------------- score_report on the real tasks


@pytest.fixture(scope="module")
def train():
    return dataset.load_split(DATA, "train")


def test_the_first_reference_run_scores_correct_on_every_train_capsule(train):
    for task in train:
        score = score_report(task["results"], task["results"][0])
        assert score.all_correct, task["capsule_id"]
        assert (score.total_written, score.total_figure) == question_totals(task["results"])
        assert [v.question for v in score.verdicts] == list(task["results"][0])


def test_an_empty_report_scores_nothing_on_every_train_capsule(train):
    for task in train:
        score = score_report(task["results"], {})
        assert not score.all_correct and score.correct_written == score.correct_figure == 0
        assert all(v.note == "missing" and not v.answered for v in score.verdicts)


def test_record_of_a_score_is_json(train):
    task = train[0]
    question = next(iter(task["results"][0]))
    record = score_report(task["results"], {question: "not a number"}).to_record()
    assert json.loads(json.dumps(record)) == record
    assert record["questions"][0]["question"] == question


# --------------------------------------------------------------------------- no pytest anywhere


def test_score_and_run_one_capsule_from_plain_python(tmp_path):
    """What a notebook does: import the package, score a report, run the oracle on one capsule; pytest is
    never imported."""
    host_network_ready()  # (the script's own configure would refuse a host run without slirp4netns)
    script = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        sys.path.insert(0, {str(REPO / "tests")!r})
        from helpers.capsule_factory import build_capsule_archive, corebench_options
        from pytest_agentbench.benchmarks.corebench import CoreBenchRun, benchmark, choose_solver, score_report
        from pytest_agentbench.benchmarks.corebench import dataset

        data, tmp = Path({str(DATA)!r}), Path({str(tmp_path)!r})
        task = next(t for t in dataset.load_split(data, "train") if t["capsule_id"] == "capsule-7038571")
        assert score_report(task["results"], task["results"][0]).all_correct
        build_capsule_archive(tmp / "staged", "capsule-7038571")
        opts = corebench_options(data, tmp / "cache", cli={{"capsules_dir": str(tmp / "staged")}})
        settings = benchmark.configure(opts, "train")
        sample = next(t.samples[0] for t in benchmark.load_tasks(opts, "train") if t.id == "capsule-7038571")
        oracle = type("Oracle", (), {{"is_oracle": True}})()
        run = CoreBenchRun(settings, choose_solver(oracle, None), data_dir=data, cache_dir=tmp / "cache")
        record = run.run_sample(sample)
        print(json.dumps({{"status": record["status"], "pytest": "pytest" in sys.modules}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == {"status": "pass", "pytest": False}
