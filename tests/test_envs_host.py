"""The host environment against the environment contract, plus its own clean-up."""
from __future__ import annotations

import pytest

import envs_contract as contract
from pytest_agentbench.envs import EnvSkip
from pytest_agentbench.envs.host import HostFactory


@pytest.fixture
def workspace(tmp_path):
    return contract.make_workspace(tmp_path)


def test_commands_files_and_copy_out(workspace):
    with HostFactory().start(workspace, name="t") as env:
        contract.check_command_basics(env)
        contract.check_files(env, workspace)
    assert not workspace.exists()


def test_timeout_and_flood(workspace):
    with HostFactory().start(workspace) as env:
        contract.check_timeout_kills_the_group(env, "3131.25")
        contract.check_flood_is_trimmed(env)
    assert contract.no_process_with("sleep\x003131.25")  # the background job it left, killed by stop()


def test_stop_kills_background_jobs_and_keeps_workspace_when_asked(workspace):
    env = HostFactory(keep_workspaces=True).start(workspace)
    assert env.run("sleep 3232.5 > /dev/null 2>&1 &", 10).exit_code == 0
    assert not contract.no_process_with("sleep\x003232.5")
    env.stop()
    env.stop()  # idempotent
    assert contract.no_process_with("sleep\x003232.5")
    assert workspace.is_dir()


def test_run_python_matches_the_contract(workspace):
    with HostFactory().start(workspace) as env:
        contract.check_python(contract.python_results(env))


def test_gpu_needs_bench_gpus(workspace):
    with pytest.raises(EnvSkip, match="--bench-gpus"):
        HostFactory().start(workspace, needs_gpu=True)
    HostFactory(gpus="0").start(workspace, needs_gpu=True).stop()


def test_bad_timeout_is_refused(workspace):
    with HostFactory().start(workspace) as env, pytest.raises(ValueError, match="timeout must be positive"):
        env.run("true", 0)


def resolved(cli=None, ini=None, env=None):
    from pathlib import Path

    from pytest_agentbench.core.options import Sources, resolve
    from pytest_agentbench.envs import ENV_OPTIONS
    from pytest_agentbench.sandbox.options import SANDBOX_OPTIONS

    return resolve((*ENV_OPTIONS, *SANDBOX_OPTIONS),
                   Sources(cli=cli or {}, ini=ini or {}, env=env or {}, invocation_dir=Path.cwd(), rootdir=Path.cwd()))


def test_settings_select_the_factory_and_its_tool_limits():
    from pytest_agentbench.envs import build_env, env_settings
    from pytest_agentbench.envs.docker import DockerFactory

    host = build_env(resolved(cli={"executor": "subprocess", "memory_limit": "1.5"},
                              ini={"keep_workspaces": "true", "env_memory": "2g"}))
    assert isinstance(host, HostFactory)
    assert (host.executor, host.python_memory, host.keep_workspaces, host.memory) == ("subprocess", 3 << 29, True, 2 << 30)
    assert host.run_python("print(7)", 10) == {"status": "ok", "exit_code": 0, "stdout": "7\n", "stderr": ""}
    docker = build_env(resolved(ini={"env": "docker", "docker_network": "none"}))
    assert isinstance(docker, DockerFactory) and docker.network == "none" and docker.memory == 8 << 30
    assert env_settings(resolved())["env"] == "host"


def test_bad_environment_settings_name_their_source():
    from pytest_agentbench.core.options import OptionError

    with pytest.raises(OptionError, match="--bench-env.*'podman'.*host, docker"):
        resolved(cli={"env": "podman"})
    with pytest.raises(OptionError, match="agentbench_env_memory.*'lots' is not a size"):
        resolved(ini={"env_memory": "lots"})
    with pytest.raises(OptionError, match="--bench-memory-limit.*positive.*'0'"):
        resolved(cli={"memory_limit": "0"})
