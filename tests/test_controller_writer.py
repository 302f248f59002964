"""The foundation of distributed runs: the xdist controller is the only writer of the run.

Under ``-n 2`` the workers write nothing under the run folder (an audit hook in each worker refuses and logs any
such write), yet records, trajectories and model-cache entries arrive exactly once and match a run without
xdist; a worker's cache entries reach the controller's cache even when the worker has a cache of its own (a
replay then calls no model); the controller refuses files that would leave the run folder; a worker killed
mid-item leaves an error record naming it, and ``--bench-resume`` runs exactly the lost items.
"""

from __future__ import annotations

import json
import socket
import zlib
from pathlib import Path

import pytest

from pytest_agentbench.core.io import CollectedFiles, DirectoryFiles, UnsafePath, run_relpath, write_under
from pytest_agentbench.core.records import comparable
from pytest_agentbench.models.cache import CacheJournal, ResponseCache
from pytest_agentbench.pytest_plugin import writer
from pytest_agentbench.pytest_plugin.writer import pack_delivery, store_delivery

from helpers.bench_runs import SHARED_DATA, read_jsonl, run_dirs
from helpers.fake_openai import FakeOpenAI
from helpers.scicode_builders import CLOSE, MODEL_CONFTEST, custom_data_args, problem, step, write_dataset

NEXT_STEP = "NEXT STEP - PROBLEM STEP AND FUNCTION HEADER"
# Distinct function headers, so the scripted model can tell from a prompt which step is asked.
STEPS = {
    "1.1": ("def add(a, b):", "def add(a, b):\n    return a + b", "add(1, 2)", 3),
    "1.2": ("def twice(a):", "def twice(a):\n    return add(a, a)", "twice(3)", 6),
    "2.1": ("def sq(a):", "def sq(a):\n    return a * a", "sq(3)", 9),
    "2.2": ("def cube(a):", "def cube(a):\n    return a * sq(a)", "cube(2)", 8),
    "3.1": ("def six():", "def six():\n    return 6", "six()", 6),
}
PROBLEMS = [
    problem(
        pid,
        [
            step(n, code, [CLOSE.format(call=call)], header=header)
            for n, (header, code, call, _) in STEPS.items()
            if n.split(".")[0] == pid
        ],
    )
    for pid in ("1", "2", "3")
]
TARGETS = {n: [value] for n, (_, _, _, value) in STEPS.items()}

# In every xdist worker: refuse (and log) any write under reports/, and, when WORKER_CACHE_ROOT is set, give the
# worker a response cache of its own (as on another host), so entries reach the controller only by travelling.
GUARD_CONFTEST = r"""
import os
import sys

import pytest

REPORTS = os.path.abspath("reports")
LOG = os.path.abspath("worker-writes.log")
WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def in_reports(path):
    if isinstance(path, int) or path is None:
        return False
    full = os.path.abspath(os.fsdecode(path))
    return full == REPORTS or full.startswith(REPORTS + os.sep)


def guard(event, args):
    if event == "open":
        path, mode, flags = (list(args) + [None, None, None])[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & WRITING)
        paths = [path] if writes else []
    elif event in ("os.rename", "os.link", "os.symlink"):  # os.replace raises os.rename
        paths = list(args[:2])
    elif event in ("os.mkdir", "os.remove", "os.rmdir", "os.truncate", "shutil.rmtree", "os.chmod"):
        paths = [args[0]]
    else:
        return
    bad = [os.fsdecode(p) for p in paths if in_reports(p)]
    if bad:
        with open(LOG, "a") as fh:
            fh.write(f"{os.getpid()} {event} {bad}\n")
        raise PermissionError(f"an xdist worker wrote into the run folder: {event} {bad}")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if hasattr(config, "workerinput"):
        sys.addaudithook(guard)
        root = os.environ.get("WORKER_CACHE_ROOT")
        if root:
            config.option.agentbench_cache_dir = os.path.join(root, config.workerinput["workerid"])
"""


