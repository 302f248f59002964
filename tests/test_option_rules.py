"""An option carries its rules (``secret``, ``stored``, ``free_on_resume``, ``hosts``, ``private``),
and every consumer asks the options, not a list of names.

The proof is a SECOND secret option, declared the way any benchmark declares an option: the toy benchmark
(tests/toybench) subclassed with ``--toy-token`` (``secret=True``) and installed through a real entry point in a
temporary site folder. A run with a remote worker (execnet's socket server on 127.0.0.1, no ssh needed) shows
that the token is redacted from the recorded command line, not stored in settings.json, not sent to the host
probe, reaches the worker only in its in-memory worker input (not its environment or command line), and is
never written to any file nor printed. The benchmark itself notes, in each process that configures it, whether
it got the token (a hash, never the value) and where else the value appears.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_agentbench.backends.slurm.commands import SLURM_OPTIONS, SlurmOptions, read_secret, write_secret
from pytest_agentbench.benchmarks import registry
from pytest_agentbench.benchmarks.corebench.bench import CoreBench
from pytest_agentbench.benchmarks.corebench.options import CORE_BENCH_OPTIONS, CoreBenchOptions, default_env
from pytest_agentbench.benchmarks.scicode.bench import SciCode
from pytest_agentbench.benchmarks.scicode.options import OPTIONS as SCICODE_OPTIONS
from pytest_agentbench.benchmarks.scicode.options import SciCodeOptions
from pytest_agentbench.core.jobs import BACKEND_OPTIONS, HARNESS_MIB, TIME_MARGIN, BackendOptions
from pytest_agentbench.core.options import (
    HOST_FORWARDED,
    HOST_GPU,
    HOST_OWN,
    HOST_RULES,
    Option,
    OptionError,
    RunFacts,
    Settings,
    Sources,
    resolve,
    rule_conflict,
    secret_names,
    stored_options,
    view,
)
from pytest_agentbench.core.run_options import RUN_OPTIONS, RunOptions, user_cache_dir
from pytest_agentbench.core.types import Sample
from pytest_agentbench.envs.host import HostFactory
from pytest_agentbench.envs.options import ENV_OPTIONS, EnvOptions, build_env
from pytest_agentbench.models.options import MODEL_OPTIONS, ModelOptions, build_model, model_settings
from pytest_agentbench.models.preflight import skip_reason
from pytest_agentbench.pytest_plugin.distribution.hostprobe import (
    apply_forwarded,
    forwarded,
    probe_settings,
)
from pytest_agentbench.pytest_plugin.options import all_options
from pytest_agentbench.pytest_plugin.slurm.taskpackage import SecretValues
from pytest_agentbench.report.options import REPORT_OPTIONS, ReportOptions
from pytest_agentbench.sandbox.options import SANDBOX_OPTIONS, SandboxOptions, limits_from

from helpers.bench_runs import REPO, SocketHost, checkout_python_path, worker_host_env

TOYBENCH = REPO / "tests" / "toybench"
TOKEN = "tok-9f3c61d2e8a4b7"  # the second secret's value: must appear in no file and no output
TOKEN_SHA = hashlib.sha256(TOKEN.encode()).hexdigest()

# The toy benchmark plus a second secret option; ``configure`` runs in the controller, the host probe and the
# worker, and notes what that process got (written to $SECRETTOY_SEEN, outside the run's folders).
SECRET_TOY = """
    import hashlib, json, os, sys
    from pathlib import Path

    from pytest_agentbench.core.options import Option
    from toybench import NAME, Toy

    TOKEN = Option("toy_token", "--toy-token", "toy benchmark: a token of a made-up service (a second secret).",
                   secret=True, owner=NAME, metavar="TOKEN")


    def role():
        if sys.argv[:1] == ["-c"]:  # hostprobe's child: python -c "... hostprobe import main; main()"
            return "probe"
        return "worker" if "PYTEST_XDIST_WORKER" in os.environ else "controller"


    class SecretToy(Toy):
        options = (*Toy.options, TOKEN)

        def configure(self, opts, split):
            value = opts["toy_token"]
            seen = {"role": role(),
                    "sha256": hashlib.sha256(value.encode()).hexdigest() if value else None,
                    "in_environ": bool(value) and any(value in v for v in os.environ.values()),
                    "in_cmdline": bool(value) and value.encode() in Path("/proc/self/cmdline").read_bytes()}
            with open(os.environ["SECRETTOY_SEEN"], "a", encoding="utf-8") as out:
                out.write(json.dumps(seen) + "\\n")
            return super().configure(opts, split)


    benchmark = SecretToy()
