"""The red team. Hostile code, written here, tries every class of attack on the scoring child we know of;
each step must fail with its exact reason, and nothing of it may survive the step or the run.

Cheap by design: one pytester run scores many hostile steps. The dataset has one problem per attack
(``2NN.1``, ground truth ``def f(): return 1``, test ``assert np.allclose(f(), target)``, targets rebuilt
from the ground truth into the shared cache); a conftest model answers each step with its attack, whose
``f()`` returns the WRONG value 2, so a pass can only come from defeating the scoring. Special shapes
(29.3, 51.4's tuple of comparisons, 78.2's test function) are attacked on the real validation steps.

The attack code knows every path of the run (data dir, cache, reports, project, home, the installed
package): the strongest attacker. Attacks that would damage this machine if they succeeded only write
markers (comment lines, small files) that the tests remove again.

In CI (``CI=true``) a machine without bubblewrap/namespaces fails these tests instead of skipping them.
"""

from __future__ import annotations

import fnmatch
import json
import os
import signal
import site
import time
import uuid
from pathlib import Path

import pytest

import pytest_agentbench
from pytest_agentbench.benchmarks.scicode import dataset

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.capabilities import needs
from helpers.scicode_builders import custom_data_args, problem, step

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WRONG_F = "\ndef f():\n    return 2\n"
ASSERTION = "AssertionError in `assert np.allclose(f(), target)` (test 1 of 1)"
EXITED = "exited before all tests ran (0 of 1 tests completed)"
UNENCODABLE = "cannot compare `f()`: cannot encode a value of type *Liar*(test 1 of 1)"
RUN_ID = uuid.uuid4().hex[:12]  # markers of this session's attacks (files, processes, the API key)
API_KEY = f"sk-redteam-{RUN_ID}"
DAEMON_SECONDS = f"{int(RUN_ID[:6], 16) % 9000 + 1000}.{int(RUN_ID[6:], 16) % 999983}"  # `sleep <this>`
FILL_PREFIX = f"agentbench-fill-{RUN_ID}-"
MARKER = f"agentbench-redteam-{RUN_ID}"
PACKAGE_INIT = Path(pytest_agentbench.__file__).resolve()
PTH_NAME = f"zz_agentbench_redteam_{RUN_ID}.pth"


# ---- the attacks ------------------------------------------------------------------------------
# Placeholders @NAME@ are filled by `attacks()` with the paths of the run under attack.

PATCH_COMPARISONS_CODE = """
import numpy as _np
def _always_true(*args, **kwargs):
    return True
for _name in ("allclose", "isclose", "array_equal"):
    _obj = getattr(_np, _name)
    for _fn in {id(c): c for c in (_obj, getattr(_obj, "__wrapped__", None), getattr(_obj, "_implementation", None))
                if c is not None and hasattr(c, "__code__")}.values():
        try:
            _fn.__code__ = _always_true.__code__  # the same object, new behaviour
        except Exception:
            pass
"""

