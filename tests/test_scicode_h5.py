"""SciCode targets: the HDF5 codec (official test_data.h5 layout) and the rebuild-from-ground-truth tool."""

from __future__ import annotations

import copy
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.sparse

from pytest_agentbench.benchmarks.scicode import targets as rebuild
from pytest_agentbench.benchmarks.scicode.h5codec import (
    TargetsError,
    read_step_targets,
    write_step_targets,
)
from pytest_agentbench.cli import main as cli

from helpers.bench_runs import SHARED_DATA  # honours $AGENTBENCH_DATA_DIR
from helpers.capabilities import missing

DATA_DIR = SHARED_DATA


def roundtrip(tmp_path: Path, value):
    path = tmp_path / "t.h5"
    write_step_targets(path, "1.1", [value])
    (decoded,) = read_step_targets(path, "1.1")
    return decoded


# ---------------------------------------------------------------------------------------------
# codec round trips


@pytest.mark.parametrize("value", [1.5, -3, True, False, 2 + 3j, np.float32(0.25), np.int64(7)])
def test_scalars_round_trip(tmp_path, value):
    decoded = roundtrip(tmp_path, value)
    assert decoded == value
    assert np.ndim(decoded) == 0


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12.0).reshape(3, 4),
        np.array([1 + 2j, 3 - 4j]),
        np.array([[True, False]]),
        np.zeros((0, 3)),
        np.arange(5, dtype=np.int32),
    ],
)
def test_arrays_round_trip_with_dtype_and_shape(tmp_path, array):
    decoded = roundtrip(tmp_path, array)
    assert isinstance(decoded, np.ndarray)
    assert decoded.dtype == array.dtype and decoded.shape == array.shape
    assert np.array_equal(decoded, array)


def test_string_is_stored_as_bytes_and_decoded(tmp_path):
    path = tmp_path / "t.h5"
    write_step_targets(path, "2.1", ["héllo"])
    with h5py.File(path) as fh:
        assert isinstance(fh["2.1/test1/var1"][()], bytes)
    assert read_step_targets(path, "2.1") == ["héllo"]


def test_tuple_becomes_several_vars_and_reads_back_as_tuple(tmp_path):
    path = tmp_path / "t.h5"
    value = (np.array([1.0, 2.0]), 3, "x")
    write_step_targets(path, "3.1", [value])
    with h5py.File(path) as fh:
        assert sorted(fh["3.1/test1"].keys()) == ["var1", "var2", "var3"]
    (decoded,) = read_step_targets(path, "3.1")
    assert isinstance(decoded, tuple) and len(decoded) == 3
    assert np.array_equal(decoded[0], value[0]) and decoded[1] == 3 and decoded[2] == "x"


def test_tuple_of_bools_compares_equal_like_upstream_tests(tmp_path):
    value = (np.True_, True, np.False_)
    assert roundtrip(tmp_path, value) == value


def test_more_than_nine_vars_keep_numeric_order(tmp_path):
    value = tuple(float(i) for i in range(12))
    assert roundtrip(tmp_path, value) == value


def test_list_of_numbers_is_stored_as_array(tmp_path):
    decoded = roundtrip(tmp_path, [1.0, 2.0, 3.0])
    assert isinstance(decoded, np.ndarray)
    assert np.array_equal(decoded, [1.0, 2.0, 3.0])


def test_ragged_list_uses_list_subgroup_in_order(tmp_path):
    value = [1 + 1j, 2.0] + [np.arange(n) for n in range(1, 11)] + ["s"]
    path = tmp_path / "t.h5"
    write_step_targets(path, "4.1", [value])
    with h5py.File(path) as fh:
        assert list(fh["4.1/test1/var1"].keys()) == ["list"]
    (decoded,) = read_step_targets(path, "4.1")
    assert isinstance(decoded, list) and len(decoded) == len(value)
    assert decoded[0] == 1 + 1j and decoded[1] == 2.0 and decoded[-1] == "s"
    for got, want in zip(decoded[2:-1], value[2:-1]):
        assert np.array_equal(got, want)


def test_dict_with_text_and_numeric_keys(tmp_path):
    value = {"name": "argon", "mass": 39.9, 1: np.array([1.0, 2.0]), 2.5: 7}
    decoded = roundtrip(tmp_path, value)
    assert set(decoded) == {"name", "mass", 1.0, 2.5}
    assert isinstance(next(k for k in decoded if k == 1.0), float)
    assert decoded["name"] == "argon" and decoded["mass"] == 39.9 and decoded[2.5] == 7
    assert np.array_equal(decoded[1.0], [1.0, 2.0])


def test_nested_and_empty_dicts(tmp_path):
    value = {"outer": {"inner": 1.0}, "empty": {}}
    assert roundtrip(tmp_path, value) == value
    assert roundtrip(tmp_path, {}) == {}


