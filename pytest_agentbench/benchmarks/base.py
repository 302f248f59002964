"""The Benchmark protocol: everything the plugin and the report layer need from a benchmark.

A benchmark is a subclass of ``Benchmark`` registered under the ``pytest_agentbench.benchmarks``
entry-point group (see ``registry.py``), so a third benchmark ships as its own package and needs no
change anywhere else. It declares its options, markers, metrics, headlines and free settings as class
attributes; the base class supplies the defaults. Nothing here imports pytest: a notebook can
configure a benchmark, load its tasks, open a run and run one sample.

The life of a run, in every process that runs items:
  ``configure(opts, split)`` -> effective settings (checked; shown in the header, stored in summary.json)
  ``load_tasks(opts, split)`` -> tasks, in canonical order
  ``open_run(spec, model, env)`` -> a ``BenchRun`` (once, at the first item: the solver is chosen here)
  ``run.run_sample(sample)`` -> the sample's record, for each item
  ``run.close()``
and on the controller ``summarize(records, settings)`` -> metrics, terminal lines and Markdown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..core.io import DirectoryFiles, RunFiles
from ..core.jobs import HARNESS_MIB, TIME_MARGIN, JobRequest
from ..core.options import Option, Settings, view
from ..core.records import Record, RecordLike
from ..core.run_options import RunOptions
from ..core.types import Sample, Task
from ..sandbox.options import SandboxOptions


@dataclass(frozen=True)
class RunSpec:
    """What a run needs, resolved once before the first item."""

    settings: Mapping[str, Any]  # the effective run settings (what configure() returned, plus the common ones)
    options: Settings  # every resolved option of this run
    tasks: tuple[Task, ...]  # the selected tasks
    selected: frozenset[str]  # ids of the samples this process will run (look-ahead never goes past them)
    run_dir: Path  # this run's report folder (created by the first record written); on a worker, the controller's
    data_dir: Path
    cache_dir: Path
    # Where the run's files (trajectories, artifacts) go: ``files.write(relpath, data) -> relpath``. A benchmark
    # writes through it only, never into ``run_dir``: on an xdist worker the files travel to the controller, the
    # only writer of the run. Default: ``DirectoryFiles(run_dir)`` (a notebook, a single process).
    files: RunFiles = None  # type: ignore[assignment]
    # The samples this process holds now (those it will still run, in its order), asked again as work arrives: a
    # benchmark may prepare them ahead (SciCode generates their chains concurrently). None: not known.
    held: Callable[[], Sequence[Sample]] | None = None
    workers: int = 1  # processes of the session that run items: a session-wide bound is divided over them
    # How many model requests this process may have in flight (its share of --bench-max-connections when the
    # plugin's own model client serves the run; 1 for the oracle, a conftest's model, a notebook): a benchmark
    # that generates ahead runs this many chains at once.
    connections: int = 1
    # The finished records an earlier session left and this run reuses (--bench-resume), by record key: a
    # benchmark whose items build on other items' answers (SciCode's steps) takes those answers from them, so an
    # item run again builds on exactly what the kept verdicts were given.
    reused: Mapping[str, RecordLike] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.files is None:
            object.__setattr__(self, "files", DirectoryFiles(self.run_dir))


class BenchRun:
    """One benchmark's run in one process: the base class of every benchmark's run (what ``open_run`` returns).

    A run implements ``run_sample``; every other method has a default the plugin relies on, so a run overrides
    only what it needs and the plugin calls each one unconditionally."""

    def run_sample(self, sample: Sample) -> RecordLike:
        """Run and score one sample; return its ``Record`` (``records.sample_record``: the common fields typed and
        checked, the benchmark's own fields beside them). A benchmark of another package may still return the
        record's fields as a dict; the run loop makes the ``Record`` of it."""
        raise NotImplementedError

    def prepare_sample(self, sample: Sample) -> None:
        """Called before ``run_sample`` outside its timing (the item's ``duration``), for work a sample needs that
        is not its own (SciCode: rebuilding its problem's targets); not for an item a resumed run already has.
        Default: nothing."""

    def close(self) -> None:
        """Release what the run holds (threads, servers); called once at the end of the session. Default: nothing."""

    def unscored(self) -> list[dict[str, Any]]:
        """After ``close``: the accounting (``generation`` fields) of model work done ahead that no record reports
        (a step generated for an item that never ran): the run's cost counts it. Default: none."""
        return []


class Benchmark:
    """Base class of a benchmark. Subclasses set the class attributes and implement the methods."""

    name: ClassVar[str] = ""  # the value of --bench
    splits: ClassVar[tuple[str, ...]] = ()
    default_split: ClassVar[str] = ""
    # --bench-dataset: the data sets the benchmark offers (none: the option is refused) and the one used without it
    datasets: ClassVar[tuple[str, ...]] = ()
    default_dataset: ClassVar[str] = ""
    # When true the samples of a task are collected under a per-task collector (``<bench>/<task>::<sample>``,
    # kept whole on one xdist worker), otherwise directly (``<bench>/<sample>``).
    group_items: ClassVar[bool] = True
    records_file: ClassVar[str] = "records.jsonl"
    options: ClassVar[tuple[Option, ...]] = ()  # the benchmark's own options (Option.owner = name)
    markers: ClassVar[Mapping[str, str]] = {}  # marker name -> description, registered with pytest
    gate_metrics: ClassVar[Mapping[str, str]] = {}  # gate name (--bench-fail-under NAME=...) -> metrics key
    headlines: ClassVar[Mapping[str, str]] = {}  # headline metrics key -> unit compare resamples: "task" or "item"
    free_settings: ClassVar[frozenset[str]] = frozenset()  # settings a baseline may differ in
    # What report.html shows of this benchmark beyond the common parts (the report layer names no benchmark):
    # answer counts under the headline cards (label -> record fields of correct answers and of answers), the
    # Categories table's columns (heading, then summary["categories"][name] keys: passed, total, rate), the
    # record fields the item's own details show (not repeated in its field table), and CSS and JavaScript the
    # page appends to its own (no record value is ever put in a script).
    answer_counts: ClassVar[Mapping[str, tuple[str, str]]] = {}
    category_columns: ClassVar[tuple[tuple[str, str, str, str], ...]] = ()
    # the Metrics table's labelled rows: (label, then summary["metrics"] keys: correct, total, rate); the metrics
    # no row names follow by their keys
    metric_rows: ClassVar[tuple[tuple[str, str, str, str], ...]] = ()
    item_fields_shown: ClassVar[frozenset[str]] = frozenset()
    page_css: ClassVar[str] = ""
    page_js: ClassVar[str] = ""

    def configure(self, opts: Settings, split: str) -> dict[str, Any]:
        """Check the benchmark's options together (raise ConfigError naming the fix) and return the
        effective settings shown in the report header and stored in summary.json."""
        return {}

    def load_tasks(self, opts: Settings, split: str) -> list[Task]:
        """Every task of ``split`` in the benchmark's canonical order (raise ConfigError or DataError)."""
        raise NotImplementedError

    def data_hashes(self, opts: Settings, split: str, settings: Mapping[str, Any]) -> dict[str, str]:
        """sha256 of the data files this run reads, so a baseline made from other data is not compared."""
        return {}

    def comparability(self, opts: Settings, split: str, settings: Mapping[str, Any]) -> dict[str, Any]:
        """What makes two runs of this benchmark comparable beyond the keys every run records (benchmark, split,
        selection, time limit, package version): ``dataset`` (its name, version and files' hashes),
        ``grading_envs`` (each environment that grades, with the package versions it has), ``harness`` (how the
        model is asked) and any other key (prompt templates' hashes). Called once ``data_hashes`` are in
        ``settings``; stored in summary.json under ``comparability``. A gate refuses a baseline whose
        ``dataset``, ``grading_envs`` or ``harness`` differ (docs/gates.md)."""
        out: dict[str, Any] = {"dataset": {"name": self.name, "hashes": dict(settings.get("data_hashes") or {})}}
        if settings.get("grading_envs"):
            out["grading_envs"] = list(settings["grading_envs"])
        return out

    def expected_cost(self, sample: Sample) -> float:
        """How long ``sample`` is expected to take, in any unit common to the benchmark's samples: the
        scheduler runs the heaviest tasks first when no earlier run measured them (durations.json)."""
        return 0.0 if sample.skip_reason else 1.0

    def default_env(self, opts: Settings) -> str:
        """The environment (``--bench-env`` value) the ``bench_env`` fixture builds when none is given."""
        return "host"

    def job_request(self, samples: list[Sample], opts: Settings) -> JobRequest:
        """What a scheduler job running these samples (one task, in order) asks for: one CPU, the memory its
        children may use plus the harness's, a GPU when a sample is marked ``gpu``, and time for every
        sample's limit plus a margin (``--bench-backend=slurm``)."""
        run = [s for s in samples if not s.skip_reason]
        return JobRequest(
            cpus=1,
            memory_mib=int(float(view(SandboxOptions, opts).memory_limit) * 1024) + HARNESS_MIB,
            gpu=any("gpu" in s.markers for s in samples),
            seconds=len(run) * float(view(RunOptions, opts).timeout) + TIME_MARGIN,
        )

    def check_selection(
        self, opts: Settings, settings: Mapping[str, Any], samples: list[Sample], env: Any
    ) -> list[str]:
        """Once, on the controller, before any item runs, when every item runs on this machine: what the selected
        ``samples`` need that can be known up front (their data files, the environment's image). ``env`` is the
        environment factory the run's items get (None when a conftest supplies its own ``bench_env``). Raise
        ConfigError naming everything missing and the fix (the run ends with a usage error and no item runs);
        return notes for the report header."""
        return []

    def first_call_misses(
        self, opts: Settings, settings: Mapping[str, Any], tasks: list[Task], samples: list[Sample], model: Any
    ) -> list[str]:
        """The selected tasks whose first model call ``model`` (a replay's cache-only client) does not answer, found
        by building each task's first request with the benchmark's own harness and the run's settings. The plugin
        asks it before any item: under --bench-replay (tasks named here end the run with exit 4), and for the
        model preflight, which sends the first request the harness builds. Default: [] (the benchmark cannot
        say: no task is named, and the preflight sends a plain request)."""
        return []

    def not_run_fields(self, sample: Sample, settings: Mapping[str, Any]) -> dict[str, Any]:
        """Fields of the record report.html and the summary show for an item that never ran (an incomplete run),
        from what the benchmark knows before it runs (CORE-Bench: its question counts). Default: none."""
        return {}

    def revise_record(self, record: Record) -> Record:
        """A finished record as this run's settings derive it: the controller calls it on every record it writes
        and on the records a resumed run reuses (CORE-Bench applies --bench-review there). Default: the record."""
        return record

    def open_run(self, spec: RunSpec, model: Any, env: Any) -> BenchRun:
        """Start this process's run with the model and environment (the bench_model and bench_env
        fixture values); choose the solver here, once."""
        raise NotImplementedError

    def page_sections(self, summary: Mapping[str, Any], records: Sequence[RecordLike]) -> list[str]:
        """report.html sections of this benchmark's own, placed after the gates: HTML, every value escaped."""
        return []

    def item_headline(self, record: RecordLike) -> str | None:
        """The text of an item's summary line in report.html (plain text); None: the record's message."""
        return None

    def item_details(self, record: RecordLike) -> list[str]:
        """HTML shown in an item's details after its message (every value escaped)."""
        return []

    def summarize(self, records: list[Record], settings: Mapping[str, Any]) -> dict[str, Any]:
        """Metrics from the records of one run (controller side; each a ``Record``, read-only): a dict with
        ``metrics`` (name -> float), ``terminal`` (list of lines) and ``markdown`` (str); other keys go into
        summary.json."""
        raise NotImplementedError


@dataclass
class Registered:
    """The benchmarks found through entry points, and the ones that failed to load."""

    found: dict[str, Benchmark] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)
