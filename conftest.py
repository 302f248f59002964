"""The repository's own test set-up, for ``pytest`` started in this checkout.

The tests themselves, their fixtures and their helpers live in ``tests/`` (``tests/conftest.py``). This file
only keeps pytest out of the folders at the top that hold no tests of this repository: ``data/`` (upstream data;
a CORE-Bench capsule unpacked there may ship its own ``test_*.py``), ``reports/`` (run reports) and ``perf/``
(speed scripts, run by hand). It defines no ``bench_*`` fixture and no hook, so a benchmark run started here
(``pytest --bench=scicode --model=oracle``) behaves as anywhere else (tests/test_repository_layout.py).
"""

collect_ignore = ["data", "reports", "perf"]
