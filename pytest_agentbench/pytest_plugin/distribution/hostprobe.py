"""What a worker's host offers the run, found ON that host (``probe``), and the run settings a remote
worker receives from its controller (``forwarded`` / ``apply_forwarded``).

The controller runs ``SERVE_SOURCE`` on each new xdist gateway before its worker starts (execnet's
``remote_exec``, see remote.py), which runs ``main`` in a child python on the host: the host's name, cores, GPUs
(``nvidia-smi -L``, read there), whether a Docker engine answers, how children can be isolated and
whether that host's interpreter runs in its sandbox (the self-test, ``sandbox/selftest.py``), the
installed plugin's version and build, and the data hashes of the selected benchmark and split computed
from the host's own data dir. What a host gets of each option is the option's ``hosts`` rule: per-host paths
(every path option: data, cache, capsules, ...) are never forwarded, a host uses its own ``AGENTBENCH_*``
environment or the defaults; a GPU option is used only by a host with a GPU. A secret option's value reaches a
worker in its in-memory worker input, never the probe (``probe_settings``).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Mapping, MutableMapping
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any

from ...benchmarks.registry import get_benchmark
from ...core import host
from ...core.data import DataError
from ...core.errors import ConfigError
from ...core.options import HOST_GPU, HOST_OWN, Option, OptionError, Settings, Sources, resolve, without_secrets
from ...sandbox.isolation import probe as isolation_probe
from ...sandbox.options import private_folders
from ...sandbox.selftest import run_self_test
from ..options import all_options
from ..provenance import PACKAGE, version_of

PROBE_TIMEOUT = 300.0  # seconds: the first probe of a host may hash its data files
# execnet remote_exec source (stdlib only): the probe runs in a child of the worker's python, so the worker
# process imports nothing of the plugin before pytest starts in it; the request (run settings) goes in on
# stdin, never on a command line. The plugin itself comes from the host's own install; a host whose install
# predates the distribution package has the probe at its old path, and answers with its version, so it is refused
# as another build rather than as a probe that failed.
SERVE_SOURCE = f"""
import json, subprocess, sys
request = channel.receive()
code = (
    "try:\\n"
    "    from pytest_agentbench.pytest_plugin.distribution.hostprobe import main\\n"
    "except ModuleNotFoundError:\\n"
    "    from pytest_agentbench.pytest_plugin.hostprobe import main\\n"
    "main()"
)
try:
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps(request), capture_output=True,
                          text=True, timeout={PROBE_TIMEOUT})
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        channel.send(json.loads(lines[-1]))
    else:
        errors = done.stderr.strip().splitlines() or ["exit status " + str(done.returncode)]
        channel.send({{"probe_error": errors[-1]}})
except Exception as exc:
    channel.send({{"probe_error": type(exc).__name__ + ": " + str(exc)}})
"""


def forwarded(options: tuple[Option, ...], opts: Settings) -> dict[str, Any]:
    """The controller's explicitly set run settings as command-line values (the options each host decides,
    ``hosts="own"``, left out): what a remote worker uses instead of the ini file and environment it does not
    share. Held in memory only; it holds the secret options' values (``probe_settings`` leaves them out)."""
    out: dict[str, Any] = {}
    for option in options:
        if option.hosts == HOST_OWN or not opts.explicit(option.name):
            continue
        if option.owner and option.owner != opts["bench"]:  # another benchmark's ini key: ignored here too
            continue
        raw = raw_value(option, opts[option.name])
        if raw is not None:
            out[option.name] = raw
    return out