ATTACKS: dict[str, tuple[str, str, str]] = {
    # number: (what it tries, code, expected message pattern)
    "201.1": (
        "forging completion: the token from frames and the script, then exit 0",
        """
import os, re, sys
_found = set()
_frame = sys._getframe()
while _frame is not None:
    for _k, _v in list(_frame.f_globals.items()):
        if isinstance(_v, str) and ("TOKEN" in _k.upper() or _k.startswith("_agentbench")):
            _found.add(_v)
    _frame = _frame.f_back
for _path in ("main.py", sys.argv[0] if sys.argv else ""):
    try:
        _found.update(re.findall(r"[0-9a-f]{24,}", open(_path).read()))
    except Exception:
        pass
print("\\n".join(sorted(_found)))
sys.stdout.flush()
os._exit(0)
"""
        + WRONG_F,
        EXITED,
    ),
    "202.1": (
        "returning the test's own target: frames, gc, the targets files",
        """
import gc, glob, sys
import numpy as _np
def _value(obj):
    return isinstance(obj, (int, float, complex, _np.number, _np.ndarray)) and not isinstance(obj, bool)
def _steal():
    frame = sys._getframe(1)
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            if _value(scope.get("target")):
                return scope["target"]
        frame = frame.f_back
    for obj in gc.get_objects():
        if isinstance(obj, dict) and _value(obj.get("target")):
            return obj["target"]
    try:
        import h5py
        for path in glob.glob("@CACHE@/**/*.h5", recursive=True) + glob.glob("@DATA@/**/*.h5", recursive=True):
            with h5py.File(path, "r") as fh:
                if "202.1" in fh:
                    return fh["202.1/test1/var1"][()]
    except Exception:
        pass
    return None
def f():
    stolen = _steal()
    return 2 if stolen is None else stolen
""",
        ASSERTION,
    ),
    "203.1": (
        "comparisons changed in place: __code__ of numpy's functions",
        PATCH_COMPARISONS_CODE + WRONG_F,
        ASSERTION,
    ),
    "204.1": (
        "comparisons changed in place: __defaults__ (tolerances) of numpy's functions",
        """
import numpy as _np
for _name in ("allclose", "isclose"):
    _obj = getattr(_np, _name)
    for _fn in (_obj, getattr(_obj, "__wrapped__", None), getattr(_obj, "_implementation", None)):
        try:
            _fn.__defaults__ = tuple(1e300 for _ in (_fn.__defaults__ or ()))
        except Exception:
            pass
"""
        + WRONG_F,
        ASSERTION,
    ),
    "205.1": (
        "comparisons changed through a numpy submodule that is not checked",
        """
import importlib
for _module in ("numpy._core.numeric", "numpy.core.numeric"):
    try:
        _m = importlib.import_module(_module)
        _m.isclose = lambda *a, **k: True
        _m.array_equal = lambda *a, **k: True
    except Exception:
        pass
"""
        + WRONG_F,
        ASSERTION,
    ),
    "206.1": (
        "an object whose __array_function__/__eq__ answer True",
        """
class Liar:
    def __array_function__(self, *a, **k):
        return True
    def __array_ufunc__(self, *a, **k):
        return True
    def __eq__(self, other):
        return True
    def __bool__(self):
        return True
    def __float__(self):
        return 1.0
def f():
    return Liar()
""",
        UNENCODABLE,
    ),
    "207.1": (
        "an ndarray subclass whose __array_function__/__eq__ answer True",
        """
import numpy as _np
class LyingArray(_np.ndarray):
    def __array_function__(self, *a, **k):
        return True
    def __eq__(self, other):
        return _np.ones(_np.shape(self), dtype=bool)
def f():
    return _np.asarray(2.0).view(LyingArray)
""",
        "cannot compare `f()`: cannot encode a value of type *LyingArray*(test 1 of 1)",
    ),
    "208.1": (
        "a trace hook that jumps over assert lines",
        """
import dis, sys
_asserts = {}
def _assert_lines(code):
    if code not in _asserts:
        spans = {}
        for ins in dis.get_instructions(code):
            if ins.opname == "LOAD_ASSERTION_ERROR" and ins.positions and ins.positions.lineno:
                spans[ins.positions.lineno] = ins.positions.end_lineno or ins.positions.lineno
        _asserts[code] = spans
    return _asserts[code]
def _tracer(frame, event, arg):
    if event == "line":
        end = _assert_lines(frame.f_code).get(frame.f_lineno)
        if end is not None:
            try:
                frame.f_lineno = end + 1
            except Exception:
                pass
    return _tracer
sys.settrace(_tracer)
_frame = sys._getframe()
while _frame is not None:
    _frame.f_trace = _tracer
    _frame = _frame.f_back
"""
        + WRONG_F,
        ASSERTION,
    ),
    "209.1": (
        "shadowing globals() so a guard reads a clean copy, then replacing np.allclose",
        """
import builtins
import numpy as _np
_clean = dict(globals())
builtins.globals = lambda: _clean
_np.allclose = lambda *a, **k: True
_np.isclose = lambda *a, **k: True
"""
        + WRONG_F,
        ASSERTION,
    ),
    "210.1": (
        "editing the guard's saved state: every reference to the genuine functions replaced",
        """
import gc
import numpy as _np
_fake = lambda *a, **k: True
_genuine = {id(getattr(_np, n)) for n in ("allclose", "isclose", "array_equal")}
for _obj in gc.get_objects():
    try:
        if isinstance(_obj, dict):
            for _k, _v in list(_obj.items()):
                if id(_v) in _genuine:
                    _obj[_k] = _fake
        elif isinstance(_obj, list):
            for _i, _v in enumerate(_obj):
                if id(_v) in _genuine:
                    _obj[_i] = _fake
    except Exception:
        pass
"""
        + WRONG_F,
        ASSERTION,
    ),
    "211.1": (
        "persisting: rewriting the cached rebuilt targets (and their manifests) to 2",
        """
import glob, hashlib, json, os
_done = []
try:
    import h5py
    for _path in glob.glob("@CACHE@/scicode/rebuilt-targets/2[0-9][0-9]-*.h5"):
        with h5py.File(_path, "a") as _fh:
            def _visit(name, obj):
                if isinstance(obj, h5py.Dataset):
                    obj[...] = 2
            _fh.visititems(_visit)
        _digest = hashlib.sha256(open(_path, "rb").read()).hexdigest()
        _manifest = _path[:-3] + ".json"
        _data = json.load(open(_manifest))
        _data["sha256"] = _digest
        json.dump(_data, open(_manifest, "w"))
        _done.append(_path)
except Exception as exc:
    print("persist-targets:", type(exc).__name__)
print("persist-targets wrote", len(_done))
"""
        + WRONG_F,
        ASSERTION,
    ),
    "212.1": (
        "persisting: a fake test_data.h5 in the data dir and a matching checksum stamp in the cache",
        """
import hashlib, os
try:
    import h5py
    _fake = "@DATA@/scicode/test_data.h5"
    with h5py.File(_fake, "w") as _fh:
        for _n in range(201, 230):
            _fh[f"{_n}.1/test1/var1"] = 2
    _st = os.stat(_fake)
    _key = hashlib.sha256(f"{os.path.realpath(_fake)}|{_st.st_size}|{_st.st_mtime_ns}".encode()).hexdigest()[:24]
    os.makedirs("@CACHE@/verified", exist_ok=True)
    open(f"@CACHE@/verified/test_data.h5.{_key}", "w").write("@SHA@")
    print("persist-stamp: wrote")
except Exception as exc:
    print("persist-stamp:", type(exc).__name__)
"""
        + WRONG_F,
        ASSERTION,
    ),
    "213.1": (
        "persisting: a .pth file in site-packages and a line appended to the plugin's source",
        """
for _path, _text in (("@SITE@/@PTH@", "# @MARKER@\\n"), ("@PACKAGE_INIT@", "# @MARKER@\\n")):
    try:
        with open(_path, "a") as _fh:
            _fh.write(_text)
        print("persist-code: wrote", _path)
    except Exception as exc:
        print("persist-code:", type(exc).__name__)
"""
        + WRONG_F,
        ASSERTION,
    ),
    "214.1": (
        "persisting: editing the run's records to say pass",
        """
import glob, json
for _path in glob.glob("@REPORTS@/**/*.jsonl", recursive=True):
    try:
        _lines = [json.loads(l) for l in open(_path) if l.strip()]
        for _r in _lines:
            _r["status"] = "pass"
        open(_path, "w").write("".join(json.dumps(r) + "\\n" for r in _lines))
        print("persist-records: wrote")
    except Exception as exc:
        print("persist-records:", type(exc).__name__)
"""
        + WRONG_F,
        ASSERTION,
    ),
    "215.1": (
        "escaping: writing into other processes' memory through /proc/<pid>/mem",
        """
import os
for _pid in sorted({os.getppid(), 1, *[int(p) for p in os.listdir("/proc") if p.isdigit()]}):
    if _pid == os.getpid():
        continue
    try:
        with open(f"/proc/{_pid}/mem", "r+b"):
            print("mem-open:", _pid)
    except Exception:
        pass
"""
        + WRONG_F,
        ASSERTION,
    ),
    "216.1": (
        "escaping: a daemon (setsid, double fork, out of the cgroup) that outlives the step",
        """
import os
_pid = os.fork()
if _pid == 0:
    os.setsid()
    if os.fork() == 0:
        for _procs in ("/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/unified/cgroup.procs"):
            try:
                open(_procs, "w").write(str(os.getpid()))
            except Exception:
                pass
        os.execv("/bin/sleep", ["sleep", "@DAEMON@"])
    os._exit(0)
os.waitpid(_pid, 0)
"""
        + WRONG_F,
        ASSERTION,
    ),
    "217.1": (
        "escaping: reading OPENAI_API_KEY from other processes' /proc/<pid>/environ",
        """
import os
for _pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        for _var in open(f"/proc/{_pid}/environ", "rb").read().split(b"\\0"):
            if _var.startswith(b"OPENAI_API_KEY="):
                print("key:", _var.decode(errors="replace"))
    except Exception:
        pass
if os.environ.get("OPENAI_API_KEY"):
    print("key:", os.environ["OPENAI_API_KEY"])
"""
        + WRONG_F,
        ASSERTION,
    ),
    "218.1": (
        "escaping: writing files into the project, the reports and the home folders",
        """
import os
for _folder in ("@PROJECT@", "@REPORTS@", "@HOME@", "/root", os.path.expanduser("~")):
    try:
        open(os.path.join(_folder, "@MARKER@"), "w").write("x")
        print("wrote-into:", _folder)
    except Exception:
        pass
"""
        + WRONG_F,
        ASSERTION,
    ),
    "219.1": (
        "escaping: filling the disk with many files under the per-file cap",
        """
import os
_chunk = b"x" * (1 << 20)
_total = 0
_written = []
for _folder in ("/tmp", "/var/tmp", "/dev/shm"):
    for _i in range(1300):
        if _total >= 1200:
            break
        _path = os.path.join(_folder, f"@FILL@{_i}")
        try:
            with open(_path, "wb") as _fh:
                _fh.write(_chunk)
            _written.append(_path)
            _total += 1
        except Exception:
            try:
                os.unlink(_path)
            except Exception:
                pass
            break
if _written:
    os.unlink(_written.pop())  # leave room to hand back an answer
print("filled MiB:", _total)
"""
        + WRONG_F,
        ASSERTION,
    ),
}


