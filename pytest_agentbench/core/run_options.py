"""Options every run shares: which benchmark, split and items, where data, cache and reports live."""
from __future__ import annotations

from .options import Option

RUN_OPTIONS: tuple[Option, ...] = (
    Option("bench", "--bench", "benchmark to run (an installed benchmark's name); without it the plugin does nothing.",
           ini="agentbench_bench", metavar="NAME"),
    Option("split", "--bench-split",
           "benchmark split (default: the benchmark's own default split).",
           ini="agentbench_split", metavar="SPLIT"),
    Option("ids", "--bench-ids",
           "exact selection, comma separated: a task id (77) or a sample id (77.3). "
           "Unlike -k, 7 does not match 17 or 70.", kind="list", ini="agentbench_ids", metavar="IDS"),
    Option("data_dir", "--bench-data-dir",
           "folder holding the upstream data files (default $AGENTBENCH_DATA_DIR, else ./data); "
           "missing files are downloaded into it from pinned URLs and checked by sha256.",
           kind="path", default="data", ini="agentbench_data_dir", env="AGENTBENCH_DATA_DIR", metavar="DIR"),
    Option("cache_dir", "--bench-cache-dir",
           "cache folder, relative to the rootdir: model responses, files a benchmark derives from its data, "
           "checksum stamps (default .agentbench_cache/).",
           kind="path", default=".agentbench_cache", relative_to="rootdir", ini="agentbench_cache_dir", metavar="DIR"),
    Option("report_dir", "--bench-report-dir",
           "folder for run reports: <dir>/<benchmark>/<model>/<run-id>/ (default reports/).",
           kind="path", default="reports", ini="agentbench_report_dir", metavar="DIR"),
    Option("run_id", "--bench-run-id",
           "name of this run's report folder (default: UTC timestamp plus a random suffix).",
           ini="agentbench_run_id", metavar="ID"),
    Option("timeout", "--bench-timeout",
           "seconds allowed for scoring one item in its child process (default 1800, as upstream).",
           kind="float", default=1800.0, minimum=0, exclusive_minimum=True, ini="agentbench_timeout",
           metavar="SECONDS"),
    Option("allow_custom_data", "--bench-allow-custom-data",
           "accept data files whose sha256 differs from the pinned upstream files (a hand-made dataset, "
           "a custom test_data.h5); the report says so.", kind="bool", default=False,
           ini="agentbench_allow_custom_data"),
)
