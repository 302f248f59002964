"""JUnit XML carries a few properties per benchmark item (never the whole record), also under xdist."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_junit_properties_under_xdist(tiny, pytester):
    xml = pytester.path / "junit.xml"
    result = tiny("-n", "2", f"--junitxml={xml}", broken="2.2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    cases = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in ET.parse(xml).iter("testcase")
    }
    assert sorted(cases) == ["1.1", "1.2", "2.1", "2.2", "3.1"]
    for name, props in cases.items():
        assert {"benchmark", "task", "step", "status", "duration", "tokens"} <= set(props)
        assert props["benchmark"] == "scicode" and props["step"] == name and props["task"] == name.split(".")[0]
        assert props["status"] == ("fail" if name == "2.2" else "pass")
        float(props["duration"]), int(props["tokens"])
        assert not any(v.startswith("{") for v in props.values()), props  # no record dict
