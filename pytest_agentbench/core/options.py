"""Declarative settings: one ``Option`` per setting, one reader, frozen results.

Every setting of the plugin is an ``Option``: its command-line flag, ini key, environment variable,
type, default, help text and check live in one place. ``resolve`` turns the raw values of one run
into a frozen ``Settings`` with the precedence command line > environment > run file > ini > default, and a
bad value is an ``OptionError`` that names where it came from (``--bench-timeout 'x'``,
``ini agentbench_timeout``, ``$AGENTBENCH_DATA_DIR``). Nothing here knows pytest: the plugin package
registers the options with pytest's parser and hands their raw values to ``resolve``.
"""

from __future__ import annotations

import difflib
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Protocol, TypeVar

KINDS = ("str", "int", "float", "bool", "choice", "path", "list", "multi", "json", "size")
# What a remote worker host gets of an option (``Option.hosts``)
HOST_FORWARDED = "forwarded"  # the controller's value, when it was set explicitly
HOST_OWN = "own"  # nothing: each host uses its own environment and defaults (paths differ between hosts)
HOST_GPU = "gpu"  # forwarded, and used only by a host that has a GPU
HOST_RULES = (HOST_FORWARDED, HOST_OWN, HOST_GPU)


# The groups of ``pytest --help`` (and the sections of docs/options.md), in the order shown: key -> title.
# ``Option.help_group`` names one; an option that names none is shown in the group of the layer declaring it
# (``place``), a benchmark's own option in that benchmark's group (``help_group_title``).
HELP_GROUPS = {
    "selection": "selection and data",
    "model": "model, cost and budget",
    "run": "running, cache and resume",
    "isolation": "isolation and environments",
    "distribution": "remote workers and Slurm",
    "gates": "reports and gates",
}
DEFAULT_HELP_GROUP = "run"  # an option no declaration or layer places


SET_FLAG = "--bench-set"  # the one repeatable flag that sets an option not shown (Option.shown): NAME=VALUE


class OptionError(ValueError):
    """A setting's value is wrong; the message names the setting, where the value came from and the fix."""


# The name of every option declared in this process (by any layer or benchmark module imported): a plain-Python
# caller's mapping may hold any of them beside the ones a reader reads (given_settings).
DECLARED_NAMES: set[str] = set()


