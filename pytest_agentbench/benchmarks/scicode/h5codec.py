"""Read and write SciCode targets in the layout of the official ``test_data.h5``.

This module is imported by the plugin *and* by sandboxed child scoring scripts (loaded by file
path), so it imports only numpy and h5py at the top; scipy is imported lazily when a sparse
matrix is met.

Layout (one HDF5 file, many steps)::

    <step_number>/test<i>/var<j>      i from 1 (one group per test case), j from 1 (one per value)

A test group with one member decodes to that member's value; several members decode to a tuple
ordered by the number in the member name (``var2`` before ``var10``). An empty test group decodes
to ``()``, as the upstream reader does.

Values:

* numbers, bools, numpy scalars and arrays (incl. complex): a dataset; read back as stored
  (``dataset[()]``: numpy scalars for scalars).
* str: a variable-length string dataset; h5py hands back bytes, which are decoded to ``str``.
* list/tuple *inside* a value: first tried as one numpy array (as upstream does, so a list of
  numbers, or of equal-shape arrays, comes back as an ``ndarray``); if that fails (ragged, mixed
  str/number, objects) a group holding a ``list`` subgroup with members ``var1..varN``, read back
  as a ``list``.
* dict: a group with one member per key (non-str keys written as ``str(key)``); on reading a key
  that parses as a float becomes that float when its value is a plain dataset, as upstream does
  (so ``{1: x}`` comes back as ``{1.0: x}``, which compares equal). An empty dict is an empty
  group marked with the attribute ``agentbench_kind="dict"``.
* scipy sparse: a group with a ``sparse_matrix`` subgroup: ``data``, ``shape`` and ``row``/``col``
  (COO), ``indices``/``indptr``/``blocksize`` (BSR) or ``indices``/``indptr`` (CSR). Other formats
  (CSC, DIA, LIL, DOK) are converted to CSR first, because the layout has no way to say "CSC".
  Read back as ``coo_matrix``/``bsr_matrix``/``csr_matrix``.
* None: an empty group (the upstream reader also decodes an empty group to None).

The top-level value of a test is a tuple => one member per element (so a 1-tuple reads back as
its element, and ``()`` as ``()``); anything else => a single ``var1``.

Differences from the upstream reader, all on inputs it cannot decode or decodes by accident:
member order is numeric rather than alphabetical (upstream would put ``var10`` before ``var2``),
strings are decoded at every depth, and nested groups inside lists/dicts are decoded recursively.
"""

from __future__ import annotations

import re
from pathlib import Path

import h5py
import numpy as np

EMPTY_KIND_ATTR = "agentbench_kind"
_VAR_RE = re.compile(r"^var(\d+)$")
_TEST_RE = re.compile(r"^test(\d+)$")
_SPARSE_WRITE_FORMATS = ("coo", "bsr", "csr")


class TargetsError(Exception):
    """Targets cannot be read or written; the message names the file/step and what to do."""


# ----------------------------------------------------------------------------------------------
# reading


def read_step_targets(h5_path, step_number: str) -> list:
    """Decoded targets of ``<step_number>/test1..testN`` in test order.

    ``h5_path`` is a path or an already open ``h5py.File``/``h5py.Group``.
    """
    step = str(step_number)
    if isinstance(h5_path, h5py.Group):
        return _read_step(h5_path, step, _describe(h5_path))
    path = Path(h5_path)
    if not path.is_file():
        raise TargetsError(
            f"targets file {path} does not exist: download the official test_data.h5 or rebuild "
            "validation targets with `python -m pytest_agentbench rebuild-targets --out <path>`"
        )
    try:
        fh = h5py.File(path, "r")
    except OSError as exc:
        raise TargetsError(
            f"targets file {path} is not a readable HDF5 file ({exc}); re-download or rebuild it"
        ) from exc
    with fh:
        return _read_step(fh, step, str(path))


def list_steps(h5_path) -> list[str]:
    """Step numbers present in a targets file (top-level group names)."""
    path = Path(h5_path)
    if not path.is_file():
        raise TargetsError(f"targets file {path} does not exist")
    try:
        with h5py.File(path, "r") as fh:
            return list(fh.keys())
    except OSError as exc:
        raise TargetsError(f"targets file {path} is not a readable HDF5 file ({exc})") from exc


def _describe(group: h5py.Group) -> str:
    return f"{group.file.filename}:{group.name}"


