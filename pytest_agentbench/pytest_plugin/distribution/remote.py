"""Remote xdist workers (``-d --tx ssh=user@host//python=...``, ``--tx socket=...``): host probes, the run
settings a remote worker receives, and placement by capability.

On the controller (``RemoteHosts``, held by the controller's distribution plugin, plugins.py, when a run
has a remote ``--tx``):
  * each new gateway is probed on its host before its worker starts (``hostprobe.serve``); a host whose
    plugin version/build or data hashes differ from the controller's is refused with the difference (a
    usage error), and the header gets one line per worker;
  * a remote worker's ``workerinput`` carries the controller's explicit run settings (benchmark, split,
    model, mode, limits, the API key and base URL) in memory; paths are never forwarded;
  * ``PlacementScheduling`` (placement.py) keeps each task whole on one worker and sends an item marked
    ``gpu`` only to a worker whose host has a GPU.
On a remote worker (``RemoteWorker``, held by the worker's distribution plugin), the forwarded settings replace
the controller's command line before the plugin reads its options, and an item marked ``gpu`` that reaches a
host without one (no worker has one) ends as env_error. Neither side is a plugin itself: the distribution
plugins own every hook, and what travels between them is ``handshake.RemoteInput``.
"""

from __future__ import annotations

import _thread
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from ...core import host
from ...core import records as rec
from ...core.types import Sample
from ..collect import BenchItem, session_entries
from ..options import all_options
from ..provenance import PACKAGE, version_of
from ..run import RECORD, SETTINGS, BenchState, base_record, outcome, state_of, states_of
from . import xdist_compat as xc
from .handshake import RemoteInput, Role, role_of
from .hostprobe import (
    PROBE_TIMEOUT,
    SERVE_SOURCE,
    apply_forwarded,
    forwarded,
    installed_versions,
    probe_settings,
    version_differences,
)

GPU_MARKER = "gpu"
NO_GPU_WORKER = "no worker with a GPU"
PINGS_PER_TIMEOUT = 4  # heartbeats (and ssh keep-alives) per --bench-set host_timeout
CHANNEL_CLOSED = object()  # what a heartbeat channel's callback gets once the channel closes (execnet's endmarker)


# --------------------------------------------------------------------------- liveness


def ssh_liveness_options(spec_ssh: str, ssh_config: str | None, timeout: float) -> list[str]:
    """``-o`` options for an ``ssh=`` gateway so a host that stops answering ends its connection within
    ``timeout``: ServerAliveInterval (with OpenSSH's ServerAliveCountMax of 3) and ConnectTimeout, each only
    when the user's own configuration (ssh_config, or -o in the spec) leaves it at OpenSSH's default."""
    interval = max(1, int(timeout / PINGS_PER_TIMEOUT))
    wanted = {
        "serveraliveinterval": f"ServerAliveInterval={interval}",
        "connecttimeout": f"ConnectTimeout={max(1, int(timeout))}",
    }
    effective = ssh_effective_config(spec_ssh, ssh_config)
    # OpenSSH's defaults as ``ssh -G`` prints them (BatchMode turns an unset ServerAliveInterval into 300)
    unset = {
        "serveraliveinterval": ("0", "300") if (effective or {}).get("batchmode") == "yes" else ("0",),
        "connecttimeout": ("none",),
    }
    out: list[str] = []
    for key, option in wanted.items():
        if effective is None or effective.get(key, unset[key][0]) in unset[key]:
            out += ["-o", option]
    return out


def ssh_effective_config(spec_ssh: str, ssh_config: str | None) -> dict[str, str] | None:
    """What ssh would use for this destination (``ssh -G``), or None when it cannot say."""
    args = ["ssh", "-G", *(["-F", ssh_config] if ssh_config else []), *spec_ssh.split()]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    out = {}
    for line in done.stdout.splitlines():
        key, _, value = line.strip().partition(" ")
        out[key.lower()] = value.strip()
    return out