def probe_settings(options: tuple[Option, ...], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The forwarded settings a host probe receives: no secret option's value (the probe needs none)."""
    return without_secrets(options, settings)


def raw_value(option: Option, value: Any) -> Any:
    """A resolved value written back as the command line gives it (resolving it again gives the value)."""
    if value is None:
        return None
    if option.kind == "bool":
        return bool(value)
    if option.kind == "multi":
        return [str(v) for v in value] or None
    if option.kind == "list":
        return ",".join(value) or None
    if option.kind == "json":
        return json.dumps(value)
    return str(value)


def apply_forwarded(
    namespace: Any,
    options: tuple[Option, ...],
    raw: Mapping[str, Any],
    host_gpus: int,
    environ: MutableMapping[str, str],
) -> None:
    """On a remote worker, before the plugin reads its options: the controller's run settings win, path
    options fall back to this host's environment and defaults, and GPUs are used only if the host has one.
    A setting the controller left at its default stays at the default here: this host's variables for it
    (``$OPENAI_API_KEY``, ``$OPENAI_BASE_URL``) are ignored."""
    for option in options:
        if option.hosts == HOST_OWN:
            setattr(namespace, option.dest, None)
            continue
        if option.name in raw:
            setattr(namespace, option.dest, raw[option.name])
        elif option.env:
            environ.pop(option.env, None)
        if option.hosts == HOST_GPU and not host_gpus:
            setattr(namespace, option.dest, None)


def host_settings(options: tuple[Option, ...], raw: Mapping[str, Any]) -> Settings:
    """This host's resolution of the forwarded settings: its own environment, its working folder."""
    cli = {o.name: raw.get(o.name) for o in options}
    here = Path.cwd()
    return resolve(options, Sources(cli=cli, ini={}, env=dict(os.environ), invocation_dir=here, rootdir=here))


def docker_engine() -> str:
    """'yes (<server version>)' when the engine ``docker.from_env()`` finds here answers, else 'no (why)'."""
    try:
        import docker  # why: the Docker SDK is only needed for this one question

        client = docker.from_env(timeout=5)
        version = client.version().get("Version", "?")
        client.close()
        return f"yes ({version})"
    except Exception as exc:  # no SDK, no engine, no permission: all mean "no engine for this host"
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"no ({text[:120]})"


def probe(request: Mapping[str, Any]) -> dict[str, Any]:
    """This host's capabilities and, for ``request["bench"]``/``["split"]``, its data hashes; a ``probe_error``
    (the controller refuses the host by name) when this host's Python cannot run in its sandbox."""
    out: dict[str, Any] = {
        "hostname": host.hostname(),
        "cores": host.cores(),
        "gpus": host.gpus(),
        "docker": docker_engine(),
        "isolation": isolation_probe().describe(),
        "version": version_of(PACKAGE),
        "build": host.package_build(),
        "data_dir": os.environ.get("AGENTBENCH_DATA_DIR", ""),
    }
    hidden: dict[str, str] = {}
    bench = request.get("bench")
    if bench:
        options = all_options()
        try:
            opts = host_settings(options, request.get("settings") or {})
            hidden = private_folders(opts)
            benchmark = get_benchmark(bench)
            split = request["split"]
            settings = benchmark.configure(opts, split)
            out["data_dir"] = str(opts["data_dir"])
            benchmark.load_tasks(opts, split)  # checks the files as the worker will (pinned checksums)
            out["data_hashes"] = benchmark.data_hashes(opts, split, settings)
        except (ConfigError, DataError, OptionError, KeyError) as exc:
            out["data_error"] = f"{type(exc).__name__}: {exc}"
    outcome = run_self_test(hidden=hidden)  # this host's interpreter in this host's sandbox, its own folders hidden
    if outcome is not None:
        out["self_test"] = outcome.describe()
        if not outcome.ok:
            out["probe_error"] = f"on {out['hostname']}: {outcome.describe()}"
    out.update(worker_readiness())
    return out


# --------------------------------------------------------------------------- what the worker needs, and versions

# What an xdist worker imports before the plugin can report anything: a host lacking one of these would pass
# a probe that does not look, then see its worker die at start-up (xdist used to replace it in a loop).
WORKER_IMPORTS = ("execnet", "xdist", "pytest", "pytest_agentbench")
# Distributions whose versions must agree between hosts: the first three speak the worker protocol, the last
# three compute the values verdicts compare.
PROTOCOL_DISTS = ("pytest", "pytest-xdist", "execnet")
VERDICT_DISTS = ("numpy", "scipy", "h5py")


def worker_readiness() -> dict[str, Any]:
    """What this host's python can import of what the worker needs, and its versions of the agreed packages."""
    out: dict[str, Any] = {"versions": installed_versions()}
    missing = import_failures(WORKER_IMPORTS)
    if missing:
        out["import_error"] = missing
    return out


def import_failures(modules: tuple[str, ...]) -> str:
    """'execnet: ModuleNotFoundError: No module named ...; ...' for each module this python cannot import."""
    failures = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # any import failure means the worker cannot start here
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
    return "; ".join(failures)


def installed_versions() -> dict[str, str | None]:
    """The installed version of each agreed distribution (None when not installed)."""
    out: dict[str, str | None] = {}
    for dist in PROTOCOL_DISTS + VERDICT_DISTS:
        try:
            out[dist] = dist_version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def version_differences(worker: Mapping[str, str | None], controller: Mapping[str, str | None]) -> list[str]:
    """'numpy: worker 1.26.4, controller 2.0.1' for each agreed distribution whose versions differ."""
    out = []
    for dist in PROTOCOL_DISTS + VERDICT_DISTS:
        mine, theirs = controller.get(dist), worker.get(dist)
        if mine != theirs:
            out.append(f"{dist}: worker {theirs or 'not installed'}, controller {mine or 'not installed'}")
    return out


def main() -> None:
    """The probe child (see SERVE_SOURCE): a JSON request on stdin, one JSON line of capabilities on stdout."""
    request = json.load(sys.stdin)
    try:
        result = probe(request)
    except Exception as exc:  # a broken host is reported to the controller, which refuses it by name
        result = {"probe_error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write("\n" + json.dumps(result, default=str) + "\n")