@dataclass(frozen=True)
class Option:
    """One setting.

    ``kind``:
      str, int, float, bool, choice (one of ``choices``), path (a ``Path``, relative paths resolved
      against the invocation folder, or the rootdir with ``relative_to="rootdir"``; ``exists`` may
      demand a "file" or a "dir"), list (comma-separated: a tuple of non-empty strings), multi
      (repeatable flag and ini line list: a tuple of the strings as given), json (a JSON value),
      size (``8g``, ``512m``, bytes: an int).
    ``default`` may be a callable ``(environment, base folder) -> value``: a default that depends on where the
    user is (the per-user cache folder).
    Numbers are finite; ``minimum``/``maximum`` bound them (``exclusive_minimum`` for "> 0").
    ``check(value)`` may return a cleaned value or raise ``ValueError`` with the reason.
    ``runfile_group`` is the section of a run file (core/runfile.py) that may set it.
    ``negatable`` adds ``--no-<flag>`` for bools. ``owner`` is the benchmark that declared the
    option, or None for options every run shares.
    ``help_group`` is the group of ``pytest --help`` that shows it (a key of ``HELP_GROUPS``); None: the group of
    the layer that declares it (``place``), for a benchmark's own option its benchmark's group.
    ``shown`` (default True): the option has a flag of its own, listed in ``pytest --help``: the settings a user
    sets in a normal run. False: a tuning knob or an escape hatch, set on the command line with the one repeatable
    ``--bench-set NAME=VALUE`` (``SET_FLAG``), as an ini key or a run-file key, and listed by ``python -m
    pytest_agentbench options``; its ``flag`` is then its old spelling, which is refused with the new one.

    The option's rules, which every consumer reads from here (never from a list of names):
      ``secret``: the value (an API key) is never written anywhere, not even inside the command line a report
        records, and never sent to a host probe; it reaches remote workers only in their in-memory worker input.
      ``stored``: a value given for the run is kept in settings.json (how the run was asked for), so
        ``--bench-resume DIR`` / ``--bench-replay DIR`` need nothing retyped. Default: True, False for a secret
        (a secret option that says ``stored=True`` is refused).
      ``free_on_resume``: the value may differ when the run is resumed (where output goes, how items are run,
        the gates); otherwise a different value on the resume's command line is refused. Only a stored option
        can be free.
      ``hosts``: what a remote worker host gets: ``"forwarded"`` (the controller's value, if set explicitly),
        ``"own"`` (each host uses its own environment and defaults: every path option, the default for kind
        path), ``"gpu"`` (forwarded, but only a host with a GPU uses it).
      ``private``: a folder of the run (data, cache, reports) that the children running model code never see
        (sandbox/options.py hides it). Only a path option every run shares (no ``owner``) can be private.
    """

    name: str
    flag: str
    help: str
    kind: str = "str"
    default: Any = None
    ini: str | None = None
    env: str | None = None
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    exclusive_minimum: bool = False
    maximum: float | None = None
    exists: str | None = None  # "file", "dir" or None, for kind "path"
    relative_to: str = "invocation"  # or "rootdir", for kind "path"
    negatable: bool = False
    metavar: str | None = None
    check: Callable[[Any], Any] | None = None
    secret: bool = False
    owner: str | None = None
    runfile_group: str | None = "bench"  # the run file section that may set it ("bench", "models", "gates"; None: none)
    stored: bool | None = None  # None: True unless secret
    free_on_resume: bool = False
    hosts: str | None = None  # one of HOST_RULES; None: "own" for a path, else "forwarded"
    private: bool = False
    help_group: str | None = None  # a key of HELP_GROUPS; None: the declaring layer's, or the benchmark's
    shown: bool = True  # a flag of its own in pytest --help; False: set with --bench-set NAME=VALUE (and ini, run file)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option {self.flag}: unknown kind {self.kind!r}")
        if not self.flag.startswith("--"):
            raise ValueError(f"option {self.name}: flag {self.flag!r} must start with --")
        # the derived defaults become plain values, so every consumer reads a bool / a rule name
        if self.stored is None:
            object.__setattr__(self, "stored", not self.secret)
        if self.hosts is None:
            object.__setattr__(self, "hosts", HOST_OWN if self.kind == "path" else HOST_FORWARDED)
        problem = rule_conflict(self)
        if problem:
            raise ValueError(f"option {self.flag}: {problem}")
        DECLARED_NAMES.add(self.name)

    @property
    def dest(self) -> str:
        """The attribute name on pytest's option namespace."""
        return "agentbench_" + self.name

    @property
    def negative_flag(self) -> str | None:
        return "--no-" + self.flag[2:] if self.negatable else None

    @property
    def takes_value(self) -> bool:
        return self.kind != "bool"

    @property
    def spelling(self) -> str:
        """How the command line sets it: its flag, or ``--bench-set NAME`` for an option not shown."""
        return self.flag if self.shown else f"{SET_FLAG} {self.name}"

    def usage(self) -> str:
        """The command-line form of the option with a value, for help texts and errors (``--bench-ids=IDS``,
        ``--bench-set tool_loops=N``)."""
        if self.shown and self.kind == "bool":
            return self.flag
        value = "true|false" if self.kind == "bool" else self.metavar or "|".join(self.choices) or self.kind.upper()
        return f"{self.flag}={value}" if self.shown else f"{SET_FLAG} {self.name}={value}"


def rule_conflict(option: Option) -> str | None:
    """Why the option's rules contradict each other (a programming error in its declaration), or None."""
    if option.hosts not in HOST_RULES:
        return f"hosts must be one of {', '.join(HOST_RULES)}, not {option.hosts!r}"
    if option.secret and option.stored:
        return "a secret option is never stored in settings.json (leave out stored=True)"
    if option.free_on_resume and not option.stored:
        return "free_on_resume needs a stored option (an option not stored is never compared on resume)"
    if option.kind == "path" and option.hosts != HOST_OWN:
        return "a path names a folder of this host: its hosts rule is 'own'"
    if option.private and (option.kind != "path" or option.owner is not None):
        return "only a path option every run shares (no owner) can be private"
    if option.help_group is not None and option.help_group not in HELP_GROUPS:
        return f"help_group must be one of {', '.join(HELP_GROUPS)}, not {option.help_group!r}"
    return None


def place(options: Iterable[Option], help_group: str) -> tuple[Option, ...]:
    """``options`` of one layer, each that names no help group (and is no benchmark's own) in ``help_group``."""
    return tuple(
        o if o.help_group is not None or o.owner is not None else replace(o, help_group=help_group) for o in options
    )


def help_group_title(option: Option) -> str:
    """The title of the ``pytest --help`` group that shows ``option``."""
    if option.help_group is None and option.owner is not None:
        return f"--bench={option.owner}"
    return HELP_GROUPS[option.help_group or DEFAULT_HELP_GROUP]


