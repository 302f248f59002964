"""``--bench-backend=slurm`` on a real two-node Slurm cluster on this machine (.ci/slurm-setup, run by .ci/run
before pytest: node1 has a pretend GPU, node2 runs in its own UTS namespace). The tests read what the set-up
wrote (tests/helpers/capabilities.py ``needs("slurm")``) and never run it. Without the cluster they skip with the
reason (CI=true: they fail).

Kept small (two one-step SciCode problems, two synthetic capsules): the whole module takes a few minutes.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_agentbench.backends.slurm import commands as slurm
from pytest_agentbench.backends.slurm import spool
from pytest_agentbench.core import records as rec

from helpers.bench_runs import read_jsonl, wait_for
from helpers.capabilities import needs, slurm_nodes_down
from helpers.capsule_factory import write_capsule_tree
from helpers.fake_openai import FakeOpenAI
from helpers.keyring_attack import environ_names, keyring_cheat
from helpers.scicode_builders import custom_data_args, write_dataset

pytestmark = [pytest.mark.e2e, pytest.mark.remote, pytest.mark.slow]

IDS = "1,3"
SMALL = ("--bench-set=memory_limit=2",)  # 3 GiB jobs: two fit on each 8 GB node


@pytest.fixture(scope="module")
def cluster() -> dict:
    """What .ci/slurm-setup wrote: the state folder, each node's slurmd pid file and start command."""
    return needs("slurm")


def comparable(record: dict) -> dict:
    return {k: v for k, v in rec.comparable(record).items() if k != "targets_source"}


def scicode_args(run_id: str) -> list[str]:
    return [
        "--bench=scicode",
        "--bench-split=validation",
        "--model=oracle",
        f"--bench-ids={IDS}",
        f"--bench-run-id={run_id}",
        *SMALL,
    ]


def records_of(pytester: pytest.Pytester, run_id: str) -> dict[str, dict]:
    run_dir = pytester.path / "reports" / "scicode" / "oracle" / run_id
    return {r["id"]: r for r in read_jsonl(run_dir / "steps.jsonl")}


def test_validation_oracle_through_slurm_gives_the_local_records(cluster, bench, pytester: pytest.Pytester) -> None:
    local = bench(*scicode_args("local"))
    assert local.ret == 0, local.stdout.str()
    through = bench(*scicode_args("slurm"), "--bench-backend=slurm")
    assert through.ret == 0, through.stdout.str()
    through.stdout.fnmatch_lines(["*submitted 2 task(s) to Slurm as job array(s) *", "*2 passed*"])
    want, got = records_of(pytester, "local"), records_of(pytester, "slurm")
    assert {k: comparable(v) for k, v in got.items()} == {k: comparable(v) for k, v in want.items()}
    for record in got.values():  # each record names its job and node
        assert record["worker"].startswith("slurm "), record
        assert record["host"] in ("node1", "node2"), record


def test_slurm_jobs_grade_in_each_grading_environment_where_they_run(
    cluster, bench, pytester: pytest.Pytester, monkeypatch
) -> None:
    """Each job resolves the grading environments on its node (here the ones .ci/grading-envs built, found by
    the spec hash as a second run finds its own) and its records keep one verdict per environment."""
    from pytest_agentbench.benchmarks.scicode import gradingenvs

    monkeypatch.setenv(gradingenvs.ROOT_ENV, str(needs("grading-envs")))
    done = bench(
        *scicode_args("graded"),
        "--bench-backend=slurm",
        "--bench-set=grading_envs=2024,2025",
        "--bench-set=grading_envs_all=true",
    )
    assert done.ret == 0, done.stdout.str()[-3000:]
    got = records_of(pytester, "graded")
    assert sorted(got) == ["1.1", "3.1"], got
    for record in got.values():
        assert record["status"] == "pass" and record["host"] in ("node1", "node2"), record
        assert {name: v["status"] for name, v in record["grading_envs"].items()} == {"2024": "pass", "2025": "pass"}


def test_an_impossible_request_is_a_usage_error_with_slurms_message(cluster, bench) -> None:
    done = bench(*scicode_args("impossible"), "--bench-backend=slurm", "--bench-set=slurm_args=--gres=gpu:2")
    assert done.ret == 4
    assert "Requested node configuration is not available" in done.stderr.str() + done.stdout.str()


