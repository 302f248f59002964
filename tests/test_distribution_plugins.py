"""One distribution component: a distributed run has one pytest-agentbench plugin object that
owns the xdist wiring on the controller and one on each worker (registered only there), the worker input is one
typed handshake built and read in one place each, the role is decided once, and the plugins leave the plugin
manager at unconfigure."""

from __future__ import annotations

import json
from pathlib import Path

import execnet
import pytest

from pytest_agentbench.pytest_plugin.distribution.handshake import HandshakeError, RemoteInput, WorkerInput

from helpers.bench_runs import read_jsonl, run_dirs

# What a conftest sees in each process: the role, the plugins of pytest-agentbench that implement xdist's
# wiring hooks (the controller's hooks; a worker must have none), the distribution plugins by name, what the
# worker's controller sent, and at the very end of the session which distribution plugins are still registered.
SEEING_CONFTEST = """

import json, os
import pytest
from pytest_agentbench.pytest_plugin.distribution.handshake import ROLE, WORKER_INPUT
from pytest_agentbench.pytest_plugin.run import STATE

DISTRIBUTION = "agentbench-distribution"
WIRING = ("pytest_configure_node", "pytest_xdist_make_scheduler", "pytest_xdist_newgateway", "pytest_handlecrashitem",
          "pytest_xdist_setupnodes", "pytest_testnodedown", "pytest_xdist_node_collection_finished")

def ours(plugin):
    return (getattr(plugin, "__module__", None) or getattr(plugin, "__name__", "")).startswith("pytest_agentbench")

def where(config):
    return getattr(config, "workerinput", {}).get("workerid", "controller")

def write(config, when, data):
    with open(os.path.join(os.environ["SEEN_DIR"], f"{where(config)}-{when}.json"), "w") as f:
        json.dump(data, f)

def pytest_sessionstart(session):
    config = session.config
    manager = config.pluginmanager
    wiring = {}
    for hook in WIRING:
        caller = getattr(manager.hook, hook, None)
        for impl in (caller.get_hookimpls() if caller is not None else []):
            if ours(impl.plugin):
                wiring.setdefault(manager.get_name(impl.plugin), []).append(hook)
    handshake = config.stash.get(WORKER_INPUT, None)
    write(config, "start", {
        "role": config.stash[ROLE].value,
        "wiring": wiring,
        "distribution": sorted(n for n, _ in manager.list_name_plugin() if n and n.startswith(DISTRIBUTION)),
        "run_dir": str(config.stash[STATE].run_dir),
        "handshake": None if handshake is None else {"run_dir": str(handshake.run_dir),
                                                     "only_bench": handshake.only_bench,
                                                     "remote": handshake.remote is not None},
    })

@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    write(config, "end", sorted(n for n, _ in config.pluginmanager.list_name_plugin()
                                if n and n.startswith("agentbench-")))
"""


def seen(folder: Path) -> dict[str, object]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))}


