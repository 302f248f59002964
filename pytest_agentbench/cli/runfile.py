"""``python -m pytest_agentbench init [FILE]``: a commented example run file (``core/runfile.py`` reads it)."""

from __future__ import annotations

import sys
from pathlib import Path

RUN_FILE_EXAMPLE = """\
# A pytest-agentbench run file: `pytest --bench-config=agentbench.yaml` (or ini key agentbench_config).
# Keys are the options' names as `pytest --help` lists them, without --bench- and with underscores
# (--bench-timeout -> timeout). The command line and the environment win over this file; this file wins
# over the ini file. Values that came from here are named `file agentbench.yaml:LINE` in errors and in
# each run's settings.json.

bench:
  bench: scicode              # the benchmark (--bench)
  split: validation           # --bench-split
  # ids: [77, "12.3"]         # --bench-ids
  mode: tool_use              # --bench-mode: tool_use or naive
  timeout: 1800               # seconds per step, as upstream (--bench-timeout)
  # attempts: 3               # --bench-attempts
  # report_dir: reports       # --bench-report-dir (relative to this file)

models:
  - name: gpt-4o                          # --model
    base_url: https://api.openai.com/v1   # --model-base-url
    api_key_env: OPENAI_API_KEY           # the variable that holds the key; never the key itself
    params: {temperature: 0}              # --model-params
    # price: {prompt_per_mtok: 2.5, completion_per_mtok: 10}   # USD per million tokens (--model-price)

# agents: [builtin, codex]    # CORE-Bench (--bench-agent): each (model, agent) pair is one run

gates:
  fail_under: ["main=40%"]    # --bench-fail-under
  # baseline: reports/scicode/gpt-4o/last-good   # --bench-baseline
  # max_drop: ["main=50%"]    # --bench-max-drop

pytest:
  n: 2                        # pytest-xdist workers (-n)
  # k: "not 51"               # -k
  # m: validation             # -m
  # deselect: ["scicode/10::10.11"]
"""


def write_example(path: Path) -> Path:
    """``python -m pytest_agentbench init``: a commented example; never overwrites a file."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; remove it or name another file")
    path.write_text(RUN_FILE_EXAMPLE, encoding="utf-8")
    return path


def main(args: list[str]) -> int:
    """Write a commented example run file; never overwrites one."""
    if len(args) > 1 or (args and args[0].startswith("-")):
        print("usage: python -m pytest_agentbench init [FILE]", file=sys.stderr)
        return 2
    try:
        path = write_example(Path(args[0] if args else "agentbench.yaml"))
    except (FileExistsError, OSError) as exc:
        print(f"init: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path}: edit it, then run pytest --bench-config={path}")
    return 0
