"""CORE-Bench (siegelz/core-bench): computational reproducibility of published research code."""