def answer(body: dict) -> dict:
    """The scripted model: the ground truth of the step whose header follows the NEXT STEP heading."""
    prompt = next(m["content"] for m in body["messages"] if m.get("role") == "user")
    asked = prompt.split(NEXT_STEP, 1)[1]
    [code] = [code for header, code, _, _ in STEPS.values() if header in asked]
    return {"text": f"Here it is.\n```python\n{code}\n```\n"}


def entries(cache_dir: Path) -> dict[str, str]:
    # model responses; durations.json beside them holds the scheduler's timings (docs/distributed.md)
    return {p.stem: p.read_text() for p in cache_dir.rglob("*.json") if p.name != "durations.json"}


def trajectories(run: Path) -> dict[str, dict]:
    """The run's trajectory files, each model call's latency left out (it differs between two runs)."""
    out = {}
    for path in sorted((run / "trajectories").iterdir()):
        data = json.loads(path.read_text())
        data["turns"] = [{k: v for k, v in turn.items() if k != "latency"} for turn in data.get("turns", [])]
        out[path.name] = data
    return out


@pytest.mark.e2e
@pytest.mark.slow
def test_workers_write_nothing_yet_records_files_and_cache_arrive_once(bench, pytester, shared_data, monkeypatch):
    data, h5 = write_dataset(pytester.path, shared_data, targets=TARGETS, problems=PROBLEMS)
    pytester.makeconftest(GUARD_CONFTEST)
    serial_cache, controller_cache, worker_caches = (pytester.path / name for name in ("c-serial", "c-ctl", "c-w"))
    with FakeOpenAI() as server:
        for _ in range(40):
            server.reply_with(answer)
        args = custom_data_args(data, h5, "--bench-mode=naive", "--bench-timeout=60", model="gt-player", server=server)
        serial = bench(*args, f"--bench-cache-dir={serial_cache}", "--bench-run-id=serial", subprocess=True)
        assert serial.ret == 0, serial.stdout.str()[-3000:]
        monkeypatch.setenv("WORKER_CACHE_ROOT", str(worker_caches))
        parallel = bench(
            *args, f"--bench-cache-dir={controller_cache}", "-n", "2", "--bench-run-id=n2", subprocess=True
        )
        assert parallel.ret == 0, parallel.stdout.str()[-3000:]
        calls = len(server.requests)
    assert calls == 10  # 5 steps, each asked once per run: nothing was answered from another run's cache
    assert not (pytester.path / "worker-writes.log").exists(), (pytester.path / "worker-writes.log").read_text()
    runs = {p.name: p for p in run_dirs(pytester.path)}
    records = {name: read_jsonl(run / "steps.jsonl") for name, run in runs.items()}
    assert sorted(r["id"] for r in records["n2"]) == sorted(STEPS)  # each record exactly once
    assert {r["worker"] for r in records["n2"]} <= {"gw0", "gw1"} and len({r["worker"] for r in records["n2"]}) == 2
    assert {r["host"] for r in records["n2"]} == {socket.gethostname()}
    assert sorted(map(comparable, records["n2"]), key=lambda r: r["id"]) == sorted(
        map(comparable, records["serial"]), key=lambda r: r["id"]
    )
    # the trajectories the workers produced were written by the controller, once, where the records say
    assert trajectories(runs["n2"]) == trajectories(runs["serial"])
    assert sorted(r["trajectory"] for r in records["n2"]) == sorted(f"trajectories/{n}.json" for n in STEPS)
    assert not [p for p in runs["n2"].rglob("*") if p.name.endswith(".tmp")]
    # each worker cached its own responses; every one of them is in the controller's cache too
    made_on_workers = entries(worker_caches)
    assert len(made_on_workers) == 5 and {p.name for p in worker_caches.iterdir()} == {"gw0", "gw1"}
    assert entries(controller_cache) == made_on_workers  # the same entries, byte for byte
    assert set(made_on_workers) == set(entries(serial_cache))  # the same requests as without xdist (latency differs)

    # the model is gone: the run re-scored from the controller's cache alone
    replay = bench(
        f"--bench-replay={runs['n2']}",
        f"--bench-cache-dir={controller_cache}",
        "--bench-run-id=replay",
        subprocess=True,
    )
    assert replay.ret == 0, replay.stdout.str()[-3000:]
    assert "0 model calls" in replay.stdout.str() and "5 cache hits" in replay.stdout.str()