def with_liveness(text: str, timeout: float) -> str:
    """A ``--tx`` spec text with the ssh liveness options added (other specs unchanged)."""
    import execnet  # why: only a distributed run parses gateway specs

    count, star, body = text.partition("*")
    if not star or not count.isdigit():
        count, star, body = "", "", text
    spec = execnet.XSpec(body)
    if not getattr(spec, "ssh", None):
        return text
    extra = ssh_liveness_options(str(spec.ssh), getattr(spec, "ssh_config", None), timeout)
    if not extra:
        return text
    parts = body.split("//")
    for i, part in enumerate(parts):
        if part.startswith("ssh="):
            parts[i] = "ssh=" + " ".join([*extra, part[len("ssh=") :]])
    return f"{count}{star}" + "//".join(parts)


class Heartbeat:
    """The controller's side of one remote worker's heartbeat channel: a ping every timeout/4; a host that
    sent nothing back for ``timeout`` (after a start-up grace of as long) is declared lost and its transport
    cut, so xdist sees the worker down whatever the transport (ssh or socket) would notice by itself."""

    def __init__(self, node: Any, channel: Any, timeout: float, on_silent: Callable[[Any, float], None]) -> None:
        self.node, self.channel, self.timeout, self.on_silent = node, channel, timeout, on_silent
        self.last = time.monotonic() + timeout  # the worker's python is still starting
        self.stopped = threading.Event()
        channel.setcallback(self.heard)
        self.thread = threading.Thread(target=self.beat, name=f"agentbench-heartbeat-{xc.worker_id(node)}", daemon=True)
        self.thread.start()

    def heard(self, _message: Any) -> None:
        self.last = time.monotonic()

    def beat(self) -> None:
        while not self.stopped.wait(self.timeout / PINGS_PER_TIMEOUT):
            silent = time.monotonic() - self.last
            if silent > self.timeout:
                self.on_silent(self.node, silent)
                xc.cut_worker(self.node)
                return
            try:
                self.channel.send("ping")
            except Exception:  # the channel or its gateway closed: the worker ended one way or the other
                return

    def stop(self) -> None:
        self.stopped.set()


def watch_controller(channel: Any, timeout: float, stop: Callable[[], None]) -> threading.Thread:
    """On a remote worker: answer each ping, and call ``stop`` once the controller has been silent for
    ``timeout`` (its host lost the link, or it died without closing the connection).

    The watch ends when the channel closes: the controller ended the gateway (the run is over) or the
    connection ended (execnet then ends the worker itself). That matters on a socket host, whose server
    process outlives its worker to serve the next run: a watch left running would stop the server."""
    heard = [time.monotonic()]
    closed = threading.Event()

    def on_message(message: Any) -> None:
        if message is CHANNEL_CLOSED:
            closed.set()
            return
        heard[0] = time.monotonic()
        try:
            channel.send("pong")
        except Exception:  # the controller is gone; the watch below ends the worker
            pass

    channel.setcallback(on_message, endmarker=CHANNEL_CLOSED)

    def watch() -> None:
        while not closed.wait(timeout / PINGS_PER_TIMEOUT):
            if time.monotonic() - heard[0] > timeout:
                stop()
                return

    thread = threading.Thread(target=watch, name="agentbench-controller-watch", daemon=True)
    thread.start()
    return thread


def stop_orphaned_worker(timeout: float) -> None:
    """The controller is gone: interrupt the running item (its sandboxes are torn down as on Ctrl-C, and
    die with this process in any case), then end the process if it has not ended within a quarter of the
    timeout (it may be blocked writing to a connection nobody reads)."""
    sys.stderr.write(f"agentbench: no word from the controller for {timeout:.0f} s; this worker stops\n")
    _thread.interrupt_main()
    time.sleep(max(1.0, timeout / PINGS_PER_TIMEOUT))
    os._exit(3)


# --------------------------------------------------------------------------- worker side