def test_detached_run_then_collect_gives_the_waiting_runs_summary(
    cluster, bench, pytester: pytest.Pytester, monkeypatch
) -> None:
    secret = "sk-h25-never-in-slurm-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    waiting = bench(*scicode_args("waiting"), "--bench-backend=slurm")
    assert waiting.ret == 0, waiting.stdout.str()
    detached = bench(*scicode_args("detached"), "--bench-backend=slurm", "--bench-set=detach=true")
    assert detached.ret == 0, detached.stdout.str()
    detached.stdout.fnmatch_lines(["*detached; collect job * runs *collect*", "collect: *pytest_agentbench collect *"])
    run_dir = pytester.path / "reports" / "scicode" / "oracle" / "detached"
    key_file = spool.spool_dir(run_dir) / spool.SECRET_FILE
    assert key_file.stat().st_mode & 0o777 == 0o600
    # Slurm keeps job scripts and exported environments in its state: the key is in none of them.
    arrays = slurm.load_jobs(spool.spool_dir(run_dir))
    for array in arrays:
        script = subprocess.run(
            ["scontrol", "write", "batch_script", array["job"], "-"], capture_output=True, text=True
        ).stdout
        assert secret not in script
    found = subprocess.run(["grep", "-rl", secret, cluster["state"]], capture_output=True, text=True).stdout
    assert not found, f"the API key is in Slurm's state: {found}"
    collect_job = detached.stdout.str().split("collect job ")[1].split()[0]
    wait_for_job(collect_job)
    assert not key_file.exists()  # removed by collect
    summary = json.loads((run_dir / "summary.json").read_text())
    reference = json.loads((pytester.path / "reports" / "scicode" / "oracle" / "waiting" / "summary.json").read_text())
    assert summary["metrics"] == reference["metrics"] and summary["counts"] == reference["counts"] == {"pass": 2}
    assert {k: comparable(v) for k, v in records_of(pytester, "detached").items()} == {
        k: comparable(v) for k, v in records_of(pytester, "waiting").items()
    }