@pytest.mark.e2e
@pytest.mark.slow  # two xdist workers; the fast loop keeps the one-worker refusal below and the in-process worker
def test_one_plugin_owns_the_xdist_wiring_on_the_controller_and_one_is_on_each_worker(
    pytester, tiny, tmp_path, monkeypatch
):
    folder = tmp_path / "seen"
    folder.mkdir()
    monkeypatch.setenv("SEEN_DIR", str(folder))
    with open(pytester.path / "conftest.py", "a") as conftest:  # after the tiny dataset's model
        conftest.write(SEEING_CONFTEST)
    result = tiny("-n", "2", "--bench-run-id=spread")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    [run] = [p for p in run_dirs(pytester.path) if p.name == "spread"]
    workers = {record["worker"] for record in read_jsonl(run / "steps.jsonl")}
    assert workers and workers <= {"gw0", "gw1"}, workers

    found = seen(folder)
    # xdist ends a worker's process once its session finished, before its unconfigure hooks have run or while they
    # run (pytest-xdist #282): a worker's "end" is seen below, on a worker made as xdist makes one
    assert {"controller-end", "controller-start", "gw0-start", "gw1-start"} <= set(found), sorted(found)
    controller = found["controller-start"]
    assert controller["role"] == "controller"
    assert controller["distribution"] == ["agentbench-distribution-controller"]
    # every wiring hook pytest-agentbench implements is that one plugin's
    assert list(controller["wiring"]) == ["agentbench-distribution-controller"], controller["wiring"]
    assert sorted(controller["wiring"]["agentbench-distribution-controller"]) == [
        "pytest_configure_node",
        "pytest_handlecrashitem",
        "pytest_testnodedown",
        "pytest_xdist_make_scheduler",
        "pytest_xdist_newgateway",
        "pytest_xdist_node_collection_finished",
    ]
    assert controller["handshake"] is None
    for worker in ("gw0", "gw1"):
        start = found[f"{worker}-start"]
        assert start["role"] == "worker"
        assert start["distribution"] == ["agentbench-distribution-worker"], start
        assert start["wiring"] == {}, start  # no controller hook on a worker
        # what the controller sent, read back typed: the controller's run folder, only the benchmark collected
        assert start["handshake"] == {"run_dir": controller["run_dir"], "only_bench": True, "remote": False}
        assert Path(start["run_dir"]).resolve() == Path(controller["run_dir"]).resolve() == run.resolve()
    assert found["controller-end"] == []  # every plugin object of the run unregistered at unconfigure
    assert all(found[f"{worker}-end"] == [] for worker in ("gw0", "gw1") if f"{worker}-end" in found), found


class MadeWorker:
    """Makes an in-process session an xdist worker the way xdist's worker entry point does (xdist/remote.py): its
    ``config.workerinput`` is set before ``pytest_cmdline_main``, here with what a controller would send."""

    def __init__(self, sent: dict) -> None:
        self.sent = sent

    @pytest.hookimpl(tryfirst=True)
    def pytest_cmdline_main(self, config: pytest.Config) -> None:
        config.workerinput = {
            "workerid": "gw7",
            "workercount": 1,
            "testrunuid": "made",
            "mainargv": ["pytest"],
            **self.sent,
        }


@pytest.mark.e2e
def test_a_workers_plugin_reads_the_handshake_and_is_unregistered_at_unconfigure(
    pytester, shared_data, tmp_path, monkeypatch
):
    folder = tmp_path / "seen"
    folder.mkdir()
    monkeypatch.setenv("SEEN_DIR", str(folder))
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(shared_data))
    monkeypatch.setenv("AGENTBENCH_OFFLINE", "1")
    pytester.makeconftest(SEEING_CONFTEST)
    sent = WorkerInput(run_dir=tmp_path / "the-controllers-run", only_bench=True).to_workerinput()
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--bench=scicode",
        "--bench-split=validation",
        "--model=oracle",
        "--bench-ids=3",
        "--collect-only",
        "-q",
        plugins=[MadeWorker(sent)],
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    found = seen(folder)
    assert sorted(found) == ["gw7-end", "gw7-start"]
    start = found["gw7-start"]
    assert start["role"] == "worker" and start["distribution"] == ["agentbench-distribution-worker"]
    assert start["run_dir"] == str(tmp_path / "the-controllers-run")  # the run is the controller's, as sent
    assert found["gw7-end"] == []