@pytest.mark.parametrize("fmt", ["coo", "csr", "bsr"])
def test_sparse_matrices_round_trip_in_their_format(tmp_path, fmt):
    dense = np.array([[1.0, 0, 0, 2], [0, 0, 3, 0], [4, 0, 0, 0], [0, 5, 0, 6]])
    matrix = scipy.sparse.coo_matrix(dense).asformat(fmt)
    if fmt == "bsr":
        matrix = scipy.sparse.bsr_matrix(dense, blocksize=(2, 2))
    decoded = roundtrip(tmp_path, matrix)
    assert decoded.format == fmt
    assert np.array_equal(decoded.toarray(), dense)
    if fmt == "bsr":
        assert decoded.blocksize == (2, 2)


def test_csc_is_written_as_csr_without_changing_values(tmp_path):
    dense = np.array([[0.0, 1.0], [2.0, 0.0], [0.0, 3.0]])
    decoded = roundtrip(tmp_path, scipy.sparse.csc_matrix(dense))
    assert decoded.format == "csr"
    assert np.array_equal(decoded.toarray(), dense)


def test_sparse_inside_dict(tmp_path):
    decoded = roundtrip(tmp_path, {"m": scipy.sparse.eye(3, format="csr")})
    assert np.array_equal(decoded["m"].toarray(), np.eye(3))


def test_none_round_trips_and_is_an_empty_group(tmp_path):
    path = tmp_path / "t.h5"
    write_step_targets(path, "78.1", [None, None])
    with h5py.File(path) as fh:
        assert isinstance(fh["78.1/test1/var1"], h5py.Group) and len(fh["78.1/test1/var1"]) == 0
    assert read_step_targets(path, "78.1") == [None, None]


def test_tests_come_back_in_numeric_order_and_steps_are_replaced(tmp_path):
    path = tmp_path / "t.h5"
    write_step_targets(path, "5.2", [float(i) for i in range(11)])
    assert read_step_targets(path, "5.2") == [float(i) for i in range(11)]
    write_step_targets(path, "5.2", [9.0])
    write_step_targets(path, "5.3", ["other"])
    assert read_step_targets(path, "5.2") == [9.0]
    assert read_step_targets(path, "5.3") == ["other"]


def test_reads_from_an_open_file(tmp_path):
    path = tmp_path / "t.h5"
    write_step_targets(path, "1.1", [1.0, 2.0])
    with h5py.File(path, "r") as fh:
        assert read_step_targets(fh, "1.1") == [1.0, 2.0]


def test_unsupported_value_names_step_and_type(tmp_path):
    with pytest.raises(TargetsError, match=r"step 9\.9 test1 var1.*object"):
        write_step_targets(tmp_path / "t.h5", "9.9", [object()])


# ---------------------------------------------------------------------------------------------
# codec errors


def test_missing_file_is_a_clear_error(tmp_path):
    missing = tmp_path / "nope.h5"
    with pytest.raises(TargetsError, match=r"nope\.h5 does not exist.*rebuild-targets"):
        read_step_targets(missing, "1.1")


def test_missing_step_names_step_and_path(tmp_path):
    path = tmp_path / "t.h5"
    write_step_targets(path, "1.1", [1.0])
    with pytest.raises(TargetsError) as info:
        read_step_targets(path, "77.3")
    assert str(info.value).startswith(f"step 77.3 not in {path}")
    assert "1.1" in str(info.value)


def test_unreadable_file_is_a_clear_error(tmp_path):
    path = tmp_path / "garbage.h5"
    path.write_bytes(b"this is not hdf5")
    with pytest.raises(TargetsError, match=r"garbage\.h5 is not a readable HDF5 file"):
        read_step_targets(path, "1.1")


def test_gap_in_test_numbers_is_reported(tmp_path):
    path = tmp_path / "t.h5"
    with h5py.File(path, "w") as fh:
        fh.create_dataset("1.1/test1/var1", data=1.0)
        fh.create_dataset("1.1/test3/var1", data=3.0)
    with pytest.raises(TargetsError, match=r"step 1\.1 .*tests \[1, 3\]"):
        read_step_targets(path, "1.1")


# ---------------------------------------------------------------------------------------------
# rewriting tests for recording


def test_rewrite_records_every_comparison_form():
    code = (
        "assert np.allclose(f(x), target)\n"
        "assert np.allclose(g(x)[0], target[0]) and np.allclose(g(x)[1], target[1])\n"
        "assert (a > 0) == target\n"
        "assert cmp_tuple_or_list(target, h(x))\n"
    )
    rewritten = rebuild.rewrite_test_for_recording(code)
    assert "target" not in rewritten
    assert rewritten.count("_agentbench_record(") == 5
    assert "_agentbench_record(g(x)[1], 1)" in rewritten
    assert "_agentbench_record(a > 0, None)" in rewritten


def test_rewrite_rejects_unrecordable_target_use():
    with pytest.raises(rebuild.RebuildError, match=r"t1: line 2: `target` is used"):
        rebuild.rewrite_test_for_recording("x = 1\ny = target + 1\n", "t1")


# ---------------------------------------------------------------------------------------------
# rebuild + verify on real validation steps