def wait_for_job(job: str, timeout: float = 180.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        out = subprocess.run(
            ["squeue", "-h", "--states=all", "-j", job, "-o", "%T"], capture_output=True, text=True
        ).stdout.strip()
        if out and out.split()[0] in slurm.ENDED_STATES:
            return
        time.sleep(1)
    pytest.fail(f"job {job} did not end within {timeout:.0f} s")


SLOW_CONFTEST = """
import os, pathlib, subprocess, time

def pytest_agentbench_record(record, item):
    # in a Slurm job only, while the flag file exists: task 3 outlives its job's time limit. The job's limit is
    # a minute (--time counts whole minutes); once inside the item the job brings its own end time forward, as
    # any user may shorten a running job of theirs, so Slurm's time-limit check ends it at its next pass (every
    # 30 s) instead of a minute after the start.
    flag = pathlib.Path(os.environ["H25_SLOW_FLAG"])
    if os.environ.get("SLURM_JOB_ID") and record.get("task") == "3" and flag.is_file():
        subprocess.run(
            ["scontrol", "update", "jobid=" + os.environ["SLURM_JOB_ID"], "EndTime=now+1"], check=True
        )
        time.sleep(600)
"""


def test_a_task_over_its_time_limit_is_lost_and_resume_submits_exactly_it(
    cluster, bench, pytester: pytest.Pytester, monkeypatch
) -> None:
    flag = pytester.path / "slow-flag"
    flag.write_text("")
    monkeypatch.setenv("H25_SLOW_FLAG", str(flag))
    pytester.makeconftest(SLOW_CONFTEST)
    first = bench(*scicode_args("late"), "--bench-backend=slurm", "--bench-set=slurm_args=--time=1")
    assert first.ret == 1, first.stdout.str()
    records = records_of(pytester, "late")
    assert records["1.1"]["status"] == "pass"
    lost = records["3.1"]
    assert lost["status"] == "error" and lost[rec.LOST_FIELD] is True
    assert "ended TIMEOUT" in lost["message"] and "time limit" in lost["message"], lost
    assert lost["worker"].startswith("slurm ") and lost["host"] in ("node1", "node2")

    flag.unlink()
    run_dir = pytester.path / "reports" / "scicode" / "oracle" / "late"
    before = len(slurm.load_jobs(spool.spool_dir(run_dir)))
    resumed = bench(f"--bench-resume={run_dir}")
    assert resumed.ret == 0, resumed.stdout.str()
    arrays = slurm.load_jobs(spool.spool_dir(run_dir))
    assert [a["units"] for a in arrays[before:]] == [["3"]]  # exactly the lost task went out again
    final = records_of(pytester, "late")
    assert {r["status"] for r in final.values()} == {"pass"} and sorted(final) == ["1.1", "3.1"]


GPU_CAPSULE, CPU_CAPSULE = "capsule-7038571", "capsule-9168639"


def test_gpu_capsules_run_on_the_gpu_node(cluster, bench, pytester: pytest.Pytester, tmp_path) -> None:
    capsules = tmp_path / "capsules"
    write_capsule_tree(capsules, GPU_CAPSULE, gpu=True)
    write_capsule_tree(capsules, CPU_CAPSULE, gpu=False)
    done = bench(
        "--bench=core-bench",
        "--bench-split=train",
        "--model=oracle",
        "--bench-set=gpus=all",
        f"--bench-ids={GPU_CAPSULE},{CPU_CAPSULE}",
        f"--bench-capsules-dir={capsules}",
        "--bench-run-id=gpu",
        "--bench-set=env_memory=2g",
        *SMALL,
        "--bench-backend=slurm",
    )
    run_dir = pytester.path / "reports" / "core-bench" / "oracle" / "gpu"
    records = {r["id"]: r for r in read_jsonl(run_dir / "records.jsonl")}
    assert sorted(records) == sorted([GPU_CAPSULE, CPU_CAPSULE]), done.stdout.str()
    assert records[GPU_CAPSULE]["host"] == "node1", records[GPU_CAPSULE]  # the node with the GPU
    requests = {tuple(a["units"]): a["request"] for a in slurm.load_jobs(spool.spool_dir(run_dir))}
    assert "--gres=gpu:1" in requests[(GPU_CAPSULE,)]
    assert "--gres=gpu:1" not in requests[(CPU_CAPSULE,)]


HOLD_CONFTEST = """
import os, pathlib, time

def pytest_agentbench_record(record, item):
    # in a Slurm job only: task 3 says it is inside its item (the "inside" file), then waits while the flag
    # file exists (the test kills its node meanwhile)
    flag = pathlib.Path(os.environ["H25_HOLD_FLAG"])
    if os.environ.get("SLURM_JOB_ID") and record.get("task") == "3":
        flag.with_name(flag.name + ".inside").write_text(os.environ["SLURM_JOB_ID"])
        while flag.is_file():
            time.sleep(0.5)
"""


def element_of(run_dir: Path, unit: str) -> tuple[str, str, str] | None:
    """(job label, state, node) of the unit's latest array element."""
    arrays = slurm.load_jobs(spool.spool_dir(run_dir))
    where = slurm.latest_elements(arrays).get(unit)
    if where is None:
        return None
    state = slurm.element_states([where[0]]).get(where)
    return (f"{where[0]}_{where[1]}", *state[:2]) if state else None


def kill_node(cluster: dict, node: str, job_label: str) -> None:
    """The node's slurmd and the task's processes die, as when a machine is lost."""
    pid = int(Path(cluster["nodes"][node]["pid_file"]).read_text())
    os.kill(pid, 9)
    job = subprocess.run(["squeue", "-h", "-j", job_label, "-o", "%A"], capture_output=True, text=True).stdout.strip()
    steps = subprocess.run(["pgrep", "-f", f"slurmstepd: \\[{job}\\."], capture_output=True, text=True).stdout.split()
    for step in steps:
        children = subprocess.run(["pgrep", "-P", step], capture_output=True, text=True).stdout.split()
        for child in children:
            subprocess.run(["pkill", "-9", "-P", child], check=False)  # the forkserver and sandboxes under it
            os.kill(int(child), 9)
        os.kill(int(step), 9)


def bring_back(cluster: dict, node: str, timeout: float = 90) -> None:
    """The node's slurmd starts again the way .ci/slurm-setup started it (its command is in the set-up's info)
    and Slurm takes the node back into service (a node marked down is resumed)."""
    subprocess.run(cluster["nodes"][node]["start"], check=False, capture_output=True, timeout=60)
    deadline = time.monotonic() + timeout
    while (problem := slurm_nodes_down()) and time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%t"], capture_output=True, text=True).stdout
        if any(word in state for word in ("down", "drain", "inval", "fail")):
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=False, capture_output=True)
        time.sleep(2)
    assert problem is None, problem


