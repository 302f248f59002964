"""The pytest plugin (the ``pytest11`` entry point): the only package of pytest-agentbench that imports pytest.

This module is what pytest loads in every session of an environment the plugin is installed in, so it does
little: it registers every layer's options (``options.py``: flags, ini keys; the benchmarks' declarations are
read without loading a benchmark) and the hooks other plugins may implement (``hookspecs.py``), and it decides,
before the conftests load, whether the session asks for a benchmark: ``--bench`` (or its ini key), a run file
(``--bench-config``, its ini key or $AGENTBENCH_CONFIG), ``--bench-resume`` or ``--bench-replay``. Only then is
the benchmark run's plugin (``session.py``) imported and registered; without it no option is resolved or checked,
no benchmark, numpy, h5py, openai, yaml or docker is imported and no marker is added.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from . import hookspecs
from .options import SET_OPTION, all_options, asks_for_benchmark, register, removed_flag_error, run_file_arguments
from .pathargs import space_form_error

SESSION_PLUGIN = "agentbench-session"  # the benchmark run's plugin (session.py), registered only when asked for


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    register(parser, all_options())


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Refuse an option value that pytest took for a test path before it knew the plugin's options; when the
    session asks for a benchmark, register the run's plugin and add the pytest flags a run file gives (pytest reads
    ``args`` again after this hook, as pytest-xdist's ``-n auto`` documentation does it)."""
    options = all_options()
    error = space_form_error(early_config, parser, args, (*[o for o in options if o.shown], SET_OPTION))
    error = error or removed_flag_error(early_config.known_args_namespace, options)
    if error:
        raise pytest.UsageError(error)
    if not asks_for_benchmark(early_config, options):
        return
    from . import session  # why: a session that runs no benchmark imports none of the run's machinery

    if not early_config.pluginmanager.has_plugin(SESSION_PLUGIN):
        early_config.pluginmanager.register(session, SESSION_PLUGIN)
    args += run_file_arguments(early_config, options)


# The fixtures are declared here, so that a test or a conftest.py may ask for (or override) them in any session;
# what they do is the benchmark run's, imported when one is first asked for.


@pytest.fixture(scope="session")
def bench_model(pytestconfig: pytest.Config) -> Any:
    """The model under evaluation. Override this fixture in a conftest.py to plug in another client."""
    from . import session  # why: only a session that uses the model imports the run's machinery

    return session.model_fixture(pytestconfig)


@pytest.fixture(scope="session")
def bench_env(pytestconfig: pytest.Config) -> Iterator[Any]:
    """Where agent commands and tool code run (``--bench-env``). Override it to supply another environment."""
    from . import session  # why: only a session that uses an environment imports the run's machinery

    yield from session.env_fixture(pytestconfig)


@pytest.fixture(scope="session")
def bench_run(request: pytest.FixtureRequest, bench_model: Any, bench_env: Any) -> Iterator[Any]:
    """This process's run of the benchmark, opened once at its first item with the model and environment
    (the solver is chosen here) and closed at the end of the session, before the environment."""
    from . import session  # why: only a benchmark run has a run

    yield from session.run_fixture(request, bench_model, bench_env)
