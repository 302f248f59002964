"""The Slurm back-end's plain part: its commands and options (``commands.py``) and the task packages (``spool.py``).
The pytest-facing part is ``pytest_plugin/slurm/``."""