def hurry_requeued(run_dir: Path, controller: subprocess.Popen, timeout: float = 240) -> None:
    """Slurm holds a requeued job back for about two minutes (reason BeginTime); the test lets it start as soon
    as it is requeued (the requeue itself is Slurm's, asked for by the job's --requeue). The element was running
    when its node was killed, so PENDING means requeued: the reason BeginTime shows only once the scheduler has
    looked at the queue again, which can be half a minute later."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and controller.poll() is None:
        label = slurm.latest_elements(slurm.load_jobs(spool.spool_dir(run_dir)))["3"]
        out = subprocess.run(
            ["squeue", "-h", "-j", f"{label[0]}_{label[1]}", "-o", "%T %r"], capture_output=True, text=True
        ).stdout.split()
        if out[:1] == ["PENDING"]:
            subprocess.run(["scontrol", "update", f"jobid={label[0]}_{label[1]}", "StartTime=now"], check=False)
            return
        if out[:1] == ["RUNNING"] and time.monotonic() > deadline - timeout + 60:
            return  # started again already
        time.sleep(1)


def test_a_lost_node_requeues_the_task_and_the_run_completes(
    cluster, pytester: pytest.Pytester, shared_data, shared_cache
) -> None:
    flag = pytester.path / "hold-flag"
    flag.write_text("")
    pytester.makeconftest(HOLD_CONFTEST)
    pytester.makeini("[pytest]\n")
    env = {**os.environ, "AGENTBENCH_DATA_DIR": str(shared_data), "AGENTBENCH_OFFLINE": "1", "H25_HOLD_FLAG": str(flag)}
    run_dir = pytester.path / "reports" / "scicode" / "oracle" / "nodeloss"
    controller = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            f"--bench-cache-dir={shared_cache}",
            *scicode_args("nodeloss"),
            "--bench-backend=slurm",
        ],
        cwd=pytester.path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    killed = None
    try:
        deadline = time.monotonic() + 120
        element = None
        while time.monotonic() < deadline:  # task 3 running (its record is being held)
            element = element_of(run_dir, "3") if run_dir.is_dir() else None
            if element and element[1] == "RUNNING" and any((spool.spool_dir(run_dir) / "logs").glob("*")):
                break
            time.sleep(1)
        assert element and element[1] == "RUNNING", element
        inside = flag.with_name(flag.name + ".inside")  # the handshake: task 3's item holds its record
        deadline = time.monotonic() + 240
        while not inside.is_file():
            assert controller.poll() is None and time.monotonic() < deadline, "task 3 never reached its item"
            time.sleep(0.5)
        killed = element[2]
        kill_node(cluster, killed, element[0])
        flag.unlink()
        hurry_requeued(run_dir, controller)
        out, _ = controller.communicate(timeout=420)
    finally:
        if controller.poll() is None:
            controller.kill()
        if killed:
            bring_back(cluster, killed)  # the killed node comes back for the other tests
    assert controller.returncode == 0, out[-4000:]
    records = {r["id"]: r for r in read_jsonl(run_dir / "steps.jsonl")}
    assert sorted(records) == ["1.1", "3.1"] and {r["status"] for r in records.values()} == {"pass"}, out[-3000:]
    assert records["3.1"]["host"] != element[2]  # run again on the node that is left


def test_a_node_that_cannot_isolate_model_code_is_a_lost_task_saying_why(
    cluster, bench, pytester: pytest.Pytester, monkeypatch
) -> None:
    from pytest_agentbench.sandbox.isolation import ISOLATION_ENV

    monkeypatch.setenv(ISOLATION_ENV, "off")  # exported to the jobs: their nodes cannot isolate
    done = bench(
        "--bench=scicode",
        "--bench-split=validation",
        "--model=oracle",
        "--bench-ids=1",
        "--bench-run-id=noiso",
        *SMALL,
        "--bench-backend=slurm",
    )
    assert done.ret == 1, done.stdout.str()
    (record,) = records_of(pytester, "noiso").values()
    assert record[rec.LOST_FIELD] is True and "ended FAILED" in record["message"], record
    assert (
        f"on Slurm node {record['host']}: --bench-require-isolation: this machine cannot isolate" in record["message"]
    ), record
    assert "bubblewrap" in record["message"]


JOB_ENV_CONFTEST = """
import os