@pytest.mark.e2e
@pytest.mark.slow
def test_an_item_whose_files_are_over_the_cap_is_an_error_saying_so(bench, pytester, shared_data):
    data, h5 = write_dataset(pytester.path, shared_data, targets=TARGETS, problems=PROBLEMS)
    # The cap is 64 MiB; each worker lowers it to 64 bytes here, so one trajectory is over it.
    pytester.makeconftest(
        GUARD_CONFTEST
        + """
@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    if hasattr(session.config, "workerinput"):
        from pytest_agentbench.pytest_plugin import writer
        writer.MAX_DELIVERY_BYTES = 64
"""
    )
    with FakeOpenAI() as server:
        for _ in range(4):
            server.reply_with(answer)
        result = bench(
            *custom_data_args(data, h5, "--bench-mode=naive", model="gt-player", server=server),
            "--bench-ids=3.1",
            "-n",
            "2",
            f"--bench-cache-dir={pytester.path / 'cache'}",
            subprocess=True,
        )
    result.assert_outcomes(failed=1)
    [run] = run_dirs(pytester.path)
    [record] = read_jsonl(run / "steps.jsonl")
    assert record["status"] == "error" and record["status_before_cap"] == "pass"
    assert record["message"].startswith("agentbench: this item's files and model responses are ")
    assert (
        "bytes compressed, over the 64 bytes an xdist worker may send to the controller; they were not kept "
        "(trajectories/3.1.json); run this item without -n/--tx to keep them" in record["message"]
    )
    assert "trajectory" not in record and not (run / "trajectories").exists()
    assert not (pytester.path / "worker-writes.log").exists()


KILLER_CONFTEST = MODEL_CONFTEST.replace(
    """        code = step["ground_truth_code"]""",
    """        flag = os.environ.get("KILL_FLAG", "")
        if number in os.environ.get("KILL_STEPS", "").split(",") and flag and os.path.exists(flag):
            os.unlink(flag)  # once: the item runs normally when resumed
            import signal  # why: only the killing step needs it
            os.kill(os.getpid(), signal.SIGKILL)
        code = step["ground_truth_code"]""",
)


