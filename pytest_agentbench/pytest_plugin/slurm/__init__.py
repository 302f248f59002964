"""The Slurm back-end's pytest side: the controller's submit-and-wait loop (``backend.py``) and the task packages'
sessions (``taskpackage.py``). Its plain part (commands, options, spool) is ``backends/slurm/``."""
