"""Back-ends: where a run's tasks run away from the pytest session (plain Python, no pytest)."""
