"""The run modes of a benchmark session come from one table (pytest_plugin/modes.py): each way a process takes part
in a run picks one row, and the combinations that cannot run are refused with a usage error naming the fix."""

from __future__ import annotations

import textwrap

import pytest

from pytest_agentbench.pytest_plugin.distribution.handshake import Role
from pytest_agentbench.pytest_plugin.modes import MODES, Situation, run_mode

ALONE, CONTROLLER, WORKER = Role.ALONE, Role.CONTROLLER, Role.WORKER
TWO = ("a", "b")

# (role, backend, several models, run-task, collect) -> the row that runs it
CASES = [
    ((ALONE, "local", (), False, False), "alone"),
    ((ALONE, "local", TWO, False, False), "alone"),
    ((CONTROLLER, "local", (), False, False), "xdist controller"),
    ((CONTROLLER, "local", TWO, False, False), "xdist controller"),
    ((WORKER, "local", (), False, False), "xdist worker"),
    ((WORKER, "local", TWO, False, False), "xdist worker"),
    ((ALONE, "slurm", (), False, False), "Slurm"),
    ((CONTROLLER, "slurm", (), False, False), "Slurm under xdist"),
    ((ALONE, "slurm", TWO, False, False), "several models on Slurm"),
    ((ALONE, "slurm", (), True, False), "task package (run-task)"),
    ((ALONE, "local", (), True, False), "task package (run-task)"),
    ((ALONE, "slurm", (), False, True), "collect"),
    ((ALONE, "local", (), False, True), "collect"),
]


@pytest.mark.parametrize(("facts", "expected"), CASES, ids=[f"{e}: {f[0].value} {f[1]}" for f, e in CASES])
def test_each_situation_picks_its_row_of_the_table(facts, expected):
    role, backend, models, packaging, collecting = facts
    mode = run_mode(Situation(role, backend, models, packaging, collecting))
    assert mode.name == expected


def test_the_rows_say_what_each_mode_does():
    """A refused row runs nothing; a sending row (a worker, a task) writes and reports nothing itself; only the
    xdist controller drives xdist; Slurm and collect run the items with a loop of their own."""
    rows = {mode.name: mode for mode in MODES}
    assert len(rows) == len(MODES), "two rows of one name"
    assert {n for n, m in rows.items() if m.refusal is not None} == {"several models on Slurm", "Slurm under xdist"}
    assert {n for n, m in rows.items() if m.sends} == {"xdist worker", "task package (run-task)"}
    assert {n for n, m in rows.items() if m.distributes} == {"xdist controller"}
    assert {n for n, m in rows.items() if m.engine is not None} == {"Slurm", "collect"}
    assert rows["xdist worker"].checks is None
    assert MODES[-1].when(Situation(ALONE, "anything", (), False, False)), "the last row must always hold"


def test_slurm_with_xdist_is_a_usage_error_naming_the_options_to_leave_out(bench):
    done = bench("--bench=scicode", "--model=oracle", "--bench-ids=1", "--bench-backend=slurm", "-n", "2")
    assert done.ret == pytest.ExitCode.USAGE_ERROR
    assert "--bench-backend=slurm runs every task as a Slurm job: leave out -n/--dist/--tx" in done.stderr.str()


def test_slurm_with_a_run_file_of_several_models_is_a_usage_error_naming_them(bench, pytester):
    pytester.path.joinpath("agentbench.yaml").write_text(
        textwrap.dedent("""
        bench: {bench: scicode, split: validation, ids: ["1"]}
        models:
          - name: first
            base_url: http://127.0.0.1:9/v1
          - name: second
            base_url: http://127.0.0.1:9/v1
        """).lstrip()
    )
    done = bench("--bench-config=agentbench.yaml", "--bench-backend=slurm")
    assert done.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "--bench-backend=slurm runs one model per session, and the run file lists 2 models (first, second): "
        "pick one with --model=NAME" in done.stderr.str()
    )