def _read_step(root: h5py.Group, step: str, where: str) -> list:
    if step not in root:
        sample = ", ".join(sorted(root.keys())[:8])
        raise TargetsError(
            f"step {step} not in {where}: the file holds {len(root)} steps"
            f"{' (e.g. ' + sample + ')' if sample else ''}; check the step number "
            "or rebuild the targets for this step"
        )
    step_group = root[step]
    if not isinstance(step_group, h5py.Group):
        raise TargetsError(f"step {step} in {where} is a dataset, not a group of tests")
    numbers = _numbered_members(step_group, _TEST_RE, f"step {step} in {where}")
    if numbers != list(range(1, len(numbers) + 1)):
        raise TargetsError(f"step {step} in {where} has tests {numbers}; expected test1..testN without gaps")
    return [_read_test(step_group[f"test{i}"], f"step {step} test{i} in {where}") for i in numbers]


def _numbered_members(group: h5py.Group, pattern: re.Pattern, where: str) -> list[int]:
    numbers = []
    for name in group.keys():
        match = pattern.match(name)
        if match is None:
            raise TargetsError(f"{where}: unexpected member {name!r} (expected {pattern.pattern})")
        numbers.append(int(match.group(1)))
    return sorted(numbers)


def _read_test(test: h5py.HLObject, where: str):
    if isinstance(test, h5py.Dataset):
        raise TargetsError(f"{where} is a dataset; expected a group of var1..varN")
    names = _ordered_vars(test)
    values = [_decode(test[name]) for name in names]
    if len(values) == 1:
        return values[0]
    return tuple(values)


def _ordered_vars(group: h5py.Group) -> list[str]:
    """Member names in numeric order of their ``var<N>`` suffix; other names keep h5py order after."""
    numbered = []
    others = []
    for name in group.keys():
        match = _VAR_RE.match(name)
        if match:
            numbered.append((int(match.group(1)), name))
        else:
            others.append(name)
    return [name for _, name in sorted(numbered)] + others


def _decode(obj: h5py.HLObject):
    if isinstance(obj, h5py.Dataset):
        return _decode_dataset(obj)
    return _decode_group(obj)


def _decode_dataset(dataset: h5py.Dataset):
    value = dataset[()]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="strict")
    return value


def _decode_group(group: h5py.Group):
    keys = list(group.keys())
    if not keys:
        if group.attrs.get(EMPTY_KIND_ATTR) == "dict":
            return {}
        return None
    # Upstream looks at the first member only; a "list"/"sparse_matrix" member marks the kind.
    if "list" in group and isinstance(group["list"], h5py.Group) and len(keys) == 1:
        return [_decode(group["list"][name]) for name in _ordered_vars(group["list"])]
    if "sparse_matrix" in group and len(keys) == 1:
        return _decode_sparse(group["sparse_matrix"])
    return _decode_dict(group)


def _decode_dict(group: h5py.Group) -> dict:
    out = {}
    for key in group.keys():
        obj = group[key]
        value = _decode(obj)
        if isinstance(obj, h5py.Dataset) and not isinstance(value, str):
            try:
                out[float(key)] = value
                continue
            except ValueError:
                pass
        out[key] = value
    return out


def _decode_sparse(group: h5py.Group):
    import scipy.sparse  # why: scipy is slow to import and only sparse targets need it

    data = group["data"][()]
    shape = tuple(int(n) for n in group["shape"][()])
    if "row" in group and "col" in group:
        return scipy.sparse.coo_matrix((data, (group["row"][()], group["col"][()])), shape=shape)
    if "blocksize" in group:
        blocksize = tuple(int(n) for n in group["blocksize"][()])
        return scipy.sparse.bsr_matrix(
            (data, group["indices"][()], group["indptr"][()]), shape=shape, blocksize=blocksize
        )
    return scipy.sparse.csr_matrix((data, group["indices"][()], group["indptr"][()]), shape=shape)


# ----------------------------------------------------------------------------------------------
# writing


def write_step_targets(h5file_or_path, step_number: str, targets: list) -> None:
    """Write ``targets`` (one value per test case) as ``<step_number>/test1..testN``.

    An existing group for the step is replaced. ``h5file_or_path`` is a writable ``h5py.File``/
    ``h5py.Group`` or a path (opened in append mode, created if missing).
    """
    step = str(step_number)
    if not isinstance(targets, (list, tuple)):
        raise TargetsError(
            f"step {step}: targets must be a list with one value per test case, got {type(targets).__name__}"
        )
    if isinstance(h5file_or_path, h5py.Group):
        _write_step(h5file_or_path, step, targets)
        return
    path = Path(h5file_or_path)
    try:
        fh = h5py.File(path, "a")
    except OSError as exc:
        raise TargetsError(
            f"cannot open {path} for writing targets of step {step} ({exc}); "
            "check the path is a writable HDF5 file or a new file name"
        ) from exc
    with fh:
        _write_step(fh, step, targets)


