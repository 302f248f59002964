"""The pieces every SciCode script is built from, in one place.

Three kinds of script run SciCode code: the scoring children (:func:`build_child_script`), the
model's ``code_interpreter`` runs (:func:`build_tool_script`) and the target rebuild (``targets.py``).
They share the same shims, so code behaves the same in all three: our comparison helpers served
under the module name the tests import (``scicode.compare.cmp``), and scipy's removed ``simps``
brought back. Then come sections: the problem's dependencies, the earlier steps' code, the step's
code, as upstream composes its scripts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...sandbox import codec
from .child import runtime
from .plan import CONTROL_FRAME_BYTES, StepPlan

# Loaded by path inside the child (importing it here would load numpy for nothing).
COMPARE_PATH = str(Path(__file__).with_name("compare.py"))

# How a script loads a module from a file (the target rebuild loads h5codec.py with it too).
LOADER = """\
def _ab_load(name, path):
    spec = _ab_util.spec_from_file_location(name, path)
    module = _ab_util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
"""

COMPARE_BLOCK = f"""\
# The tests import `scicode.compare.cmp`; serve our own helpers under that name.
_ab_cmp = _ab_load("scicode.compare.cmp", {COMPARE_PATH!r})
for _ab_name in ("scicode", "scicode.compare"):
    _ab_sys.modules.setdefault(_ab_name, _ab_types.ModuleType(_ab_name))
_ab_sys.modules["scicode.compare.cmp"] = _ab_cmp
_ab_sys.modules["scicode"].compare = _ab_sys.modules["scicode.compare"]
_ab_sys.modules["scicode.compare"].cmp = _ab_cmp
"""

SIMPS_SHIM = """\
# scipy removed `simps` in 1.14; problems 2 and 28 still call it. Same arguments, computed by `simpson`.
try:
    import scipy.integrate as _ab_integrate
except ImportError:
    pass
else:
    if not hasattr(_ab_integrate, "simps"):
        def _ab_simps(y, x=None, dx=1.0, axis=-1, even=None):
            return _ab_integrate.simpson(y, x=x, dx=dx, axis=axis)
        _ab_integrate.simps = _ab_simps
"""

IMPORTS = "import sys as _ab_sys, types as _ab_types, importlib.util as _ab_util\n"

# What a scoring child starts with (before the operand runtime and any code of the problem).
SHIMS = IMPORTS + "\n" + LOADER + "\n" + COMPARE_BLOCK + "\n" + SIMPS_SHIM + "del _ab_load, _ab_name, _ab_cmp\n"
# ... in a grading environment (--bench-set grading_envs): no `simps`, so each environment's verdict is its own
SHIMS_WITHOUT_SIMPS = IMPORTS + "\n" + LOADER + "\n" + COMPARE_BLOCK + "\n" + "del _ab_load, _ab_name, _ab_cmp\n"

# What a code_interpreter run starts with: the same `simps`. (The tests' comparison helpers are for
# scoring; the tool may run in an environment that cannot see this package's files.)
TOOL_SHIMS = SIMPS_SHIM


def section(title: str, body: str) -> str:
    return f"\n# ---- {title} ----\n{body.rstrip()}\n"


def build_tool_script(*, dependencies: str, previous_code: list[str], code: str) -> str:
    """What the model's ``code_interpreter`` runs: dependencies and earlier steps already loaded."""
    parts = [TOOL_SHIMS, section("dependencies", dependencies)]
    for number, earlier in enumerate(previous_code, 1):
        parts.append(section(f"earlier step {number}", earlier))
    parts.append(section("your code", code))
    return "".join(parts)


# ---- the scoring child -----------------------------------------------------------------------------

MESSAGE_CHARS = 500  # characters of a child's exception text kept in a frame
DIGEST_BYTES = 64 * 1024 * 1024  # largest encoded input the child digests to note a change in place (a note only)

# Loads the operand runtime (child/runtime.py) by its path and starts it; the runtime loads the codec by its path.
CHILD_RUNTIME = """\
def _agentbench_runtime(path, *args):
    import importlib.util
    spec = importlib.util.spec_from_file_location("_agentbench_runtime", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.start(*args)


_agentbench_rt = _agentbench_runtime({runtime_path!r}, {codec_path!r}, {channel!r}, {max_bytes!r}, {control_bytes!r},
                                     {message_chars!r}, {digest_bytes!r}, {traced!r})
del _agentbench_runtime
"""


def child_runtime(
    channel: int | str, *, max_bytes: int = codec.DEFAULT_MAX_BYTES, codec_path: str | None = None, traced: bool = False
) -> str:
    """Source that defines ``_agentbench_rt`` in the child (:mod:`.child.runtime`, loaded by its path): it
    loads the codec by file path and writes frames to ``channel`` (an inherited file descriptor number, or a
    file path); ``traced`` when the plan has a traced helper. Put it before the model's code; the tests'
    child code (:meth:`.plan.StepPlan.child_source`) goes after it."""
    return CHILD_RUNTIME.format(
        runtime_path=runtime.__file__,
        codec_path=codec_path or codec.__file__,
        channel=channel,
        max_bytes=int(max_bytes),
        control_bytes=CONTROL_FRAME_BYTES,
        message_chars=MESSAGE_CHARS,
        digest_bytes=min(int(max_bytes), DIGEST_BYTES),
        traced=bool(traced),
    )


def build_child_script(
    plan: StepPlan,
    *,
    dependencies: str,
    previous_code: Sequence[str],
    code: str,
    channel: int | str,
    max_bytes: int = codec.DEFAULT_MAX_BYTES,
    simps: bool = True,
) -> str:
    """The whole child script of a step: the shims every SciCode script gets (:data:`SHIMS`: the comparison
    helpers under the name the tests import, scipy's removed ``simps`` unless ``simps`` is false), the operand
    runtime, the problem's dependencies, the earlier steps' code, the step's code, then every test's child
    code. No target, no comparison."""
    traced = any(leaf.trace for test in plan.tests for part in test.evaluated for leaf in part.leaves)
    parts = [
        SHIMS if simps else SHIMS_WITHOUT_SIMPS,
        child_runtime(channel, max_bytes=max_bytes, traced=traced),
        section("dependencies", dependencies),
    ]
    for number, earlier in enumerate(previous_code, 1):
        parts.append(section(f"earlier step {number}", earlier))
    parts.append(section(f"step {plan.step}", code))
    parts.append(plan.child_source())
    return "".join(parts)
