"""SciCode's grading environments (--bench-set grading_envs): a step graded in several pinned Pythons passes when
any passes, each environment's verdict kept; a bad name, a failed build or an unfit interpreter is a usage
error naming it; a replay re-grades an earlier run's answers in them with no model call.

The built-in environments (2024, 2025) are built once by .ci/grading-envs (``needs("grading-envs")`` finds
them in ``$AGENTBENCH_GRADING_ENVS``); the runs here point the plugin at that folder, so the lookup by spec
hash and the self-test run as a user's second run does."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_agentbench.benchmarks.scicode import gradingenvs
from pytest_agentbench.core.errors import ConfigError

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.capabilities import needs
from helpers.fake_openai import FakeOpenAI
from helpers.scicode_builders import CLOSE, custom_data_args, problem, step, write_dataset

SAMPLES = [1.0, 2.0, 4.0, 8.0]
EXPECTED = 5.083333333333333  # simps and simpson of SAMPLES with dx=0.5 (SciPy >= 1.11: the same rule)
PROBLEMS = [
    problem(
        "9",
        [
            step(
                "9.1",
                "def area(y, dx):\n    return simps(np.array(y), dx=dx)",
                [CLOSE.format(call=f"area({SAMPLES}, 0.5)")],
                header="def area(y, dx):",
            )
        ],
        deps="import numpy as np\nfrom scipy.integrate import simps",
    )
]
ANSWER = "```python\ndef area(y, dx):\n    return simps(np.array(y), dx=dx)\n```"


# ---- the option's values ----------------------------------------------------------------------------------


def test_names_are_built_in_specs_or_name_equals_python_and_others_are_refused_naming_them():
    assert gradingenvs.parse(["2024", " 2025 ", "mine=/opt/py/bin/python"]) == [
        ("2024", None),
        ("2025", None),
        ("mine", "/opt/py/bin/python"),
    ]
    for bad, said in [
        (["2023"], "no built-in grading environment '2023'; built-in: 2024, 2025"),
        (["2024", "2024"], "'2024' is named twice"),
        (["x="], "names no interpreter"),
        (["a b=/p"], "is not NAME or NAME=/path/to/python"),
    ]:
        with pytest.raises(ConfigError, match="--bench-set grading_envs: .*" + said.replace("(", r"\(")):
            gradingenvs.parse(bad)


def test_the_built_in_specs_pin_every_scoring_package_for_the_supported_pythons():
    specs = gradingenvs.load_specs()
    assert set(specs) == {"2024", "2025"}
    for spec in specs.values():
        assert {"numpy", "scipy", "sympy", "h5py"} <= set(spec.packages)
        assert all(version.count(".") == 2 for version in spec.packages.values()), spec  # exact releases
        assert spec.python == ("3.10", "3.11", "3.12")
    assert specs["2024"].packages["numpy"].startswith("1.") and specs["2024"].packages["scipy"].startswith("1.13.")
    assert specs["2025"].packages["numpy"].startswith("2.") and specs["2025"].packages["scipy"].startswith("1.15.")
    # the hash names the venv: another pin or another building interpreter is another venv
    other = gradingenvs.Spec("2024", {**specs["2024"].packages, "numpy": "1.26.3"}, specs["2024"].python)
    assert other.digest("/usr/bin/python3", "3.11.7") != specs["2024"].digest("/usr/bin/python3", "3.11.7")
    assert specs["2024"].digest("/usr/bin/python3", "3.11.7") != specs["2024"].digest("/usr/bin/python3", "3.12.1")


@pytest.mark.slow  # builds a venv with pip, over 10 s
def test_a_failed_build_names_the_spec_and_quotes_pip(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # nothing leaves the machine: the requirement fails to parse first
    monkeypatch.delenv("PATH", raising=False)  # no uv: the venv-and-pip path
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    version = ".".join(map(str, sys.version_info[:2]))
    spec = gradingenvs.Spec("broken", {"numpy": "not-a-version!"}, (version,))
    with pytest.raises(gradingenvs.GradingEnvError) as raised:
        gradingenvs.built(spec, tmp_path)
    message = str(raised.value)
    assert "could not build grading environment broken (numpy==not-a-version!)" in message
    assert "pip said:" in message and "not-a-version" in message.split("pip said:", 1)[1]
    assert not any(tmp_path.glob("broken-*/bin")), "a failed build leaves no venv to be taken for a built one"


def test_a_spec_for_other_pythons_is_refused_naming_what_it_needs(tmp_path):
    spec = gradingenvs.Spec("old", {"numpy": "1.0.0"}, ("2.7",))
    with pytest.raises(gradingenvs.GradingEnvError, match="grading environment old needs CPython 2.7"):
        gradingenvs.built(spec, tmp_path)
    assert list(tmp_path.iterdir()) == []


# ---- runs ---------------------------------------------------------------------------------------------------


def run_args(pytester, shared_data, fake: FakeOpenAI, *extra: str) -> tuple[str, ...]:
    data, h5 = write_dataset(pytester.path, shared_data, targets={"9.1": [EXPECTED]}, problems=PROBLEMS)
    return custom_data_args(
        data,
        h5,
        "--bench-mode=naive",
        f"--bench-cache-dir={pytester.path / 'cache'}",
        "--bench-timeout=120",
        *extra,
        model="m",
        server=fake,
    )


@pytest.mark.e2e
def test_an_interpreter_without_the_scientific_packages_is_a_usage_error_naming_it(
    pytester, bench, shared_data, tmp_path
):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    with FakeOpenAI() as fake:
        result = bench(*run_args(pytester, shared_data, fake, f"--bench-set=grading_envs=bare={bare}/bin/python"))
        missing = bench(*run_args(pytester, shared_data, fake, "--bench-set=grading_envs=nope=/no/such/python"))
        assert fake.count() == 0
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    out = result.stdout.str() + result.stderr.str()
    assert f"grading environment bare ({bare}/bin/python) lacks numpy, scipy, sympy, h5py" in " ".join(out.split())
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    assert "grading environment nope=/no/such/python: /no/such/python is not an executable file" in (
        missing.stdout.str() + missing.stderr.str()
    )


@pytest.mark.e2e
@pytest.mark.slow
def test_a_step_importing_simps_passes_in_2024_fails_in_2025_and_passes_combined_and_a_replay_regrades(
    pytester, bench, shared_data, monkeypatch
):
    root = needs("grading-envs")
    monkeypatch.setenv(gradingenvs.ROOT_ENV, str(root))
    with FakeOpenAI() as fake:
        fake.reply(ANSWER)
        args = run_args(pytester, shared_data, fake)
        fresh = bench(*args, "--bench-run-id=fresh")  # the default: this interpreter, with the simps shim
        assert fresh.ret == 0, fresh.stdout.str()[-3000:]
        asked = fake.count()
        original = pytester.path / "reports" / "scicode" / "m" / "fresh"
        [record] = read_jsonl(original / "steps.jsonl")
        assert record["status"] == "pass" and "grading_envs" not in record and "graded_in" not in record
        assert "grading_envs" not in json.loads((original / "settings.json").read_text())

        def replay(run_id: str, *extra: str, ret: int = 0) -> tuple[dict, dict]:
            done = bench(
                f"--bench-replay={original}",
                f"--bench-run-id={run_id}",
                f"--model-base-url={fake.base_url}",
                f"--bench-cache-dir={pytester.path / 'cache'}",
                *extra,
            )
            assert done.ret == ret, done.stdout.str()[-3000:]
            folder = pytester.path / "reports" / "scicode" / "m" / run_id
            [out] = read_jsonl(folder / "steps.jsonl")
            return out, json.loads((folder / "settings.json").read_text())

        every, settings = replay("every", "--bench-set=grading_envs=2024,2025", "--bench-set=grading_envs_all=true")
        assert fake.count() == asked, "a re-grade makes no model call"
        verdicts = every["grading_envs"]
        assert verdicts["2024"]["status"] == "pass" and verdicts["2024"]["tests_completed"] == 1
        assert verdicts["2025"]["status"] == "fail", verdicts
        assert "simps" in verdicts["2025"]["message"], verdicts["2025"]  # no shim: SciPy 1.15 has none
        assert every["status"] == "pass" and every["graded_in"] == "2024"
        envs = {env["name"]: env for env in settings["grading_envs"]}
        assert envs["2024"]["versions"]["numpy"] == "1.26.4" and envs["2024"]["versions"]["scipy"] == "1.13.1"
        assert envs["2025"]["versions"]["numpy"] == "2.2.6" and envs["2025"]["versions"]["scipy"] == "1.15.3"
        assert all(env["spec"] and env["python"].startswith(str(root)) for env in envs.values())
        assert settings["grading_envs_all"] is True

        # without --bench-set=grading_envs_all=true, an environment after a pass is not run; one before it still is
        first, _ = replay("first", "--bench-set=grading_envs=2024,2025")
        assert first["grading_envs"]["2025"]["status"] == "skipped" and first["status"] == "pass"
        late, _ = replay("late", "--bench-set=grading_envs=2025,2024")
        assert [late["grading_envs"][n]["status"] for n in ("2025", "2024")] == ["fail", "pass"]
        assert late["status"] == "pass" and late["graded_in"] == "2024"

        # an interpreter given by path: the 2025 venv under another name fails the step alone
        python = envs["2025"]["python"]
        mine, settings = replay("mine", f"--bench-set=grading_envs=mine={python}", ret=1)
        assert mine["status"] == "fail" and mine["grading_envs"]["mine"]["status"] == "fail"
        assert settings["grading_envs"] == [{"name": "mine", "python": python, "versions": envs["2025"]["versions"]}]
        assert fake.count() == asked
    assert len(run_dirs(pytester.path)) == 5


@pytest.mark.e2e
@pytest.mark.slow
def test_the_oracle_resolves_a_validation_problem_in_each_environment_with_targets_rebuilt_in_each(
    pytester, bench, monkeypatch, tmp_path
):
    root = needs("grading-envs")
    monkeypatch.setenv(gradingenvs.ROOT_ENV, str(root))
    cache = tmp_path / "cache"
    result = bench(
        "--bench=scicode",
        "--model=oracle",
        "--bench-split=validation",
        "--bench-ids=1",
        "--bench-set=grading_envs=2024,2025",
        "--bench-set=grading_envs_all=true",
        f"--bench-cache-dir={cache}",
    )
    assert result.ret == 0, result.stdout.str()[-3000:]
    records = read_jsonl(run_dirs(pytester.path)[0] / "steps.jsonl")
    assert records and all(r["status"] == "pass" for r in records)
    for record in records:
        assert {name: v["status"] for name, v in record["grading_envs"].items()} == {"2024": "pass", "2025": "pass"}
        assert {v["targets"] for v in record["grading_envs"].values()} == {"rebuilt"}
    # one cache entry per environment: a target rebuilt with NumPy 1.26 is not the one NumPy 2.2 is graded by
    manifests = [json.loads(p.read_text()) for p in (cache / "scicode" / "rebuilt-targets").glob("1-*.json")]
    assert sorted(m["key"]["versions"]["numpy"] for m in manifests) == ["1.26.4", "2.2.6"]


@pytest.mark.e2e
@pytest.mark.slow
def test_each_xdist_worker_grades_in_the_environments_it_resolves_itself(pytester, bench, monkeypatch, tmp_path):
    root = needs("grading-envs")
    monkeypatch.setenv(gradingenvs.ROOT_ENV, str(root))
    result = bench(
        "--bench=scicode",
        "--model=oracle",
        "--bench-split=validation",
        "--bench-ids=1,3",
        "--bench-set=grading_envs=2024,2025",
        f"--bench-cache-dir={tmp_path / 'cache'}",
        "-n",
        "2",
    )
    assert result.ret == 0, result.stdout.str()[-3000:]
    records = read_jsonl(run_dirs(pytester.path)[0] / "steps.jsonl")
    assert sorted(r["id"] for r in records) == ["1.1", "3.1"]
    assert {r["worker"] for r in records} <= {"gw0", "gw1"}
    for record in records:  # without --bench-set=grading_envs_all=true the second is skipped once the first passed
        assert record["status"] == "pass", record
        verdicts = {name: v["status"] for name, v in record["grading_envs"].items()}
        assert verdicts == {"2024": "pass", "2025": "skipped"}, record
