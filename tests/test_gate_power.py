"""A max-drop gate with --bench-set significance: a significant drop fails as such, a drop it cannot tell from noise
fails as underpowered when the test could not see its limit, a run without a drop holds (with a power note)."""

from __future__ import annotations

import pytest

from pytest_agentbench.report.power import detectable_drop, power_at

from helpers.scicode_builders import MODEL_CONFTEST, CustomScicode, numbered_problems


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
    return numbered_problems(range(1, 16))


def validation_runs(pytester, bench, shared_data, monkeypatch):
    """A baseline of the 15 problems all solved, and ``run(*gates, broken=STEPS)`` against it."""
    problems, targets = fifteen_problems()
    custom = CustomScicode(pytester, bench, shared_data)
    custom.write(problems, targets)
    pytester.makeconftest(MODEL_CONFTEST)
    common = custom.args(f"--bench-baseline={pytester.path / 'baseline'}")
    monkeypatch.setenv("BREAK_STEPS", "")
    first = bench(*common, "--bench-update-baseline")
    assert first.ret == 0, first.stdout.str()[-2000:]

    def run(*gates: str, broken: str = "") -> pytest.RunResult:
        monkeypatch.setenv("BREAK_STEPS", broken)
        return bench(*common, *gates)

    return run


# the README's CI gates, as written there
README_GATES = (
    "--bench-max-drop=subproblem=10%",
    "--bench-set=significance=0.05",
    "--bench-fail-under=subproblem=0.30",
    "--bench-max-errors=0",
)


@pytest.mark.e2e
@pytest.mark.slow
def test_a_run_identical_to_its_baseline_holds_with_a_power_note(pytester, bench, shared_data, monkeypatch):
    run = validation_runs(pytester, bench, shared_data, monkeypatch)
    same = run(*README_GATES)
    out = same.stdout.str()
    assert same.ret == pytest.ExitCode.OK, out[-2000:]
    assert "PASS --bench-max-drop subproblem=10%: subproblem 100.0% -> 100.0% (drop 0.0 pp" in out
    assert "note: this gate cannot see a drop as small as its limit" in out and "over 15 items" in out
    assert "select more items (the whole split) or add --bench-attempts" in out
    strict = run("--bench-max-drop=main=1%", "--bench-set=significance=0.05")
    assert strict.ret == pytest.ExitCode.OK, strict.stdout.str()[-2000:]
    assert "over 15 tasks (assuming 6.7% of them flip by chance): 54.5 pp > the limit" in strict.stdout.str()
    # 15 problems detect a drop of 47.5 points at 0.1 (54.5 at 0.05): a 50-point gate is within reach, no note
    generous = run("--bench-max-drop=main=50%", "--bench-set=significance=0.1")
    assert generous.ret == pytest.ExitCode.OK, generous.stdout.str()[-2000:]
    assert (
        "PASS --bench-max-drop main=50%: main 100.0% -> 100.0% (drop 0.0 pp, limit 50.0 pp); smallest drop "
        "detectable with 80% power at 0.1 over 15 tasks (assuming 6.7% of them flip by chance): 47.5 pp\n"
    ) in generous.stdout.str()


@pytest.mark.e2e
@pytest.mark.slow
def test_a_real_regression_fails_as_significant_and_a_noisy_one_as_underpowered(
    pytester, bench, shared_data, monkeypatch
):
    run = validation_runs(pytester, bench, shared_data, monkeypatch)
    # 13 of 15 problems lost, none gained: exact McNemar p = 2 / 2**13 = 0.000244
    lost = run(*README_GATES[:2], broken=",".join(f"{k}.1" for k in range(1, 14)))
    out = lost.stdout.str()
    assert lost.ret == pytest.ExitCode.TESTS_FAILED, out[-2000:]
    assert "FAIL --bench-max-drop subproblem=10%: significant drop: subproblem 100.0% -> 13.3%" in out
    assert "significant (McNemar over items p = 0.000244 < 0.05)" in out
    assert "underpowered:" not in out and "note:" not in out.split("agentbench gates")[-1]
    # 3 of 15 lost (20 points, p = 0.25): beyond the limit, but this test cannot see 10 points
    noisy = run(*README_GATES[:2], broken="1.1,2.1,3.1")
    out = noisy.stdout.str()
    assert noisy.ret == pytest.ExitCode.TESTS_FAILED, out[-2000:]
    assert "FAIL --bench-max-drop subproblem=10%: underpowered: subproblem 100.0% -> 80.0%" in out
    assert "not significant (McNemar over items p = 0.25), but this gate cannot see a drop as small" in out
    allowed = run(*README_GATES[:2], "--bench-set=allow_underpowered=true", broken="1.1,2.1,3.1")
    assert allowed.ret == pytest.ExitCode.OK, allowed.stdout.str()[-2000:]
    assert "(underpowered, allowed by --bench-set=allow_underpowered=true); not significant" in allowed.stdout.str()
