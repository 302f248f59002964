"""No private pytest or xdist API: every pytest-xdist/execnet attribute the package uses that they do not
document is listed in ``pytest_plugin/distribution/xdist_compat.py`` and used nowhere else, and each still exists
in the installed releases (a failure names the attribute, the release, and what uses it). A real ``-n 1`` run
calls each adapter function on xdist's own objects."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import signal
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_agentbench.pytest_plugin.distribution import xdist_compat

from helpers.bench_runs import SocketHost

PACKAGE = Path(xdist_compat.__file__).resolve().parents[2]
ADAPTER = Path(xdist_compat.__file__).resolve()


def resolve(owner: str):
    """``a.b.C`` or ``a.b.C.method``: the object, importing the longest module prefix."""
    parts = owner.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(owner)


def present(owner: str, attribute: str) -> bool:
    """Whether ``owner`` still has ``attribute``: on the class, as ``self.<attribute>`` set in its source, or,
    for ``var.attr``, as an assignment in the function's source."""
    obj = resolve(owner)
    if "." in attribute:
        return re.search(rf"\b{re.escape(attribute)}\s*=", inspect.getsource(obj)) is not None
    if hasattr(obj, attribute):
        return True
    return re.search(rf"self\.{re.escape(attribute)}\s*[:=]", inspect.getsource(obj)) is not None


@pytest.mark.parametrize("owner, attribute", xdist_compat.INTERNALS, ids=lambda v: str(v))
def test_each_internal_the_adapter_uses_still_exists(owner, attribute):
    releases = f"pytest-xdist {version('pytest-xdist')}, execnet {version('execnet')}"
    try:
        found = present(owner, attribute)
    except (ImportError, AttributeError, OSError, TypeError) as exc:
        pytest.fail(
            f"{owner} is gone in {releases} ({exc}): pytest_plugin/distribution/xdist_compat.py uses its "
            f"{attribute!r}; adapt the adapter or bound the release in pyproject.toml"
        )
    assert found, (
        f"{owner}.{attribute} is gone in {releases}: pytest_plugin/distribution/xdist_compat.py uses it; adapt the "
        f"adapter or bound the release in pyproject.toml"
    )


@pytest.mark.parametrize("group", xdist_compat.EITHER, ids=lambda g: " or ".join(f"{o}.{a}" for o, a in g))
def test_one_shape_of_each_internal_that_changed_shape_exists(group):
    releases = f"pytest-xdist {version('pytest-xdist')}, execnet {version('execnet')}"

    def exists(owner: str, attribute: str) -> bool:
        try:
            return present(owner, attribute)
        except (ImportError, AttributeError, OSError, TypeError):
            return False

    assert any(exists(owner, attribute) for owner, attribute in group), (
        f"none of {[f'{o}.{a}' for o, a in group]} exists in {releases}: pytest_plugin/distribution/xdist_compat.py "
        f"uses one of them; adapt the adapter or bound the release in pyproject.toml"
    )


# Spellings of xdist/execnet internals (undocumented attributes, "_" names of their objects): only the adapter
# may use them. Each pattern names what it catches.
FORBIDDEN = {
    r"\.gateway\b": "a worker's gateway",
    r"\bsend_runtest_(some|all)\b": "WorkerController.send_runtest_*",
    r"\bsend_steal\b": "WorkerController.send_steal",
    r"\bshutting_down\b": "WorkerController.shutting_down",
    r"\bnode\.shutdown\(": "WorkerController.shutdown",
    r"\bnodemanager\b": "DSession.nodemanager",
    r"\bhandle_crashitem\b": "DSession.handle_crashitem",
    r"\b(workqueue|assigned_work|registered_collections|loadscopereorder)\b": "a load-scope scheduler's state",
    r"\b_(assign_work_unit|split_scope|pending_of|reschedule|check_nodes_have_same_collection|clone_node)\b": (
        "a private xdist method"
    ),
    r"\b(from|import) xdist\.": "an xdist module (its hooks get the objects; nothing needs importing)",
    r"\bexecnet\.(gateway|gateway_base|multi|rsync)\b": "an execnet module beyond its documented top level",
    r"getplugin\(\"dsession\"\)|get_plugin\(\"dsession\"\)": "xdist's DSession plugin",
    r"\breport\.node\b|\brep\.node\b": "the worker xdist sets on a report",
}