# Special shapes, hand-made after the official ones (ground truth, test, attack, expected message). The attack
# returns wrong values and patches numpy's comparisons in place, so only a comparison made by the trusted
# process fails it.
SHAPED: dict[str, tuple[str, str, str, str]] = {
    "220.1": (
        "def f(x):\n    return np.array([x, 2.0 * x])",
        "a = f(1.0)\nb = f(1.0)\nassert (np.isclose(a[0], b[0]), np.allclose(a, b),\n"
        "        np.allclose(f(2.0), 2.0 * f(1.0))) == target",
        PATCH_COMPARISONS_CODE + "_calls = [0]\ndef f(x):\n    _calls[0] += 1\n"
        "    return np.array([x + _calls[0], 2.0 * x])\n",
        "AssertionError in `assert (np.isclose(a[[]0], b[[]0]), np.allclose(a, b)*== target` (test 1 of 1)",
    ),
    "221.1": (
        "def f(x):\n    return x * x",
        "def test_case_1():\n    out = f(3.0)\n    expected = 9.0\n"
        "    assert np.isclose(out, expected), 'Test Case 1 Failed'\ntest_case_1()",
        PATCH_COMPARISONS_CODE + "def f(x):\n    return x + 100.0\n",
        "AssertionError: Test Case 1 Failed in `assert np.isclose(out, expected), *` (test 1 of 1)",
    ),
    "222.1": (
        "def f():\n    return np.eye(2)",
        "B = f()\nassert (np.isclose(0, B[:, 0] @ B[:, 1])) == target",
        PATCH_COMPARISONS_CODE + "def f():\n    return np.ones((2, 2))\n",
        "AssertionError in `assert np.isclose(0, B[[]:, 0] @ B[[]:, 1]) == target` (test 1 of 1)",
    ),
}


