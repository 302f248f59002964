"""One gate for text a model or an agent chose: every sink gets the same hostile corpus and shows it inert.

The sinks are run for real: pytest's terminal (the failure line, the warnings summary, the plugin's report),
summary.md and ``$GITHUB_STEP_SUMMARY``, JUnit XML and the ``compare`` command's output, after CORE-Bench runs
of a scripted agent on a synthetic capsule and a SciCode run of a scripted model. Nothing that comes out may
hold a raw control character, a line or paragraph separator or a bidi control, and no Markdown structure the
run did not write (a heading, a bullet, a table cell) may appear. The two attacks that worked before: a
workspace path of terminal control sequences in pytest's warnings summary (erasing the line and drawing a green
"PASSED ... (all answers correct)" with an OSC 8 hyperlink), and an answer whose carriage returns forged a
"capsule ...: pass" heading and a "capsules correct: 1/1 (100.0%)" bullet in summary.md while the result was 0/1.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

# imported before any in-process pytester run (numpy cannot be imported twice in one process)
from pytest_agentbench.benchmarks.corebench import dataset  # noqa: F401
from pytest_agentbench.core.text import printable

from helpers.bench_runs import SHARED_DATA
from helpers.capsule_factory import build_capsule_archive

CAPSULE = "capsule-7038571"
ESC, BEL = "\x1b", "\x07"
ERASE_AND_PAINT = f"{ESC}[2K\r{ESC}[1A{ESC}[32mPASSED core-bench::{CAPSULE} (all answers correct){ESC}[0m"
HYPERLINK = f"{ESC}]8;;https:evil.example{BEL}click{ESC}]8;;{BEL}"
FORGED_HEADING = f"### {CAPSULE}: pass"
FORGED_BULLET = "- capsules correct: 1/1 (100.0%)"
CORPUS = (
    f"0{ERASE_AND_PAINT}{HYPERLINK}\r{FORGED_HEADING}\r{FORGED_BULLET}\u2028{FORGED_HEADING}\u2029{FORGED_BULLET}"
    f"\x00nul \u202eesrever\u202c \x85c1 \n# heading\n| a | b |\n- bullet\n`code` <b>bold</b> [l](http://x) "
    + "long " * 400
    + "[" * 50
    + "]" * 50
)
# what must never come out raw: C0 controls but tab and newline, DEL, C1, the separators, the bidi controls
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# how a Markdown renderer splits lines: GitHub takes a carriage return and the Unicode separators as line ends
LINES = re.compile("\r\n|[\n\r\u2028\u2029\x85]")


def assert_inert(text: str, where: str) -> None:
    found = RAW.search(text)
    if found is not None:
        near = text[max(found.start() - 80, 0) :][:160]
        pytest.fail(f"{where}: raw U+{ord(found.group()):04X} at {found.start()}: {near!r}")


def rendered_lines(markdown: str) -> list[str]:
    return LINES.split(markdown)


def assert_no_forged_markdown(markdown: str, where: str) -> None:
    """No heading or bullet the run did not write, every table row as many cells as its header."""
    assert_inert(markdown, where)
    lines = rendered_lines(markdown)
    assert not [line for line in lines if line.startswith(FORGED_HEADING)], where
    assert not [line for line in lines if line.lstrip().startswith(FORGED_BULLET)], where
    assert not [line for line in lines if line.strip() in ("# heading", "- bullet", "| a | b |")], where
    columns = None
    for line in lines:
        if not line.startswith("|"):
            columns = None
            continue
        cells = len(re.findall(r"(?<!\\)\|", line))
        if columns is None:
            columns = cells
        assert cells == columns, f"{where}: a table row with {cells} pipes under a header of {columns}: {line[:200]!r}"


# ---- the gate itself ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", [{}, {"one_line": True}, {"markdown": True}], ids=["text", "one-line", "markdown"])
def test_the_gate_leaves_nothing_raw(mode):
    shown = printable(CORPUS, **mode)
    assert_inert(shown, "printable")
    assert "\\x1b" in shown and "\\x0d" in shown and "\\u2028" in shown and "\\u202e" in shown  # visible
    if mode:
        assert "\n" not in shown
    if mode.get("markdown"):
        assert_no_forged_markdown(f"| {shown} |", "markdown cell")
        assert_no_forged_markdown(f"- {shown}", "markdown bullet")
        assert printable("# x", markdown=True) == "\\# x" and printable("1. x", markdown=True) == "1\\. x"
        assert printable("0.93", markdown=True) == "0.93"  # an answer reads as itself


def test_the_gate_cuts_long_text_and_keeps_ordinary_text():
    assert printable("x" * 100, limit=10) == "x" * 9 + "…"
    text = "assert np.allclose(x, y)\n\tAssertionError: 1 ≠ 2 — ünïcode ok"
    assert printable(text) == text


def test_the_stop_after_model_errors_quotes_the_last_message_inert():
    """The reason a run stops on model errors in a row quotes the last one: pytest prints it ("Interrupted:"), the
    plugin's report and summary.md's notes repeat it."""
    from pytest_agentbench.pytest_plugin.run import Streak

    stop = Streak(limit=1).add({"status": "model_error", "message": CORPUS})
    assert stop is not None and "model errors in a row" in stop
    assert_inert(stop, "the stop reason")
    assert "\n" not in stop


# ---- CORE-Bench: a scripted agent on a synthetic capsule ---------------------------------------------------
def questions() -> dict:
    task = next(t for t in dataset.load_split(SHARED_DATA, "train") if t["capsule_id"] == CAPSULE)
    return task["results"][0]


# a folder name: no "/" and no NUL, at most 255 bytes
HOSTILE_DIR = f"{ERASE_AND_PAINT}{HYPERLINK}\u202e\r{FORGED_BULLET.replace('/', ' of ')}"


def script_path_attack(server) -> list[str]:
    """A report.json the scorer refuses, in a folder named with control sequences: the warning names its path.
    The agent's one step ends it unsubmitted (the root's report.json, which submit writes, would win)."""
    make = f"mkdir -- '{HOSTILE_DIR}' && printf 'not json' > '{HOSTILE_DIR}/report.json'"
    server.reply(tool_calls=[("bash", {"command": make})])
    return ["--bench-set=agent_steps=1"]


def script_answer_attack(server) -> list[str]:
    """Every answer the hostile corpus (so every answer is wrong: the real result is 0/1)."""
    server.reply(tool_calls=[("submit", {"answers": dict.fromkeys(questions(), CORPUS)})])
    return []


def run_corebench(pytester, tmp_path, server, monkeypatch, run_id: str, *extra: str):
    staged = tmp_path / "staged"
    build_capsule_archive(staged, CAPSULE)
    step_summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(SHARED_DATA))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    junit = tmp_path / "junit.xml"
    result = pytester.runpytest_subprocess(
        "--bench=core-bench",
        "--bench-split=train",
        f"--bench-ids={CAPSULE}",
        "--model=agent-model",
        f"--model-base-url={server.base_url}",
        "--model-api-key=x",
        "--bench-cache=off",
        "--bench-env=host",
        f"--bench-capsules-dir={staged}",
        f"--bench-report-dir={tmp_path / 'reports'}",
        f"--bench-run-id={run_id}",
        f"--junitxml={junit}",
        "-rA",
        "-p",
        "no:cacheprovider",
        *extra,
    )
    run_dir = tmp_path / "reports" / "core-bench" / "agent-model" / run_id
    return result, run_dir, step_summary, junit


def assert_every_sink_inert(result, run_dir: Path, step_summary: Path, junit: Path) -> dict:
    terminal = result.stdout.str() + result.stderr.str()
    assert_inert(terminal, "terminal")
    assert "PASSED core-bench" not in terminal.replace("\\x1b[32mPASSED core-bench", "")  # only as visible escapes
    assert_no_forged_markdown((run_dir / "summary.md").read_text(encoding="utf-8"), "summary.md")
    assert_no_forged_markdown(step_summary.read_text(encoding="utf-8"), "$GITHUB_STEP_SUMMARY")
    assert_inert(junit.read_text(encoding="utf-8"), "junit xml")
    [record] = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().split("\n") if line]
    return record


@pytest.mark.e2e
@pytest.mark.slow
def test_a_workspace_path_of_control_sequences_reaches_the_terminal_inert(pytester, tmp_path, server, monkeypatch):
    extra = script_path_attack(server)
    result, run_dir, step_summary, junit = run_corebench(pytester, tmp_path, server, monkeypatch, "path", *extra)
    record = assert_every_sink_inert(result, run_dir, step_summary, junit)
    assert record["status"] == "fail" and record["report_status"] == "invalid"
    terminal = result.stdout.str()
    assert "AgentbenchWarning" in terminal and "report.json is not valid JSON" in terminal  # the warning is shown ...
    assert "\\x1b[2K\\x0d\\x1b[1A\\x1b[32mPASSED" in terminal  # ... with its control sequences visible
    assert "\\x1b]8;;https:evil.example\\x07" in terminal


@pytest.mark.e2e
@pytest.mark.slow
def test_an_answer_of_carriage_returns_forges_no_summary_line(pytester, tmp_path, server, monkeypatch):
    script_answer_attack(server)
    result, run_dir, step_summary, junit = run_corebench(pytester, tmp_path, server, monkeypatch, "answer")
    record = assert_every_sink_inert(result, run_dir, step_summary, junit)
    assert record["status"] == "fail"
    summary = (run_dir / "summary.md").read_text(encoding="utf-8")
    assert f"### {CAPSULE}: fail" in rendered_lines(summary)
    assert "capsules correct:        0/1" in summary
    # the comparison command reads both runs' files and prints them, as text and as Markdown
    for extra in ([], ["--markdown"]):
        shown = subprocess.run(
            [sys.executable, "-m", "pytest_agentbench", "compare", str(run_dir), str(run_dir), *extra],
            capture_output=True,
            text=True,
            check=False,
        )
        assert shown.returncode in (0, 1), shown.stderr
        assert_no_forged_markdown(shown.stdout + shown.stderr, f"compare {extra}")


# ---- SciCode: a scripted model whose code raises the corpus ------------------------------------------------
TINY_STEPS = ("1.1", "1.2", "2.1", "2.2", "3.1")
GROUND_TRUTH = {
    "1.1": "def add(a, b):\n    return a + b",
    "1.2": "def twice(a):\n    return add(a, a)",
    "2.1": "def sq(a):\n    return a * a",
    "2.2": "def cube(a):\n    return a * a * a",
    "3.1": "def six():\n    return 6",
}


def step_of(body: dict) -> str:
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    asked = prompt.split("NEXT STEP", 1)[-1]
    return next(n for n, code in GROUND_TRUTH.items() if code.splitlines()[0] in asked or n in asked)


@pytest.mark.e2e
@pytest.mark.slow
def test_scicode_text_of_the_models_code_reaches_every_sink_inert(pytester, custom_scicode, tmp_path, monkeypatch):
    from helpers.fake_openai import FakeOpenAI

    raising = f"def add(a, b):\n    raise ValueError({CORPUS!r})"
    printing = (
        f"def sq(a):\n    print({CORPUS!r})\n    __import__('sys').stderr.write({CORPUS!r})\n    return a * a + 1"
    )
    replies = {"1.1": raising, "2.1": printing}

    def answer(body: dict) -> dict:
        step = step_of(body)
        return {"text": f"{CORPUS[:300]}\n```python\n{replies.get(step, GROUND_TRUTH[step])}\n```\n"}

    step_summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    junit = tmp_path / "junit.xml"
    custom_scicode.write()
    with FakeOpenAI() as server:
        for _ in range(10):
            server.reply_with(answer)
        result = custom_scicode(
            "--bench-mode=naive",
            "--bench-timeout=20",
            f"--bench-cache-dir={tmp_path / 'model-cache'}",
            f"--junitxml={junit}",
            "-rA",
            model="hostile",
            server=server,
            subprocess=True,
        )
    terminal = result.stdout.str() + result.stderr.str()
    assert_inert(terminal, "terminal")
    assert "ValueError" in terminal  # the failure is shown, inert
    [run] = [p.parent for p in pytester.path.rglob("summary.md")]
    assert_no_forged_markdown((run / "summary.md").read_text(encoding="utf-8"), "summary.md")
    assert_no_forged_markdown(step_summary.read_text(encoding="utf-8"), "$GITHUB_STEP_SUMMARY")
    assert_inert(junit.read_text(encoding="utf-8"), "junit xml")
    lines = (run / "steps.jsonl").read_text().split("\n")  # (str.splitlines would split at a U+2028 too)
    records = {r["id"]: r for r in map(json.loads, filter(None, lines))}
    assert records["1.1"]["status"] == "fail" and records["2.1"]["status"] == "fail"