def test_no_module_but_the_adapter_touches_xdist_or_execnet_internals():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.resolve() == ADAPTER:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            for pattern, what in FORBIDDEN.items():
                if re.search(pattern, code) and not code.strip().startswith(('"', "'", "``")):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{number}: {what}: {line.strip()}")
    assert not found, "use pytest_plugin/distribution/xdist_compat.py for:\n" + "\n".join(found)


PROBE_CONFTEST = """
import json, os, pytest
from pytest_agentbench.pytest_plugin.distribution import xdist_compat as xc

SEEN = {}

def pytest_xdist_newgateway(gateway):
    SEEN["spec_of"] = str(xc.spec_of(gateway))

def pytest_testnodeready(node):
    SEEN["worker_id"] = xc.worker_id(node)
    SEEN["worker_spec"] = str(xc.worker_spec(node))
    SEEN["is_shutting_down"] = xc.is_shutting_down(node)
    SEEN["callable"] = [callable(node.send_runtest_some), callable(node.shutdown)]
    SEEN["active"] = node in xc.active_workers(node.config)
    SEEN["scheduler"] = callable(xc.current_scheduler(node.config).remove_node)
    channel = xc.new_channel(node)
    SEEN["channel"] = not channel.isclosed()
    channel.close()

def seen_down(node, error):
    SEEN["down"] = xc.worker_id(node)
    return False  # xdist's own handling follows

def pytest_xdist_setupnodes(config, specs):
    xc.drop_rsync_roots(config, lambda root: False)  # nodemanager.roots must be readable and settable
    SEEN["expected_workers"] = xc.expected_workers(config)
    SEEN["routed"] = xc.route_worker_down(config, seen_down)

def pytest_handlecrashitem(crashitem, report, sched):
    SEEN["crashed_worker"] = xc.worker_id(xc.crashed_worker(report))

def pytest_sessionfinish(session):
    if not hasattr(session.config, "workerinput"):
        with open(os.environ["SEEN_FILE"], "w") as f:
            json.dump(SEEN, f)
"""


@pytest.mark.e2e
@pytest.mark.slow
def test_the_adapter_works_on_xdists_own_objects(pytester, tmp_path, monkeypatch):
    seen_file = tmp_path / "seen.json"
    monkeypatch.setenv("SEEN_FILE", str(seen_file))
    pytester.makeconftest(PROBE_CONFTEST)
    pytester.makepyfile(test_crash="import os\ndef test_ok():\n    pass\ndef test_dies():\n    os._exit(3)\n")
    result = pytester.runpytest_subprocess("-n", "1", "-p", "no:cacheprovider", "--max-worker-restart=0")
    seen = json.loads(seen_file.read_text())
    assert seen == {
        "spec_of": seen["spec_of"],
        "worker_id": "gw0",
        "worker_spec": seen["spec_of"],
        "is_shutting_down": False,
        "callable": [True, True],
        "expected_workers": 1,
        "crashed_worker": "gw0",
        "active": True,
        "scheduler": True,
        "channel": True,
        "routed": True,
        "down": "gw0",
    }, (seen, result.stdout.str()[-2000:])
    assert "popen" in seen["spec_of"]


def test_cut_worker_ends_a_socket_gateway_whose_host_went_silent(tmp_path):
    """A socket gateway whose host stopped answering (its server stopped: no FIN, no RST) has a receive blocked
    on it; ``cut_worker`` (what the heartbeat calls on a lost host) must end it at once, as end-of-file. execnet's
    ``SocketIO.kill`` does nothing, so a cut that only called it left the run waiting forever."""
    import execnet

    host = SocketHost(tmp_path / "host", os.environ)
    try:
        gateway = execnet.makegateway(f"socket={host.address}")
        channel = gateway.remote_exec("channel.send(channel.receive())")
        os.kill(host.proc.pid, signal.SIGSTOP)
        with pytest.raises(execnet.TimeoutError):  # silent: nothing ends the wait by itself
            channel.receive(timeout=1)
        xdist_compat.cut_worker(SimpleNamespace(gateway=gateway))  # a worker is a WorkerController; it has .gateway
        with pytest.raises(EOFError):  # the cut ends the wait: a silent host would give execnet.TimeoutError
            channel.receive(timeout=10)
        gateway.exit()
    finally:
        host.stop()