"""


def install_secret_toy(site: Path, entry: str = "secrettoy:benchmark") -> Path:
    """The secret toy as an installed distribution: its module and a dist-info with the entry point."""
    site.mkdir(parents=True, exist_ok=True)
    (site / "secrettoy.py").write_text(textwrap.dedent(SECRET_TOY), encoding="utf-8")
    dist = site / "secrettoy-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: secrettoy\nVersion: 0.1.0\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text(f"[pytest_agentbench.benchmarks]\ntoy = {entry}\n", encoding="utf-8")
    return site


def secret_toy_host_env(home: Path, site: Path, seen: Path) -> dict[str, str]:
    """A socket host's environment with the toy installed (``site``) and its notes file."""
    return worker_host_env(home, home / "cache", [str(site), str(TOYBENCH)], SECRETTOY_SEEN=str(seen))


def files_containing(folder: Path, text: str) -> list[Path]:
    """Every file under ``folder`` whose bytes contain ``text``."""
    needle = text.encode()
    return [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.remote
def test_a_second_secret_option_is_never_stored_sent_to_the_probe_or_written(tmp_path):
    site = install_secret_toy(tmp_path / "site")
    seen = tmp_path / "seen.jsonl"
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n", encoding="utf-8")
    host = SocketHost(tmp_path / "host", secret_toy_host_env(tmp_path / "host", site, seen))
    try:
        # the run is a user's: none of this test's own xdist worker variables (role() reads PYTEST_XDIST_WORKER)
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
            "PYTHONPATH": checkout_python_path([str(site), str(TOYBENCH)]),
            "SECRETTOY_SEEN": str(seen),
            "AGENTBENCH_OFFLINE": "1",
        }
        args = [
            sys.executable,
            "-m",
            "pytest",
            "--bench=toy",
            "--model=oracle",
            f"--toy-token={TOKEN}",
            "--bench-run-id=secret",
            f"--bench-cache-dir={tmp_path / 'cache'}",
            "-d",
            "--tx",
            f"socket={host.address}",
            "-v",
        ]
        done = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True, timeout=600, check=False)
    finally:
        host.stop()
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert "4 passed" in output, output[-3000:]
    run_dir = project / "reports" / "toy" / "oracle" / "secret"

    # the recorded command line names the flag with its value redacted
    command = json.loads((run_dir / "summary.json").read_text())["run"]["command"]
    assert "--toy-token=***" in command and "--bench=toy" in command, command

    # settings.json keeps the run's other options, not the secret
    stored = json.loads((run_dir / "settings.json").read_text())
    assert stored["_run"]["options"]["model"] == "oracle"
    assert "toy_token" not in stored["_run"]["options"] and "toy_token" not in stored["_run"]["sources"]
    assert "toy_token" not in stored

    # where the token went: the controller had it (its own command line), the probe did not, the worker got it
    # in memory only (neither its environment nor its command line holds it)
    notes = [json.loads(line) for line in seen.read_text().splitlines()]
    by_role = {role: [n for n in notes if n["role"] == role] for role in ("controller", "probe", "worker")}
    assert by_role["probe"] and all(n["sha256"] is None for n in by_role["probe"]), notes
    assert by_role["worker"] and all(n["sha256"] == TOKEN_SHA for n in by_role["worker"]), notes
    assert not any(n["in_environ"] or n["in_cmdline"] for n in by_role["worker"]), notes
    assert by_role["controller"] and all(n["sha256"] == TOKEN_SHA for n in by_role["controller"]), notes

    # nothing written or printed holds it: the run's folders, the caches, the worker host's home, the output
    assert files_containing(tmp_path, TOKEN) == []
    assert TOKEN not in output and TOKEN not in "".join(host.output)
    assert len(list(run_dir.iterdir())) >= 4  # the run wrote its files (records, settings, summaries, ...)