def secret_names(options: Iterable[Option]) -> frozenset[str]:
    """The names of the secret options: their values are never written, logged or sent to a host probe."""
    return frozenset(o.name for o in options if o.secret)


def without_secrets(options: Iterable[Option], values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` (option name -> value) without the secret options' values."""
    hidden = secret_names(options)
    return {name: value for name, value in values.items() if name not in hidden}


def stored_options(options: Iterable[Option]) -> tuple[Option, ...]:
    """The options settings.json keeps when a run gives them (``Option.stored``)."""
    return tuple(o for o in options if o.stored)


@dataclass(frozen=True)
class Sources:
    """The raw values of one run, as the plugin found them (strings; None where a source is silent)."""

    cli: Mapping[str, Any]  # option name -> value from the command line (None when not given)
    ini: Mapping[str, Any]  # option name -> value from the ini file ("" or [] when not set)
    env: Mapping[str, str]
    invocation_dir: Path
    rootdir: Path
    ini_dir: Path | None = None  # folder of the ini file: relative ini paths are resolved there
    file: Mapping[str, tuple[Any, str]] = field(default_factory=dict)  # option name -> (value, where) from a run file
    file_dir: Path | None = None  # folder of the run file: relative paths in it are resolved there


FILE_ORIGIN = "file "  # how a value from a run file names its origin: "file agentbench.yaml:12"


@dataclass(frozen=True)
class RunFacts:
    """What the plugin knows about a run that no option says; it travels beside the settings (``Settings.facts``),
    never among them: it is not resolved, stored, forwarded or shown as an option."""

    listing_only: bool = False  # --collect-only: nothing is scored, so nothing has to be fetched or built for it


class Settings(Mapping[str, Any]):
    """Resolved settings: read-only, by key or attribute, plus where each value came from and the run's facts."""

    def __init__(
        self, values: Mapping[str, Any], origins: Mapping[str, str] | None = None, facts: RunFacts | None = None
    ) -> None:
        self._values = MappingProxyType(dict(values))
        self._origins = MappingProxyType(dict(origins or {}))
        self._facts = facts or RunFacts()

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, key: str) -> Any:
        try:
            return self.__dict__["_values"][key]
        except KeyError:
            raise AttributeError(key) from None

    def __setattr__(self, key: str, value: Any) -> None:
        if key.startswith("_"):
            object.__setattr__(self, key, value)
            return
        raise AttributeError("settings are frozen")

    @property
    def facts(self) -> RunFacts:
        """The run's facts (``RunFacts``): what is true of this run that no option says."""
        return self._facts

    def with_values(self, **values: Any) -> Settings:
        """These settings with some options' values replaced (their origins kept)."""
        return Settings({**self._values, **values}, self._origins, self._facts)

    def with_facts(self, facts: RunFacts) -> Settings:
        """The same settings for a run with these facts."""
        return Settings(self._values, self._origins, facts)

    def origin(self, key: str) -> str:
        """'command line', 'environment', 'file NAME:LINE' (a run file), 'ini' or 'default'."""
        return self._origins.get(key, "default")

    def explicit(self, key: str) -> bool:
        return self.origin(key) != "default"

    def __repr__(self) -> str:
        return f"Settings({dict(self._values)!r})"


class LayerView(Protocol):
    """What ``view`` needs of a layer's typed view: the option tuple its fields are named after, in order."""

    OPTIONS: ClassVar[tuple[Option, ...]]


View = TypeVar("View", bound=LayerView)


def view(cls: type[View], opts: Mapping[str, Any]) -> View:
    """A layer's typed view of settings: the frozen dataclass ``cls``, whose fields are named after the layer's
    options (``cls.OPTIONS``), filled with their values (e.g. ``view(SlurmOptions, opts).slurm_key``).

    Resolved ``Settings`` are read as they are. A plain mapping (a notebook's or a test's few settings) is first
    checked against this view by ``given_settings``. An option the settings lack gets its declared default."""
    settings = given_settings(opts, cls)
    return cls(**{o.name: settings[o.name] if o.name in settings else declared_default(o) for o in cls.OPTIONS})


def given_settings(opts: Mapping[str, Any], *views: type[LayerView]) -> Settings:
    """Settings as a plain-Python caller gives them (a mapping, option name -> value) to a reader of ``views``,
    checked the way ``resolve`` checks a value: each is converted and checked by its option (a relative path
    against the current folder), and None counts as not given. A name that no declared option has and that is
    close to one the reader reads is an OptionError naming both (a misspelled setting would otherwise fall back
    to its default unseen); other names are left alone, since a caller may hand every reader the same wider
    mapping (SciCode's ``mode`` beside the model's ``model``). Resolved ``Settings`` are
    returned as they are: ``resolve`` checked them."""
    if isinstance(opts, Settings):
        return opts
    known = {o.name: o for cls in views for o in cls.OPTIONS}
    misspelled = {
        name: close[0]
        for name in opts
        if name not in known
        and name not in DECLARED_NAMES
        and (close := difflib.get_close_matches(name, known, n=1, cutoff=0.8))
    }
    if misspelled:
        raise OptionError(
            "unknown setting "
            + ", ".join(f"{name!r} (did you mean {close!r}?)" for name, close in misspelled.items())
            + f": the settings read here are {', '.join(known)}"
        )
    here = Path.cwd()
    return Settings(
        {
            name: given_value(known[name], value, here)
            for name, value in opts.items()
            if name in known and value is not None
        }
    )


def given_value(option: Option, value: Any, base: Path) -> Any:
    """One value a plain-Python caller gives for ``option``, converted and checked as ``convert`` does."""
    if option.kind == "list" and isinstance(value, (list, tuple)):
        value = ",".join(map(str, value))  # already split: the comma-separated form the option reads
    return convert(option, value, f"setting {option.name} ({option.spelling})", base)


def declared_default(option: Option) -> Any:
    """The value ``resolve`` gives an option nothing sets, a relative path taken from the current folder."""
    return _default(option, Path.cwd(), os.environ)


def resolve(options: Iterable[Option], sources: Sources) -> Settings:
    """Every option's value: command line, else environment, else run file, else ini, else default, checked."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for option in options:
        raw, where, origin = pick(option, sources)
        base = sources.rootdir if option.relative_to == "rootdir" else sources.invocation_dir
        if origin == "ini" and sources.ini_dir:
            base = sources.ini_dir
        elif origin.startswith(FILE_ORIGIN) and sources.file_dir:
            base = sources.file_dir
        values[option.name] = (
            convert(option, raw, where, base) if raw is not None else _default(option, base, sources.env)
        )
        origins[option.name] = origin
    return Settings(values, origins)


def pick(option: Option, sources: Sources) -> tuple[Any, str, str]:
    """The raw value that wins, a description of where it came from, and its origin."""
    cli = sources.cli.get(option.name)
    if cli is not None and cli != []:
        shown = option.flag if cli is not False or not option.negatable else option.negative_flag
        return cli, str(shown) if option.shown else option.spelling, "command line"
    if option.env and sources.env.get(option.env, "") != "":
        return sources.env[option.env], f"${option.env}", "environment"
    if option.name in sources.file:
        value, where = sources.file[option.name]
        if value is not None:
            return value, where, where if where.startswith(FILE_ORIGIN) else FILE_ORIGIN.strip()
    if option.ini:
        value = sources.ini.get(option.name)
        if value not in (None, "", []):
            return value, f"ini {option.ini}", "ini"
    return None, "default", "default"


def _default(option: Option, base: Path, env: Mapping[str, str]) -> Any:
    if callable(option.default):  # a default that depends on the user's environment (the per-user cache folder)
        return option.default(env, base)
    if option.default is None:
        return () if option.kind in ("list", "multi") else None
    if option.kind == "path":
        return _path(option.default, base)
    if isinstance(option.default, str) and option.kind not in ("str", "choice"):
        return _typed(option, option.default, base)  # a default written as text, like "8g", gets its type
    return option.default


def convert(option: Option, raw: Any, where: str, base: Path) -> Any:
    """One raw value to its typed value, or an OptionError naming ``where``."""
    try:
        value = _typed(option, raw, base)
        if option.check is not None:
            checked = option.check(value)
            value = value if checked is None else checked
        return value
    except OptionError:
        raise
    except (TypeError, ValueError) as exc:
        raise OptionError(describe(where, raw, str(exc))) from None


def describe(where: str, raw: Any, reason: str) -> str:
    """``--flag must be a positive integer, got 'x'`` or ``--flag 'x' is not valid JSON``."""
    if reason.startswith("must "):
        return f"{where} {reason}, got {raw!r}"
    return f"{where} {raw!r} {reason}"


def _typed(option: Option, raw: Any, base: Path) -> Any:
    kind = option.kind
    if kind == "bool":
        return _bool(raw)
    if kind == "multi":
        items = raw if isinstance(raw, (list, tuple)) else str(raw).splitlines()
        return tuple(str(i).strip() for i in items if str(i).strip())
    text = raw if not isinstance(raw, str) else raw.strip()
    if kind == "str":
        return str(text)
    if kind == "choice":
        if text not in option.choices:
            raise ValueError(f"is not a valid value; valid values: {', '.join(option.choices)}")
        return text
    if kind in ("int", "float"):
        return _number(option, text)
    if kind == "path":
        if str(text) == "":
            raise ValueError("is empty; give a path")
        path = _path(text, base)
        if option.exists == "file" and not path.is_file():
            raise ValueError(f"names no file ({path} is not a file)")
        if option.exists == "dir" and not path.is_dir():
            raise ValueError(f"names no folder ({path} is not a folder)")
        return path
    if kind == "list":
        parts = [p.strip() for p in str(text).split(",")]
        if not any(parts):
            raise ValueError("names nothing; give comma-separated values")
        return tuple(p for p in parts if p)
    if kind == "json":
        try:
            return json.loads(text) if isinstance(text, str) else text
        except json.JSONDecodeError as error:
            raise ValueError(f"is not valid JSON ({error.msg} at column {error.colno})") from None
    if kind == "size":
        return parse_size(str(text))
    raise ValueError(f"unknown kind {kind}")


def _bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError("is not a boolean; write true or false")


def _number(option: Option, text: Any) -> int | float:
    kind = option.kind
    try:
        value = int(str(text)) if kind == "int" else float(text)
    except (TypeError, ValueError):
        value = None
    low, high = option.minimum, option.maximum
    if (
        value is None
        or not math.isfinite(value)
        or (low is not None and (value < low or (option.exclusive_minimum and value == low)))
        or (high is not None and value > high)
    ):
        raise ValueError(f"must be {number_range(option)}")
    return value


def number_range(option: Option) -> str:
    """What a number option accepts, in words: 'a positive integer', 'a number >= 0', ..."""
    noun = "integer" if option.kind == "int" else "number"
    low, high = option.minimum, option.maximum
    if low is not None and high is not None:
        return f"a finite {noun} from {low:g} to {high:g}"
    if low is not None and (low > 0 or (low == 0 and option.exclusive_minimum)):
        text = f"a positive {noun}"
        return text if low <= 1 or option.kind != "int" else f"{text} >= {low:g}"
    if low is not None:
        return f"a finite {noun} {'>' if option.exclusive_minimum else '>='} {low:g}"
    return f"a finite {noun}"


def _path(text: Any, base: Path) -> Path:
    path = Path(str(text)).expanduser()
    return path if path.is_absolute() else Path(base) / path


SIZE_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """``8g``, ``512m``, ``1073741824`` -> bytes."""
    raw = str(text).strip().lower().removesuffix("b")
    try:
        number = float(raw[:-1]) if raw and raw[-1] in SIZE_UNITS else float(raw)
    except ValueError:
        raise ValueError("is not a size; write e.g. 8g or 512m") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError("is not a positive size; write e.g. 8g or 512m")
    return int(number * SIZE_UNITS[raw[-1]]) if raw[-1] in SIZE_UNITS else int(number)


def help_text(option: Option) -> str:
    """The help shown by ``pytest --help`` and for the ini key: one text for both."""
    extra = []
    if option.ini:
        extra.append(f"ini {option.ini}")
    if option.env:
        extra.append(f"env ${option.env}")
    return option.help + (f" [{'; '.join(extra)}]" if extra else "")


def by_name(options: Sequence[Option]) -> dict[str, Option]:
    """Options keyed by name; a name or flag declared twice is a programming error."""
    out: dict[str, Option] = {}
    flags: set[str] = set()
    for option in options:
        if option.name in out or option.flag in flags:
            raise ValueError(f"option {option.flag} ({option.name}) is declared twice")
        out[option.name] = option
        flags.add(option.flag)
    return out


def set_values(entries: Iterable[str], options: Sequence[Option]) -> dict[str, str]:
    """Option name -> raw value of each ``--bench-set NAME=VALUE`` (``NAME`` as a run file writes it; ``-`` for
    ``_`` is accepted); a later entry of the same name wins. A malformed entry or an unknown name is an
    OptionError, an unknown name listing the close ones."""
    known = {o.name: o for o in options}
    out: dict[str, str] = {}
    for entry in entries:
        name, equals, value = str(entry).partition("=")
        name = name.strip().replace("-", "_")
        if not equals or not name:
            raise OptionError(f"{SET_FLAG} {entry!r}: write NAME=VALUE (`python -m pytest_agentbench options`)")
        if name not in known:
            close = difflib.get_close_matches(name, known, n=5, cutoff=0.6)
            hint = f"did you mean {', '.join(close)}?" if close else "python -m pytest_agentbench options lists them"
            raise OptionError(f"{SET_FLAG} {entry!r}: no setting is called {name!r}; {hint}")
        out[name] = value
    return out
