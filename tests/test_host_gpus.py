"""A machine's GPUs are what its ``nvidia-smi -L`` lists, and nothing else: no environment variable declares GPUs
(the tests' fake GPUs are a fake ``nvidia-smi`` on a worker's PATH, written by .ci/ssh-setup)."""

from __future__ import annotations

import os
from pathlib import Path

from pytest_agentbench.core import host


def fake_smi(folder: Path, lines: str, code: int = 0) -> None:
    script = folder / "nvidia-smi"
    script.write_text(f'#!/bin/sh\n[ "$1" = "-L" ] || exit 2\nprintf \'{lines}\'\nexit {code}\n', encoding="utf-8")
    script.chmod(0o755)


def test_gpus_are_the_gpu_lines_of_nvidia_smi(tmp_path, monkeypatch):
    fake_smi(tmp_path, "GPU 0: fake (UUID: GPU-a)\\nMIG 1g.5gb Device 0\\nGPU 1: fake (UUID: GPU-b)\\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert host.gpus() == ["GPU 0: fake (UUID: GPU-a)", "GPU 1: fake (UUID: GPU-b)"]


def test_no_environment_variable_declares_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi at all
    monkeypatch.setenv("AGENTBENCH_TEST_GPUS", "2")  # the test-only override the package once read
    assert host.gpus() == []


def test_a_failing_nvidia_smi_means_no_gpu(tmp_path, monkeypatch):
    fake_smi(tmp_path, "GPU 0: fake\\n", code=9)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert host.gpus() == []