class RemoteWorker:
    """A worker on another host: what its controller forwarded (``RemoteInput``), and this host's GPUs."""

    def __init__(self, remote: RemoteInput) -> None:
        self.remote = remote
        self.gpus = 0  # this host's own, whatever the controller has; counted in ``take_settings``

    def take_settings(self, config: pytest.Config) -> None:
        """The controller's run settings replace this host's before the plugin reads its options; the worker
        stops by itself once its controller has been silent for the host timeout."""
        self.gpus = len(host.gpus())
        apply_forwarded(config.option, all_options(), self.remote.settings, self.gpus, os.environ)
        channel = self.remote.heartbeat
        if channel is not None:
            timeout = self.remote.host_timeout
            watch_controller(channel, timeout, lambda: stop_orphaned_worker(timeout))

    def unplaced(self, pyfuncitem: pytest.Function) -> bool:
        """On a host without a GPU, an item marked gpu is not run: it ends as env_error (it reaches such a host
        only when no worker of the run has a GPU). True when the item was ended here."""
        if self.gpus or not isinstance(pyfuncitem, BenchItem) or pyfuncitem.get_closest_marker(GPU_MARKER) is None:
            return False
        state: BenchState = state_of(pyfuncitem)
        fields = {
            **base_record(pyfuncitem.sample, state),
            "status": "env_error",
            "duration": 0.0,
            "message": (
                f"{NO_GPU_WORKER}: this item needs a GPU and the host of worker "
                f"{os.environ.get('PYTEST_XDIST_WORKER', '?')} ({self.remote.host}) has none; add a "
                f"--tx worker on a host with a GPU, or deselect GPU items with -m 'not gpu'"
            ),
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
            "host": host.hostname(),
            rec.UNPLACED_FIELD: "gpu",
        }  # a resume with a GPU host runs it
        record = rec.Record.from_json(fields)
        pyfuncitem.stash[RECORD] = record
        outcome(record)
        return True


# --------------------------------------------------------------------------- controller side


def remote_specs(config: pytest.Config) -> list[Any]:
    """The ``--tx`` specs of this run that start a worker on another host (ssh, socket)."""
    if role_of(config) is not Role.CONTROLLER:
        return []
    import execnet  # why: only a distributed run parses gateway specs

    specs = [execnet.XSpec(text) for text in (config.getoption("tx", None) or [])]
    return [spec for spec in specs if is_remote(spec)]


def is_remote(spec: Any) -> bool:
    return bool(getattr(spec, "ssh", None) or getattr(spec, "socket", None) or getattr(spec, "vagrant_ssh", None))


def spec_host(spec: Any) -> str:
    """The host as the user named it in --tx: the last word of ``ssh=`` (options come first), or the socket."""
    if getattr(spec, "ssh", None):
        return str(spec.ssh).split()[-1]
    if getattr(spec, "socket", None):
        return f"socket {spec.socket}"
    if getattr(spec, "vagrant_ssh", None):
        return f"vagrant {spec.vagrant_ssh}"
    return "local"


def conftest_model_override(config: pytest.Config) -> str | None:
    """The conftest.py that overrides ``bench_model``, if any (it cannot run on another host)."""
    for plugin in config.pluginmanager.get_plugins():
        path = str(getattr(plugin, "__file__", "") or "")
        if path.endswith("conftest.py") and getattr(plugin, "bench_model", None) is not None:
            return path
    return None


def remote_hosts(config: pytest.Config, state: BenchState, note_host: Callable[[str, str], None]) -> RemoteHosts | None:
    """At session start, before xdist starts any gateway: refuse what cannot run remotely and add the liveness
    options to the ssh specs; the controller's dealings with the run's remote hosts (None when it has none)."""
    specs = remote_specs(config)
    if not specs:
        return None
    override = conftest_model_override(config)
    if override:
        raise pytest.UsageError(
            f"agentbench: {override} overrides the bench_model fixture, which cannot run on remote workers "
            f"({', '.join(spec_host(s) for s in specs)}): a remote worker uses the built-in clients (--model ...) or a "
            f"model plugin installed on its host. Remove the override, or run without remote --tx workers."
        )
    timeout = float(config.stash[SETTINGS]["host_timeout"])
    config.option.tx = [with_liveness(text, timeout) for text in (config.getoption("tx", None) or [])]
    return RemoteHosts(config, state, note_host)


