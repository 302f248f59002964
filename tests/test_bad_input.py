"""Bad input ends as a record: a report.json nested past the depth limit, and a workspace with a huge sparse
file, a FIFO, a socket and symbolic links in a loop or out of the tree, become a per-item status (the
report's ``report_status``, the record's ``copy_out``) and the run goes on; nothing copied home passes
the cap on disk. Through the scorer, the environments' ``copy_out`` (host, Docker) and a CORE-Bench item
run by a scripted agent."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

# imported before any in-process pytester run (numpy cannot be imported twice in one process)
from pytest_agentbench.benchmarks.corebench import scorer
from pytest_agentbench.benchmarks.corebench.scorer import MAX_JSON_DEPTH, load_submission, score_report
from pytest_agentbench.envs.host import HostEnvironment
from pytest_agentbench.sandbox.isolation import Isolation

from helpers.bench_runs import SHARED_DATA
from helpers.capabilities import needs
from helpers.capsule_factory import build_capsule_archive, labelled_containers
from helpers.fake_openai import FakeOpenAI

CAP = 1 << 20
HUGE = 20 << 30  # apparent bytes of the sparse file: far past any cap, no disk


def deep(depth: int, kind: str = "list") -> str:
    """A report whose one answer nests ``depth`` levels below the report object."""
    if kind == "list":
        return '{"acc": ' + "[" * depth + "]" * depth + "}"
    return '{"acc": ' + '{"k": ' * depth + "1" + "}" * depth + "}"


# --------------------------------------------------------------------------- the scorer


@pytest.mark.parametrize("kind", ["list", "object"])
@pytest.mark.parametrize("depth", [900, 5000])
def test_a_deep_report_is_invalid_with_the_reason(tmp_path, kind, depth):
    (tmp_path / "report.json").write_text(deep(depth, kind))
    sub = load_submission(tmp_path, final_answer={"acc": 1})
    assert (sub.report_status, sub.submission_source, sub.report) == ("invalid", "report", {})
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in sub.warning
    score = score_report([{"acc": 1.0}, {"acc": 2.0}], sub.report)
    assert not score.all_correct and score.verdicts[0].note == "missing"
    json.dumps(score.to_record())  # the record can be built and written


def test_a_report_at_the_limit_is_read():
    shallow = deep(MAX_JSON_DEPTH - 1)  # the report object is the first level
    assert scorer.json_text_depth(shallow) == MAX_JSON_DEPTH
    assert scorer.json_text_depth('{"a": "[[[[{{", "b": ["\\"]"]}') == 2  # brackets in strings do not count
    assert scorer.loads_shallow(shallow)["acc"]


@pytest.mark.parametrize(
    "answer",
    [deep(900), "Here it is:\n```json\n" + deep(900, "object") + "\n```", json.loads(deep(900, "object"))],
    ids=["text", "fenced", "object"],
)
def test_a_deep_final_answer_is_an_empty_submission(tmp_path, answer):
    sub = load_submission(tmp_path / "no-report", final_answer=answer)
    assert sub.report == {} and sub.submission_source == "final_answer"
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in sub.warning


def test_a_cyclic_final_answer_is_an_empty_submission(tmp_path):
    answer: dict = {"acc": []}
    answer["acc"].append(answer)
    sub = load_submission(tmp_path / "no-report", final_answer=answer)
    assert sub.report == {} and "nested deeper" in sub.warning


# --------------------------------------------------------------------------- copy_out


def hostile_tree(root: Path) -> None:
    """report.json, a 20 GiB sparse file, a FIFO, a socket, a link loop and a link out of the tree."""
    (root / "results").mkdir(parents=True, exist_ok=True)
    (root / "report.json").write_text('{"acc": 1}')
    (root / "results" / "small.txt").write_text("kept\n")
    with open(root / "results" / "sparse.bin", "wb") as fh:
        fh.truncate(HUGE)
    os.mkfifo(root / "results" / "pipe")
    (root / "results" / "loop1").symlink_to("loop2")
    (root / "results" / "loop2").symlink_to("loop1")
    (root / "results" / "passwd").symlink_to("/etc/passwd")
    (root / "results" / "inside").symlink_to("small.txt")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(root / "results" / "sock"))
    server.close()


def disk_bytes(root: Path) -> tuple[int, int]:
    """(real bytes on disk, apparent bytes) of the regular files under ``root``, links never followed."""
    real = apparent = 0
    for folder, _, files in os.walk(root):
        for name in files:
            info = os.lstat(Path(folder) / name)
            real += info.st_blocks * 512
            apparent += info.st_size
    return real, apparent


def check_copied(dest: Path, record: dict, cap: int = CAP) -> None:
    assert record["cap"] == cap and record["bytes"] == len('{"acc": 1}') + len("kept\n")
    why = {entry["path"]: entry["why"] for entry in record["skipped"]}
    assert f"{HUGE} bytes would pass the copy cap of {cap} bytes" in why["results/sparse.bin"]
    assert "FIFO" in why["results/pipe"] and "socket" in why["results/sock"]
    assert "loop" in why["results/loop1"] and "loop" in why["results/loop2"]
    assert "outside" in why["results/passwd"]
    assert (dest / "report.json").read_text() == '{"acc": 1}' and (dest / "results" / "inside").read_text() == "kept\n"
    left = {p.name for p in (dest / "results").iterdir()}
    assert left == {"small.txt", "inside"}
    real, apparent = disk_bytes(dest)
    assert apparent <= cap and real <= cap


def host_env(workspace: Path) -> HostEnvironment:
    return HostEnvironment(workspace, isolation=Isolation("none", "a copy test"), copy_cap=CAP)


def test_host_copy_out_into_another_folder_keeps_within_the_cap(tmp_path):
    workspace = tmp_path / "ws"
    hostile_tree(workspace)
    with host_env(workspace) as env:
        dest = env.copy_out(tmp_path / "home")
        assert env.copied is not None and not env.copied.complete
        check_copied(dest, env.copied.to_record())


def test_host_copy_out_in_place_removes_what_a_copy_leaves_out(tmp_path):
    workspace = tmp_path / "ws"
    hostile_tree(workspace)
    env = host_env(workspace)
    env.keep_workspace = True
    with env:
        env.copy_out(workspace)
        assert env.copied is not None
        check_copied(workspace, env.copied.to_record())


@pytest.mark.docker
@pytest.mark.slow
def test_docker_copy_out_keeps_within_the_cap(tmp_path):
    from pytest_agentbench.envs.docker import DockerFactory

    factory = DockerFactory(image=needs("docker"), network="none", copy_cap=CAP)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    try:
        with factory.start(workspace, name="copy-cap") as env:
            # made past the commands' own file-size limit, as a root process in the container could
            script = (
                "mkdir -p results && printf '{\"acc\": 1}' > report.json && printf 'kept\\n' > results/small.txt "
                "&& truncate -s 20G results/sparse.bin && mkfifo results/pipe && ln -s loop2 results/loop1 "
                "&& ln -s loop1 results/loop2 && ln -s /etc/passwd results/passwd && ln -s small.txt results/inside "
                "&& python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('results/sock')\""
            )
            made = env.container.exec_run(["/bin/sh", "-c", script], workdir=env.workdir)
            assert made.exit_code == 0, made.output
            env.copy_out(workspace)
            assert env.copied is not None
            record = env.copied.to_record()
            assert "stopped" not in record, record
            check_copied(workspace, record)
            # a link at the top: the whole tree comes in one archive, with the same rules
            env.container.exec_run(["ln", "-s", "/etc", "top-link"], workdir=env.workdir)
            env.copy_out(workspace)
            record = env.copied.to_record()
            assert "outside" in {e["path"]: e["why"] for e in record["skipped"]}["top-link"]
            assert not (workspace / "top-link").exists()
            check_copied(workspace, record)
    finally:
        factory.close()
    assert labelled_containers() == []


# --------------------------------------------------------------------------- a CORE-Bench item

CAPSULE = "capsule-7038571"


@pytest.mark.e2e
@pytest.mark.slow  # a whole CORE-Bench run; the deep report and the copy cap are tested in-process above
def test_a_core_bench_item_records_a_deep_report_and_the_copy_cap(pytester, tmp_path, monkeypatch):
    """The agent writes a report.json 900 levels deep and leaves a sparse file, a FIFO and a link loop: the item
    fails with report_status invalid and the reason, its record names the copy cap and the bytes kept, and the
    kept workspace stays under the cap on disk."""
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(SHARED_DATA))
    staged = tmp_path / "staged"
    build_capsule_archive(staged, CAPSULE)
    writer = "python3 -c " + json.dumps(
        "import sys; d = 900; open('report.json', 'w').write('{\"acc\": ' + '[' * d + ']' * d + '}')"
    )
    litter = "truncate -s 900M results/sparse.bin && mkfifo results/pipe && ln -s l2 l1 && ln -s l1 l2"
    with FakeOpenAI() as server:
        server.reply(tool_calls=[("bash", {"command": f"{writer} && {litter} && echo done"})])
        server.reply(tool_calls=[("submit", {"answers": json.loads(deep(900, "object"))})])  # told, not crashed
        server.reply("I wrote report.json.")
        result = pytester.runpytest_subprocess(
            "--bench=core-bench",
            "--bench-split=train",
            f"--bench-ids={CAPSULE}",
            "--model=agent-model",
            f"--model-base-url={server.base_url}",
            "--model-api-key=x",
            "--bench-set=model_max_retries=0",
            "--bench-cache=off",
            f"--bench-capsules-dir={staged}",
            f"--bench-report-dir={tmp_path / 'reports'}",
            "--bench-run-id=deep",
            "--bench-env=host",
            "--bench-set=agent_steps=3",
            "--bench-set=copy_out_cap=1m",
            "--bench-set=keep_workspaces=true",
            "-p",
            "no:cacheprovider",
        )
    run_dir = tmp_path / "reports" / "core-bench" / "agent-model" / "deep"
    (record,) = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    assert "RecursionError" not in result.stdout.str() + result.stderr.str()
    result.assert_outcomes(failed=1)
    assert record["status"] == "fail" and record["report_status"] == "invalid", record
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in record["report_warning"]
    copied = record["copy_out"]
    assert copied["cap"] == CAP and 0 < copied["bytes"] <= CAP
    why = {entry["path"]: entry["why"] for entry in copied["skipped"]}
    assert f"{900 << 20} bytes would pass the copy cap" in why["results/sparse.bin"]
    assert "FIFO" in why["results/pipe"] and "loop" in why["l1"]
    real, apparent = disk_bytes(Path(record["workspace"]))
    assert real <= CAP and apparent <= CAP
    trajectory = json.loads((run_dir / record["trajectory"]).read_text())
    told = [m["content"] for m in trajectory["messages"] if m["role"] == "tool"][1]
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in told
