"""The comparison component of the report layer: two runs compared (``runs.py``: a run with its baseline in
its report.html, and the page of ``compare A B --html OUT``) and the models of one run compared (``models.py``:
the table across the models, and each later model compared with the first with the same two-run view).
``format.py`` holds what both print alike (rates, differences, intervals, the page shell)."""

from __future__ import annotations

from .models import (
    MODELS_FOLDER,
    ModelRow,
    ModelRun,
    Pair,
    compared_with_first,
    model_row,
    render_markdown,
    render_text,
    write_models_reports,
)
from .runs import comparison_for_run, comparison_section, render_compare_page, write_compare_page

__all__ = [
    "MODELS_FOLDER",
    "ModelRow",
    "ModelRun",
    "Pair",
    "comparison_for_run",
    "comparison_section",
    "compared_with_first",
    "model_row",
    "render_compare_page",
    "render_markdown",
    "render_text",
    "write_compare_page",
    "write_models_reports",
]
