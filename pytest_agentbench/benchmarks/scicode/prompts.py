"""SciCode step prompts, built the way upstream's eval/scripts/gencode.py builds them.

Upstream's file names are counter-intuitive but deliberate: ``multistep_template.txt`` is the
prompt WITH the scientific background (the background is pasted into the step texts), and
``background_comment_template.txt`` is the prompt WITHOUT it (it asks the model to write the
background itself as a comment).

Prompt layout (filled into the template's three placeholders):
- problem_steps_str: for each earlier step, its description (plus a newline and its background
  when backgrounds are on), then the code this run produced for it, steps separated by a
  ``------`` line; all pieces joined by blank lines.
- next_step_str: the step's description (plus background), a blank line, then its function
  header, a blank line and its return line.
- dependencies: the problem's ``required_dependencies`` text.
"""

from __future__ import annotations

from pathlib import Path

TEMPLATE_FILES = {
    "with_background": "multistep_template.txt",
    "without_background": "background_comment_template.txt",
}
STEP_SEPARATOR = "------"


def _template_dir(data_dir: Path) -> Path:
    """Accept either the data root (holding scicode/) or the scicode folder itself."""
    data_dir = Path(data_dir)
    nested = data_dir / "scicode"
    return nested if (nested / TEMPLATE_FILES["with_background"]).is_file() else data_dir


def load_templates(data_dir: Path) -> dict:
    """{"with_background": text, "without_background": text} from the SciCode data files."""
    folder = _template_dir(data_dir)
    templates = {}
    for key, name in TEMPLATE_FILES.items():
        path = folder / name
        if not path.is_file():
            raise FileNotFoundError(
                f"SciCode prompt template {name} not found in {folder}; point the data directory "
                "(AGENTBENCH_DATA_DIR) at the folder holding scicode/ with the upstream files"
            )
        templates[key] = path.read_text(encoding="utf-8")
    return templates


def step_text(step: dict, with_background: bool) -> str:
    description = step["step_description_prompt"]
    if with_background:
        return description + "\n" + (step.get("step_background") or "")
    return description


def header_and_return(step: dict) -> str:
    return f"{step['function_header']}\n\n{step['return_line']}"


def previous_steps_text(problem: dict, step_index: int, previous_code: list[str], with_background: bool) -> str:
    pieces: list[str] = []
    for index in range(step_index):
        step = problem["sub_steps"][index]
        pieces += [step_text(step, with_background), previous_code[index] or "", STEP_SEPARATOR]
    return "\n\n".join(pieces[:-1])  # no separator after the last step


def next_step_text(problem: dict, step_index: int, with_background: bool) -> str:
    step = problem["sub_steps"][step_index]
    return "\n\n".join([step_text(step, with_background), header_and_return(step)])


def build_prompt(
    problem: dict, step_index: int, previous_code: list[str], *, with_background: bool, templates: dict
) -> str:
    """The prompt for step ``step_index`` (0-based) given the code generated for earlier steps."""
    steps = problem.get("sub_steps") or []
    if not 0 <= step_index < len(steps):
        raise IndexError(
            f"SciCode problem {problem.get('problem_id')} has {len(steps)} steps; "
            f"step index {step_index} is out of range (indices are 0-based)"
        )
    if len(previous_code) < step_index:
        raise ValueError(
            f"step {steps[step_index].get('step_number')} needs the code of its "
            f"{step_index} earlier steps but got {len(previous_code)}"
        )
    template = templates["with_background" if with_background else "without_background"]
    return template.format(
        problem_steps_str=previous_steps_text(problem, step_index, previous_code, with_background),
        next_step_str=next_step_text(problem, step_index, with_background),
        dependencies=problem["required_dependencies"],
    )
