"""tests/helpers/capabilities.py, the one "needs a capability" helper: locally a missing capability skips the test with
the reason; under CI=true it fails it, so CI never passes by skipping what it must run."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e

NEEDS_WHAT_NOBODY_HAS = """
from helpers.capabilities import missing, needs

def test_missing():
    missing("a-thing", "no such thing here (run .ci/thing-setup)")

def test_unknown():
    needs("no-such-capability")
"""


@pytest.mark.parametrize("ci,outcome", [("", "skipped"), ("true", "failed")])
@pytest.mark.slow
def test_a_missing_capability_skips_locally_and_fails_under_ci(pytester: pytest.Pytester, monkeypatch, ci, outcome):
    monkeypatch.setenv("CI", ci)
    pytester.makepyfile(test_needs=NEEDS_WHAT_NOBODY_HAS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rfEs", "-k", "missing")
    result.assert_outcomes(**{outcome: 1}, deselected=1)
    result.stdout.fnmatch_lines(["*a-thing is missing: no such thing here (run .ci/thing-setup)*"])


def test_an_unknown_capability_is_a_mistake_in_the_test(pytester: pytest.Pytester, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(test_needs=NEEDS_WHAT_NOBODY_HAS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "unknown")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(["*unknown capability 'no-such-capability'; known: bwrap, chromium,*"])
