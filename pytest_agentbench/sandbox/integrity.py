"""Detecting the usual ways generated code fakes a pass: early exit, replaced comparison functions,
tampered builtins.

``integrity_prelude`` / ``integrity_epilogue`` wrap a scoring script; ``integrity_check`` reads the
run's result. The threat model is a model gaming the tests, not an adversary that introspects the
scoring script: code that reads its own source can find the completion token.
"""
from __future__ import annotations

import json
import secrets
from typing import Mapping, Sequence

from .result import ExecResult
from .workdir import EXECUTOR_DIED

COMPLETION_PREFIX = "AGENTBENCH-COMPLETE"
TAMPER_PREFIX = "AGENTBENCH-TAMPERED:"
_STASH = "__agentbench_integrity__"
DEFAULT_GUARDED_MODULES = ("numpy", "numpy.testing", "numpy.linalg", "math", "cmath")
DEFAULT_GUARDED_GLOBALS = {"np": "numpy", "numpy": "numpy", "math": "math"}


def new_token() -> str:
    return secrets.token_hex(16)


def integrity_prelude(guard_modules: Sequence[str] = DEFAULT_GUARDED_MODULES,
                      guard_globals: Mapping[str, str] = DEFAULT_GUARDED_GLOBALS) -> str:
    """Source to put at the very top of a scoring script, before any generated code.

    It records the genuine objects that the tests rely on: every attribute of ``guard_modules``
    (e.g. ``numpy.allclose``, a module of comparison helpers), the ``builtins`` namespace, the
    ``sys.modules`` entries, and the objects that global names in ``guard_globals`` (name -> dotted
    path, e.g. ``{"np": "numpy", "cmp_tuple_or_list": "my.cmp.cmp_tuple_or_list"}``) must still be
    bound to when the tests run. ``integrity_epilogue`` checks them after the tests.
    """
    spec = json.dumps({"modules": list(guard_modules), "globals": dict(guard_globals)})
    return f'''\
def _agentbench_capture(spec):
    import builtins, importlib, json, os, sys
    spec = json.loads(spec)
    modules = {{}}
    for name in spec["modules"]:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        modules[name] = (module, dict(vars(module)))
    def resolve(dotted):
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
            return obj
        raise ImportError(dotted)
    bound = {{}}
    for name, dotted in spec["globals"].items():
        try:
            bound[name] = (dotted, resolve(dotted))
        except (ImportError, AttributeError):
            pass
    return {{"modules": modules, "bound": bound, "builtins": dict(vars(builtins)), "builtins_module": builtins,
            "sys": sys, "sys_modules": {{n: m for n, m in sys.modules.items()}}, "write": os.write,
            "exit": os._exit, "flush": [sys.stdout.flush, sys.stderr.flush]}}
{_STASH} = _agentbench_capture({spec!r})
del _agentbench_capture
'''


def integrity_epilogue(token: str) -> str:
    """Source to put after the last test: verify nothing was replaced, then print the completion token.

    Printing the token is the script's last action, so a run that exits early (``sys.exit(0)``,
    ``os._exit(0)``, a killed parent) never shows it. On tampering it prints a reason to stderr and exits 3.
    """
    if not token or not token.isalnum():
        raise ValueError(f"completion token must be a non-empty alphanumeric string, got {token!r}")
    return f'''\
def _agentbench_verify(stash, scope):
    problems = []
    builtins = stash["builtins_module"]
    for name, (module, attrs) in stash["modules"].items():
        if stash["sys_modules"].get(name) is not stash["sys"].modules.get(name):
            problems.append("generated code replaced the module " + name + " in sys.modules")
        current = vars(module)
        for attr, value in attrs.items():
            if attr.startswith("__") or not callable(value):
                continue
            if current.get(attr) is not value:
                problems.append("generated code replaced " + name + "." + attr)
    for name, (dotted, value) in stash["bound"].items():
        if name in scope and scope[name] is not value:
            problems.append("generated code rebound " + name + " (expected " + dotted + ")")
    current = vars(builtins)
    for attr, value in stash["builtins"].items():
        if attr == "_":
            continue
        if current.get(attr) is not value:
            problems.append("generated code tampered with builtins." + attr)
    return problems

_agentbench_stash = globals()["{_STASH}"]
_agentbench_problems = _agentbench_verify(_agentbench_stash, globals())
for _agentbench_flush in _agentbench_stash["flush"]:
    try:
        _agentbench_flush()
    except Exception:
        pass
if _agentbench_problems:
    _agentbench_stash["write"](2, ("\\n{TAMPER_PREFIX} " + "; ".join(_agentbench_problems[:5]) + "\\n").encode())
    _agentbench_stash["exit"](3)
_agentbench_stash["write"](1, b"\\n{COMPLETION_PREFIX} {token}\\n")
'''


def integrity_check(result: ExecResult, token: str) -> str | None:
    """Why a scoring run is not a genuine pass (None when every test ran and nothing was tampered with)."""
    if result.limit:
        return f"{result.limit} limit hit"
    if EXECUTOR_DIED in result.stderr:
        return "generated code killed the process running it (its parent)"
    for line in reversed(result.stderr.splitlines()):
        if line.startswith(TAMPER_PREFIX):
            return line[len(TAMPER_PREFIX):].strip()
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    completed = bool(lines) and lines[-1].strip() == f"{COMPLETION_PREFIX} {token}"
    if result.exit_code != 0:
        return f"script failed with exit code {result.exit_code}"
    if not completed:
        return "exited before all tests ran"
    return None