@pytest.mark.e2e
@pytest.mark.slow
def test_a_worker_killed_mid_item_leaves_an_error_record_and_resume_runs_exactly_the_lost_items(
    tiny, pytester, monkeypatch
):
    pytester.makeconftest(KILLER_CONFTEST)
    flag = pytester.path / "kill-once"
    flag.write_text("")
    monkeypatch.setenv("KILL_FLAG", str(flag))
    monkeypatch.setenv("KILL_STEPS", "3.1")  # its generation kills the worker, in 3.1's item or earlier, ahead
    # one connection per worker: it holds one problem and generates the next one's first step ahead at most
    one_chain = "--bench-max-connections=2"
    first = tiny("-n", "2", one_chain, "--bench-run-id=crashed", broken="2.2")
    assert not flag.exists(), first.stdout.str()[-3000:]
    assert first.ret == pytest.ExitCode.TESTS_FAILED
    assert "replacing crashed worker" in first.stdout.str()  # xdist's restart: the run went on without it
    [run] = run_dirs(pytester.path)
    records = read_jsonl(run / "steps.jsonl")
    assert sorted(r["id"] for r in records) == ["1.1", "1.2", "2.1", "2.2", "3.1"]  # the lost item is not run again
    lost = [r for r in records if r.get("lost")]
    assert lost and len({r["task"] for r in lost}) == 1, records  # the item it was in (and its problem's later steps)
    for record in lost:
        assert record["status"] == "error" and record["worker"] in ("gw0", "gw1")
        assert f"worker '{record['worker']}' on host {socket.gethostname()} died while running" in record["message"]
        assert "--bench-resume runs it again" in record["message"]
    summary = json.loads((run / "summary.json").read_text())
    statuses = {i["id"]: i["status"] for i in summary["items"]}
    assert all(statuses[r["id"]] == "error" for r in lost)  # counted, as any infrastructure error

    resumed = tiny("-n", "2", one_chain, f"--bench-resume={run}", broken="2.2")
    out = resumed.stdout.str()
    ids = ", ".join(sorted(r["id"] for r in lost))
    assert f"{5 - len(lost)} finished record(s) reused" in out, out[-3000:]
    assert f"{len(lost)} item(s) whose worker died run again: {ids}" in out, out[-3000:]
    lines = read_jsonl(run / "steps.jsonl")
    assert sorted(r["id"] for r in lines) == ["1.1", "1.2", "2.1", "2.2", "3.1"]  # every record exactly once
    assert not any(r.get("lost") for r in lines)
    statuses = {r["id"]: r["status"] for r in lines}
    assert statuses == {"1.1": "pass", "1.2": "pass", "2.1": "pass", "2.2": "fail", "3.1": "pass"}
    resumed.assert_outcomes(passed=4, failed=1)

    again = tiny("-n", "2", one_chain, f"--bench-resume={run}", broken="2.2")  # nothing lost any more: none runs
    said = again.stdout.str()
    assert "all 5 item(s) have a finished record, nothing is left to run" in said and "whose worker died" not in said
    assert read_jsonl(run / "steps.jsonl") == lines


# ---- the pieces, without pytest -------------------------------------------------------------------
def test_the_controller_refuses_files_that_would_leave_the_run_folder(tmp_path):
    run = tmp_path / "run"
    outside = tmp_path / "outside"
    outside.mkdir()
    run.mkdir()
    (run / "trajectories").symlink_to(outside)  # a folder on the way that leads elsewhere
    delivery = pack_delivery(
        {
            "../evil.txt": b"x",
            "/etc/agentbench-evil": b"x",
            "artifacts/../../evil2": b"x",
            "trajectories/t.json": b"x",
            "artifacts/ok/prompt.txt": b"fine",
        },
        {},
    )
    problems = store_delivery(run, None, delivery)
    assert len(problems) == 4, problems
    assert all(p.startswith("refused a file from the worker: run file ") for p in problems)
    assert any("absolute path" in p for p in problems) and any("symlink" in p for p in problems)
    assert not list(outside.iterdir()) and not (tmp_path / "evil.txt").exists() and not (tmp_path / "evil2").exists()
    assert (run / "artifacts" / "ok" / "prompt.txt").read_text() == "fine"
    with pytest.raises(UnsafePath):
        run_relpath("")
    assert run_relpath("a//b/./c.json") == "a/b/c.json"
    with pytest.raises(UnsafePath, match="exists and is not a regular file"):
        write_under(run, "artifacts", b"x")