def test_every_option_declares_consistent_rules():
    """The rules of every option of every layer and installed benchmark agree with each other, and a
    declaration that breaks one is refused where it is written."""
    options = all_options()
    for option in options:
        assert rule_conflict(option) is None, option.flag
        assert option.hosts in HOST_RULES, option.flag
        assert not (option.secret and option.stored), option.flag
        assert not option.free_on_resume or option.stored, option.flag
        assert option.kind != "path" or option.hosts == HOST_OWN, option.flag
    assert secret_names(options) == {"model_api_key"}  # the built-in secret (the toy adds the second one)
    assert {o.name for o in options if not o.stored} == {
        "model_api_key",
        "config",
        "run_id",
        "resume",
        "resume_merge",
        "replay",
    }
    assert {o.name for o in options if o.hosts == HOST_GPU} == {"gpus"}
    assert {o.name for o in options if o.private} == {"data_dir", "cache_dir", "report_dir"}
    assert "progress" not in {o.name for o in options}
    # derived defaults: a secret is not stored, a path stays on its host
    secret = Option("t", "--t", "h", secret=True)
    assert (secret.stored, secret.hosts) == (False, HOST_FORWARDED)
    assert Option("p", "--p", "h", kind="path").hosts == HOST_OWN
    for bad, words in [
        ({"secret": True, "stored": True}, "never stored"),
        ({"stored": False, "free_on_resume": True}, "free_on_resume"),
        ({"kind": "path", "hosts": HOST_FORWARDED}, "'own'"),
        ({"hosts": "everywhere"}, "hosts must be one of"),
        ({"private": True}, "private"),
    ]:
        with pytest.raises(ValueError, match=words):
            Option("x", "--x", "h", **bad)


def test_forwarded_settings_carry_a_secret_to_workers_but_not_to_the_probe():
    token = Option("toy_token", "--toy-token", "h", secret=True, owner="toy")
    path = Option("toy_dir", "--toy-dir", "h", kind="path", owner="toy")
    options = (Option("bench", "--bench", "h"), token, path, Option("plain", "--plain", "h"))
    given = {"bench": "toy", "toy_token": TOKEN, "toy_dir": Path("/somewhere"), "plain": "yes"}
    opts = Settings(given, {name: "command line" for name in given})
    sent = forwarded(options, opts)
    assert sent == {"bench": "toy", "toy_token": TOKEN, "plain": "yes"}  # a path is each host's own
    assert probe_settings(options, sent) == {"bench": "toy", "plain": "yes"}
    assert [o.name for o in stored_options(options)] == ["bench", "toy_dir", "plain"]


def test_a_worker_host_applies_each_options_hosts_rule():
    """forwarded: the controller's value wins and the host's variable for an option left at its default is
    ignored; own: the host's own (None on the namespace: its environment or default); gpu: only with a GPU."""
    options = (
        Option("url", "--url", "h", env="THE_URL"),
        Option("dir", "--dir", "h", kind="path"),
        Option("gpus", "--gpus", "h", hosts=HOST_GPU),
        Option("plain", "--plain", "h"),
    )
    sent = {"gpus": "all", "plain": "yes"}
    for host_gpus, expected in ((0, None), (1, "all")):
        namespace = SimpleNamespace(**{o.dest: "from the controller's argv" for o in options})
        environ = {"THE_URL": "http://host-only"}
        apply_forwarded(namespace, options, sent, host_gpus, environ)
        assert namespace.agentbench_gpus == expected
        assert namespace.agentbench_dir is None and namespace.agentbench_plain == "yes"
        assert "THE_URL" not in environ