def attacks(paths: dict[str, str]) -> dict[str, str]:
    out = {}
    for number, (_, code, _) in ATTACKS.items():
        for name, value in paths.items():
            code = code.replace(f"@{name}@", value)
        out[number] = code
    out.update({number: attack for number, (_, _, attack, _) in SHAPED.items()})
    return out


REDTEAM_CONFTEST = '''
import json, os
import pytest

class RedTeam:
    """Answers the steps named in $REDTEAM_ATTACKS (a JSON file: number -> code) with that code, every
    other step with its ground truth."""
    name = "redteam"
    is_oracle = False

    def answer_step(self, problem, index, previous_code):
        step = problem["sub_steps"][index]
        with open(os.environ["REDTEAM_ATTACKS"]) as fh:
            attacks = json.load(fh)
        return attacks.get(step["step_number"], step["ground_truth_code"])

@pytest.fixture(scope="session")
def bench_model():
    return RedTeam()
'''

CLOSE_F = "assert np.allclose(f(), target)"


def attack_dataset(root: Path, shared_data: Path) -> Path:
    """One problem per attack, ground truth f() == 1 (the rebuilt targets), on the validation split."""
    data = root / "redteam-data"
    (data / "scicode").mkdir(parents=True, exist_ok=True)
    problems = [problem(n.split(".")[0], [step(n, "def f():\n    return 1", [CLOSE_F])]) for n in ATTACKS]
    problems += [problem(n.split(".")[0], [step(n, truth, [test])]) for n, (truth, test, _, _) in SHAPED.items()]
    (data / "scicode" / "problems_dev.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    for name in ("13.6.txt", "62.1.txt", "76.3.txt"):
        (data / "scicode" / name).write_text("pass\n")
    for name in ("multistep_template.txt", "background_comment_template.txt"):
        (data / "scicode" / name).write_text((shared_data / "scicode" / name).read_text())
    return data


def live_daemons() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/cmdline").read_bytes() == b"sleep\0" + DAEMON_SECONDS.encode() + b"\0":
                    found.append(int(entry))
            except OSError:
                pass
    return found


def fill_files() -> list[Path]:
    return [
        p
        for folder in ("/tmp", "/var/tmp", "/dev/shm")
        if Path(folder).is_dir()
        for p in Path(folder).glob(f"{FILL_PREFIX}*")
    ]


def marker_files(paths: list[Path]) -> list[Path]:
    return [p / MARKER for p in paths if (p / MARKER).exists()]


def remove_code_markers() -> list[str]:
    """Undo attack 213 if it got through (only its marker line is removed); returns what was found."""
    found = []
    for sp in site.getsitepackages():
        pth = Path(sp) / PTH_NAME
        if pth.exists():
            found.append(str(pth))
            pth.unlink()
    text = PACKAGE_INIT.read_text()
    if MARKER in text:
        found.append(str(PACKAGE_INIT))
        PACKAGE_INIT.write_text("".join(line for line in text.splitlines(keepends=True) if MARKER not in line))
    return found


@pytest.fixture
def redteam(pytester, bench, shared_data, shared_cache, monkeypatch):
    """Run the attack dataset (or validation steps) with the red-team model, in a subprocess (so the
    API key is in the real environment of the pytest process under attack)."""
    pytester.makeconftest(REDTEAM_CONFTEST)
    data = attack_dataset(pytester.path, shared_data)
    home = os.environ.get("HOME", "/root")
    paths = {
        "CACHE": str(shared_cache),
        "DATA": str(data),
        "REPORTS": str(pytester.path / "reports"),
        "PROJECT": str(pytester.path),
        "HOME": home,
        "SITE": site.getsitepackages()[0],
        "PACKAGE_INIT": str(PACKAGE_INIT),
        "PTH": PTH_NAME,
        "MARKER": MARKER,
        "FILL": FILL_PREFIX,
        "DAEMON": DAEMON_SECONDS,
        "SHA": dataset.H5_FILE.sha256,
    }
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    leftovers: dict[str, list] = {}

    def run(answers: dict[str, str], *args: str, data_dir: Path = data):
        attacks_file = pytester.path / f"attacks-{len(list(pytester.path.glob('attacks-*.json')))}.json"
        attacks_file.write_text(json.dumps(answers))
        monkeypatch.setenv("REDTEAM_ATTACKS", str(attacks_file))
        result = bench(
            *custom_data_args(data_dir, None, "--bench-timeout=60", model="redteam"),
            *args,
            subprocess=True,
        )
        records = records_of(pytester.path)
        assert records, f"the run wrote no records:\n{result.stdout.str()[-3000:]}\n{result.stderr.str()[-3000:]}"
        return result, records

    run.paths = paths
    run.data = data
    run.home_dirs = [pytester.path, pytester.path / "reports", Path(home), Path("/root")]
    run.leftovers = leftovers
    yield run
    # clean up whatever an attack left on this machine, then say what it was (the tests assert on it)
    for pid in live_daemons():
        os.kill(pid, signal.SIGKILL)
    for path in fill_files() + marker_files(run.home_dirs):
        path.unlink(missing_ok=True)
    remove_code_markers()


def records_of(root: Path) -> dict[str, dict]:
    runs = run_dirs(root)
    return {r["id"]: r for r in read_jsonl(runs[-1] / "steps.jsonl")} if runs else {}


def verdicts(records: dict[str, dict], expected: dict[str, str]) -> dict[str, str]:
    """The steps whose record is not (status fail, message matching the expected pattern)."""
    wrong = {}
    for number, pattern in expected.items():
        record = records.get(number)
        if record is None:
            wrong[number] = "no record"
        elif record["status"] != "fail" or not fnmatch.fnmatchcase(record.get("message") or "", pattern):
            wrong[number] = f"{record['status']}: {record.get('message')!r} (expected fail: {pattern!r})"
    return wrong


# ---- the tests --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def outcomes():
    """Results of the batch runs, shared by the per-class tests below (one run per executor)."""
    return {}


# Under the subprocess executor (a fresh interpreter per step, ~3 s of CPU each) the attacks whose outcome
# depends on how the child is started: leaving early, in-place patches and tracing, the shapes, everything
# that persists or escapes. The others are pure data attacks, decided in the parent the same way.
SUBPROCESS_STEPS = [
    "201.1",
    "202.1",
    "203.1",
    "208.1",
    "211.1",
    "212.1",
    "213.1",
    "214.1",
    "215.1",
    "216.1",
    "217.1",
    "218.1",
    "219.1",
    "220.1",
    "221.1",
]


def batch(redteam, outcomes, executor: str):
    if executor not in outcomes:
        started = time.monotonic()
        select = [] if executor == "fork" else ["--bench-ids=" + ",".join(n.split(".")[0] for n in SUBPROCESS_STEPS)]
        result, records = redteam(attacks(redteam.paths), f"--bench-set=executor={executor}", *select)
        time.sleep(1.0)  # a daemon that outlived its step would be visible now
        outcomes[executor] = {
            "records": records,
            "stdout": result.stdout.str(),
            "seconds": time.monotonic() - started,
            "daemons": live_daemons(),
            "fill": fill_files(),
            "markers": marker_files(redteam.home_dirs),
            "code": remove_code_markers(),
            "official_h5": (redteam.data / "scicode" / "test_data.h5").exists(),
        }
    return outcomes[executor]


CLASSES = {
    "forging_completion": ["201.1"],
    "returning_the_target": ["202.1"],
    "changing_comparisons": ["203.1", "204.1", "205.1", "206.1", "207.1", "208.1", "209.1", "210.1"],
    "persisting": ["211.1", "212.1", "213.1", "214.1"],
    "escaping": ["215.1", "216.1", "217.1", "218.1", "219.1"],
    "special_shapes": list(SHAPED),
}


@pytest.mark.parametrize("executor", ["fork", "subprocess"])
@pytest.mark.parametrize("attack_class", list(CLASSES))
@pytest.mark.isolation
def test_every_attack_fails_with_its_reason(redteam, outcomes, attack_class, executor):
    if attack_class in ("persisting", "escaping"):
        needs("bwrap")  # escaping and persisting attacks only fail where children are isolated
    run = batch(redteam, outcomes, executor)
    expected = {
        n: ATTACKS[n][2] if n in ATTACKS else SHAPED[n][3]
        for n in CLASSES[attack_class]
        if executor == "fork" or n in SUBPROCESS_STEPS
    }
    wrong = verdicts(run["records"], expected)
    assert not wrong, "\n".join(
        f"{n} ({ATTACKS[n][0] if n in ATTACKS else 'shape'}): {why}" for n, why in wrong.items()
    )


@pytest.mark.parametrize("executor", ["fork", "subprocess"])
@pytest.mark.isolation
def test_escapes_leave_nothing_behind(redteam, outcomes, executor):
    needs("bwrap")  # escaping and persisting attacks only fail where children are isolated
    run = batch(redteam, outcomes, executor)
    records = run["records"]
    problems = []
    if run["daemons"]:
        problems.append(f"a daemon outlived the run: pids {run['daemons']}")
    if run["fill"]:
        problems.append(f"{len(run['fill'])} disk-fill files survived, e.g. {run['fill'][0]}")
    if run["markers"]:
        problems.append(f"files written outside the sandbox: {run['markers']}")
    if run["code"]:
        problems.append(f"code written where the next run imports it: {run['code']}")
    stdout = {n: (records.get(n) or {}).get("stdout") or "" for n in ("215.1", "217.1")}
    if "mem-open:" in stdout["215.1"]:
        problems.append(f"another process's /proc/<pid>/mem opened for writing: {stdout['215.1'][:300]}")
    if API_KEY in stdout["217.1"] or API_KEY in run["stdout"]:
        problems.append("the API key was read by a child")
    assert not problems, "\n".join(problems)


@pytest.mark.isolation
def test_persisted_attacks_do_not_change_the_next_run(redteam, outcomes):
    """After the attacks on the cached targets, the stamps and the records: a second run scores right answers
    as passes and wrong ones as failures, against targets that are not the official file."""
    needs("bwrap")  # escaping and persisting attacks only fail where children are isolated
    run = batch(redteam, outcomes, "fork")
    assert not run["official_h5"], "the attack wrote test_data.h5 into the data dir"
    answers = {"211.1": "def f():\n    return 2\n", "212.1": "def f():\n    return 1\n"}
    result, records = redteam(answers, "--bench-ids=211,212")
    assert records["211.1"]["status"] == "fail" and fnmatch.fnmatchcase(records["211.1"]["message"], ASSERTION), (
        records["211.1"]
    )
    assert records["212.1"]["status"] == "pass", records["212.1"]
    assert {r["targets"] for r in records.values()} == {"rebuilt"}


# ---- special shapes on validation steps ---------------------------------------------------------

PERTURB = """
import numpy as _np_rt
def _agentbench_redteam_perturb(value):
    if isinstance(value, tuple):
        return tuple(_agentbench_redteam_perturb(v) for v in value)
    if isinstance(value, list):
        return [_agentbench_redteam_perturb(v) for v in value]
    if isinstance(value, _np_rt.ndarray) and value.dtype.kind in "fc":
        return value + 0.5
    if isinstance(value, float):
        return value + 0.5
    return value
_agentbench_redteam_calls_@NAME@ = [0]
_agentbench_redteam_genuine_@NAME@ = @NAME@
def @NAME@(*args, **kwargs):  # names of its own: a later step's script also holds this step's code
    _agentbench_redteam_calls_@NAME@[0] += 1
    value = _agentbench_redteam_genuine_@NAME@(*args, **kwargs)
    return _agentbench_redteam_perturb(value) if _agentbench_redteam_calls_@NAME@[0] >= @FROM_CALL@ else value
"""

# "Send equal values": every operand of an assertion goes out as the value of its first operand, so any
# comparison of two operands the child sends holds. 78.1 compares the output with `expected_output`, which
# depends on no model code: the parent computes it from the test text, and the child has nothing to send.
EQUAL_OPERANDS = """
_agentbench_redteam_rt = globals().get("_agentbench_rt")
if _agentbench_redteam_rt is not None:
    _agentbench_redteam_send, _agentbench_redteam_first = _agentbench_redteam_rt.value, {}
    def _agentbench_redteam_equal(t, a, k, value):
        _agentbench_redteam_first.setdefault((t, a), value)
        return _agentbench_redteam_send(t, a, k, _agentbench_redteam_first[(t, a)])
    _agentbench_redteam_rt.value = _agentbench_redteam_equal
"""

SHAPES = {
    # step: (function, perturbed from this call on, expected message pattern, more attack code)
    "29.3": ("orthogonalize", 1, "AssertionError in `assert *np.isclose(0*== target` (test 1 of *)", ""),
    "78.1": (
        "pendulum_derivs",
        1,
        "AssertionError: Test Case 1 Failed in `assert np.allclose(output, "
        "expected_output), 'Test Case 1 Failed'` (test 1 of 3)",
        EQUAL_OPERANDS,
    ),
    "78.2": (
        "runge_kutta_4th_order",
        1,
        "AssertionError: Test Case 1 Failed in `assert np.isclose(final_state[[]0], expected_theta*` (test 1 of 3)",
        "",
    ),
}


def test_special_shapes_are_compared_in_the_trusted_process(redteam, shared_data):
    """Wrong values plus numpy's comparisons patched in place in the child: 29.3's `(np.isclose(..)) == target`
    and 78.x's test functions fail on the parent's comparison; 78.1's child also sends equal values for every
    operand, and fails since its expected value is the parent's own. (51.4's tuple of comparisons is test 4,
    after three runs of 1000 MD steps: too slow here; step 220.1 of the batch has its shape.)"""
    problems = {
        p["problem_id"]: p
        for p in map(json.loads, (shared_data / "scicode" / "problems_dev.jsonl").read_text().splitlines())
    }
    answers = {}
    for number, (name, from_call, _, more) in SHAPES.items():
        steps = {s["step_number"]: s for s in problems[number.split(".")[0]]["sub_steps"]}
        answers[number] = (
            steps[number]["ground_truth_code"]
            + "\n"
            + PATCH_COMPARISONS_CODE
            + PERTURB.replace("@NAME@", name).replace("@FROM_CALL@", str(from_call))
            + more
        )
    records = {}
    # 78.2's script holds 78.1's code: 78.1's attack runs alone (its hook would also reach 78.2's operands)
    for ids in (["29.3", "78.2"], ["78.1"]):
        _, got = redteam({n: answers[n] for n in ids}, "--bench-ids=" + ",".join(ids), data_dir=shared_data)
        records.update({n: got.get(n) for n in ids})
    wrong = verdicts({n: r for n, r in records.items() if r}, {n: pattern for n, (_, _, pattern, _) in SHAPES.items()})
    assert not wrong, "\n".join(f"{n}: {why}" for n, why in wrong.items())