class RemoteHosts:
    """The controller's side of a run with remote workers; the controller's distribution plugin calls it from
    the xdist hooks it owns (plugins.py)."""

    def __init__(self, config: pytest.Config, state: BenchState, note_host: Callable[[str, str], None]) -> None:
        self.config = config
        self.state = state
        self.note_host = note_host  # (worker, host): the run learns where a worker runs
        self.settings = forwarded(all_options(), config.stash[SETTINGS])
        self.expected = {
            "version": version_of(PACKAGE),
            "build": host.package_build(),
            "data_hashes": dict(state.settings.get("data_hashes") or {}),
        }
        self.hosts: dict[str, dict[str, Any]] = {}  # gateway id -> capabilities (with "label")
        self.timeout = float(config.stash[SETTINGS]["host_timeout"])
        self.versions = installed_versions()
        self.allow_skew = bool(config.stash[SETTINGS]["allow_version_skew"])
        self.heartbeats: dict[str, Heartbeat] = {}
        self.silent: dict[str, float] = {}  # gateway id -> seconds without an answer when declared lost
        self.lost: dict[str, tuple[str, str]] = {}  # gateway id -> (host, how the run lost its worker)
        xc.route_worker_down(config, self.remote_node_down)

    # ---- probing
    def new_gateway(self, gateway: Any) -> None:
        """A new gateway (``pytest_xdist_newgateway``): a remote host is probed and refused when it cannot take
        part; every worker gets a header line saying where it runs."""
        spec = xc.spec_of(gateway)
        self.keep_host_pytest()
        if is_remote(spec):
            caps = self.probe(gateway)
            refusal = (
                refusal_of(gateway.id, spec_host(spec), caps, self.expected)
                or readiness_refusal(gateway.id, spec_host(spec), caps)
                or version_refusal(gateway.id, spec_host(spec), caps, self.versions, self.allow_skew)
            )
            if refusal:
                raise pytest.UsageError(refusal)
        else:
            caps = {"hostname": host.hostname(), "cores": host.cores(), "gpus": host.gpus(), "local": True}
        caps["label"] = spec_host(spec)
        self.hosts[gateway.id] = caps
        self.note_host(gateway.id, host_name(caps))
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(worker_line(gateway.id, caps))

    def keep_host_pytest(self) -> None:
        """xdist's deprecated rsync copies the controller's own pytest into every remote worker's folder
        (~/pyexecnetcache) and runs that; a worker host runs its own install, so those two roots are dropped
        (folders given with --rsyncdir are still copied). Called before xdist copies anything."""
        xc.drop_rsync_roots(self.config, lambda root: root.name in ("pytest", "_pytest"))

    def probe(self, gateway: Any) -> dict[str, Any]:
        settings = probe_settings(all_options(), self.settings)  # no secret option's value
        request = {"bench": self.state.benchmark.name, "split": self.state.split, "settings": settings}
        try:
            channel = gateway.remote_exec(SERVE_SOURCE)
            channel.send(request)
            caps = channel.receive(timeout=PROBE_TIMEOUT)
            channel.waitclose(timeout=PROBE_TIMEOUT)
        except Exception as exc:  # execnet's errors carry the remote traceback; its last line says enough
            lines = [line for line in str(exc).strip().splitlines() if line.strip()]
            return {"probe_error": lines[-1] if lines else type(exc).__name__}
        return dict(caps)

    def worker_input(self, node: Any) -> RemoteInput | None:
        """What a remote worker gets in its worker input (None for a local one); its heartbeat starts here."""
        spec = xc.worker_spec(node)
        if not is_remote(spec):
            return None
        caps = self.hosts.get(xc.worker_id(node), {})
        channel = xc.new_channel(node)  # sent along with workerinput: execnet passes channels by reference
        self.heartbeats[xc.worker_id(node)] = Heartbeat(node, channel, self.timeout, self.host_silent)
        return RemoteInput(
            settings=self.settings,
            host=host_name(caps) or spec_host(spec),
            gpus=len(caps.get("gpus") or []),
            host_timeout=self.timeout,
            heartbeat=channel,
        )

    # ---- a lost host
    def host_silent(self, node: Any, seconds: float) -> None:
        self.silent[xc.worker_id(node)] = seconds

    def remote_node_down(self, node: Any, error: Any) -> bool:
        """A remote worker's connection ended before it finished. Its item in flight and the later items of
        that task get lost records naming the host (the scheduler returns and reports them); its tasks not
        begun go to the other workers; no worker is started there again (--max-worker-restart is for local
        workers). When no worker is left to take queued tasks, those are recorded lost too. Returns False
        for a local worker (xdist's own handling, with its restarts)."""
        spec = xc.worker_spec(node)
        if not is_remote(spec):
            return False
        from .placement import PlacementScheduling  # why: only a distributed run schedules

        gid = xc.worker_id(node)
        beat = self.heartbeats.pop(gid, None)
        if beat is not None:
            beat.stop()
        label = host_name(self.hosts.get(gid, {})) or spec_host(spec)
        self.config.hook.pytest_testnodedown(node=node, error=error)
        sched = xc.current_scheduler(self.config)
        started = node in sched.nodes  # else it died before it was ready: its worker could not start there
        crashitem = sched.remove_node(node) if started else None  # reports the rest of its task lost
        if crashitem:
            xc.report_crash(self.config, crashitem, node)
        placement = isinstance(sched, PlacementScheduling)
        if placement:
            sched.count_out(node)
        why = (
            f"no answer for {self.silent[gid]:.0f} s"
            if gid in self.silent
            else "its worker could not start"
            if not started
            else "its connection ended"
        )
        self.lost[gid] = (label, why)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(
                f"agentbench: host {label} of worker {gid} lost ({why}): its items in flight are "
                f"recorded lost, its tasks not begun go to the other workers; no worker is "
                f"started there again",
                red=True,
            )
        xc.forget_worker(self.config, node)
        remaining = xc.active_workers(self.config)
        if all(xc.is_shutting_down(other) for other in remaining):  # no worker left to take the tasks not begun
            for nodeid in sched.take_queued() if placement else []:
                xc.report_crash(self.config, nodeid, node)
            if not remaining:
                xc.finish_session(self.config)
        return True

    def finish(self, session: pytest.Session) -> None:
        for beat in self.heartbeats.values():
            beat.stop()
        if self.lost and session.exitstatus == 0:
            session.exitstatus = 1  # a lost host makes the run incomplete even if no item was in flight

    def summarize(self, terminalreporter: Any) -> None:
        for gid, (label, why) in self.lost.items():
            terminalreporter.write_line(
                f"agentbench: lost host {label}, worker {gid}: {why}; --bench-resume runs its lost items again",
                red=True,
            )

    # ---- placement
    def scheduler(self, config: Any, log: Any):
        """The placement scheduler of a run with remote hosts: GPU items to GPU hosts, and room kept for the
        work of a host that is lost (remote hosts are not replaced)."""
        samples = session_entries(states_of(config))
        gpu_nodeids = frozenset(nodeid for nodeid, (_, sample) in samples.items() if needs_gpu(sample))
        return make_placement_scheduler(
            config,
            log,
            gpu_nodeids.__contains__,
            lambda node: bool(self.hosts.get(xc.worker_id(node), {}).get("gpus")),
            keep_free=True,
        )  # remote hosts are not replaced: keep room for their work