def pytest_agentbench_record(record, item):
    # what the Slurm job's own process held: the unlisted variable reached the node, so its absence from the
    # scoring child's environment is the sandbox's doing
    record["job_had_database_url"] = bool(os.environ.get("SLURM_JOB_ID")) and "DATABASE_URL" in os.environ
"""


def after_the_first_task(make: Callable[[dict], dict], spool_folder: Path) -> Callable[[dict], dict]:
    """``make`` for the first request; every later one is answered once a task's package is in the spool. The
    attempts are jobs that run side by side, so this is what puts the readers after the one that stored."""
    served: list[int] = []

    def gated(body: dict) -> dict:
        served.append(1)
        if len(served) > 1:
            wait_for(lambda: any(spool_folder.glob("**/*" + spool.SUFFIX)), 300, "the first task's package")
        return make(body)

    return gated


@pytest.mark.isolation
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the attack uses x86-64 system call numbers")
def test_later_attempts_on_slurm_nodes_cannot_read_what_the_first_left_in_the_keyring(
    cluster, bench, pytester: pytest.Pytester, shared_data, tmp_path, monkeypatch
) -> None:
    """The keyring attack of tests/test_kernel_surface.py with each attempt a Slurm job: the attempt that
    answers first leaves the answer in the keyrings of the node's uid 65534, the two after it answer with what
    they find there. And a variable the submitting shell exported (sbatch --export=ALL carries it to the job)
    is not in a scoring child's environment on the node."""
    needs("bwrap")
    monkeypatch.setenv("DATABASE_URL", "postgres://admin:hunter2@db.internal/prod")
    pytester.makeconftest(JOB_ENV_CONFTEST)
    data, h5 = write_dataset(pytester.path, shared_data)
    run_dir = pytester.path / "reports" / "scicode" / "cheat" / "keyring"
    tag = f"agentbench-{uuid.uuid4().hex[:12]}"
    with FakeOpenAI() as server:
        cheat = after_the_first_task(keyring_cheat(tag, show_environ=True), spool.spool_dir(run_dir))
        for _ in range(6):
            server.reply_with(cheat)
        done = bench(
            *custom_data_args(
                data,
                h5,
                "--bench-mode=naive",
                "--bench-ids=3",
                "--bench-attempts=3",
                f"--bench-cache-dir={tmp_path / 'cache'}",
                "--bench-require-isolation",
                "--bench-run-id=keyring",
                *SMALL,
                "--bench-backend=slurm",
                model="cheat",
                server=server,
            )
        )
    records = sorted(read_jsonl(run_dir / "steps.jsonl"), key=lambda r: r["attempt"])
    stored_first = [r for r in records if "syscall(248" in r["code"]]  # (add_key: the attempt that stored)
    assert len(records) == 3 and len(stored_first) == 1, done.stdout.str()[-3000:]
    readers = [r for r in records if r is not stored_first[0]]
    assert [stored_first[0]["status"], *(r["status"] for r in readers)] == ["pass", "fail", "fail"], [
        (r["attempt"], r["status"], r.get("message"), r.get("stderr", "")[-300:]) for r in records
    ]
    assert done.ret == 1
    for record in records:
        assert record["worker"].startswith("slurm ") and record["host"] in ("node1", "node2"), record
        assert record["job_had_database_url"] is True, record
        names = environ_names(record["stdout"])
        assert names is not None, record["stdout"]
        assert "DATABASE_URL" not in names and not [n for n in names if n.startswith("SLURM_")], names
