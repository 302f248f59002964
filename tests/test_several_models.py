"""Several models, one run: a run file that lists more than one model runs each of them in one session, with its
own run folder, summary and gates, and ends with one table across the models."""

from __future__ import annotations

import json
import textwrap

import pytest

from helpers.bench_runs import read_jsonl
from helpers.fake_openai import FakeOpenAI
from helpers.scicode_builders import MODEL_CONFTEST, write_dataset

# step -> (right code, wrong code) of the tiny dataset (scicode_builders)
CODE = {
    "1.1": ("def add(a, b):\n    return a + b", "def add(a, b):\n    return a - b"),
    "3.1": ("def six():\n    return 6", "def six():\n    return 7"),
}


def answering(right: bool):
    """A scripted reply that answers whichever step the request asks for (right or wrong code)."""

    def make(body: dict) -> dict:
        prompt = json.dumps(body.get("messages", ""))
        step = next((s for s in CODE if f"step {s}" in prompt), "3.1")
        return {"text": f"```python\n{CODE[step][0 if right else 1]}\n```"}

    return make


def serving(server: FakeOpenAI, right: bool, replies: int = 8) -> FakeOpenAI:
    for _ in range(replies):
        server.reply_with(answering(right))
    return server


@pytest.fixture
def two_models(pytester, shared_data, monkeypatch):
    """The tiny dataset and a run file of two models, each on its own local endpoint (the right one, the wrong one),
    each with its key in its own variable; yields (run file, right server, wrong server)."""
    monkeypatch.delenv("AGENTBENCH_DATA_DIR", raising=False)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTBENCH_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGENTBENCH_OFFLINE", "1")
    monkeypatch.setenv("RIGHT_KEY", "sk-right")
    monkeypatch.setenv("WRONG_KEY", "sk-wrong")
    data, h5 = write_dataset(pytester.path, shared_data)
    with FakeOpenAI() as right, FakeOpenAI() as wrong:
        right.api_key, wrong.api_key = "sk-right", "sk-wrong"  # each endpoint accepts only its model's key
        path = pytester.path / "agentbench.yaml"
        path.write_text(
            textwrap.dedent(f"""
            bench: {{bench: scicode, split: validation, data_dir: {data.name}, h5: {h5.name},
                    allow_custom_data: true, mode: naive, ids: ["1.1", "3.1"]}}
            models:
              - name: righty
                base_url: {right.base_url}
                api_key_env: RIGHT_KEY
                params: {{temperature: 0}}
              - name: wrongy
                base_url: {wrong.base_url}
                api_key_env: WRONG_KEY
                params: {{temperature: 0.5}}
            gates:
              fail_under: ["subproblem=50%"]
            """).lstrip()
        )
        yield path, serving(right, True), serving(wrong, False)


def run(pytester, shared_cache, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "-p",
        "no:cacheprovider",
        f"--bench-cache-dir={shared_cache}",
        "--bench-config=agentbench.yaml",
        "--bench-run-id=both",
        *args,
    )


def completions(server: FakeOpenAI) -> list[dict]:
    return [r for r in server.requests if r["path"].endswith("/chat/completions") and r not in server.preflights]


@pytest.mark.e2e
@pytest.mark.slow
def test_two_models_get_their_own_runs_a_table_across_them_and_their_own_gates(pytester, shared_cache, two_models):
    _, right, wrong = two_models
    listed = run(pytester, shared_cache, "--collect-only", "-q")
    assert listed.ret == 0, listed.stdout.str()
    ids = [line for line in listed.stdout.lines if line.startswith("scicode/")]
    assert ids == [
        "scicode/1::1.1[righty]",
        "scicode/1::1.1[wrongy]",
        "scicode/3::3.1[righty]",
        "scicode/3::3.1[wrongy]",
    ]

    result = run(pytester, shared_cache)
    out = result.stdout.str()
    assert result.ret == 1, out  # the wrong model's gate fails the run
    assert "agentbench gates FAILED for model(s): wrongy" in out
    reports = pytester.path / "reports" / "scicode"
    for model, status, temperature, key in (("righty", "pass", 0, "sk-right"), ("wrongy", "fail", 0.5, "sk-wrong")):
        folder = reports / model / "both"
        records = read_jsonl(folder / "steps.jsonl")
        assert {r["id"]: r["status"] for r in records} == {"1.1": status, "3.1": status}
        assert {r["model"] for r in records} == {model}
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["settings"]["model"] == model and summary["gates_passed"] is (model == "righty")
        assert (folder / "report.html").is_file() and (folder / "summary.md").is_file()
        stored = json.loads((folder / "settings.json").read_text())["_run"]
        assert stored["options"]["model"] == model  # --bench-resume of this folder is this model's run
        server = right if model == "righty" else wrong
        asked = completions(server)
        assert len(asked) == 2 and all(r["body"]["temperature"] == temperature for r in asked)  # its own params
        assert all(r["headers"]["authorization"] == f"Bearer {key}" for r in asked)  # its own key
    table = out[out.index("2 models compared") :]
    assert "righty" in table and "wrongy" in table and "tokens" in table and "cost" in table
    assert "subproblem" in table and "95% CI" in table
    compared = reports / "_models" / "both"
    markdown = (compared / "summary.md").read_text()
    assert "| righty | 100.0% (2/2, 95% CI" in markdown and "| wrongy | 0.0% (0/2, 95% CI" in markdown
    assert "| FAILED |" in markdown and "| — |" in markdown  # no price: no cost
    page = (compared / "report.html").read_text()
    assert 'href="../../righty/both/report.html"' in page and "wrongy" in page
    # the later model compared with the first as two runs are: deltas, McNemar, flipped items linking both pages
    pairwise = page[page.index('id="compared-wrongy"') :]
    assert "wrongy compared with righty" in pairwise and "-100.0 pp" in pairwise and "McNemar p" in pairwise
    flipped = pairwise[pairwise.index('data-id="1.1"') : pairwise.index("</tr>", pairwise.index('data-id="1.1"'))]
    assert "pass -&gt; fail" in flipped  # escaped, as every value on the page
    assert 'href="../../righty/both/report.html#item-1.1"' in flipped
    assert 'href="../../wrongy/both/report.html#item-1.1"' in flipped
    assert "## wrongy compared with righty" in markdown and "flipped items (2):" in markdown

    # --bench-resume takes one model's run folder: that model's run, with its entry of the run file
    resumed = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        f"--bench-cache-dir={shared_cache}",
        "--bench-config=agentbench.yaml",
        f"--bench-resume={reports / 'wrongy' / 'both'}",
    )
    text = resumed.stdout.str()
    assert resumed.ret == 1, text  # its gate still fails; its finished records are reused
    assert "model wrongy" in text and "model righty" not in text and "models compared" not in text
    assert len(completions(wrong)) == 2 and len(completions(right)) == 2  # nothing asked again


