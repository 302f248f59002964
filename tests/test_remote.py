"""Remote xdist workers over SSH and execnet socket gateways, on two loopback "hosts" made by
.ci/ssh-setup.

Each host is an unprivileged account with its own venv (the package installed from this checkout, not
editable), data dir, cache and state; account b has one fake GPU: a test-only nvidia-smi that its worker python
wrapper puts on its PATH (read on that host, not here). The controller (this
root process) keeps its report dir at mode 0700, so a worker could not have written a record there.
Without the setup the tests skip with the reason (CI=true: they fail); see tests/helpers/capabilities.py. The tests only
read what the set-up wrote: after a change to the package, rerun .ci/ssh-setup as root (.ci/run does).
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers.bench_runs import (
    REPO,
    SHARED_DATA,
    ctrl_c_as_a_terminal_gives_it,
    free_port,
    read_jsonl,
    validation_problems,
    wait_for,
)
from helpers.capabilities import missing, needs
from helpers.capsule_factory import write_capsule_tree
from helpers.fake_openai import FakeOpenAI

VALIDATION = ["--bench=scicode", "--bench-split=validation", "--model=oracle"]
# The runs compared across hosts leave out the two problems whose upstream tests are most of a run's CPU: what
# they check is the distribution, and each host would score them again.
VALIDATION_PROBLEMS, VALIDATION_STEPS = validation_problems()
COMPARED = f"--bench-ids={','.join(VALIDATION_PROBLEMS)}"
SOCKET_IDS = "1,3,19,78"  # four validation problems, seven steps
KILL_IDS = "1,3,19"  # three problems, four steps: one item on each worker when the kill comes
API_KEY = "sk-remote-test-5f1c0e"
BOOTSTRAP = "exec(eval(sys.stdin.readline()))"  # execnet's remote python command line


def on_host(info: dict, account: str, command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["ssh", "-F", info["ssh_config"], account, command], capture_output=True, text=True, timeout=120
    )


def host_build(info: dict, host: dict) -> str:
    done = on_host(
        info,
        host["account"],
        f"{host['python']} -c 'from pytest_agentbench.core.host import package_build; print(package_build())'",
    )
    return done.stdout.strip()


def same_build(info: dict) -> dict:
    """The hosts' info when both run this checkout's build (checked again before a long test's remote run, as
    the checkout may have changed meanwhile). The test only reads the hosts: reinstalling them is
    .ci/ssh-setup's job, run as root before the tests (by .ci/run), never from here."""
    from pytest_agentbench.core.host import package_build

    stale = [h["account"] for h in info["hosts"] if host_build(info, h) != package_build()]
    if stale:
        missing(
            "sshd",
            f"the worker accounts {', '.join(stale)} run another build of the package than this "
            "checkout; rerun .ci/ssh-setup as root",
        )
    return info


@pytest.fixture(scope="module")
def hosts_lock():
    """One test process at a time uses the two hosts (under `pytest -n 2` this module's tests may be spread
    over two processes: the kill test must find exactly one worker of its own run on a host)."""
    import fcntl

    with open("/tmp/agentbench-remote-tests.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="module")
def loopback(hosts_lock):
    """The two hosts as .ci/ssh-setup wrote them, their package the same build as this checkout."""
    info = same_build(needs("sshd"))
    info["before"] = {h["account"]: home_files(Path(h["home"])) for h in info["hosts"]}
    return info


def home_files(home: Path) -> set[str]:
    """Files in a worker account's home outside its venv, cache, state and the capsules the GPU tests stage
    (a run must leave none there)."""
    out = set()
    for path in home.rglob("*"):
        rel = path.relative_to(home)
        if rel.parts[0] in ("venv", "cache", "state") or rel.parts[:2] == ("data", "core_bench") or not path.is_file():
            continue
        out.add(str(rel))
    return out


def tx(info: dict, account: str) -> list[str]:
    host = next(h for h in info["hosts"] if h["account"] == account)
    return ["--tx", f"ssh={account}//ssh_config={info['ssh_config']}//python={host['python']}"]


def both(info: dict) -> list[str]:
    return ["-d", *tx(info, "agentbench-a"), *tx(info, "agentbench-b")]


def private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def pytest_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:benchmark", *args]


def controller_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "OPENAI_"))}
    # the plugin as this checkout has it (the worker hosts have their own installed copy)
    env.update(
        AGENTBENCH_DATA_DIR=str(SHARED_DATA),
        AGENTBENCH_OFFLINE="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")])),
    )
    env.update(extra)  # a test's own values win (a skewed PYTHONPATH)
    return env


def run(cwd: Path, *args: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        pytest_cmd(*args), cwd=cwd, env=controller_env(**env), capture_output=True, text=True, timeout=timeout
    )


def records_of(run_dir: Path) -> list[dict]:
    return (
        read_jsonl(run_dir / "steps.jsonl")
        if (run_dir / "steps.jsonl").is_file()
        else read_jsonl(run_dir / "records.jsonl")
    )


def any_lost(run_dir: Path) -> bool:
    """Whether a lost record is in the run's records file yet (a line being written is skipped)."""
    for name in ("steps.jsonl", "records.jsonl"):
        path = run_dir / name
        for line in path.read_text().splitlines() if path.is_file() else []:
            try:
                if json.loads(line).get("lost"):
                    return True
            except ValueError:
                continue
    return False