def test_a_layers_typed_view_names_exactly_its_options():
    """``view(SlurmOptions, opts)``: one typed field per option of the layer, filled from resolved settings."""
    assert [f.name for f in fields(SlurmOptions)] == [o.name for o in SLURM_OPTIONS]
    opts = resolve(
        (*BACKEND_OPTIONS, *SLURM_OPTIONS),
        Sources(
            cli={"slurm_max_running": "3", "detach": True},
            ini={},
            env={},
            invocation_dir=Path.cwd(),
            rootdir=Path.cwd(),
        ),
    )
    typed = view(SlurmOptions, opts)
    assert (typed.slurm_max_running, typed.detach, typed.slurm_key) == (3, True, "file")
    assert view(BackendOptions, opts).backend == "local"


LAYER_VIEWS = [
    (RunOptions, RUN_OPTIONS),
    (SandboxOptions, SANDBOX_OPTIONS),
    (EnvOptions, ENV_OPTIONS),
    (ModelOptions, MODEL_OPTIONS),
    (ReportOptions, REPORT_OPTIONS),
    (BackendOptions, BACKEND_OPTIONS),
    (SlurmOptions, SLURM_OPTIONS),
]
# each benchmark's own view of its own options (they have an owner)
BENCHMARK_VIEWS = [(SciCodeOptions, SCICODE_OPTIONS), (CoreBenchOptions, CORE_BENCH_OPTIONS)]
ALL_VIEWS = LAYER_VIEWS + BENCHMARK_VIEWS


@pytest.mark.parametrize(("layer_view", "options"), ALL_VIEWS, ids=[cls.__name__ for cls, _ in ALL_VIEWS])
def test_every_layers_view_names_exactly_its_options_and_is_filled_by_its_defaults(layer_view, options, tmp_path):
    """Each layer's typed view has one field per option of the layer, in order, and resolved defaults fill it."""
    assert [f.name for f in fields(layer_view)] == [o.name for o in options]
    opts = resolve(options, Sources(cli={}, ini={}, env={}, invocation_dir=tmp_path, rootdir=tmp_path))
    typed = view(layer_view, opts)
    assert {f.name: getattr(typed, f.name) for f in fields(layer_view)} == dict(opts)


def test_every_option_every_run_shares_is_a_field_of_exactly_one_view():
    """No shared option lacks a typed view (a benchmark's own options, with an ``owner``, are the benchmark's)."""
    view_fields = [f.name for cls, _ in LAYER_VIEWS for f in fields(cls)]
    shared = [o.name for o in all_options() if o.owner is None]
    assert sorted(view_fields) == sorted(shared)


def test_a_view_carries_the_values_a_run_gives(tmp_path):
    """Values given on the command line, in the environment and the ini file reach the views typed."""
    sources = Sources(
        cli={"attempts": "3", "memory_limit": "2.5", "fail_under": ["main=0.5"]},
        ini={"env_memory": "2g", "model_timeout": "12"},
        env={"AGENTBENCH_DATA_DIR": "somewhere", "XDG_CACHE_HOME": str(tmp_path / "xdg")},
        invocation_dir=tmp_path,
        rootdir=tmp_path,
    )
    opts = resolve((*RUN_OPTIONS, *SANDBOX_OPTIONS, *ENV_OPTIONS, *MODEL_OPTIONS, *REPORT_OPTIONS), sources)
    run, sandbox, env = view(RunOptions, opts), view(SandboxOptions, opts), view(EnvOptions, opts)
    model, report = view(ModelOptions, opts), view(ReportOptions, opts)
    cache = tmp_path / "xdg" / "pytest-agentbench"
    assert (run.attempts, run.data_dir, run.cache_dir) == (3, tmp_path / "somewhere", cache)
    assert (sandbox.memory_limit, sandbox.executor, env.env_memory, env.env) == (2.5, "fork", 2 << 30, None)
    assert (model.model_timeout, model.cache, report.fail_under, report.baseline) == (12.0, "rw", ("main=0.5",), None)


