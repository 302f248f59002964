"""summary.md and summary.png: one usage line, data hashes as a table, one status format for both benchmarks,
a legend beside the bars, a visible baseline marker, a GitHub step summary without local image paths."""

from __future__ import annotations

import re

from pytest_agentbench.benchmarks.registry import get_benchmark
from pytest_agentbench.report.picture import figure
from pytest_agentbench.report.summary import Verdict, build_summary, render_markdown, write_reports

STATUS_FORMAT = re.compile(r"^\d+ [a-z_]+(, \d+ [a-z_]+)*$")


def scicode_records(statuses: dict[str, str], replay: bool = False) -> list[dict]:
    out = []
    for sid, status in statuses.items():
        generation = {
            "status": "ok",
            "model_calls": 2,
            "cache_hits": 2 if replay else 0,
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "tool_calls": 1,
        }
        out.append(
            {
                "benchmark": "scicode",
                "task": sid.split(".")[0],
                "id": sid,
                "split": "validation",
                "scored": True,
                "status": status,
                "message": "",
                "generation": generation,
            }
        )
    return out


SETTINGS = {
    "benchmark": "scicode",
    "split": "validation",
    "model": "m|x",
    "run_id": "r1",
    "data_hashes": {"problems": "a" * 64, "targets": "b" * 64},
}


def test_summary_md_usage_hashes_and_statuses():
    records = scicode_records({"1.1": "pass", "1.2": "fail", "2.1": "pass"}, replay=True)
    summary = build_summary(records, get_benchmark("scicode"), SETTINGS)
    md = render_markdown(summary, Verdict(exit_before=1, exit_code=1))
    usage = [line for line in md.splitlines() if "usage" in line.lower() or "model calls" in line]
    # one usage line; a replay made no model call, every answer came from the cache
    assert usage == ["Usage: 0 model calls, 45 tokens, 6 cache hits, 3 tool calls"], usage
    assert "| file | sha256 |" in md and f"| problems | `{'a' * 64}` |" in md
    assert "data_hashes" not in md
    assert "| model | m\\|x |" in md  # a pipe in a value does not break the settings table
    statuses = [line.split(":", 1)[1].strip() for line in md.splitlines() if line.lower().startswith("statuses:")]
    assert statuses == ["2 pass, 1 fail"]


def test_both_benchmarks_count_statuses_alike():
    core = get_benchmark("core-bench")
    records = [
        {
            "benchmark": "core-bench",
            "task": c,
            "id": c,
            "split": "test",
            "scored": True,
            "status": s,
            "message": "",
            "total_written": 1,
            "correct_written": int(s == "pass"),
        }
        for c, s in (("c1", "pass"), ("c2", "fail"), ("c3", "fail"))
    ]
    lines = core.summarize(records, {"split": "test", "difficulty": "easy"})["terminal"]
    core_statuses = [line.split(":", 1)[1].strip() for line in lines if line.startswith("statuses:")]
    sci = get_benchmark("scicode").summarize(
        scicode_records({"1.1": "pass", "1.2": "fail", "2.1": "fail"}), {"split": "validation"}
    )
    sci_statuses = [line.split(":", 1)[1].strip() for line in sci["terminal"] if "statuses:" in line]
    assert core_statuses == ["1 pass, 2 fail"] and sci_statuses[0] == "1 pass, 2 fail"
    assert all(STATUS_FORMAT.match(s) for s in [*core_statuses, *sci_statuses])


def test_legend_beside_the_bars_and_a_visible_baseline():
    statuses = {f"{t}.{s}": ("pass" if (t + s) % 3 else "fail") for t in range(1, 9) for s in range(1, 4)}
    summary = build_summary(scicode_records(statuses), get_benchmark("scicode"), SETTINGS)
    baseline = build_summary(scicode_records({k: "pass" for k in statuses}), get_benchmark("scicode"), SETTINGS)
    fig = figure(summary, headlines={"main": "main"}, baseline=baseline)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent(renderer)
    bars = [p.get_window_extent(renderer) for p in ax.patches]
    assert bars and not any(legend.overlaps(b) for b in bars)
    assert not legend.overlaps(ax.get_window_extent(renderer))
    ticks = [line for line in ax.lines if line.get_gid() == "baseline"]
    assert len(ticks) == 8  # baseline pass share 1.0 for every task: at the right edge, still drawn
    assert all(t.get_zorder() > max(p.get_zorder() for p in ax.patches) and not t.get_clip_on() for t in ticks)
    assert "baseline pass share" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_github_step_summary_has_no_local_image_paths(tmp_path):
    records = scicode_records({"1.1": "pass", "1.2": "fail"})
    summary = build_summary(records, get_benchmark("scicode"), SETTINGS)
    step = tmp_path / "step.md"
    run_dir = tmp_path / "run"
    written = write_reports(summary, Verdict(exit_before=1, exit_code=1), run_dir, step_summary=step)
    assert written.picture is not None and "![per-task results](summary.png)" in written.markdown
    text = step.read_text()
    assert "![" not in text and str(tmp_path) not in text
    assert "summary.png" in text and "run folder r1" in text