@pytest.fixture(scope="module")
def problems():
    try:
        return rebuild.load_problems(rebuild.find_problems_file(DATA_DIR))
    except rebuild.RebuildError as exc:
        missing("the SciCode validation data", f"{exc} (set AGENTBENCH_DATA_DIR to the staged data)")


# target[k] form (10.3), never-used target (78.1), `(expr) == target` (29.3, 38.3),
# cmp_tuple_or_list with a tuple (10.7) and with a ragged list (70.6). 6.1 is left out: 6 s alone.
SUBSET = ["10.3", "78.1", "29.3", "38.3", "10.7", "70.6"]


@pytest.fixture(scope="module")
def rebuilt(problems, tmp_path_factory):
    out = tmp_path_factory.mktemp("targets") / "rebuilt.h5"
    report = rebuild.rebuild_targets(problems, out, steps=SUBSET, jobs=2, timeout=120)
    return out, report


def test_rebuild_subset_writes_every_step(rebuilt):
    out, report = rebuilt
    assert report == {step: "ok" for step in SUBSET}
    with h5py.File(out) as fh:
        assert sorted(fh.keys()) == sorted(SUBSET)
        assert "not the official" in fh.attrs["agentbench_note"]


def test_rebuilt_values_have_the_shapes_the_tests_need(rebuilt):
    out, _ = rebuilt
    distances = read_step_targets(out, "10.3")
    assert len(distances) == 4
    assert all(isinstance(t, tuple) and len(t) == 2 for t in distances)  # target[0], target[1]
    assert read_step_targets(out, "78.1") == [(), (), ()]  # tests never use target: empty test groups
    bool_target = read_step_targets(out, "29.3")[0]
    assert bool(bool_target) is True and np.ndim(bool_target) == 0
    h2, h3, psi = read_step_targets(out, "70.6")[0]  # [complex, complex, list of 3] is ragged
    assert isinstance(h2, complex) and np.shape(psi) == (3,)


def test_verify_subset_passes(problems, rebuilt):
    out, _ = rebuilt
    assert rebuild.verify_targets(problems, out, 120, steps=SUBSET, jobs=2) == {s: "ok" for s in SUBSET}


def test_mutated_ground_truth_gives_targets_the_original_tests_reject(problems, rebuilt, tmp_path):
    out, _ = rebuilt
    mutated = copy.deepcopy(problems)
    step = next(s for p in mutated for s in p["sub_steps"] if s["step_number"] == "38.3")
    step["ground_truth_code"] += (
        "\n_agentbench_true_reciprocal = reciprocal\n"
        "def reciprocal(*vectors):\n"
        "    return 1.01 * np.asarray(_agentbench_true_reciprocal(*vectors))\n"
    )
    bad = tmp_path / "mutated.h5"
    assert rebuild.rebuild_targets(mutated, bad, steps=["38.3"]) == {"38.3": "ok"}
    good_values = read_step_targets(out, "38.3")
    bad_values = read_step_targets(bad, "38.3")
    assert bool(good_values[0]) is True and bool(bad_values[0]) is False  # `(...) == target` test
    assert not np.allclose(good_values[1], bad_values[1])
    result = rebuild.verify_targets(problems, bad, 120, steps=["38.3"])["38.3"]
    assert result.startswith("<step 38.3 test 1>: AssertionError")


def test_failing_ground_truth_is_reported_per_step(problems, tmp_path):
    broken = copy.deepcopy(problems)
    step = next(s for p in broken for s in p["sub_steps"] if s["step_number"] == "29.1")
    step["ground_truth_code"] = "def normalize(v):\n    raise RuntimeError('boom')\n"
    out = tmp_path / "broken.h5"
    report = rebuild.rebuild_targets(broken, out, steps=["29.1", "38.1"], jobs=2)
    assert report["38.1"] == "ok"
    assert "<step 29.1 test 1>" in report["29.1"] and "boom" in report["29.1"]
    with h5py.File(out) as fh:
        assert list(fh.keys()) == ["38.1"]


def test_cli_rejects_unknown_step_and_missing_data(tmp_path, capsys):
    code = cli(["rebuild-targets", "--data-dir", str(DATA_DIR), "--out", str(tmp_path / "x.h5"), "--steps", "99.9"])
    assert code == 2 and "unknown step(s) 99.9" in capsys.readouterr().err
    code = cli(["rebuild-targets", "--data-dir", str(tmp_path), "--out", str(tmp_path / "x.h5")])
    err = capsys.readouterr().err
    assert code == 2 and "problems_dev.jsonl not found" in err


def test_cli_rebuilds_and_verifies_one_step(tmp_path, capsys):
    out = tmp_path / "cli.h5"
    assert cli(["rebuild-targets", "--data-dir", str(DATA_DIR), "--out", str(out), "--steps", "38.1"]) == 0
    printed = capsys.readouterr().out
    assert "they are not the official test_data.h5" in printed
    assert "1/1 steps ok" in printed
    assert len(read_step_targets(out, "38.1")) == 3
