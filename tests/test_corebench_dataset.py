"""CORE-Bench task files: the real train split, the real encrypted test split, the prompts."""

from __future__ import annotations

import json

import pytest

from pytest_agentbench.benchmarks.corebench import dataset, prepare
from pytest_agentbench.benchmarks.corebench.bench import benchmark
from pytest_agentbench.benchmarks.corebench.dataset import DatasetError
from pytest_agentbench.benchmarks.corebench.scorer import question_totals, score_report
from pytest_agentbench.core.options import OptionError

from helpers.bench_runs import SHARED_DATA  # honours $AGENTBENCH_DATA_DIR
from helpers.capsule_factory import corebench_options

DATA = SHARED_DATA
CORE = DATA / "core_bench"

# first capsules of each split, in upstream order, and their question counts
TEST_FIRST = ["capsule-5507257", "capsule-3449234", "capsule-9670283", "capsule-8536428", "capsule-8807709"]


@pytest.fixture(scope="module")
def train():
    return dataset.load_split(DATA, "train")


@pytest.fixture(scope="module")
def test_split():
    return dataset.load_split(DATA, "test")


def test_test_split_decrypts_in_memory(test_split):
    assert len(test_split) == 45
    assert [t["capsule_id"] for t in test_split[:5]] == TEST_FIRST
    assert len({t["capsule_id"] for t in test_split}) == 45
    assert sum(len(t["results"][0]) for t in test_split) == 79
    assert all(len(t["results"]) == 3 for t in test_split)
    assert not list(CORE.glob("core_test.json")) and not list(CORE.parent.glob("core_test.json"))


def test_train_split(train):
    assert len(train) == 45
    assert train[0]["capsule_id"] == "capsule-7038571" and len(train[0]["results"][0]) == 1
    assert sum(len(t["results"][0]) for t in train) == 102


def test_181_questions_in_both_splits(train, test_split):
    both = train + test_split
    assert sum(len(t["results"][0]) for t in both) == 181
    written, figure = map(sum, zip(*(question_totals(t["results"]) for t in both)))
    assert (written, figure) == (98, 83)  # 'fig' (case-sensitive) marks the figure questions
    assert not {t["capsule_id"] for t in train} & {t["capsule_id"] for t in test_split}


def test_oracle_answers_score_every_capsule_correct(train, test_split):
    """The first reference run lies in its own interval for every real question."""
    for task in train + test_split:
        assert score_report(task["results"], dict(task["results"][0])).all_correct, task["capsule_id"]


def test_wrong_passphrase_and_corrupt_file():
    raw = (CORE / "core_test.json.gpg").read_bytes()
    with pytest.raises(DatasetError, match="decrypting core_test.json.gpg failed"):
        dataset.decrypt_test_split(raw, passphrase="wrong")
    with pytest.raises(DatasetError, match="failed"):
        dataset.decrypt_test_split(b"not an OpenPGP message")


@pytest.mark.parametrize(
    "tasks, fragment",
    [
        ({"a": 1}, "expected a JSON list"),
        ([{"capsule_id": "capsule-1"}], "lacks"),
        ([{k: "x" for k in dataset.TASK_KEYS} | {"capsule_id": "capsule-1", "results": [{"q": 1}]}], "at least 2"),
        (
            [{k: "x" for k in dataset.TASK_KEYS} | {"capsule_id": "capsule-1", "results": [{"q": 1}, {"r": 1}]}],
            "do not answer the same questions",
        ),
    ],
)
def test_bad_task_files_name_the_problem(tmp_path, tasks, fragment):
    path = tmp_path / "core_train.json"
    path.write_text(json.dumps(tasks))
    with pytest.raises(DatasetError, match=fragment):
        dataset.read_split(path, "train")


def test_invalid_json_names_the_file(tmp_path):
    path = tmp_path / "core_train.json"
    path.write_text("{")
    with pytest.raises(DatasetError, match=str(path)):
        dataset.read_split(path, "train")


def test_prompts_list_the_questions_as_json(train):
    templates = dataset.load_prompts(DATA)
    task = train[0]
    question = next(iter(task["results"][0]))
    for difficulty in prepare.DIFFICULTIES:
        prompt = prepare.render_prompt(templates, task, difficulty, hints=False)
        assert prompt.startswith(f"Task: codeocean_{difficulty}")
        fields = json.dumps(list(task["results"][0]), ensure_ascii=False)
        assert f"{fields}" in prompt and question in json.loads(fields) and "dict_keys" not in prompt
        assert "{json_fields}" not in prompt and "{task_prompt}" not in prompt
        assert (task["task_prompt"] in prompt) == (difficulty != "easy")  # easy has no {task_prompt}
        hinted = prepare.render_prompt(templates, task, difficulty, hints=True)
        assert hinted.startswith(prompt) and prepare.HINTS[difficulty] in hinted


def test_tasks_are_one_sample_each(tmp_path):
    tasks = benchmark.load_tasks(corebench_options(DATA, tmp_path), "test")
    assert [t.id for t in tasks[:5]] == TEST_FIRST
    sample = tasks[0].samples[0]
    assert all(len(t.samples) == 1 for t in tasks)
    assert (sample.id, sample.task_id, sample.split) == (TEST_FIRST[0], TEST_FIRST[0], "test")
    assert sample.data["capsule_id"] == TEST_FIRST[0]
    assert benchmark.name == "core-bench" and benchmark.group_items is False
    assert benchmark.splits == ("train", "test") and benchmark.default_split == "test"
    assert benchmark.records_file == "records.jsonl"


def test_settings_defaults_and_validation(tmp_path):
    settings = benchmark.configure(corebench_options(DATA, tmp_path), "test")
    assert (settings["difficulty"], settings["hints"], settings["upstream_abort"], settings["capsules_dir"]) == (
        "hard",
        True,
        False,
        None,
    )
    opts = corebench_options(
        DATA,
        tmp_path,
        cli={"difficulty": "easy", "hints": False, "upstream_abort": True, "capsules_dir": str(tmp_path)},
    )
    settings = benchmark.configure(opts, "test")
    assert (settings["difficulty"], settings["hints"], settings["upstream_abort"], settings["capsules_dir"]) == (
        "easy",
        False,
        True,
        str(tmp_path),
    )
    with pytest.raises(OptionError, match="is not a folder"):
        corebench_options(DATA, tmp_path, cli={"capsules_dir": str(tmp_path / "missing")})
