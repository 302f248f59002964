"""Every use of a pytest-xdist or execnet attribute that neither documents: the one place a new release can
break, and the one module ``tests/test_xdist_compat.py`` checks against the installed releases.

The rest of the package uses only documented API: xdist's hooks (``pytest_xdist_make_scheduler``,
``pytest_configure_node``, ``pytest_xdist_newgateway``, ``pytest_handlecrashitem``, ...), its scheduler
interface (``xdist.scheduler.protocol.Scheduling``, implemented by ``placement.PlacementScheduling``),
``workerinput`` and the ``--tx``/``--dist`` options; execnet's ``XSpec``, ``Gateway.remote_exec`` and channels.
What xdist hands those hooks (a ``WorkerController`` "node", the crash report's worker) is used only through the
functions here. ``INTERNALS`` lists each attribute with where it lives; the test fails naming any one a release
removed, so a bound in pyproject.toml can be set before users meet it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

# (owner, attribute): what the package reads or calls that xdist/execnet do not document.
INTERNALS: tuple[tuple[str, str], ...] = (
    ("xdist.workermanage.WorkerController", "gateway"),            # worker_id, worker_spec
    ("xdist.workermanage.WorkerController", "send_runtest_some"),  # send_items
    ("xdist.workermanage.WorkerController", "shutdown"),           # shut_down
    ("xdist.workermanage.WorkerController", "shutting_down"),      # is_shutting_down
    ("xdist.dsession.DSession", "nodemanager"),                    # drop_rsync_roots
    ("xdist.workermanage.NodeManager", "roots"),                   # drop_rsync_roots
    ("execnet.gateway.Gateway", "spec"),                           # spec_of (set by execnet's makegateway)
    ("xdist.dsession.DSession.worker_testreport", "rep.node"),     # crashed_worker: the report's worker
)


def worker_id(node: Any) -> str:
    """The xdist worker id (``gw0``) of a ``WorkerController``; the worker itself sees it as PYTEST_XDIST_WORKER."""
    return str(node.gateway.id)


def worker_spec(node: Any) -> Any:
    """The execnet ``XSpec`` a worker was started from (``popen``, ``ssh=...``, ``socket=...``)."""
    return spec_of(node.gateway)


def spec_of(gateway: Any) -> Any:
    """The ``XSpec`` an execnet gateway was made from (``pytest_xdist_newgateway`` gets the gateway)."""
    return gateway.spec


def send_items(node: Any, indices: Sequence[int]) -> None:
    """Ask a worker to run these items (indices into its collection), after what it has."""
    node.send_runtest_some(list(indices))


def shut_down(node: Any) -> None:
    """Tell a worker that nothing more comes: it runs what it has, its last item included, and stops."""
    node.shutdown()


def is_shutting_down(node: Any) -> bool:
    return bool(node.shutting_down)


def crashed_worker(report: Any) -> Any:
    """The worker (``WorkerController``) a crash report of xdist names, or None."""
    return getattr(report, "node", None)


def with_worker(report: Any, node: Any) -> Any:
    """A crash report made here names its worker as xdist's own do (``crashed_worker`` reads it back)."""
    report.node = node
    return report


def drop_rsync_roots(config: Any, drop: Callable[[Path], bool]) -> None:
    """Remove folders from the ones xdist's (deprecated) rsync copies to remote workers; call it before the
    first gateway is set up (``pytest_xdist_newgateway`` of the first one is early enough)."""
    manager = getattr(config.pluginmanager.get_plugin("dsession"), "nodemanager", None)
    roots = getattr(manager, "roots", None)
    if roots:
        manager.roots = [root for root in roots if not drop(Path(root))]


def expected_workers(config: Any) -> int:
    """How many workers the run starts (``-n N`` and every ``--tx``, ``N*spec`` counted N times): the number
    of collections a scheduler waits for before it hands out work. Read from the documented ``--tx`` option,
    which xdist fills from ``-n``."""
    count = 0
    for spec in config.getoption("tx", None) or []:
        times, star, _rest = str(spec).partition("*")
        count += int(times) if star and times.isdigit() else 1
    return count
