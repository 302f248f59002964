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

import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# (owner, attribute): what the package reads or calls that xdist/execnet do not document.
INTERNALS: tuple[tuple[str, str], ...] = (
    ("xdist.workermanage.WorkerController", "gateway"),  # worker_id, worker_spec
    ("xdist.workermanage.WorkerController", "send_runtest_some"),  # send_items
    ("xdist.workermanage.WorkerController", "shutdown"),  # shut_down
    ("xdist.workermanage.WorkerController", "shutting_down"),  # is_shutting_down
    ("xdist.dsession.DSession", "nodemanager"),  # drop_rsync_roots
    ("xdist.workermanage.NodeManager", "roots"),  # drop_rsync_roots
    ("execnet.gateway.Gateway", "spec"),  # spec_of (set by execnet's makegateway)
    ("xdist.dsession.DSession.worker_testreport", "rep.node"),  # crashed_worker: the report's worker
    ("xdist.dsession.DSession", "worker_errordown"),  # route_worker_down
    ("xdist.dsession.DSession", "_active_nodes"),  # forget_worker, active_workers
    ("xdist.dsession.DSession", "sched"),  # current_scheduler
    ("xdist.dsession.DSession", "triggershutdown"),  # finish_session
    ("xdist.dsession.DSession", "handle_crashitem"),  # report_crash
    ("execnet.gateway_base.BaseGateway", "newchannel"),  # new_channel
    ("execnet.gateway_base.BaseGateway", "_io"),  # cut_worker
    ("execnet.gateway_io.Popen2IOMaster", "kill"),  # cut_worker (popen, ssh)
    ("execnet.gateway_socket.SocketIO", "sock"),  # cut_worker (socket)
    ("execnet.gateway_base.Popen2IO", "close_read"),  # cut_worker (other transports)
    ("execnet.gateway_base.Popen2IO", "close_write"),  # cut_worker (other transports)
    ("xdist.remote.WorkerInteractor", "torun"),  # queued_indices
    ("xdist.remote.WorkerInteractor", "nextitem_index"),  # queued_indices
)

# Internals that changed shape between the supported releases: each group holds one per shape, and at least one
# of a group must exist in the installed release.
EITHER: tuple[tuple[tuple[str, str], ...], ...] = (
    (
        ("xdist.remote.TestQueue", "lock"),  # queued_indices, pytest-xdist >= 3.6
        ("queue.Queue", "mutex"),  # queued_indices, earlier releases: a plain queue with its own lock
    ),
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


def queued_indices(config: Any) -> list[int]:
    """On a worker: the items its controller sent that it has not begun (indices into ``session.items``), in the
    order it will run them; empty where no xdist worker runs."""
    for plugin in config.pluginmanager.get_plugins():
        if type(plugin).__name__ != "WorkerInteractor" or not hasattr(plugin, "torun"):
            continue
        queued = [i for i in _queued(plugin.torun) if isinstance(i, int)]
        following = getattr(plugin, "nextitem_index", None)
        return ([following] if isinstance(following, int) else []) + queued
    return []


def _queued(torun: Any) -> list[Any]:
    """A snapshot of a worker's queue of item indices, taken under the queue's own lock."""
    if hasattr(torun, "lock"):
        with torun.lock() as queue:
            return list(queue)
    with torun.mutex:
        return list(torun.queue)


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
    if manager is not None and roots:
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


# ---- a lost remote host (remote.py): xdist replaces a worker whose channel ends, and no public hook stops it


def dsession(config: Any) -> Any:
    """xdist's controller plugin (``DSession``), or None when the run is not distributed."""
    return config.pluginmanager.get_plugin("dsession")


def route_worker_down(config: Any, handler: Callable[[Any, Any], bool]) -> bool:
    """xdist calls ``DSession.worker_errordown(node, error)`` when a worker's channel ends unexpectedly, and
    replaces the worker there. ``handler`` sees it first and returns True when it dealt with the worker
    itself (a remote host: never restarted); xdist's own handling runs otherwise. False when not distributed."""
    session = dsession(config)
    if session is None:
        return False
    original = session.worker_errordown

    def worker_errordown(node: Any, error: Any) -> None:
        if not handler(node, error):
            original(node, error)

    session.worker_errordown = worker_errordown
    return True


def forget_worker(config: Any, node: Any) -> None:
    """The worker no longer counts as active (xdist's loop ends when no active worker is left)."""
    dsession(config)._active_nodes.discard(node)


def active_workers(config: Any) -> list[Any]:
    """The workers xdist still waits for (started, running, or finishing)."""
    return list(dsession(config)._active_nodes)


def current_scheduler(config: Any) -> Any:
    """The run's scheduler (used through xdist's documented scheduler interface only)."""
    return dsession(config).sched


def finish_session(config: Any) -> None:
    """Stop handing out work and shut every worker down; xdist's loop ends once no active worker is left."""
    dsession(config).triggershutdown()


def report_crash(config: Any, nodeid: str, node: Any) -> None:
    """xdist's own crash report for ``nodeid`` on ``node`` (``pytest_handlecrashitem`` and a failed report
    follow, as when a worker dies in that item)."""
    dsession(config).handle_crashitem(nodeid, node)


def new_channel(node: Any) -> Any:
    """A new execnet channel on a worker's gateway (it can travel in ``workerinput``: execnet passes channels
    by reference)."""
    return node.gateway.newchannel()


def cut_worker(node: Any) -> None:
    """End a worker's transport so its receiver sees end-of-file (and xdist the worker down): a socket is shut
    down both ways, the ssh (or popen) process is killed. Used when its host stopped answering.

    The socket comes first: execnet's ``SocketIO`` has a ``kill`` too, but it does nothing, and a read blocked
    on a silent peer (no FIN, no RST) ends only when the socket is shut down here (Linux wakes a blocked
    ``recv`` with end-of-file; ``close`` alone would not: the receiver thread holds the descriptor)."""
    io = getattr(node.gateway, "_io", None)
    if io is None:
        return
    sock = getattr(io, "sock", None)
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)  # both ways: the read ends, and a write blocked on a full buffer too
        elif hasattr(io, "kill"):
            io.kill()
        else:
            io.close_read()
            io.close_write()
    except OSError:  # already closed
        pass