def needs_gpu(sample: Sample) -> bool:
    return GPU_MARKER in sample.markers


def host_name(caps: dict[str, Any]) -> str:
    """How records and messages name a worker's host: as --tx names it, with its hostname when that differs."""
    label, name = caps.get("label", ""), caps.get("hostname", "")
    if caps.get("local"):
        return name
    return f"{label} ({name})" if name and name != label else label


def worker_line(worker: str, caps: dict[str, Any]) -> str:
    """One header line per worker: where it runs and what its host has."""
    gpus = len(caps.get("gpus") or [])
    if caps.get("local"):
        return (
            f"agentbench worker {worker}: this machine ({caps.get('hostname')}), {caps.get('cores')} cores, {gpus} GPUs"
        )
    docker = str(caps.get("docker", "?")).split(" (")[0]
    isolation = str(caps.get("isolation", "?")).split(" (")[0]
    return (
        f"agentbench worker {worker}: {host_name(caps)}, {caps.get('cores')} cores, {gpus} GPUs, "
        f"docker {docker}, isolation {isolation}, data {caps.get('data_dir') or '?'}"
    )


def refusal_of(worker: str, label: str, caps: dict[str, Any], expected: dict[str, Any]) -> str | None:
    """Why a probed host cannot take part in this run (None when it can)."""
    where = f"agentbench: worker {worker} on {label}"
    if "probe_error" in caps:
        return (
            f"{where} could not be probed: {caps['probe_error']} (is pytest-agentbench installed in the "
            f"worker's python, the one after //python= in --tx?)"
        )
    if (caps.get("version"), caps.get("build")) != (expected["version"], expected["build"]):
        return (
            f"{where} has pytest-agentbench {caps.get('version')} (build {caps.get('build')}), the controller "
            f"{expected['version']} (build {expected['build']}): install the controller's version on the "
            f"worker host (the build is a digest of the installed sources)"
        )
    if "data_error" in caps:
        return (
            f"{where} cannot read the benchmark data in {caps.get('data_dir') or 'its data dir'}: {caps['data_error']}"
        )
    diff = hash_difference(caps.get("data_hashes") or {}, expected["data_hashes"])
    if diff:
        return (
            f"{where} has other data than the controller ({'; '.join(diff)}); put the same files in its "
            f"data dir ({caps.get('data_dir') or '$AGENTBENCH_DATA_DIR'})"
        )
    return None