def _write_step(root: h5py.Group, step: str, targets) -> None:
    if "/" in step or not step:
        raise TargetsError(f"step number {step!r} cannot be an HDF5 group name")
    if step in root:
        del root[step]
    step_group = root.create_group(step, track_order=True)
    for index, value in enumerate(targets, start=1):
        test = step_group.create_group(f"test{index}", track_order=True)
        members = value if isinstance(value, tuple) else (value,)
        for number, member in enumerate(members, start=1):
            _encode(test, f"var{number}", member, f"step {step} test{index} var{number}")


def _encode(parent: h5py.Group, name: str, value, where: str) -> None:
    """Store ``value`` as member ``name`` of ``parent`` (dataset or group, see module docs)."""
    if value is None:
        parent.create_group(name)
    elif isinstance(value, dict):
        _encode_dict(parent, name, value, where)
    elif isinstance(value, (list, tuple)):
        _encode_sequence(parent, name, value, where)
    elif _is_sparse(value):
        _encode_sparse(parent, name, value)
    elif isinstance(value, str):
        parent.create_dataset(name, data=value, dtype=h5py.string_dtype("utf-8"))
    elif isinstance(value, np.ndarray):
        if value.dtype.kind in "OU":
            # h5py cannot store object/unicode arrays: keep the elements, as a list.
            _encode_list_group(parent, name, value.tolist(), where)
        else:
            parent.create_dataset(name, data=value)
    elif isinstance(value, (bool, int, float, complex, np.generic)):
        try:
            parent.create_dataset(name, data=value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TargetsError(f"{where}: cannot store {value!r} ({exc})") from exc
    else:
        raise TargetsError(
            f"{where}: cannot store a value of type {type(value).__module__}."
            f"{type(value).__qualname__}; supported: numbers, str, numpy arrays, "
            "list/tuple, dict, scipy sparse matrices, None"
        )


def _encode_sequence(parent: h5py.Group, name: str, value, where: str) -> None:
    array = None
    if not any(_is_container(item) for item in value):
        try:
            array = np.array(value)
        except (ValueError, TypeError):
            array = None
    if array is not None and array.dtype.kind not in "OU":
        try:
            parent.create_dataset(name, data=array)
            return
        except (TypeError, ValueError):
            pass
    _encode_list_group(parent, name, value, where)


def _is_container(item) -> bool:
    # dicts, sparse matrices and None inside a list cannot become one numpy array without
    # turning into an object array, so they always go to the ``list`` subgroup.
    return item is None or isinstance(item, dict) or _is_sparse(item)


def _encode_list_group(parent: h5py.Group, name: str, items, where: str) -> None:
    group = parent.create_group(name, track_order=True)
    inner = group.create_group("list", track_order=True)
    for number, item in enumerate(items, start=1):
        _encode(inner, f"var{number}", item, f"{where}[{number - 1}]")


def _encode_dict(parent: h5py.Group, name: str, value: dict, where: str) -> None:
    group = parent.create_group(name, track_order=True)
    if not value:
        group.attrs[EMPTY_KIND_ATTR] = "dict"
        return
    for key, item in value.items():
        text = key if isinstance(key, str) else str(key)
        if not text or "/" in text or text == ".":
            raise TargetsError(f"{where}: dict key {key!r} cannot be an HDF5 member name")
        if text in group:
            raise TargetsError(f"{where}: dict keys collide as {text!r} once written as text")
        _encode(group, text, item, f"{where}[{key!r}]")


def _is_sparse(value) -> bool:
    module = type(value).__module__
    if not module.startswith("scipy.sparse"):
        return False
    import scipy.sparse  # why: as in _decode_sparse; a sparse value means scipy is loaded already

    return scipy.sparse.issparse(value)


def _encode_sparse(parent: h5py.Group, name: str, value) -> None:
    if value.format not in _SPARSE_WRITE_FORMATS:
        value = value.tocsr()
    group = parent.create_group(name)
    sub = group.create_group("sparse_matrix")
    sub.create_dataset("data", data=value.data)
    sub.create_dataset("shape", data=np.asarray(value.shape))
    if value.format == "coo":
        sub.create_dataset("row", data=value.row)
        sub.create_dataset("col", data=value.col)
    else:
        sub.create_dataset("indices", data=value.indices)
        sub.create_dataset("indptr", data=value.indptr)
        if value.format == "bsr":
            sub.create_dataset("blocksize", data=np.asarray(value.blocksize))


__all__ = ["TargetsError", "read_step_targets", "write_step_targets", "list_steps"]
