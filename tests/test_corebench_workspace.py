"""CORE-Bench: metadata override, workspace root, preinstalled inputs, nested Docker,
GPU accounting and scoring evidence. (The scorer against upstream: test_corebench_scorer_upstream.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_agentbench.benchmarks import corebench
from pytest_agentbench.benchmarks.base import RunSpec
from pytest_agentbench.benchmarks.corebench import dataset, prepare
from pytest_agentbench.core.options import OptionError

from helpers.bench_runs import SHARED_DATA  # honours $AGENTBENCH_DATA_DIR
from helpers.capsule_factory import build_capsule_archive, corebench_options, write_capsule_tree

DATA = SHARED_DATA
CID = "capsule-7038571"


# --------------------------------------------------------------------------- 6, 7, 8, 11: one capsule in plain Python


def _run(tmp_path, sample, model, **cli):
    bench = corebench.benchmark
    opts = corebench_options(DATA, tmp_path / "cache", cli=cli)
    spec = RunSpec(
        settings={"split": sample.split, **bench.configure(opts, sample.split)},
        options=opts,
        tasks=(),
        selected=frozenset({sample.id}),
        run_dir=tmp_path / "run",
        data_dir=DATA,
        cache_dir=tmp_path / "cache",
    )
    return bench.open_run(spec, model, None).run_sample(sample)


class Oracle:
    is_oracle = True


def _sample(tmp_path, **cli):
    tasks = corebench.benchmark.load_tasks(corebench_options(DATA, tmp_path / "cache", cli=cli), "train")
    return next(t.samples[0] for t in tasks if t.id == CID)


def test_every_record_carries_its_scoring_evidence(tmp_path):
    staged = tmp_path / "capsules"
    build_capsule_archive(staged, CID)
    record = _run(tmp_path, _sample(tmp_path), Oracle(), capsules_dir=str(staged), workspace_root="/work/x")
    assert record["status"] == "pass"
    assert (record["total_written"], record["total_figure"]) == (1, 0) and len(record["questions"]) == 1
    assert record["questions"][0]["correct"] is True
    assert (record["report_status"], record["report_path"], record["submission_source"]) == (
        "found",
        "/work/x/report.json",
        "report",
    )
    assert (record["split"], record["difficulty"], record["dataset_revision"]) == (
        "train",
        "hard",
        dataset.UPSTREAM_REV,
    )


@pytest.mark.parametrize("raw, message", [("relative/path", "absolute"), ("/a/../b", "'..'"), ("/", "below /")])
def test_workspace_root_must_be_absolute_without_dotdot(tmp_path, raw, message):
    with pytest.raises(OptionError, match=message):
        corebench_options(DATA, tmp_path, cli={"workspace_root": raw})


def test_prompt_hints_name_the_workspace_root():
    task = {"task_prompt": "do it", "results": [{"q": 1}]}
    text = prepare.render_prompt(
        {"codeocean_hard": "{task_prompt} {json_fields}"}, task, "hard", True, root="/workspace/core-bench"
    )
    assert "/workspace/core-bench/report.json" in text


def test_dataset_path_replaces_the_split_and_the_report_says_so(tmp_path):
    official = dataset.load_split(DATA, "train")
    custom = tmp_path / "mine.json"
    custom.write_text(json.dumps(official[:2]))
    opts = corebench_options(DATA, tmp_path / "cache", cli={"dataset_path": str(custom)})
    settings = corebench.benchmark.configure(opts, "train")
    tasks = corebench.benchmark.load_tasks(opts, "train")
    assert [t.id for t in tasks] == [t["capsule_id"] for t in official[:2]]
    assert settings["dataset_revision"].startswith("custom:") and settings["dataset_path"] == str(custom)
    assert corebench.benchmark.data_hashes(opts, "train", settings) == {"metadata": settings["dataset_revision"]}
    summary = corebench.benchmark.summarize([], {**settings, "split": "train"})
    assert "custom metadata" in summary["terminal"][0]
    custom.write_text(json.dumps([{"capsule_id": "x"}]))
    with pytest.raises(Exception, match="mine.json"):
        corebench.benchmark.load_tasks(opts, "train")


def _preinstalled(tmp_path, **manifest):
    folder = tmp_path / "image" / "inputs"
    write_capsule_tree(folder, CID, gpu=True)
    fields = {
        "schema_version": 1,
        "task_id": CID,
        "split": "train",
        "difficulty": "hard",
        "dataset_revision": dataset.UPSTREAM_REV,
        "uses_gpu": False,
        **manifest,
    }
    (folder / "input.json").write_text(json.dumps(fields))
    return folder


def test_preinstalled_inputs_replace_the_download(tmp_path):
    folder = _preinstalled(tmp_path)
    empty = tmp_path / "no-capsules"
    empty.mkdir()
    record = _run(tmp_path, _sample(tmp_path), Oracle(), capsules_dir=str(empty), preinstalled_input_dir=str(folder))
    assert record["status"] == "pass", record["message"]
    assert record["gpu_required"] is False and "manifest wins" in record["gpu_note"]  # REPRODUCING.md said gpu


@pytest.mark.parametrize(
    "field, value",
    [
        ("task_id", "capsule-1"),
        ("split", "test"),
        ("difficulty", "easy"),
        ("dataset_revision", "abc"),
        ("schema_version", 2),
    ],
)
def test_a_manifest_that_does_not_fit_is_an_env_error_naming_the_field(tmp_path, field, value):
    folder = _preinstalled(tmp_path, **{field: value})
    record = _run(tmp_path, _sample(tmp_path), Oracle(), capsules_dir=str(tmp_path), preinstalled_input_dir=str(folder))
    assert record["status"] == "env_error" and f"{field} is {value!r}" in record["message"]


# --------------------------------------------------------------------------- 10: GPU capsules


@pytest.mark.e2e
@pytest.mark.slow
def test_local_gpu_capsules_are_marked_and_the_summary_counts_the_selection(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(DATA))
    gpu_one, cpu_one = CID, "capsule-0201225"
    staged = tmp_path / "staged"
    write_capsule_tree(staged, gpu_one, gpu=True)
    write_capsule_tree(staged, cpu_one)
    result = pytester.runpytest_subprocess(
        "--bench=core-bench",
        "--bench-split=train",
        f"--bench-ids={gpu_one},{cpu_one}",
        "--model=oracle",
        f"--bench-capsules-dir={staged}",
        f"--bench-report-dir={tmp_path / 'r'}",
        "--bench-run-id=g",
        "-m",
        "not gpu",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["*1 of 45 selected*"])


# ------------------------------------------------------------------------ 7 + 9: Docker, workspace root, nested daemon

NESTED = (
    "pwd && docker info --format 'nested-daemon {{.Driver}}' && mkdir -p /tmp/r && "
    "cp --parents /bin/dash $(ldd /bin/dash | grep -o '/[^ ]*') /tmp/r/ && "
    "tar -C /tmp/r -c . | docker import - tiny >/dev/null && "
    "docker run --rm --network none tiny /bin/dash -c 'echo hello-from-nested'"
)


@pytest.mark.docker
@pytest.mark.e2e
@pytest.mark.slow
def test_medium_capsule_reaches_a_nested_docker_daemon_at_the_workspace_root(pytester, tmp_path, monkeypatch):
    from helpers.capabilities import missing, needs
    from helpers.capsule_factory import labelled_containers
    from helpers.fake_openai import FakeOpenAI

    image = needs("docker-dind")
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(DATA))
    staged = tmp_path / "staged"
    build_capsule_archive(staged, CID)
    answers = next(t for t in dataset.load_split(DATA, "train") if t["capsule_id"] == CID)["results"][0]
    with FakeOpenAI() as server:
        server.reply(tool_calls=[("bash", {"command": NESTED, "timeout": 300})])
        server.reply(tool_calls=[("submit", {"answers": answers})])
        pytester.runpytest_subprocess(
            "--bench=core-bench",
            "--bench-split=train",
            f"--bench-ids={CID}",
            "--model=agent-model",
            f"--model-base-url={server.base_url}",
            "--model-api-key=x",
            "--bench-cache=off",
            "--bench-difficulty=medium",
            f"--bench-capsules-dir={staged}",
            "--bench-env=docker",
            f"--bench-set=docker_image={image}",
            "--bench-set=docker_network=none",
            "--bench-set=docker_dind=true",
            "--bench-set=workspace_root=/workspace/core-bench",
            f"--bench-report-dir={tmp_path / 'r'}",
            "--bench-run-id=dind",
            "-p",
            "no:cacheprovider",
        )
        tools = [m["content"] for r in server.requests for m in r["body"].get("messages", []) if m["role"] == "tool"]
    record = json.loads((tmp_path / "r" / "core-bench" / "agent-model" / "dind" / "records.jsonl").read_text())
    assert record["isolation"] == "none (privileged)"
    assert not labelled_containers()
    if record["status"] == "env_error":
        assert "refused a privileged container" in record["message"], record["message"]
        missing(
            "docker-dind", f"this engine refuses privileged containers (reported clearly): {record['message'][:300]}"
        )
    assert record["status"] == "pass", record["message"]
    assert record["report_path"] == "/workspace/core-bench/report.json"
    assert "/workspace/core-bench" in tools[0] and "nested-daemon vfs" in tools[0] and "hello-from-nested" in tools[0]


@pytest.mark.docker
@pytest.mark.e2e
@pytest.mark.slow
def test_preinstalled_capsule_in_the_image_runs_at_a_custom_workspace_root(pytester, tmp_path, monkeypatch):
    """Done-when: a train capsule under Docker with --bench-set workspace_root /workspace/core-bench; its inputs
    are preinstalled in the image (nothing downloaded or uploaded)."""
    from helpers.capabilities import needs
    from helpers.capsule_factory import image_with_inputs, labelled_containers
    from helpers.fake_openai import FakeOpenAI

    base = needs("docker")
    inputs = tmp_path / "inputs"
    write_capsule_tree(inputs, CID)
    (inputs / "input.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "task_id": CID,
                "split": "train",
                "difficulty": "hard",
                "dataset_revision": dataset.UPSTREAM_REV,
                "uses_gpu": False,
            }
        )
    )
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(DATA))
    empty = tmp_path / "no-capsules"
    empty.mkdir()
    answers = next(t for t in dataset.load_split(DATA, "train") if t["capsule_id"] == CID)["results"][0]
    with image_with_inputs(base, inputs, "agentbench-preinstalled") as image:
        with FakeOpenAI() as server:
            server.reply(tool_calls=[("bash", {"command": "pwd && ls -A"})])
            server.reply(tool_calls=[("submit", {"answers": answers})])
            pytester.runpytest_subprocess(
                "--bench=core-bench",
                "--bench-split=train",
                f"--bench-ids={CID}",
                "--model=agent-model",
                f"--model-base-url={server.base_url}",
                "--model-api-key=x",
                "--bench-cache=off",
                f"--bench-capsules-dir={empty}",
                "--bench-env=docker",
                f"--bench-set=docker_image={image}",
                "--bench-set=docker_network=none",
                "--bench-set=preinstalled_input_dir=/opt/inputs",
                "--bench-set=workspace_root=/workspace/core-bench",
                f"--bench-report-dir={tmp_path / 'r'}",
                "--bench-run-id=pre",
                "-p",
                "no:cacheprovider",
            )
            tools = [
                m["content"] for r in server.requests for m in r["body"].get("messages", []) if m["role"] == "tool"
            ]
    record = json.loads((tmp_path / "r" / "core-bench" / "agent-model" / "pre" / "records.jsonl").read_text())
    assert record["status"] == "pass", record["message"]
    assert record["report_path"] == "/workspace/core-bench/report.json" and record["gpu_required"] is False
    listing = tools[0]
    assert "/workspace/core-bench" in listing and "code" in listing and "data" in listing
    assert "REPRODUCING.md" not in listing and "environment" not in listing  # hard, applied in the container
    assert list(empty.iterdir()) == [] and not labelled_containers()


# --------------------------------------------------------------------------- 7: the host environment at the root

ROOT = "/workspace/core-bench"


def _host_agent_run(pytester, tmp_path, server, run_id, *extra):
    staged = tmp_path / "staged"
    build_capsule_archive(staged, CID)
    result = pytester.runpytest_subprocess(
        "--bench=core-bench",
        "--bench-split=train",
        f"--bench-ids={CID}",
        "--model=agent-model",
        f"--model-base-url={server.base_url}",
        "--model-api-key=x",
        "--bench-cache=off",
        f"--bench-capsules-dir={staged}",
        "--bench-env=host",
        f"--bench-set=workspace_root={ROOT}",
        f"--bench-report-dir={tmp_path / 'r'}",
        f"--bench-run-id={run_id}",
        "-p",
        "no:cacheprovider",
        *extra,
    )
    record = json.loads((tmp_path / "r" / "core-bench" / "agent-model" / run_id / "records.jsonl").read_text())
    chats = [r["body"]["messages"] for r in server.requests if r["path"].endswith("/chat/completions")]
    return result, record, chats


def _answers():
    return next(t for t in dataset.load_split(DATA, "train") if t["capsule_id"] == CID)["results"][0]


@pytest.mark.e2e
@pytest.mark.isolation
@pytest.mark.slow
def test_train_capsule_runs_on_the_host_at_a_custom_workspace_root(pytester, tmp_path, monkeypatch):
    """The host environment maps --bench-set workspace_root per item: the agent works at the root, writes
    report.json there with bash, and the record's report_path is under it."""
    from helpers.capabilities import needs
    from helpers.fake_openai import FakeOpenAI

    needs("bwrap")
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(DATA))
    write = f"pwd && ls -A && cat > {ROOT}/report.json <<'EOF'\n{json.dumps(_answers())}\nEOF"
    with FakeOpenAI() as server:
        server.reply(tool_calls=[("bash", {"command": write})])
        server.reply(tool_calls=[("bash", {"command": "ls /workspace && cat report.json"})])
        result, record, chats = _host_agent_run(pytester, tmp_path, server, "host-root", "--bench-set=agent_steps=2")
    run_dir = tmp_path / "r" / "core-bench" / "agent-model" / "host-root"
    messages = json.loads((run_dir / record["trajectory"]).read_text())["messages"]
    tools = [m["content"] for m in messages if m["role"] == "tool"]
    assert record["status"] == "pass", record["message"]
    assert record["end_reason"] == "max_steps" and record["submission_source"] == "report"
    assert (record["report_path"], record["workspace_root"], record["env"]) == (f"{ROOT}/report.json", ROOT, "host")
    assert "workspace_root_note" not in record and record["isolation"].startswith("bwrap (")
    assert f"--- stdout ---\n{ROOT}\n" in tools[0] and "code" in tools[0] and "REPRODUCING.md" not in tools[0]
    assert "--- stdout ---\ncore-bench\n{" in tools[1]  # /workspace holds only this item's folder
    assert f"({ROOT})" in chats[0][0]["content"] and f"{ROOT}/report.json" in chats[0][1]["content"]


