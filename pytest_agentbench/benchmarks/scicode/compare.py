"""The comparison helpers SciCode's test cases import (``from scicode.compare.cmp import ...``).

Same semantics as upstream's helpers, written here so scoring needs no upstream package: dicts are
compared key by key with ``np.allclose`` (sympy symbols compared as strings, sparse matrices densified),
sequences element by element, booleans exactly, and anything ``allclose`` rejects by ``==``.
"""

from __future__ import annotations

import numpy as np


def _sparse_types(extended: bool):
    import scipy.sparse as sp  # why: loaded in every scoring child; only dict and sequence helpers need it

    base = (sp.csr_matrix, sp.csc_matrix)
    return base + (sp.bsr_matrix, sp.coo_matrix) if extended else base


def _symbols_as_strings(mapping: dict) -> dict:
    import sympy  # why: sympy takes a second to import; only dict comparisons need it

    # As upstream's process_symbol_in_dict: a Symbol value becomes its name, except under a Symbol key,
    # whose entry is re-filed under the key's name with the ORIGINAL value (so a Symbol value stays a
    # Symbol there and then equals no string target); entries are filed in order, later ones win.
    out = {}
    for key, value in mapping.items():
        out[key] = str(value) if isinstance(value, sympy.Symbol) else value
        if isinstance(key, sympy.Symbol):
            out[str(key)] = mapping[key]
            out.pop(key)
    return out


def are_dicts_close(dict1, dict2, atol=1e-8, rtol=1e-5) -> bool:
    import sympy  # why: as in _symbols_as_strings

    dict1, dict2 = _symbols_as_strings(dict1), _symbols_as_strings(dict2)
    if dict1.keys() != dict2.keys():
        return False
    for key, left in dict1.items():
        right = dict2[key]
        if isinstance(left, (sympy.Symbol, str)):
            if not left == right:
                return False
            continue
        if isinstance(left, _sparse_types(extended=True)):
            left, right = left.toarray(), right.toarray()
        try:
            if not np.allclose(left, right, atol=atol, rtol=rtol):
                return False
        except ValueError:
            if not left == right:
                return False
    return True


def are_csc_matrix_close(matrix1, matrix2) -> bool:
    return np.allclose(matrix1.toarray(), matrix2.toarray())


def cmp_tuple_or_list(var1, var2) -> bool:
    if len(var1) != len(var2):
        return False
    for left, right in zip(var1, var2):
        if isinstance(left, dict):
            same = are_dicts_close(left, right)
        elif isinstance(left, _sparse_types(extended=False)):
            same = are_csc_matrix_close(left, right)
        elif isinstance(left, bool):
            same = left == right
        else:
            try:
                same = np.allclose(left, right)
            except ValueError as exc:
                print(exc)
                same = left == right
        if not same:
            return False
    return True
