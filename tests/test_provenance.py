"""The command line a run records never carries a secret option's value."""

import pytest

from pytest_agentbench.pytest_plugin.provenance import REDACTED, command_line, option_flags, redact


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--model-api-key=sk-1"], [f"--model-api-key={REDACTED}"]),
        (["--model-api-key", "sk-2", "-k", "x"], ["--model-api-key", REDACTED, "-k", "x"]),
        (["--model-api", "sk-3"], ["--model-api", REDACTED]),  # an abbreviation argparse would accept
        (["--model=gpt-4o", "--model-base-url=http://h"], ["--model=gpt-4o", "--model-base-url=http://h"]),
    ],
)
def test_secret_values_are_redacted(argv, expected):
    assert redact(argv, option_flags()) == expected


def test_the_recorded_command_keeps_everything_but_the_key():
    text = command_line(["--bench=scicode", "--model-api-key", "sk-secret-value", "-n", "2"])
    assert "sk-secret-value" not in text
    assert text == f"pytest --bench=scicode --model-api-key '{REDACTED}' -n 2"