@pytest.mark.e2e
@pytest.mark.slow
def test_without_isolation_the_host_names_the_folder_it_really_used(pytester, tmp_path, monkeypatch):
    """No sandbox, no mount namespace: the root cannot be applied, so prompt, hints, report_path and the
    header name the item's own folder instead, and the record says the root was not applied."""
    from helpers.fake_openai import FakeOpenAI

    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(DATA))
    monkeypatch.setenv("AGENTBENCH_ISOLATION", "off")
    with FakeOpenAI() as server:
        server.reply(tool_calls=[("bash", {"command": "pwd"})])
        server.reply(tool_calls=[("submit", {"answers": _answers()})])
        result, record, chats = _host_agent_run(pytester, tmp_path, server, "host-plain")
    folder = record["workdir"]
    assert record["status"] == "pass", record["message"]
    assert folder != ROOT and Path(folder).name.startswith(f"corebench-{CID}-") and not Path(folder).exists()
    assert record["report_path"] == f"{folder}/report.json" and record["workspace_root"] == ROOT
    assert record["workspace_root_note"].startswith(f"{ROOT} not applied: without isolation")
    assert f"--- stdout ---\n{folder}\n" in [m["content"] for m in chats[-1] if m["role"] == "tool"][0]
    system, prompt = chats[0][0]["content"], chats[0][1]["content"]
    assert f"({folder})" in system and f"{folder}/report.json" in prompt and ROOT not in prompt + system
    summary = json.loads((tmp_path / "r" / "core-bench" / "agent-model" / "host-plain" / "summary.json").read_text())
    assert summary["settings"]["isolation"].startswith("none (turned off")  # (the header prints the same line)
    assert f"workspace root {ROOT} not applied" in summary["settings"]["isolation"]