# --------------------------------------------------------------------------- SciCode over two hosts


@pytest.fixture(scope="module")
def local_validation(loopback, shared_validation_oracle_run) -> dict[str, dict]:
    """The SciCode validation oracle run here alone (no xdist): the test session's one run of the split
    (helpers/fixtures.py), its records of COMPARED's problems by id and their metrics, as a run of those problems
    alone reports them (SciCode's own summary of those records)."""
    from pytest_agentbench.benchmarks.scicode.metrics import summarize

    records = {r["id"]: r for r in shared_validation_oracle_run.records if r["task"] in VALIDATION_PROBLEMS}
    assert len(records) == VALIDATION_STEPS
    return {"records": records, "summary": {"metrics": summarize(list(records.values()), {})["metrics"]}}


@pytest.mark.e2e
@pytest.mark.remote
@pytest.mark.slow
def test_validation_oracle_over_two_hosts_matches_a_local_run(loopback, local_validation, tmp_path):
    """The SciCode validation oracle (COMPARED's problems) run here alone and spread over both hosts: the same
    records (but host, worker and timings) and metrics; one header line per worker; only the controller wrote
    the run."""
    from pytest_agentbench.core.records import comparable

    reports = private_dir(tmp_path / "reports")
    same_build(loopback)  # the local run may have taken minutes
    remote = run(
        tmp_path,
        *VALIDATION,
        COMPARED,
        f"--bench-report-dir={reports}",
        "--bench-run-id=remote",
        *both(loopback),
        timeout=1500,
    )
    assert remote.returncode == 0, remote.stdout[-3000:] + remote.stderr[-2000:]
    run_dir = reports / "scicode" / "oracle" / "remote"
    mine = local_validation["records"]
    theirs = {r["id"]: r for r in records_of(run_dir)}
    assert len(theirs) == len(records_of(run_dir)) == VALIDATION_STEPS  # every step once
    assert sorted(mine) == sorted(theirs)
    for key in mine:
        assert comparable(theirs[key]) == comparable(mine[key]), key
    assert {r["worker"] for r in theirs.values()} == {"gw0", "gw1"}  # spread over both hosts
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["metrics"] == local_validation["summary"]["metrics"]
    assert (run_dir / "report.html").is_file()

    lines = [line for line in remote.stdout.splitlines() if line.startswith("agentbench worker ")]
    assert len(lines) == 2, remote.stdout[:3000]
    assert "gw0: agentbench-a" in lines[0] and "0 GPUs" in lines[0] and "/home/agentbench-a/data" in lines[0]
    assert "gw1: agentbench-b" in lines[1] and "1 GPUs" in lines[1] and "/home/agentbench-b/data" in lines[1]

    assert reports.stat().st_uid == 0 and (reports.stat().st_mode & 0o777) == 0o700
    for host in loopback["hosts"]:
        account = host["account"]
        # not hollow: the worker accounts are unprivileged and cannot even look into the report dir
        assert subprocess.run(["runuser", "-u", account, "--", "ls", str(reports)], capture_output=True).returncode != 0
        assert home_files(Path(host["home"])) == loopback["before"][account], f"stray files in {account}'s home"
        found = [p for p in Path(host["home"]).rglob("*") if p.name in ("steps.jsonl", "records.jsonl", "summary.json")]
        assert not found, found


@pytest.mark.e2e
@pytest.mark.remote
@pytest.mark.slow
def test_a_remote_host_builds_its_own_grading_environment_and_grades_in_it(loopback, tmp_path):
    """--bench-set grading_envs on a remote host: the worker resolves the built-in spec where it runs (its own
    cache, built there by pip on first use, as a user's host does), and the records keep that environment's
    verdict. The controller finds its own copy (the one .ci/grading-envs built)."""
    from pytest_agentbench.benchmarks.scicode import gradingenvs

    host = next(h for h in loopback["hosts"] if h["account"] == "agentbench-b")
    built = Path(host["home"]) / "cache" / "grading-envs"
    reports = private_dir(tmp_path / "reports")
    done = run(
        tmp_path,
        *VALIDATION,
        "--bench-ids=1,3",
        "--bench-set=grading_envs=2025",
        f"--bench-report-dir={reports}",
        "--bench-run-id=graded",
        "-d",
        *tx(loopback, "agentbench-b"),
        timeout=1200,
        **{gradingenvs.ROOT_ENV: str(needs("grading-envs"))},
    )
    try:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        records = records_of(reports / "scicode" / "oracle" / "graded")
        assert sorted(r["id"] for r in records) == ["1.1", "3.1"]
        for record in records:
            assert record["worker"] == "gw0" and record["status"] == "pass", record
            assert {name: v["status"] for name, v in record["grading_envs"].items()} == {"2025": "pass"}, record
        # built on the host, in its own cache, for its own interpreter
        assert [p.name.split("-")[0] for p in built.iterdir() if (p / gradingenvs.STAMP).is_file()] == ["2025"]
    finally:
        shutil.rmtree(built, ignore_errors=True)  # (the hosts' homes are checked for leftovers)