@pytest.mark.e2e
def test_without_xdist_the_process_is_alone_and_no_distribution_plugin_is_registered(
    pytester, tiny, tmp_path, monkeypatch
):
    folder = tmp_path / "seen"
    folder.mkdir()
    monkeypatch.setenv("SEEN_DIR", str(folder))
    with open(pytester.path / "conftest.py", "a") as conftest:
        conftest.write(SEEING_CONFTEST)
    result = tiny("-n", "0", "--bench-ids=3", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    found = seen(folder)
    assert sorted(found) == ["controller-end", "controller-start"]
    assert found["controller-start"]["role"] == "alone"
    assert found["controller-start"]["distribution"] == [] and found["controller-start"]["wiring"] == {}


BOGUS_KEY_CONFTEST = """

def pytest_configure_node(node):
    node.workerinput["agentbench_from_the_future"] = 1  # as a controller of another release would
"""


@pytest.mark.slow
@pytest.mark.e2e
def test_a_worker_refuses_worker_input_it_does_not_know_naming_the_key(pytester, tiny):
    with open(pytester.path / "conftest.py", "a") as conftest:
        conftest.write(BOGUS_KEY_CONFTEST)
    result = tiny("-n", "1", "--bench-ids=3", "--max-worker-restart=0")
    assert result.ret != pytest.ExitCode.OK
    out = result.stdout.str() + result.stderr.str()
    assert "'agentbench_from_the_future'" in out and "install the controller's version" in out, out[-3000:]


# ---- the handshake itself


def full_input(heartbeat: object = None) -> WorkerInput:
    return WorkerInput(
        run_dir=Path("/reports/scicode/m/run-1"),
        only_bench=False,
        run_dirs={"a": Path("/reports/scicode/a/both"), "b": Path("/reports/scicode/b/both")},
        resumed=json.dumps([{"id": "1.1", "task": "1", "status": "pass"}]),
        remote=RemoteInput(
            settings={"bench": "scicode", "model_api_key": "sk-x", "ids": ["1.1"]},
            host="cpu-b (node7)",
            gpus=1,
            host_timeout=40.0,
            heartbeat=heartbeat,
        ),
    )


def xdist_input(ours: dict) -> dict:
    """A worker input as xdist hands it over: its own keys, ours, carried by execnet's serializer."""
    sent = {"workerid": "gw0", "workercount": 2, "testrunuid": "abc", "mainargv": ["pytest"], **ours}
    return execnet.loads(execnet.dumps(sent))


@pytest.mark.parametrize(
    "handshake",
    [
        full_input(),
        WorkerInput(run_dir=Path("reports/scicode/m/run-2"), only_bench=True),
    ],
    ids=["everything", "the-least"],
)
def test_the_worker_input_reads_back_as_it_was_built(handshake):
    read = WorkerInput.from_workerinput(xdist_input(handshake.to_workerinput()))
    assert read == handshake


def test_the_worker_input_carries_each_part_only_when_there_is_one():
    assert sorted(WorkerInput(run_dir=Path("r"), only_bench=True).to_workerinput()) == [
        "agentbench_only_bench",
        "agentbench_run_dir",
    ]
    channel = object()  # execnet passes a channel by reference: it travels as itself
    built = full_input(heartbeat=channel).to_workerinput()
    assert built["agentbench_heartbeat"] is channel
    assert WorkerInput.from_workerinput(built).remote.heartbeat is channel
    read = WorkerInput.from_workerinput(built)
    assert read.run_dir_of("b") == Path("/reports/scicode/b/both") and read.run_dir_of(None) == read.run_dir
    assert read.resumed_records() == {"1.1": {"id": "1.1", "task": "1", "status": "pass"}}


def test_a_controller_that_sends_nothing_of_ours_is_no_handshake():
    assert WorkerInput.from_workerinput(xdist_input({})) is None


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda wi: wi.update(agentbench_from_the_future=1), "'agentbench_from_the_future', which this worker"),
        (lambda wi: wi.pop("agentbench_only_bench"), "lacks 'agentbench_only_bench'"),
        (lambda wi: wi["agentbench_remote"].pop("host_timeout"), "without 'host_timeout'"),
        (lambda wi: wi.pop("agentbench_remote"), "'agentbench_heartbeat' without 'agentbench_remote'"),
    ],
    ids=["unknown-key", "missing-key", "missing-remote-field", "heartbeat-alone"],
)
def test_worker_input_it_cannot_read_is_an_error_naming_the_key(change, named):
    sent = full_input(heartbeat="a channel").to_workerinput()
    change(sent)
    with pytest.raises(HandshakeError) as caught:
        WorkerInput.from_workerinput(sent)
    message = str(caught.value)
    assert named in message, message
    assert "install the controller's version where the worker runs" in message
