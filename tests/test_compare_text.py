"""What the comparison of two runs says: a warning of replayed answers only when B's answers were replayed (not
when fresh answers merely equal A's, as a deterministic model's do), a settings table whose heading never runs
into a short key, and a detectable drop never called "none up to 0 pp"."""

from __future__ import annotations

from pytest_agentbench.report.compare import compare, render_markdown, render_text, settings_lines
from pytest_agentbench.report.power import detectable_drop
from pytest_agentbench.report.summary import build_summary

from helpers.records_kit import toy_records
from toybench import Toy


def comparison_of(answers_b: str):
    settings = {"benchmark": "toy", "model": "m", "split": "dev"}
    a = build_summary(toy_records({"1.1": "pass", "2.1": "fail", "3.1": "pass"}), Toy(), {**settings, "run_id": "a"})
    b = build_summary(
        toy_records({"1.1": "pass", "2.1": "fail", "3.1": "pass"}, answers=answers_b),
        Toy(),
        {**settings, "run_id": "b"},
    )
    return compare(a.to_json(), b.to_json())


def test_fresh_answers_equal_to_the_baselines_are_no_replay():
    fresh = comparison_of("fresh")
    assert (fresh.same_responses, fresh.replayed) == (3, 0)
    text = "\n".join(render_text(fresh))
    assert "3 of 3 shared items have the same model responses in both runs; 0 of B's were replayed" in text
    assert "normal for a deterministic model" in text
    assert "replayed answers" not in text and "replayed answers" not in render_markdown(fresh)
    replayed = comparison_of("replayed")
    assert "WARNING: this comparison rests mostly on replayed answers" in "\n".join(render_text(replayed))


def test_the_settings_heading_never_runs_into_a_short_key():
    heading = settings_lines([("model", "gpt-a", "gpt-b")])[2]
    assert heading.split() == ["setting", "A", "B"], heading


def test_a_drop_no_selection_can_show_is_not_called_none_up_to_0_pp():
    every_unit_flipped = detectable_drop(4, 4, 0.05)
    assert every_unit_flipped.drop is None
    assert "up to 0 pp" not in every_unit_flipped.text(0.05)
    assert every_unit_flipped.shown == "none (every unit may flip by chance)"
    assert detectable_drop(10, 2, 0.05).shown.startswith("none up to 80 pp")