@pytest.mark.parametrize(("layer_view", "options"), ALL_VIEWS, ids=[cls.__name__ for cls, _ in ALL_VIEWS])
def test_a_partial_mapping_fills_the_declared_defaults(layer_view, options, tmp_path, monkeypatch):
    """A plain-Python caller's mapping may name only some options: the others get the default their Option
    declares, exactly what ``resolve`` gives a run that sets nothing in the current folder."""
    monkeypatch.chdir(tmp_path)
    assert layer_view.OPTIONS is options
    resolved = resolve(options, Sources(cli={}, ini={}, env={}, invocation_dir=tmp_path, rootdir=tmp_path))
    assert view(layer_view, {}) == view(layer_view, resolved)
    assert view(SandboxOptions, {"memory_limit": 2}) == SandboxOptions("fork", 2.0, False)
    assert view(RunOptions, {"ids": ["1.1", "2"], "timeout": "5"}).ids == ("1.1", "2")
    assert view(EnvOptions, {"env_memory": "2g", "gpus": None}) == view(EnvOptions, resolved_with(env_memory="2g"))


def resolved_with(**cli):
    """ENV_OPTIONS resolved with these command-line values (the current folder as the invocation folder)."""
    return resolve(ENV_OPTIONS, Sources(cli=cli, ini={}, env={}, invocation_dir=Path.cwd(), rootdir=Path.cwd()))


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"memory_limt": 2}, "unknown setting 'memory_limt' (did you mean 'memory_limit'?): the settings read here"),
        (
            {"memory_limit": "lots"},
            "setting memory_limit (--bench-set memory_limit) must be a positive number, got 'lots'",
        ),
        ({"memory_limit": -1}, "setting memory_limit (--bench-set memory_limit) must be a positive number, got -1"),
        ({"executor": "threads"}, "setting executor (--bench-set executor) 'threads' is not a valid value"),
        ({"require_isolation": "maybe"}, "setting require_isolation (--bench-require-isolation) 'maybe' is not a"),
    ],
)
def test_a_partial_mapping_with_a_misspelled_name_or_a_wrong_value_is_refused_naming_it(given, says):
    with pytest.raises(OptionError) as refused:
        view(SandboxOptions, given)
    assert str(refused.value).startswith(says)


def test_a_mapping_wider_than_the_reader_reads_is_accepted():
    """Another layer's or a benchmark's settings in the same mapping are not the reader's business, even when
    a name is close to one the reader reads (SciCode's mode and tool_timeout beside model and model_timeout)."""
    from pytest_agentbench.benchmarks.scicode.bench import SciCode

    assert {o.name for o in SciCode.options} >= {"mode", "tool_timeout"}
    wide = {"memory_limit": 2, "timeout": 5, "docker_image": "x", "mode": "tool_use", "tool_timeout": 30}
    assert view(SandboxOptions, wide) == SandboxOptions("fork", 2.0, False)
    assert build_model({"model": "oracle", "mode": "tool_use", "tool_timeout": 30}).is_oracle
    assert model_settings({"model": "gpt-x", "mode": "naive", "tool_timeout": 5})["model"] == "gpt-x"