@pytest.fixture
def socket_server(loopback):
    """execnet's socket server (execnet/script/socketserver.py) on 127.0.0.1, run as agentbench-b with that
    account's worker python (so its own paths): the port it listens on. Stopped at teardown."""
    host = next(h for h in loopback["hosts"] if h["account"] == "agentbench-b")
    account = pwd.getpwnam(host["account"])
    port = free_port()
    proc = subprocess.Popen(
        [host["python"], "-u", "-m", "execnet.script.socketserver", f"127.0.0.1:{port}"],
        cwd=host["home"],
        user=account.pw_uid,
        group=account.pw_gid,
        extra_groups=[g.gr_gid for g in grp.getgrall() if host["account"] in g.gr_mem],
        env={"HOME": host["home"], "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        wait_for(
            lambda: any("Entering Accept loop" in line for line in lines) or proc.poll() is not None,
            60,
            "the socket server to listen",
        )
        assert proc.poll() is None, "".join(lines)
        yield {"port": port, "home": host["home"], "account": host["account"], "output": lines}
    finally:
        proc.terminate()  # the server, by its pid (the wrapper exec'd python)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        reader.join(10)


@pytest.mark.e2e
@pytest.mark.remote
@pytest.mark.slow
def test_a_socket_gateway_worker_runs_items_on_its_host_and_sends_the_records_back(
    loopback, local_validation, socket_server, shared_cache, tmp_path
):
    """``--tx socket=127.0.0.1:PORT`` (execnet's socket server, run by agentbench-b) beside a local popen
    worker: the records come back to the controller naming their worker and host, identical to the local
    run's for those items; the socket worker used its host's data dir."""
    from pytest_agentbench.core.records import comparable

    reports = private_dir(tmp_path / "reports")
    address = f"127.0.0.1:{socket_server['port']}"
    same_build(loopback)
    done = run(
        tmp_path,
        *VALIDATION,
        f"--bench-ids={SOCKET_IDS}",
        f"--bench-report-dir={reports}",
        "--bench-run-id=socket",
        f"--bench-cache-dir={shared_cache}",
        "-d",
        "--tx",
        f"socket={address}",
        "--tx",
        "popen",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:] + "".join(socket_server["output"])[-2000:]
    records = records_of(reports / "scicode" / "oracle" / "socket")
    theirs = {r["id"]: r for r in records}
    assert len(records) == len(theirs) == 7  # every step of the four problems once
    for key, record in theirs.items():
        assert comparable(record) == comparable(local_validation["records"][key]), key
        assert record["host"] and record["worker"] in ("gw0", "gw1"), record
    assert {r["worker"] for r in records} == {"gw0", "gw1"}, [(r["id"], r["worker"]) for r in records]

    lines = [line for line in done.stdout.splitlines() if line.startswith("agentbench worker ")]
    assert len(lines) == 2, done.stdout[:3000]
    assert lines[0].startswith(f"agentbench worker gw0: socket {address}") and "1 GPUs" in lines[0], lines
    assert "data /home/agentbench-b/data" in lines[0], lines  # its host's own data dir, not the controller's
    assert lines[1].startswith("agentbench worker gw1: this machine"), lines
    assert home_files(Path(socket_server["home"])) == loopback["before"][socket_server["account"]]
    assert any("got new connection" in line for line in socket_server["output"])


@pytest.mark.e2e
@pytest.mark.remote
@pytest.mark.slow
def test_a_host_with_other_data_is_refused_with_the_difference(loopback, tmp_path):
    problems = Path("/home/agentbench-a/data/scicode/problems_dev.jsonl")
    saved = problems.read_bytes()
    try:
        problems.write_bytes(saved + b"\n")
        args = [
            "--bench=scicode",
            "--model=oracle",
            "--bench-ids=1",
            f"--bench-report-dir={private_dir(tmp_path / 'reports')}",
            *both(loopback),
        ]
        pinned = run(tmp_path, *args, timeout=300)
        custom = run(tmp_path, *args, "--bench-set=allow_custom_data=true", timeout=300)  # hashes of what is there
    finally:
        problems.write_bytes(saved)
    for done in (pinned, custom):
        assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
        assert not list((tmp_path / "reports").rglob("*.jsonl"))  # refused before any item ran
    assert (
        "worker gw0 on agentbench-a cannot read the benchmark data in /home/agentbench-a/data: "
        "DataError: checksum mismatch for /home/agentbench-a/data/scicode/problems_dev.jsonl"
    ) in pinned.stderr
    theirs = hashlib.sha256(saved + b"\n").hexdigest()[:12]
    assert (
        "worker gw0 on agentbench-a has other data than the controller (problems_dev.jsonl: worker sha256 "
        f"{theirs}, controller 193968aff23b)"
    ) in custom.stderr


@pytest.mark.e2e
@pytest.mark.remote
@pytest.mark.slow
def test_a_conftest_model_override_cannot_run_remotely(loopback, tmp_path):
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n@pytest.fixture(scope='session')\ndef bench_model():\n    return object()\n"
    )
    done = run(
        tmp_path,
        "--bench=scicode",
        "--model=oracle",
        "--bench-ids=1",
        f"--bench-report-dir={private_dir(tmp_path / 'reports')}",
        *both(loopback),
        timeout=120,
    )
    assert done.returncode == 4
    assert "overrides the bench_model fixture, which cannot run on remote workers" in done.stdout + done.stderr


# --------------------------------------------------------------------------- GPU placement

GPU_CAPSULES = ("capsule-7038571", "capsule-3137115", "capsule-5367566")
CPU_CAPSULES = ("capsule-9168639", "capsule-9166182", "capsule-0325493")


