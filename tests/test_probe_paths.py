"""A remote host's probe runs the host's own install of the plugin: a host installed with a release from before the
distribution package (the probe at ``pytest_plugin/hostprobe.py``) still answers it with what it has, so the
controller refuses it as another build, naming the versions, instead of reporting a probe that failed."""

from __future__ import annotations

import json

import pytest

from pytest_agentbench.pytest_plugin.distribution.hostprobe import SERVE_SOURCE

FAKE_PROBE = (
    "import json, sys\n\n"
    "def main():\n"
    "    print(json.dumps({{'layout': {layout!r}, 'request': json.loads(sys.stdin.read())}}))\n"
)
LAYOUTS = {
    "distribution package": "pytest_agentbench/pytest_plugin/distribution/hostprobe.py",
    "before the distribution package": "pytest_agentbench/pytest_plugin/hostprobe.py",
}


class Channel:
    """The two calls of execnet's channel the probe's source makes."""

    def __init__(self, request: dict) -> None:
        self.request, self.sent = request, []

    def receive(self) -> dict:
        return self.request

    def send(self, item: dict) -> None:
        self.sent.append(item)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_probe_finds_the_hosts_own_install_at_either_path(layout, tmp_path, monkeypatch):
    probe = tmp_path / LAYOUTS[layout]
    probe.parent.mkdir(parents=True)
    for folder in [probe.parent, *probe.parent.parents]:
        if folder == tmp_path:
            break
        (folder / "__init__.py").write_text("")
    probe.write_text(FAKE_PROBE.format(layout=layout))
    monkeypatch.chdir(tmp_path)  # the probe's child python finds this install first (``-c`` puts the cwd first)
    channel = Channel({"bench": "x"})
    exec(compile(SERVE_SOURCE, "serve", "exec"), {"channel": channel})
    assert channel.sent == [{"layout": layout, "request": {"bench": "x"}}], json.dumps(channel.sent)