def test_the_readers_honour_values_given_through_a_partial_mapping(tmp_path, monkeypatch):
    """limits_from, build_env, model_settings, build_model and skip_reason read their layers' views of a partial
    mapping: what it gives counts, the rest are the declared defaults, and a misspelling of a name they read is
    refused, naming it (not silently left at its default)."""
    monkeypatch.chdir(tmp_path)
    limits = limits_from({"memory_limit": 2, "data_dir": tmp_path / "d"}, timeout=3)
    assert (limits.memory, limits.timeout, limits.hidden) == (2 << 30, 3, (str(tmp_path / "d"),))
    assert limits_from({}, timeout=1).memory == 4 << 30 and limits_from({}, timeout=1).hidden == ()
    host = build_env({"executor": "subprocess", "memory_limit": 1.5, "env_memory": "2g", "keep_workspaces": True})
    assert isinstance(host, HostFactory) and (host.executor, host.python_memory, host.memory) == (
        "subprocess",
        3 << 29,
        2 << 30,
    )
    assert host.keep_workspaces and host.hidden == () and host.network == "user"
    settings = model_settings({"model": "gpt-x", "model_timeout": "12", "model_base_url": "http://127.0.0.1:1/v1/"})
    assert (settings["timeout"], settings["base_url"], settings["protocol"], settings["cache_mode"]) == (
        12.0,
        "http://127.0.0.1:1/v1",
        "chat",
        "rw",
    )
    assert settings["cache_dir"] == str(user_cache_dir(os.environ)) and "price" not in settings
    assert build_model({"model": "oracle"}).is_oracle
    assert skip_reason({"model": "gpt-x", "cache": "replay"}) == "--bench-cache replay calls no endpoint"
    with pytest.raises(OptionError, match="unknown setting 'env_memroy'"):
        build_env({"env_memroy": "2g"})
    with pytest.raises(
        OptionError, match=r"setting model_timeout \(--bench-set model_timeout\) must be a positive number"
    ):
        model_settings({"model": "gpt-x", "model_timeout": "soon"})


def test_the_benchmarks_read_the_layers_views():
    """A Slurm job's memory and time come from the sandbox's, the run's and the environments' views of the settings
    (options a hand-made Settings lacks take their defaults); CORE-Bench's default environment from the model's and
    the backend's views, also of a partial mapping."""
    sample = [Sample("1.1", "1", "validation")]
    request = SciCode().job_request(sample, Settings({"memory_limit": 2.0, "timeout": 30.0}))
    assert (request.memory_mib, request.seconds) == (2048 + HARNESS_MIB, 30.0 + TIME_MARGIN)
    assert SciCode().job_request(sample, Settings({})).memory_mib == 4096 + HARNESS_MIB
    core = CoreBench().job_request(sample, Settings({"agent_time": 60, "timeout": 30.0, "env_memory": 16 << 30}))
    assert (core.memory_mib, core.seconds) == ((16 << 10) + HARNESS_MIB, 90.0 + TIME_MARGIN)
    assert (default_env({"model": "gpt-x"}), default_env({"model": "oracle"})) == ("docker", "host")
    assert default_env({"model": "gpt-x", "backend": "slurm"}) == "host"
    with pytest.raises(OptionError, match="setting backend \\(--bench-backend\\) 'slurmm' is not a valid value"):
        default_env({"model": "gpt-x", "backend": "slurmm"})


@pytest.fixture
def class_entry_point(tmp_path, monkeypatch):
    """The secret toy installed with an entry point naming its CLASS, seen by this process's registry."""
    install_secret_toy(tmp_path / "site", entry="secrettoy:SecretToy")
    monkeypatch.syspath_prepend(str(TOYBENCH))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("SECRETTOY_SEEN", str(tmp_path / "seen.jsonl"))
    yield registry.reload()
    monkeypatch.undo()
    registry.reload()


def test_the_registry_is_read_once_and_a_class_entry_point_is_one_instance(class_entry_point):
    first = registry.available_benchmarks()
    assert first is class_entry_point and registry.available_benchmarks() is first
    toy = registry.get_benchmark("toy")
    assert type(toy).__name__ == "SecretToy"
    assert registry.get_benchmark("toy") is toy is first.found["toy"]  # one instance, its caches kept
    assert "toy_token" in {o.name for o in all_options()}


