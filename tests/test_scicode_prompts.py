"""SciCode prompts, pinned against hand-written expectations of upstream's layout."""

from __future__ import annotations

import json

import pytest

from pytest_agentbench.benchmarks.scicode.prompts import build_prompt, load_templates

from helpers.bench_runs import SHARED_DATA  # honours $AGENTBENCH_DATA_DIR

DATA = SHARED_DATA


def problem(problem_id: str) -> dict:
    with open(DATA / "scicode" / "problems_dev.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            if row["problem_id"] == problem_id:
                return row
    raise LookupError(problem_id)


@pytest.fixture(scope="module")
def templates():
    return load_templates(DATA)


STEP_1_CODE = "def get_alpha(recvec, alpha_scaling=5):\n    return alpha_scaling * 2.0"

# Problem 10, step 10.2, without background (background_comment_template.txt), written out by hand.
EXPECTED_10_2_WITHOUT_BACKGROUND = """PROBLEM DESCRIPTION:
You will be provided with the main description of the problem, previous steps, and the next step. Your task will be to generate the disciplinary knowledge necessary for solving the next step and then develop a Python solution focused on this step.

PREVIOUS STEPS DESCRIPTION:
Write a Python function to determine the alpha value for the Ewald summation given reciprocal lattice vectors `recvec` of shape (3, 3). Alpha is a parameter that controls the division of the summation into real and reciprocal space components and determines the width of the Gaussian charge distribution. Multiply the result by scaling `alpha_scaling` (fixed to 5).

def get_alpha(recvec, alpha_scaling=5):
    return alpha_scaling * 2.0

NEXT STEP - PROBLEM DESCRIPTION AND FUNCTION HEADER:
This part will describe the next step in the problem-solving process. First, provide the necessary scientific background knowledge as a comment at the beginning of your response, starting with 'Background: '. Then, a function header will be provided, and your task is to develop the Python code for this next step based on the provided description and function header.

Write a Python function to generate the tiled lattice coordinates from the `latvec` and `nlatvec` number of lattice cells to expand to in each of the 3D directions, i.e. from `-nlatvec` to `nlatvec + 1`. Return `lattice_coords` of shape ((2N+1)^3, 3)

def get_lattice_coords(latvec, nlatvec=1):
    \'\'\'Generate lattice coordinates based on the provided lattice vectors.
    Parameters:
        latvec (np.ndarray): A 3x3 array representing the lattice vectors.
        nlatvec (int): The number of lattice coordinates to generate in each direction.
    Returns:
        np.ndarray: An array of shape ((2 * nlatvec + 1)^3, 3) containing the lattice coordinates.
    \'\'\'

    return lattice_coords

DEPENDENCIES:
Use only the following dependencies in your solution. Do not include these dependencies at the beginning of your code.
import numpy as np
from scipy.special import erfc

RESPONSE GUIDELINES:
1. Start with the scientific background required for the next step, formatted as a comment.
2. Then write the complete and executable Python program for the next step in a single block.
3. Your response should focus exclusively on implementing the solution for the next step, adhering closely to the specified function header and the context provided by the initial steps.
4. DO NOT include previous function code, example usage or test code in your response.
5. Ensure your response is in the format of ```python``` and includes the necessary background as a comment at the top.

Example:
```python
# Background: [Here, insert the necessary scientific knowledge required for the next step.]

[Insert the Python code here based on the provided function header and dependencies.]
```
"""


def test_step_10_2_without_background_is_exact(templates):
    prompt = build_prompt(problem("10"), 1, [STEP_1_CODE], with_background=False, templates=templates)
    assert prompt == EXPECTED_10_2_WITHOUT_BACKGROUND


def test_with_background_uses_multistep_template_and_backgrounds(templates):
    prob = problem("78")
    steps = prob["sub_steps"]
    codes = ["def first():\n    return 1", "def second():\n    return 2"]
    prompt = build_prompt(prob, 2, codes, with_background=True, templates=templates)
    assert prompt.startswith("PROBLEM DESCRIPTION:\nYou will be provided with problem steps along with background")
    previous = (
        f"{steps[0]['step_description_prompt']}\n{steps[0]['step_background']}\n\n{codes[0]}\n\n------\n\n"
        f"{steps[1]['step_description_prompt']}\n{steps[1]['step_background']}\n\n{codes[1]}"
    )
    next_step = (
        f"{steps[2]['step_description_prompt']}\n{steps[2]['step_background']}\n\n"
        f"{steps[2]['function_header']}\n\n{steps[2]['return_line']}"
    )
    assert (
        "PROBLEM STEPS AND FUNCTION CODE:\nHere, you'll find the Python code for the initial steps of the "
        "problem-solving process. This code is integral to building the solution.\n\n"
        + previous
        + "\n\nNEXT STEP - PROBLEM STEP AND FUNCTION HEADER:\n"
    ) in prompt
    assert (
        "and function header.\n\n" + next_step + "\n\nDEPENDENCIES:\nUse only the following dependencies in "
        "your solution. Do not include these dependencies at the beginning of your code.\n\n"
        + prob["required_dependencies"]
        + "\n\nRESPONSE GUIDELINES:"
    ) in prompt
    # the next step's code is never shown
    assert steps[2]["ground_truth_code"] not in prompt


def test_first_step_has_empty_previous_steps(templates):
    prob = problem("10")
    prompt = build_prompt(prob, 0, [], with_background=False, templates=templates)
    assert "PREVIOUS STEPS DESCRIPTION:\n\n\nNEXT STEP" in prompt
    assert "------" not in prompt


def test_without_background_omits_step_background(templates):
    prob = problem("78")
    prompt = build_prompt(prob, 1, ["def first():\n    return 1"], with_background=False, templates=templates)
    assert prob["sub_steps"][0]["step_background"] not in prompt
    assert prob["sub_steps"][1]["step_background"] not in prompt


def test_load_templates_accepts_scicode_folder_and_names_missing_files(tmp_path):
    assert load_templates(DATA / "scicode") == load_templates(DATA)
    with pytest.raises(FileNotFoundError, match="multistep_template.txt.*AGENTBENCH_DATA_DIR"):
        load_templates(tmp_path)


def test_bad_step_index_and_missing_previous_code(templates):
    prob = problem("10")
    with pytest.raises(IndexError, match="0-based"):
        build_prompt(prob, 11, [""] * 11, with_background=False, templates=templates)
    with pytest.raises(ValueError, match="needs the code of its 2 earlier steps"):
        build_prompt(prob, 2, ["x"], with_background=False, templates=templates)