def readiness_refusal(worker: str, label: str, caps: dict[str, Any]) -> str | None:
    """A host whose python cannot import what an xdist worker imports is refused before its worker starts."""
    if not caps.get("import_error"):
        return None
    return (
        f"agentbench: worker {worker} on {label} cannot start a pytest-xdist worker: its python cannot import "
        f"{caps['import_error']}; install pytest-xdist and pytest-agentbench in the python after //python= "
        f"in --tx"
    )


def version_refusal(
    worker: str, label: str, caps: dict[str, Any], controller: dict[str, str | None], allow_skew: bool
) -> str | None:
    """A host whose protocol (pytest, pytest-xdist, execnet) or verdict (numpy, scipy, h5py) packages differ
    from the controller's is refused with the differences, unless --bench-set=allow_version_skew=true."""
    if allow_skew or "versions" not in caps:
        return None
    diff = version_differences(caps["versions"], controller)
    if not diff:
        return None
    return (
        f"agentbench: worker {worker} on {label} has other package versions than the controller "
        f"({'; '.join(diff)}): install the controller's versions on the worker host, or pass "
        f"--bench-set=allow_version_skew=true to run anyway (verdicts may then differ between hosts)"
    )


def hash_difference(worker: dict[str, str], controller: dict[str, str]) -> list[str]:
    out = []
    for name in sorted(set(worker) | set(controller)):
        mine, theirs = controller.get(name), worker.get(name)
        if mine == theirs:
            continue
        if theirs is None:
            out.append(f"{name}: missing on the worker")
        elif mine is None:
            out.append(f"{name}: only on the worker")
        else:
            out.append(f"{name}: worker sha256 {theirs[:12]}, controller {mine[:12]}")
    return out


def make_placement_scheduler(
    config: Any, log: Any, gpu_item: Callable[[str], bool], gpu_node: Callable[[Any], bool], keep_free: bool = False
):
    from .placement import placement_scheduler  # why: only a distributed run schedules

    return placement_scheduler(config, log, gpu_item, gpu_node, keep_free)