@pytest.mark.e2e
@pytest.mark.slow
def test_k_selects_a_model_by_its_name(pytester, shared_cache, two_models):
    _, right, wrong = two_models
    result = run(pytester, shared_cache, "-k", "righty and 3.1")
    assert result.ret == 0, result.stdout.str()  # only the right model ran: its gate passes, the other's is not judged
    reports = pytester.path / "reports" / "scicode"
    assert [r["id"] for r in read_jsonl(reports / "righty" / "both" / "steps.jsonl")] == ["3.1"]
    assert not (reports / "wrongy" / "both").exists()
    assert completions(wrong) == [] and len(completions(right)) == 1
    # the resume command of that model's folder keeps the -k: a run of one model matches its name too
    resumed = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        f"--bench-cache-dir={shared_cache}",
        "--bench-config=agentbench.yaml",
        "-k",
        "righty and 3.1",
        f"--bench-resume={reports / 'righty' / 'both'}",
    )
    assert resumed.ret == 0, resumed.stdout.str()
    resumed.assert_outcomes(passed=1)
    assert len(completions(right)) == 1  # reused, not asked again


@pytest.mark.e2e
def test_a_conftest_bench_model_with_several_models_is_a_usage_error(pytester, shared_cache, two_models):
    pytester.makeconftest(MODEL_CONFTEST)
    result = run(pytester, shared_cache, "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "overrides the bench_model fixture" in err and "2 models (righty, wrongy)" in err, err


@pytest.mark.e2e
@pytest.mark.slow
def test_several_models_under_xdist_collect_the_same_ids_and_write_both_runs(pytester, shared_cache, two_models):
    result = run(pytester, shared_cache, "-n", "2", "-k", "3.1")
    assert result.ret == 1, result.stdout.str()
    reports = pytester.path / "reports" / "scicode"
    for model, status in (("righty", "pass"), ("wrongy", "fail")):
        records = read_jsonl(reports / model / "both" / "steps.jsonl")
        assert [(r["id"], r["status"]) for r in records] == [("3.1", status)]
        assert records[0]["worker"].startswith("gw")
    assert (reports / "_models" / "both" / "summary.md").is_file()


def test_the_table_shows_cost_when_a_summary_has_it_and_a_dash_otherwise():
    from pytest_agentbench.report.comparison.models import model_row, render_markdown, render_text

    records = [{"id": "1.1", "task": "1", "status": "pass"}, {"id": "1.2", "task": "1", "status": "fail"}]
    base = {
        "settings": {"benchmark": "scicode"},
        "metrics": {"subproblem": 0.5, "main": 0.0},
        "gate_metrics": {"subproblem": "subproblem", "main": "main"},
        "headlines": {"subproblem": "item"},
        "counts": {"pass": 1, "fail": 1},
        "usage": {"tokens": 30, "prompt_tokens": 20, "completion_tokens": 10},
    }
    priced = model_row("priced", {**base, "cost": {"total_usd": 0.01234}, "gates_passed": False}, records, "r/p")
    unpriced = model_row("free", base, records, "r/f")
    lines = render_text([priced, unpriced])
    assert lines[0].split() == ["model", "subproblem", "items", "tokens", "cost", "gates"]
    assert "$0.0123" in lines[2] and "FAILED" in lines[2] and "50.0% (1/2, 95% CI" in lines[2]
    assert lines[3].split()[-2:] == ["—", "—"]  # no cost, no gate
    markdown = render_markdown([priced, unpriced])
    assert (
        "| priced | 50.0% (1/2, 95% CI 9.5%–90.5%) | 1 pass, 1 fail | 30 (20 in, 10 out) | $0.0123 | FAILED |"
        in markdown
    )