@pytest.mark.e2e
def test_listing_only_is_a_run_fact_not_an_option(bench):
    """--collect-only reaches SciCode as ``opts.facts.listing_only``: listing the test split with official
    targets fetches nothing (offline, no test_data.h5 here), while a run of the same items refuses; no option
    is named after the fact."""
    args = ("--bench=scicode", "--bench-split=test", "--bench-targets=official", "--model=m")
    listed = bench(*args, "--collect-only", "-q")
    assert listed.ret == pytest.ExitCode.OK, listed.stderr.str()
    assert "291 tests collected" in listed.stdout.str()
    run = bench(*args, "--bench-ids=1")
    assert run.ret == pytest.ExitCode.USAGE_ERROR and "the official test_data.h5 is missing" in run.stderr.str()
    assert "listing_only" not in {o.name for o in all_options()}
    assert Settings({"a": 1}).facts == RunFacts() and "listing_only" not in Settings({"a": 1})


SECRET_TOKEN = Option("toy_token", "--toy-token", "a second secret.", secret=True, owner="toy", metavar="TOKEN")


def test_a_slurm_runs_key_file_carries_every_secret_option_and_nothing_else(tmp_path):
    """--bench-set=slurm_key=file: one 0600 file holds every secret option's value for the run's jobs; a file an
    earlier release wrote (one bare value) still reaches the secret options that read a variable."""
    values = {"model_api_key": "sk-first-secret", "toy_token": "t-second-secret"}
    path = write_secret(tmp_path / "spool", values)
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_secret(path, ["model_api_key"]) == values
    path.write_text("sk-written-by-an-earlier-release\n", encoding="utf-8")
    assert read_secret(path, ["model_api_key"]) == {"model_api_key": "sk-written-by-an-earlier-release"}
    assert read_secret(tmp_path / "no-such-file", ["model_api_key"]) == {}


@pytest.mark.e2e
def test_a_slurm_job_sets_the_secret_values_before_the_plugin_reads_its_options(pytester):
    """run-task's session gets the secrets from the key file in memory (``SecretValues``): the plugin's settings
    have them although the job's command line and environment name none."""
    options = (*all_options(), SECRET_TOKEN)
    secrets = SecretValues({"model_api_key": "sk-from-the-key-file", "toy_token": "t", "not_an_option": "x"}, options)
    assert set(secrets.values) == {SECRET_TOKEN.dest, next(o.dest for o in options if o.name == "model_api_key")}
    pytester.makeconftest(
        """
        import pytest
        from pytest_agentbench.pytest_plugin.run import SETTINGS

        @pytest.hookimpl(trylast=True)
        def pytest_configure(config):
            print("settings key:", config.stash[SETTINGS]["model_api_key"])
        """
    )
    pytester.makepyfile("def test_nothing():\n    pass\n")
    # a run file asks for the benchmark run's plugin (run-task's session gives --bench-resume) without a benchmark
    pytester.path.joinpath("run.json").write_text('{"bench": {"timeout": 60}}', encoding="utf-8")
    result = pytester.runpytest("-p", "no:cacheprovider", "-s", "--bench-config=run.json", plugins=[secrets])
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["settings key: sk-from-the-key-file"])


def test_an_option_shows_in_its_declared_help_group_else_its_layers_else_its_benchmarks():
    from pytest_agentbench.core.options import help_group_title, place

    declared = Option("a", "--bench-a", "a.", help_group="selection")
    undeclared = Option("b", "--bench-b", "b.")
    own = Option("c", "--bench-c", "c.", owner="toy")
    placed = dict(zip("abc", place((declared, undeclared, own), "model")))
    assert help_group_title(placed["a"]) == "selection and data"
    assert help_group_title(placed["b"]) == "model, cost and budget"  # an option added without a group still shows
    assert help_group_title(placed["c"]) == "--bench=toy"
    assert help_group_title(undeclared) == "running, cache and resume"  # placed by no layer
    with pytest.raises(ValueError, match="help_group must be one of selection, model"):
        Option("d", "--bench-d", "d.", help_group="misc")