@pytest.fixture(scope="module")
def staged_capsules(loopback, tmp_path_factory):
    """Synthetic capsules in the controller's capsule folder and in each host's own data dir."""
    staged = tmp_path_factory.mktemp("capsules")
    placed = []
    for parent in [staged, *(Path(h["home"]) / "data" / "core_bench" / "capsules" for h in loopback["hosts"])]:
        for cid in GPU_CAPSULES + CPU_CAPSULES:
            write_capsule_tree(parent, cid, gpu=cid in GPU_CAPSULES)
    for host in loopback["hosts"]:
        folder = Path(host["home"]) / "data" / "core_bench"
        for name in ("core_train.json", "benchmark_prompts.json"):
            shutil.copy(SHARED_DATA / "core_bench" / name, folder / name)
        subprocess.run(["chown", "-R", f"{host['account']}:{host['account']}", str(folder)], check=True)
        placed.append(folder)
    yield staged
    for folder in placed:
        shutil.rmtree(folder, ignore_errors=True)


def corebench_args(staged: Path, reports: Path, run_id: str) -> list[str]:
    return [
        "--bench=core-bench",
        "--bench-split=train",
        "--model=oracle",
        "--bench-set=gpus=all",
        f"--bench-ids={','.join(GPU_CAPSULES + CPU_CAPSULES)}",
        f"--bench-capsules-dir={staged}",
        f"--bench-report-dir={reports}",
        f"--bench-run-id={run_id}",
    ]


@pytest.mark.e2e
@pytest.mark.remote
@pytest.mark.slow
def test_gpu_capsules_run_only_on_the_host_with_a_gpu(loopback, staged_capsules, tmp_path):
    reports = private_dir(tmp_path / "reports")
    done = run(tmp_path, *corebench_args(staged_capsules, reports, "gpu"), *both(loopback), timeout=400)
    records = {r["id"]: r for r in read_jsonl(reports / "core-bench" / "oracle" / "gpu" / "records.jsonl")}
    assert sorted(records) == sorted(GPU_CAPSULES + CPU_CAPSULES), done.stdout[-3000:] + done.stderr[-2000:]
    assert {records[c]["worker"] for c in GPU_CAPSULES} == {"gw1"}  # agentbench-b declares the GPU
    assert all(records[c]["status"] != "env_error" for c in GPU_CAPSULES), [records[c] for c in GPU_CAPSULES]


@pytest.mark.e2e
@pytest.mark.remote
@pytest.mark.slow
def test_without_a_gpu_worker_gpu_capsules_are_env_errors_in_the_denominator(loopback, staged_capsules, tmp_path):
    reports = private_dir(tmp_path / "reports")
    done = run(
        tmp_path, *corebench_args(staged_capsules, reports, "nogpu"), "-d", *tx(loopback, "agentbench-a"), timeout=400
    )
    records = {r["id"]: r for r in read_jsonl(reports / "core-bench" / "oracle" / "nogpu" / "records.jsonl")}
    assert sorted(records) == sorted(GPU_CAPSULES + CPU_CAPSULES), done.stdout[-3000:] + done.stderr[-2000:]
    for cid in GPU_CAPSULES:
        assert records[cid]["status"] == "env_error" and "no worker with a GPU" in records[cid]["message"]
        assert "agentbench-a" in records[cid]["message"]
        assert records[cid]["unplaced"] == "gpu"
    summary = json.loads((reports / "core-bench" / "oracle" / "nogpu" / "summary.json").read_text())
    assert summary["metrics"]["capsules"] == 6 and summary["metrics"]["status_env_error"] == 3

    # the same run resumed with the GPU host among the workers: exactly the GPU capsules run again, there
    run_dir = reports / "core-bench" / "oracle" / "nogpu"
    resumed = run(
        tmp_path,
        *corebench_args(staged_capsules, reports, "nogpu"),
        f"--bench-resume={run_dir}",
        *both(loopback),
        timeout=400,
    )
    assert "3 item(s) whose host lacked what they need run again" in resumed.stdout, resumed.stdout[-3000:]
    final = read_jsonl(run_dir / "records.jsonl")
    assert sorted(r["id"] for r in final) == sorted(GPU_CAPSULES + CPU_CAPSULES), resumed.stdout[-3000:]
    again = {r["id"]: r for r in final if r["id"] in GPU_CAPSULES}
    assert all(r["status"] != "env_error" and r["worker"] == "gw1" and "unplaced" not in r for r in again.values()), (
        again
    )


# --------------------------------------------------------------------------- a worker or its host lost mid-run


def worker_pids(account: str) -> list[int]:
    """The execnet python of each worker running as ``account`` (not its forked children)."""
    done = subprocess.run(["ps", "-ww", "-u", account, "-o", "pid=,ppid=,args="], capture_output=True, text=True)
    found = {}
    for line in done.stdout.splitlines():
        pid, ppid, args = line.strip().split(None, 2)
        if BOOTSTRAP in args and not args.startswith("sh -c"):  # the python, not the shell ssh started it from
            found[int(pid)] = int(ppid)
    return [pid for pid, ppid in found.items() if ppid not in found]