def test_docker_dind_needs_the_docker_environment(tmp_path):
    from pytest_agentbench.core.errors import ConfigError

    opts = corebench_options(DATA, tmp_path, cli={"docker_dind": True})
    with pytest.raises(ConfigError, match="--bench-env=docker"):
        corebench.benchmark.configure(opts, "train")


def test_an_external_agent_is_refused_the_nested_docker_engine_of_medium_items(tmp_path):
    """It runs as an unprivileged user in its container: a medium item's nested engine would be out of its reach,
    so the run is refused up front instead of failing every item."""
    from pytest_agentbench.core.errors import ConfigError
    from pytest_agentbench.core.options import Settings

    def in_docker(**cli):
        opts = corebench_options(DATA, tmp_path, cli={"docker_dind": True, "difficulty": "medium", **cli})
        return Settings({**opts, "env": "docker"})

    with pytest.raises(ConfigError, match="mini-swe-agent 2.4.6 with --bench-set=docker_dind=true.*builtin"):
        corebench.benchmark.configure(in_docker(agent="mini-swe-agent"), "train")
    builtin = corebench.benchmark.configure(in_docker(), "train")
    assert builtin["docker_dind"] and builtin["difficulty"] == "medium"
    easy = corebench.benchmark.configure(in_docker(agent="mini-swe-agent", difficulty="easy"), "train")
    assert easy["agent"] == "mini-swe-agent==2.4.6"


def test_fetch_capsules_unpacks_ahead_so_collection_marks_gpu(tmp_path, capsys):
    from pytest_agentbench.cli import main

    store = tmp_path / "store"
    build_capsule_archive(store, CID, gpu=True)
    cache = tmp_path / "cache"
    assert (
        main(
            [
                "fetch-capsules",
                "--split",
                "train",
                "--data-dir",
                str(DATA),
                "--cache-dir",
                str(cache),
                "--capsules-dir",
                str(store),
                "--ids",
                CID,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert f"[1/1] {CID} ready" in out and "needs a GPU" in out and "1 of 1 capsules ready" in out
    opts = corebench_options(DATA, cache, cli={"capsules_dir": str(store)})
    task = next(t for t in corebench.benchmark.load_tasks(opts, "train") if t.id == CID)
    assert "gpu" in task.samples[0].markers
