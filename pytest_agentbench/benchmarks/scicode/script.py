"""Scoring scripts, built the way SciCode's authors build them, plus a completion proof.

A script is: a preamble (compatibility shims, the comparison helpers under the module name the
tests import, the targets read from the h5 *before* any generated code runs), the problem's
dependencies, the code of every earlier step, the step's own code, then ``target = targets[i]``
and each test case in turn. Upstream counts a step as passed when the script exits with 0; here it
must also print a per-run token after the last test, after checking that the comparison functions
are still the genuine ones, so code that exits early with status 0 or replaces ``np.allclose``
does not pass (README, "Where scoring differs from upstream").
"""
from __future__ import annotations

from pathlib import Path

from ...sandbox import integrity

# Loaded by path inside the scoring child (importing them here would load numpy and h5py for nothing).
COMPARE_PATH = str(Path(__file__).with_name("compare.py"))
CODEC_PATH = str(Path(__file__).with_name("h5codec.py"))

TOKEN_ENV = "AGENTBENCH_COMPLETION_TOKEN"
TARGETS_EXIT = 97  # the targets could not be read: eval_error, not the model's fault

# Shared with the target rebuild (targets.py): how a script loads a module from a file, serves our
# comparison helpers under the name the tests import, and brings back `scipy.integrate.simps`.
LOADER = '''\
def _ab_load(name, path):
    spec = _ab_util.spec_from_file_location(name, path)
    module = _ab_util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
'''

COMPARE_BLOCK = '''\
# The tests import `scicode.compare.cmp`; serve our own helpers under that name.
_ab_cmp = _ab_load("scicode.compare.cmp", {compare_path!r})
for _ab_name in ("scicode", "scicode.compare"):
    _ab_sys.modules.setdefault(_ab_name, _ab_types.ModuleType(_ab_name))
_ab_sys.modules["scicode.compare.cmp"] = _ab_cmp
_ab_sys.modules["scicode"].compare = _ab_sys.modules["scicode.compare"]
_ab_sys.modules["scicode.compare"].cmp = _ab_cmp
'''.format(compare_path=COMPARE_PATH)

SIMPS_SHIM = '''\
# scipy removed `simps` in 1.14; problems 2 and 28 still call it. Same arguments, computed by `simpson`.
import scipy.integrate as _ab_integrate
if not hasattr(_ab_integrate, "simps"):
    def _ab_simps(y, x=None, dx=1.0, axis=-1, even=None):
        return _ab_integrate.simpson(y, x=x, dx=dx, axis=axis)
    _ab_integrate.simps = _ab_simps
'''

PREAMBLE = (
    "import os as _ab_os, sys as _ab_sys, types as _ab_types, importlib.util as _ab_util\n"
    "_ab_os.environ.pop({token_env!r}, None)\n\n"
    + LOADER.replace("{", "{{").replace("}", "}}") + "\n"
    + COMPARE_BLOCK.replace("{", "{{").replace("}", "}}") + "\n"
    + SIMPS_SHIM.replace("{", "{{").replace("}", "}}") + "\n"
    "{targets_block}\n"
    "del _ab_load, _ab_name\n"
)

TARGETS_BLOCK = '''\
try:
    targets = _ab_load("_ab_h5codec", {codec_path!r}).read_step_targets({h5_path!r}, {step!r})
except Exception as _ab_exc:
    print(f"agentbench: cannot read targets of step {step}: {{_ab_exc}}", file=_ab_sys.stderr)
    _ab_sys.exit({exit_code})
if len(targets) < {n_tests}:
    print(f"agentbench: {h5_path} has {{len(targets)}} targets for step {step}, the step has {n_tests} tests",
          file=_ab_sys.stderr)
    _ab_sys.exit({exit_code})
'''

TEST_BLOCK = '''
target = targets[{index}]

{test}
print("agentbench: test {number} done")
'''

# The guard records the genuine comparison functions before generated code runs; the epilogue
# checks them and prints the completion token only when nothing was replaced.
GUARDED_MODULES = (*integrity.DEFAULT_GUARDED_MODULES, "scicode.compare.cmp")


def new_token() -> str:
    return integrity.new_token()


def section(title: str, body: str) -> str:
    return f"\n# ---- {title} ----\n{body.rstrip()}\n"


def build_scoring_script(*, step_number: str, dependencies: str, previous_code: list[str], code: str,
                         tests: list[str], h5_path: Path, token: str) -> str:
    """The whole script for one step; it proves completion by printing ``token`` last."""
    targets_block = TARGETS_BLOCK.format(codec_path=CODEC_PATH, h5_path=str(h5_path), step=step_number,
                                         exit_code=TARGETS_EXIT, n_tests=len(tests))
    parts = [PREAMBLE.format(token_env=TOKEN_ENV, compare_path=COMPARE_PATH, targets_block=targets_block)]
    parts.append(integrity.integrity_prelude(guard_modules=GUARDED_MODULES))
    parts.append(section("dependencies", dependencies))
    for number, earlier in enumerate(previous_code, 1):
        parts.append(section(f"earlier step {number}", earlier))
    parts.append(section(f"step {step_number}", code))
    for index, test in enumerate(tests):
        parts.append(TEST_BLOCK.format(index=index, number=index + 1, test=test.rstrip()))
    parts.append("\n" + integrity.integrity_epilogue(token))
    return "".join(parts)


def build_tool_script(*, dependencies: str, previous_code: list[str], code: str) -> str:
    """What the model's ``code_interpreter`` runs: dependencies and earlier steps already loaded."""
    parts = [section("dependencies", dependencies)]
    for number, earlier in enumerate(previous_code, 1):
        parts.append(section(f"earlier step {number}", earlier))
    parts.append(section("your code", code))
    return "".join(parts)


def tests_completed(stdout: str) -> int:
    return sum(1 for line in stdout.splitlines() if line.startswith("agentbench: test ") and line.endswith(" done"))