def sshd_session_pids(account: str) -> list[int]:
    """The sshd processes serving ``account``'s connections (OpenSSH names them "sshd: <user> [priv]", the
    privileged monitor, and "sshd: <user>@notty", the session): the far end of the worker's connection."""
    done = subprocess.run(["ps", "-ww", "-e", "-o", "pid=,args="], capture_output=True, text=True)
    found = []
    for line in done.stdout.splitlines():
        pid, _, args = line.strip().partition(" ")
        if args.strip().startswith((f"sshd: {account} ", f"sshd: {account}@")):
            found.append(int(pid))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[-1].startswith("Z")


def kill_worker(account: str) -> list[int]:
    """The worker's python dies (as on an OOM kill); its host stays up."""
    victims = worker_pids(account)
    assert len(victims) == 1, f"not one worker of {account}: {victims}"
    subprocess.run(["runuser", "-u", account, "--", "kill", "-KILL", str(victims[0])], check=True)
    return victims


def signal_connection(account: str, signum: int) -> tuple[list[int], list[int]]:
    """``signum`` to the sshd session processes serving the one worker of ``account`` (not to the worker).
    Returns (sshd session pids, worker pids)."""
    workers = worker_pids(account)
    assert len(workers) == 1, f"not one worker of {account}: {workers}"
    sessions = sshd_session_pids(account)
    assert sessions, f"no sshd session of {account}"
    for pid in sessions:
        os.kill(pid, signum)
    return sessions, workers


def cut_connection(account: str) -> list[int]:
    """The host drops off the network, as the controller sees it: the ssh connection of its worker ends
    mid-item (its sshd session processes are killed), while the worker's python is left running there."""
    return signal_connection(account, signal.SIGKILL)[1]