def test_a_damaged_or_oversized_blob_and_a_bad_cache_key_are_refused(tmp_path, monkeypatch):
    cache = ResponseCache(tmp_path / "cache", "rw")
    monkeypatch.setattr(writer, "MAX_UNPACKED_BYTES", 1024)  # the limit is 1 GiB: not built in a test
    bomb = zlib.compress(b"\0" * 4096, 9)  # expands past the limit
    good_key = "ab" * 32
    delivery = {
        "files": [["a.txt", b"not zlib"], ["b.txt", bomb]],
        "cache": [
            ["../../etc", zlib.compress(b"{}")],
            [good_key, zlib.compress(b'{"text": "hi"}')],
            ["cd" * 32, zlib.compress(b"[1]")],
        ],
    }
    problems = store_delivery(tmp_path / "run", cache, delivery)
    assert len(problems) == 4, problems
    assert not (tmp_path / "run" / "a.txt").exists() and not (tmp_path / "run" / "b.txt").exists()
    assert cache.get(good_key) == {"text": "hi"} and cache.get("cd" * 32) is None
    assert not cache.add_entry(good_key, '{"text": "other"}') and cache.get(good_key) == {"text": "hi"}  # if absent
    assert not ResponseCache(tmp_path / "ro", "ro").add_entry("ef" * 32, "{}")  # a read-only cache stays untouched


def test_the_worker_sink_and_journal_keep_everything_in_memory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = CollectedFiles()
    assert files.write("trajectories/1.1.json", "{}") == "trajectories/1.1.json"
    with pytest.raises(UnsafePath):
        files.write("../x", b"")
    assert files.take() == {"trajectories/1.1.json": b"{}"} and files.take() == {}
    cache = ResponseCache(tmp_path / "cache", "rw")
    cache.journal = CacheJournal()
    cache.put("12" * 32, {"text": "hi"})
    assert cache.journal.take() == {"12" * 32: '{"text":"hi"}'} and cache.journal.take() == {}
    assert list(tmp_path.iterdir()) == [tmp_path / "cache"]  # only the cache the worker owns was written
    assert DirectoryFiles(tmp_path / "run").write("a/b.txt", "x") == "a/b.txt"
    assert (tmp_path / "run" / "a" / "b.txt").read_text() == "x"


# ---- CORE-Bench artifacts: one folder per attempt -------------------------------------------------
CAPSULES = ["capsule-7038571", "capsule-0201225"]  # train capsules


@pytest.mark.parametrize("attempts,xdist", [(1, ()), (2, ("-n", "2"))], ids=["one-attempt", "two-attempts-xdist"])
@pytest.mark.e2e
@pytest.mark.slow
def test_core_bench_artifacts_and_records_per_attempt(pytester, tmp_path, monkeypatch, attempts, xdist):
    from pytest_agentbench.benchmarks.corebench import capsules

    from helpers.capsule_factory import build_capsule_archive  # why: only the CORE-Bench cases build capsules

    staged = tmp_path / "staged"
    for capsule_id in CAPSULES:
        build_capsule_archive(staged, capsule_id)
    pytester.makeconftest(GUARD_CONFTEST)
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(SHARED_DATA))
    monkeypatch.setenv(capsules.CAPSULE_URL_ENV, "http://127.0.0.1:9")  # nothing is downloaded here
    result = pytester.runpytest_subprocess(
        "--bench=core-bench",
        "--model=oracle",
        "--bench-split=train",
        f"--bench-ids={','.join(CAPSULES)}",
        f"--bench-capsules-dir={staged}",
        f"--bench-attempts={attempts}",
        "--bench-report-dir=reports",
        f"--bench-cache-dir={tmp_path / 'cache'}",
        "--bench-run-id=k",
        "-p",
        "no:cacheprovider",
        *xdist,
    )
    result.assert_outcomes(passed=2 * attempts)
    assert not (pytester.path / "worker-writes.log").exists()
    run = pytester.path / "reports" / "core-bench" / "oracle" / "k"
    keys = CAPSULES if attempts == 1 else [f"{c}[attempt{a}]" for c in CAPSULES for a in (1, 2)]
    assert sorted(p.name for p in (run / "artifacts").iterdir()) == sorted(keys)
    for key in keys:
        assert sorted(p.name for p in (run / "artifacts" / key).iterdir()) == ["prompt.txt", "submission.json"]
        assert json.loads((run / "artifacts" / key / "submission.json").read_text())["report"]
    records = read_jsonl(run / "records.jsonl")
    assert len(records) == len(keys) and all(r["status"] == "pass" for r in records)
