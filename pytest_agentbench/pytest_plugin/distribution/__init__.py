"""Distribution over pytest-xdist: the controller's and worker's plugin objects (``plugins.py``), their handshake,
remote hosts and their probe, placement, the durations the scheduler reads, and xdist's undocumented objects."""