FAULTS = {
    "worker killed": ("agentbench-a", "gw0", kill_worker),
    "connection cut": ("agentbench-b", "gw1", cut_connection),
}


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.e2e
@pytest.mark.remote
@pytest.mark.slow
def test_a_lost_worker_loses_its_item_naming_its_host_and_resume_completes(loopback, tmp_path, fault):
    account, gateway, inflict = FAULTS[fault]
    reports = private_dir(tmp_path / "reports")
    gate = threading.Event()

    def held(body):  # every model request waits until the test lets it through
        gate.wait(120)
        return {"text": "```python\ndef f():\n    return 0\n```"}

    orphans: list[int] = []
    with FakeOpenAI() as server:
        server.api_key = API_KEY  # the key reaches the remote workers only through workerinput
        for _ in range(40):
            server.reply_with(held)
        common = [
            "--bench=scicode",
            "--bench-split=validation",
            "--model=fake-model",
            f"--model-base-url={server.base_url}",
            f"--bench-ids={KILL_IDS}",
            "--bench-set=model_max_retries=0",
            f"--bench-report-dir={reports}",
            *both(loopback),
        ]
        proc = subprocess.Popen(
            pytest_cmd(*common, "--bench-run-id=lost"),
            cwd=tmp_path,
            env=controller_env(OPENAI_API_KEY=API_KEY),
            preexec_fn=ctrl_c_as_a_terminal_gives_it,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        run_dir = reports / "scicode" / "fake-model" / "lost"
        try:
            # both workers are inside an item once each has a model request waiting
            wait_for(lambda: len(server.requests) >= 2, 240, "a model request from each worker")
            try:
                orphans = inflict(account)
            except AssertionError as exc:
                gate.set()
                table = subprocess.run(
                    ["ps", "-ww", "-e", "-o", "user=,pid=,ppid=,args="], capture_output=True, text=True
                ).stdout
                pytest.fail(f"{exc}\n{table}\n{proc.communicate()[0][-4000:]}")
            # the controller has declared the worker lost (its item's lost record is written) while the other
            # worker is still held inside its item: then both requests are let through
            wait_for(lambda: proc.poll() is not None or any_lost(run_dir), 240, f"a lost record of {gateway}")
            gate.set()
            out, _ = proc.communicate(timeout=300)
        finally:
            gate.set()
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(30)
        first = records_of(run_dir)
        lost = [r for r in first if r.get("lost")]
        assert sorted(r["id"] for r in first) == ["1.1", "19.1", "19.2", "3.1"], out[-4000:]  # each once, counted
        assert lost, out[-4000:]  # the item it was in, and the later steps of that item's problem
        for record in lost:
            assert record["status"] == "error" and record["worker"] == gateway, record
            assert f"worker '{gateway}' on host {account}" in record["message"], record["message"]
        assert len(lost) < len(first), out[-4000:]  # the other worker's items ran: the run went on
        # a remote host's worker is never restarted (xdist's restart blocked or crashed the run): named once
        assert "replacing crashed worker" not in out and "INTERNALERROR" not in out, out[-4000:]
        assert out.count(f"agentbench: host {account} (") == 1 and f"of worker {gateway} lost (" in out, out[-4000:]
        assert proc.returncode == 1, out[-4000:]
        assert server.requests and all(
            r["headers"].get("authorization") == f"Bearer {API_KEY}" for r in server.requests
        )

        resumed = run(tmp_path, *common, f"--bench-resume={run_dir}", timeout=400, OPENAI_API_KEY=API_KEY)
    final = records_of(run_dir)
    ids = [r["id"] for r in final]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 4, resumed.stdout[-3000:]
    assert not [r for r in final if r.get("lost")]
    assert "whose worker died run again" in resumed.stdout, resumed.stdout[-3000:]
    for host in loopback["hosts"]:  # the key was held in memory only, on every host
        leaked = subprocess.run(["grep", "-rl", API_KEY, host["home"], str(reports)], capture_output=True, text=True)
        assert leaked.stdout == "", leaked.stdout
    # a worker cut off from its controller does not keep running on its host once its item is over
    try:
        wait_for(lambda: not any(alive(pid) for pid in orphans), 60, f"the cut-off worker {orphans} to end")
    finally:
        for pid in orphans:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- without SSH: the pieces

# The scheduler itself (GPU placement, a dead worker's item returned once, the rest of its task lost, its
# units not begun moved) is tested without SSH in tests/test_placement.py.


def test_run_settings_travel_without_paths_and_resolve_the_same(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from pytest_agentbench.core.options import Sources, resolve
    from pytest_agentbench.pytest_plugin.distribution.hostprobe import apply_forwarded, forwarded
    from pytest_agentbench.pytest_plugin.options import all_options

    options = all_options()
    cli = {
        "bench": "scicode",
        "model": "m",
        "model_params": '{"temperature": 0}',
        "ids": "1,3",
        "timeout": "12.5",
        "cache_dir": str(tmp_path / "mine"),
        "background": False,
        "difficulty": "easy",
    }  # another benchmark's option: never forwarded
    controller = resolve(
        options, Sources(cli=cli, ini={}, env={"OPENAI_API_KEY": "sk-1"}, invocation_dir=tmp_path, rootdir=tmp_path)
    )
    raw = forwarded(options, controller)
    assert "cache_dir" not in raw and "data_dir" not in raw and "difficulty" not in raw
    assert raw["model_api_key"] == "sk-1" and raw["ids"] == "1,3"
    namespace = SimpleNamespace(**{**{o.dest: None for o in options}, "agentbench_cache_dir": "/controller/cache"})
    host_env = {"OPENAI_BASE_URL": "http://elsewhere/v1", "AGENTBENCH_DATA_DIR": str(tmp_path / "host-data")}
    apply_forwarded(namespace, options, raw, 0, host_env)
    assert namespace.agentbench_cache_dir is None  # the host's own
    assert "OPENAI_BASE_URL" not in host_env  # the controller's default, not this host's variable
    worker = resolve(
        options,
        Sources(
            cli={o.name: getattr(namespace, o.dest) for o in options},
            ini={},
            env=host_env,
            invocation_dir=tmp_path,
            rootdir=tmp_path,
        ),
    )
    for option in options:
        if option.kind != "path" and option.name != "difficulty":
            assert worker[option.name] == controller[option.name], option.name
    assert worker["data_dir"] == tmp_path / "host-data"


def test_refusals_name_the_worker_the_host_and_the_difference():
    from pytest_agentbench.pytest_plugin.distribution.remote import refusal_of

    expected = {"version": "0.1.0", "build": "abc", "data_hashes": {"a.jsonl": "1" * 64, "b.txt": "2" * 64}}
    same = {"version": "0.1.0", "build": "abc", "data_hashes": dict(expected["data_hashes"]), "data_dir": "/d"}
    assert refusal_of("gw0", "u@h", same, expected) is None
    assert "has pytest-agentbench 0.2.0 (build abc), the controller 0.1.0 (build abc)" in refusal_of(
        "gw0", "u@h", {**same, "version": "0.2.0"}, expected
    )
    text = refusal_of("gw3", "u@h", {**same, "data_hashes": {"a.jsonl": "9" * 64}}, expected)
    assert text.startswith(
        "agentbench: worker gw3 on u@h has other data than the controller (a.jsonl: worker "
        "sha256 999999999999, controller 111111111111; b.txt: missing on the worker)"
    )
    assert "could not be probed: boom" in refusal_of("gw0", "u@h", {"probe_error": "boom"}, expected)


# --------------------------------------------------------------------------- a host that goes silent

SILENT_TIMEOUT = 8.0  # --bench-set host_timeout for the silent-host test: a lost host is declared within 10 s


def stop_connection(account: str) -> tuple[list[int], list[int]]:
    """The host goes silent without closing anything: the sshd processes serving its connection are stopped
    (SIGSTOP), so its TCP connection stays open but nothing answers on it; the worker's python goes on
    running on its host, cut off. Returns (stopped sshd pids, worker pids)."""
    return signal_connection(account, signal.SIGSTOP)


@pytest.mark.e2e
@pytest.mark.remote
@pytest.mark.slow
def test_a_silent_host_is_lost_within_the_bound_and_the_run_finishes_on_the_other(loopback, tmp_path):
    """agentbench-b's connection goes silent mid-item (its sshd stopped, the connection left open): within the
    host timeout the run declares it lost, records its in-flight task as lost naming the host, finishes the rest
    on agentbench-a without restarting anything there, and exits 1 naming the host; the cut-off worker stops
    on its own within the same bound; a resume completes every item exactly once."""
    reports = private_dir(tmp_path / "reports")
    gate = threading.Event()

    def held(body):
        gate.wait(120)
        return {"text": "```python\ndef f():\n    return 0\n```"}

    stopped: list[int] = []
    workers: list[int] = []
    with FakeOpenAI() as server:
        server.api_key = API_KEY
        for _ in range(40):
            server.reply_with(held)
        common = [
            "--bench=scicode",
            "--bench-split=validation",
            "--model=fake-model",
            f"--model-base-url={server.base_url}",
            f"--bench-ids={KILL_IDS}",
            "--bench-set=model_max_retries=0",
            f"--bench-set=host_timeout={SILENT_TIMEOUT}",
            f"--bench-report-dir={reports}",
            *both(loopback),
        ]
        proc = subprocess.Popen(
            pytest_cmd(*common, "--bench-run-id=silent"),
            cwd=tmp_path,
            env=controller_env(OPENAI_API_KEY=API_KEY),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            wait_for(lambda: len(server.requests) >= 2, 240, "a model request from each worker")
            try:
                stopped, workers = stop_connection("agentbench-b")
            except AssertionError as exc:
                gate.set()
                pytest.fail(f"{exc}\n{proc.communicate(timeout=300)[0][-4000:]}")
            silent_at = time.monotonic()
            ended: list[float] = []  # when the cut-off worker's process ended, watched from the side

            def watch_worker():
                while any(alive(pid) for pid in workers) and time.monotonic() - silent_at < 300:
                    time.sleep(0.2)
                ended.append(time.monotonic() - silent_at)

            watcher = threading.Thread(target=watch_worker, daemon=True)
            watcher.start()
            gate.set()
            out, _ = proc.communicate(timeout=300)
            watcher.join(300)
            worker_stopped = ended[0]
        finally:
            gate.set()
            for pid in stopped:  # the stopped sshd session: it serves nothing any more
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        assert proc.returncode == 1, out[-4000:]
        assert "INTERNALERROR" not in out and "replacing crashed worker" not in out, out[-4000:]
        # declared by the heartbeat ("no answer for N s") or by ssh's keep-alive ("its connection ended")
        assert "agentbench: lost host agentbench-b (" in out, out[-4000:]
        assert ", worker gw1: no answer for" in out or ", worker gw1: its connection ended" in out, out[-4000:]
        silent_for = re.search(r", worker gw1: no answer for (\d+) s", out)
        # the heartbeat's figure: not before the host timeout (a bound of ten times it only ends a hung wait)
        assert not silent_for or SILENT_TIMEOUT <= int(silent_for.group(1)) < SILENT_TIMEOUT * 10, out[-4000:]
        # the cut-off worker ended by itself (it heard no heartbeat for the host timeout), not when the watch
        # above gave up on it: ten times the timeout tells the two apart on a loaded machine
        assert worker_stopped < SILENT_TIMEOUT * 10, worker_stopped
        run_dir = reports / "scicode" / "fake-model" / "silent"
        first = records_of(run_dir)
        assert sorted(r["id"] for r in first) == ["1.1", "19.1", "19.2", "3.1"], out[-4000:]  # each once
        lost = [r for r in first if r.get("lost")]
        assert lost, out[-4000:]
        assert len({r["id"].split(".")[0] for r in lost}) == 1, lost  # the in-flight task only
        for record in lost:
            assert record["status"] == "error" and record["worker"] == "gw1", record
            assert "worker 'gw1' on host agentbench-b" in record["message"], record["message"]
        assert all(r["worker"] == "gw0" for r in first if not r.get("lost")), first  # the rest moved to a

        resumed = run(tmp_path, *common, f"--bench-resume={run_dir}", timeout=400, OPENAI_API_KEY=API_KEY)
    assert resumed.returncode == 1 and "INTERNALERROR" not in resumed.stdout, resumed.stdout[-3000:]  # wrong code fails
    assert "whose worker died run again" in resumed.stdout, resumed.stdout[-3000:]
    final = records_of(run_dir)
    ids = [r["id"] for r in final]
    assert sorted(ids) == ["1.1", "19.1", "19.2", "3.1"], resumed.stdout[-3000:]
    assert not [r for r in final if r.get("lost")]


def shadow_module_dir(name: str) -> Path:
    """A folder (readable by the worker accounts) whose ``<name>`` package fails to import, as on a host where
    it is not installed."""
    folder = Path(f"/tmp/agentbench-no-{name}-{os.getpid()}")
    (folder / name).mkdir(parents=True, exist_ok=True)
    (folder / name / "__init__.py").write_text(f"raise ModuleNotFoundError(\"No module named '{name}'\")\n")
    for path in (folder, folder / name, folder / name / "__init__.py"):
        path.chmod(0o755)
    return folder


@pytest.mark.e2e
@pytest.mark.remote
@pytest.mark.slow
def test_a_host_whose_python_lacks_execnet_is_refused_by_name_once(loopback, tmp_path):
    folder = shadow_module_dir("execnet")
    try:
        host = next(h for h in loopback["hosts"] if h["account"] == "agentbench-a")
        broken = [
            "--tx",
            f"ssh=agentbench-a//ssh_config={loopback['ssh_config']}//python=env PYTHONPATH={folder} {host['python']}",
        ]
        done = run(
            tmp_path,
            "--bench=scicode",
            "--model=oracle",
            "--bench-ids=1",
            f"--bench-report-dir={private_dir(tmp_path / 'reports')}",
            "-d",
            *broken,
            *tx(loopback, "agentbench-b"),
            timeout=300,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    text = done.stdout + done.stderr
    assert done.returncode == 4, text[-3000:]
    assert (
        text.count(
            "worker gw0 on agentbench-a cannot start a pytest-xdist worker: its python cannot import "
            "execnet: ModuleNotFoundError"
        )
        == 1
    ), text[-3000:]
    assert "replacing crashed worker" not in text  # refused once, never restarted there


@pytest.mark.e2e
@pytest.mark.remote
@pytest.mark.slow
def test_a_host_whose_worker_cannot_start_is_lost_once_and_the_other_host_runs_everything(loopback, tmp_path):
    """The probe passes but the worker dies at start (a plugin its pytest cannot import): the host is named
    once, nothing is restarted there, the other host runs every item, exit 1."""
    host = next(h for h in loopback["hosts"] if h["account"] == "agentbench-a")
    broken = [
        "--tx",
        f"ssh=agentbench-a//ssh_config={loopback['ssh_config']}"
        f"//python=env PYTEST_PLUGINS=agentbench_no_such_plugin {host['python']}",
    ]
    reports = private_dir(tmp_path / "reports")
    done = run(
        tmp_path,
        "--bench=scicode",
        "--bench-split=validation",
        "--model=oracle",
        "--bench-ids=1,3",
        f"--bench-report-dir={reports}",
        "--bench-run-id=nostart",
        "-d",
        *broken,
        *tx(loopback, "agentbench-b"),
        timeout=300,
    )
    text = done.stdout + done.stderr
    assert done.returncode == 1, text[-3000:]
    assert "replacing crashed worker" not in text and "INTERNALERROR" not in text, text[-3000:]
    assert text.count("agentbench: host agentbench-a (") == 1, text[-3000:]  # named once, with its hostname
    assert "of worker gw0 lost (its worker could not start)" in text, text[-3000:]
    records = records_of(reports / "scicode" / "oracle" / "nostart")
    assert sorted(r["id"] for r in records) == ["1.1", "3.1"] and {r["worker"] for r in records} == {"gw1"}
    assert all(r["status"] == "pass" for r in records), records


@pytest.mark.e2e
@pytest.mark.remote
@pytest.mark.slow
def test_a_version_skew_is_refused_with_the_difference_unless_allowed(loopback, tmp_path):
    """The controller's python finds numpy 0.0.1's metadata first on its path (a dist-info folder ahead of the
    installed one), so each host's real numpy differs from the controller's."""
    import numpy

    skewed = skewed_metadata(tmp_path / "skewed", numpy="0.0.1")

    args = [
        "--bench=scicode",
        "--bench-split=validation",
        "--model=oracle",
        "--bench-ids=1",
        f"--bench-report-dir={private_dir(tmp_path / 'reports')}",
        "-d",
        *tx(loopback, "agentbench-a"),
    ]
    refused = run(tmp_path, *args, timeout=300, PYTHONPATH=skewed)
    assert refused.returncode == 4, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert (
        f"worker gw0 on agentbench-a has other package versions than the controller (numpy: worker "
        f"{numpy.__version__}, controller 0.0.1)"
    ) in refused.stderr, refused.stderr[-2000:]
    assert "--bench-set=allow_version_skew=true" in refused.stderr
    assert not list((tmp_path / "reports").rglob("*.jsonl"))
    allowed = run(tmp_path, *args, "--bench-set=allow_version_skew=true", timeout=300, PYTHONPATH=skewed)
    assert allowed.returncode == 0, allowed.stdout[-3000:] + allowed.stderr[-2000:]


def skewed_metadata(folder: Path, **versions: str) -> str:
    """A PYTHONPATH of ``folder``, holding a dist-info folder of each distribution at another version, then the
    controller's own: ``importlib.metadata`` finds those versions first, while the packages import as installed."""
    for name, version in versions.items():
        info = folder / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return os.pathsep.join([str(folder), controller_env()["PYTHONPATH"]])


def test_ssh_liveness_options_are_added_only_where_the_users_config_leaves_them_unset(tmp_path):
    from pytest_agentbench.pytest_plugin.distribution.remote import ssh_liveness_options, with_liveness

    needs("ssh")
    plain = tmp_path / "plain_config"
    plain.write_text("Host worker\n    HostName 127.0.0.1\n")
    own = tmp_path / "own_config"
    own.write_text("Host worker\n    HostName 127.0.0.1\n    ServerAliveInterval 7\n    ConnectTimeout 9\n")
    assert ssh_liveness_options("worker", str(plain), 40) == ["-o", "ServerAliveInterval=10", "-o", "ConnectTimeout=40"]
    assert ssh_liveness_options("worker", str(own), 40) == []  # the user's ssh_config wins
    assert ssh_liveness_options("-o ConnectTimeout=3 worker", str(plain), 40) == ["-o", "ServerAliveInterval=10"]
    assert (
        with_liveness(f"2*ssh=worker//ssh_config={plain}//python=py", 20)
        == f"2*ssh=-o ServerAliveInterval=5 -o ConnectTimeout=20 worker//ssh_config={plain}//python=py"
    )
    assert with_liveness("socket=127.0.0.1:8888", 20) == "socket=127.0.0.1:8888"


def test_version_differences_name_each_package():
    from pytest_agentbench.pytest_plugin.distribution.hostprobe import installed_versions, version_differences

    mine = installed_versions()
    assert set(mine) == {"pytest", "pytest-xdist", "execnet", "numpy", "scipy", "h5py"}
    assert version_differences(mine, mine) == []
    theirs = {**mine, "h5py": "1.0", "execnet": None}
    assert version_differences(theirs, mine) == [
        f"execnet: worker not installed, controller {mine['execnet']}",
        f"h5py: worker 1.0, controller {mine['h5py']}",
    ]
