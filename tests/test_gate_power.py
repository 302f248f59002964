"""A max-drop gate that cannot detect what it gates fails as underpowered (with --bench-significance)."""

from __future__ import annotations

import pytest

from pytest_agentbench.report.power import detectable_drop, power_at

from scicode_builders import CLOSE, MODEL_CONFTEST, problem, step, write_dataset


def test_power_grows_with_the_drop_and_the_units():
    assert power_at(50, 0.1, 0.05, 0.05) < power_at(50, 0.1, 0.2, 0.05) < power_at(50, 0.1, 0.4, 0.05)
    assert power_at(50, 0.1, 0.2, 0.05) < power_at(338, 0.1, 0.2, 0.05)


def test_detectable_drop_is_where_power_reaches_80_percent():
    found = detectable_drop(338, 34, 0.05)
    assert found.drop is not None and 0 < found.drop < 0.2
    assert power_at(338, 0.1, found.drop, 0.05) >= 0.8 > power_at(338, 0.1, found.drop - 0.005, 0.05)
    # more noise or fewer units: a larger drop is needed; two identical runs still assume one flip
    assert detectable_drop(338, 68, 0.05).drop > found.drop < detectable_drop(50, 5, 0.05).drop
    assert detectable_drop(15, 0, 0.05).noise == pytest.approx(1 / 15)


def fifteen_problems() -> tuple[list[dict], dict[str, list]]:
    """A validation split the size of SciCode's (15 main problems), one quick step each."""
    problems = [
        problem(
            str(k),
            [step(f"{k}.1", f"def f{k}():\n    return {k}", [CLOSE.format(call=f"f{k}()")], header=f"def f{k}():")],
        )
        for k in range(1, 16)
    ]
    return problems, {f"{k}.1": [k] for k in range(1, 16)}


@pytest.mark.e2e
@pytest.mark.slow
def test_a_one_percent_gate_on_15_problems_fails_as_underpowered_and_a_generous_one_passes(
    pytester, bench, shared_data
):
    problems, targets = fifteen_problems()
    data, h5 = write_dataset(pytester.path, shared_data, targets=targets, problems=problems)
    pytester.makeconftest(MODEL_CONFTEST)
    baseline = pytester.path / "baseline"
    run = (
        "--bench=scicode",
        "--bench-split=validation",
        "--model=mutant",
        f"--bench-data-dir={data}",
        f"--bench-h5={h5}",
        "--bench-allow-custom-data",
        f"--bench-baseline={baseline}",
    )
    first = bench(*run, "--bench-update-baseline")
    assert first.ret == 0, first.stdout.str()[-2000:]
    strict = bench(*run, "--bench-max-drop=main=1%", "--bench-significance=0.05")
    out = strict.stdout.str()
    assert strict.ret == pytest.ExitCode.TESTS_FAILED, out[-2000:]
    assert "FAIL --bench-max-drop main=1%: underpowered: main 100.0% -> 100.0%" in out
    assert "smallest drop detectable with 80% power at 0.05 over 15 tasks" in out and "> the limit" in out
    allowed = bench(*run, "--bench-max-drop=main=1%", "--bench-significance=0.05", "--bench-allow-underpowered")
    assert allowed.ret == pytest.ExitCode.OK
    assert "underpowered, allowed by --bench-allow-underpowered" in allowed.stdout.str()
    # 15 problems detect a drop of 47.5 points at 0.1 (54.5 at 0.05): a 50-point gate is within reach
    generous = bench(*run, "--bench-max-drop=main=50%", "--bench-significance=0.1")
    assert generous.ret == pytest.ExitCode.OK, generous.stdout.str()[-2000:]
    assert "PASS --bench-max-drop main=50%" in generous.stdout.str()
    assert "over 15 tasks (assuming 6.7% of them flip by chance): 47.5 pp" in generous.stdout.str()
