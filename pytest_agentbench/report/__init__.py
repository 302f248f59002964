"""The report layer: summaries, baselines, comparisons, gates, the picture and summary.md.

Plain Python (no pytest) and benchmark-agnostic: what it needs of a benchmark comes from the
``Benchmark`` members ``gate_metrics``, ``headlines`` and ``free_settings`` (``declared.Declared``),
which every summary.json also stores. Imports inside the package point one way:

    options, declared, baseline  <-  compare  <-  gates  <-  summary  (-> picture)
    baseline, options            <-  resume
    highlight  <-  transcript  <-  html  (report.html: code highlighting, transcripts, the page)
"""
