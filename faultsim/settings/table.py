"""Every setting of faultsim, each declared once: `SETTINGS`, one `Setting` a row (its name,
type, built-in default, help, check) naming where a user may give it: a `faultsim` flag, a
`FAULTSIM_*` variable, a `[tool.faultsim]` key, a pytest option, a pytest ini key, a key
of the `faultsim` marker, a field of `ExploreOptions`. The front ends are built from it
(`cli/parser.py`'s flags, `config.KEYS`, the plugin's options, ini keys and marker keys,
`ExploreOptions`' defaults and checks), and tests/test_settings_table.py checks the docs'
tables and the parser against it. (The one-table way of `scenario.SECTIONS`; hypothesis
declares its settings once the same way, in `_settings.py`.)

Also here, the words every front end shares about a setting: the choices and what a check
expects (a front end names the setting its own way around them), and the small rules the
checks use (`crash_models`, `parse_shard`, `check_shard`).

The table's order is the order `[tool.faultsim]`'s keys, the marker's keys and the pytest
options are listed in; `faultsim run --help` lists its flags in the parser's own order.
Standard library, errors and the core only: the plugin imports this at load time."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..core.classes import COVERAGES, PER_CLASS
from ..core.crashmodel import CRASH_MODELS, MODEL_NAMES, PAUSE

MODES = ("auto", "in-process", "subprocess")
# what --crash-model, --faultsim-crash-model and the marker take: a model, or both
CRASH_MODEL_CHOICES = (*CRASH_MODELS, PAUSE, "all")
CRASH_MODEL_EXPECTED = "process, power, pause or all"
SHARD_EXPECTED = "I/N with 1 <= I <= N, for example 2/4"
# the coverage settings, for every front end (the CLI, [tool.faultsim], the scenario's
# [fault_profile], the pytest option and ini key): the choices are faultsim.core.classes'
COVERAGE_EXPECTED = " or ".join(COVERAGES)
PER_CLASS_EXPECTED = "an integer >= 0"


@dataclass(frozen=True)
class Setting:
    """One setting and every place it is given. `check(value)` returns the value as an
    exploration keeps it, or raises ValueError (the front end's message then says it
    expected `expected`); None: any value of `type`."""

    name: str  # ExploreOptions' field and explore()'s keyword, where it is one
    type: type  # as [tool.faultsim] and the command line take it
    default: Any  # the built-in value when nothing sets it (None: unset)
    help: str  # `faultsim run --help` (or the one front end that has it)
    check: Callable[[Any], Any] | None = None
    expected: str = ""
    # a scenario's [fault_profile] decides it when nothing else does (default: its own)
    profile: bool = False
    shown: str | None = None  # the default as the docs say it, where not the value itself
    cli: str | None = None  # the `faultsim` flag (without dashes: a positional argument)
    metavar: str | None = None  # the flag's (not shown where it has choices) and option's
    choices: tuple[str, ...] | None = None
    nargs: str | None = None
    const: Any = None
    env: str | None = None  # the FAULTSIM_* variable
    toml: str | None = None  # the [tool.faultsim] key
    option: bool = False  # a field of ExploreOptions
    pytest: str | None = None  # the pytest option
    pytest_help: str = ""
    ini: str | None = None  # the pytest ini key (a project's default for the option)
    ini_help: str = ""  # what the ini key holds, for `pytest --help`
    marker: str | None = None  # the key of @pytest.mark.faultsim

    def default_text(self) -> str:
        """The default as every docs table shows it."""
        if self.shown is not None:
            text = self.shown
        elif isinstance(self.default, float):
            text = f"`{self.default:g}`"
        elif isinstance(self.default, bool):
            text = "on" if self.default else "off"
        else:
            text = f"`{self.default}`"
        return f"the scenario's fault profile, else {text}" if self.profile else text


# -- the checks ----------------------------------------------------------------------------
def crash_models(crash_model: str | Iterable[str]) -> list[str]:
    """The crash models "process", "power", "pause", "all" (process and power) or a list
    of them name."""
    if isinstance(crash_model, str):
        names = list(CRASH_MODELS) if crash_model == "all" else [crash_model]
    else:
        names = list(crash_model)
    for name in names:
        if name not in MODEL_NAMES:
            raise ValueError(f"unknown crash model {name!r}; expected {CRASH_MODEL_EXPECTED}")
    return names


def parse_shard(text: str) -> tuple[int, int]:
    """`"2/4"` -> (2, 4), as every front end takes a shard; a ValueError otherwise (the
    front end names its own flag, expecting SHARD_EXPECTED)."""
    i, sep, n = text.partition("/")
    i, n = i.strip(), n.strip()
    if sep and all(part.isascii() and part.isdigit() for part in (i, n)) \
            and 1 <= int(i) <= int(n):
        return int(i), int(n)
    raise ValueError(f"{text!r}: expected {SHARD_EXPECTED}")


def check_shard(shard: tuple[int, int] | None) -> tuple[int, int] | None:
    if shard is not None and not 1 <= shard[0] <= shard[1]:
        raise ValueError(f"shard {shard[0]}/{shard[1]}: expected 1 <= i <= n")
    return shard


def _integer(least: int) -> Callable[[Any], Any]:
    """None, or an int (not a bool) >= least."""
    def check(value: Any) -> Any:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < least):
            raise ValueError(value)
        return value
    return check


def _crash_model(value: Any) -> Any:
    return None if value is None else tuple(crash_models(value))


def _timeout(value: Any) -> Any:
    if value is not None and value != "auto" and (
            not isinstance(value, (int, float)) or value <= 0):
        raise ValueError(value)
    return value


def _workers(value: Any) -> Any:  # a bool passes, as it always has
    if value is not None and (not isinstance(value, int) or value < 0):
        raise ValueError(value)
    return value


def _shard(value: Any) -> Any:
    try:
        return None if value is None else check_shard(tuple(value))
    except TypeError:
        raise ValueError(value) from None


def _search(value: Any) -> Any:  # with crashes >= 2: ExploreOptions checks the pair
    if value is not None and (not isinstance(value, int) or value < 1):
        raise ValueError(value)
    return value


def _seconds(least: float, strict: bool = False) -> Callable[[Any], Any]:
    """None, or seconds over `least` (strict) or at least it (NaN is neither)."""
    def check(value: Any) -> Any:
        if value is not None and not (value > least if strict else value >= least):
            raise ValueError(value)
        return value
    return check


def _search_seconds(value: Any) -> Any:  # NaN passes, as it always has
    if value is not None and value < 0:
        raise ValueError(value)
    return value


def _one_of(choices: tuple[str, ...], none: bool = True) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if (value is not None or not none) and value not in choices:
            raise ValueError(value)
        return value
    return check


SEARCH_EXPECTED = ("a positive number of examples, with crashes >= 2 (single crashes are "
                   "always explored exhaustively)")

SETTINGS: tuple[Setting, ...] = (
    Setting("scenario", str, None, "the scenario file (relative: next to the test file, "
            "then under the rootdir, then in the current directory)", shown="none",
            marker="scenario"),
    Setting("agent", str, None,
            "the agent factory: MODULE[:ATTR] or FILE.py[:ATTR], attribute make_agent by "
            "default (default: [tool.faultsim] agent; with no agent or scenarios named "
            "anywhere, the bundled reference agent on the bundled scenarios); "
            "claude-agent-sdk:FILE.py:ATTR for a Claude Agent SDK agent's coroutine. Typed "
            "here, it runs a scenario with a [langgraph] table too; a default one leaves "
            "that to the table's graph",
            shown="none",
            cli="--agent", env="FAULTSIM_AGENT", toml="agent", marker="agent"),
    Setting("scenarios", list, ["scenarios"],
            "scenario files or directories (default: [tool.faultsim] scenarios in "
            "pyproject.toml, else scenarios/, else the bundled scenarios)",
            shown="`scenarios/`, else the bundled scenarios", cli="scenarios", nargs="*",
            env="FAULTSIM_SCENARIOS", toml="scenarios"),
    Setting("crash_model", str, "process",
            "what a crash leaves on disk: a killed process, power loss, or both (all); or "
            "pause, a worker frozen and woken after its replacement started (default: the "
            "scenario's fault profile, else process)",
            check=_crash_model, expected=CRASH_MODEL_EXPECTED, profile=True,
            cli="--crash-model", metavar="MODEL", choices=CRASH_MODEL_CHOICES,
            env="FAULTSIM_CRASH_MODEL", toml="crash_model", option=True,
            pytest="--faultsim-crash-model",
            pytest_help="process (a SIGKILL: what was written survives), power (unsynced "
                        "writes may be lost), all (both) or pause (frozen, then woken after "
                        "its replacement started) (default: the marker's, else process)",
            ini="faultsim_crash_model", ini_help=CRASH_MODEL_EXPECTED, marker="crash_model"),
    Setting("crashes", int, 2,
            "the most crashes in one schedule (default: the scenario's fault profile, else "
            "2). One and two are explored exhaustively (the second crash at every kill "
            "point of the resumed run); more are searched with hypothesis",
            check=_integer(1), expected="an integer >= 1", profile=True,
            cli="--crashes", metavar="N", env="FAULTSIM_CRASHES", toml="crashes",
            option=True, pytest="--faultsim-crashes",
            pytest_help="crashes per schedule: 1, 2 (every pair, the default) or more "
                        "(longer schedules searched with hypothesis, in whole-scenario "
                        "tests)",
            ini="faultsim_crashes", ini_help="crashes per schedule", marker="crashes"),
    Setting("seed", str, "0",
            "seed for the agent's uuid/random/tempfile names and the search (default: 0); "
            "the same seed gives the same report",
            check=str, cli="--seed", env="FAULTSIM_SEED", toml="seed", option=True,
            metavar="SEED", pytest="--faultsim-seed",
            pytest_help="seed of the agent's uuid/random/temp names and of the search "
                        "(default: the marker's, else 0); the same seed, the same verdicts",
            ini="faultsim_seed", ini_help="the seed", marker="seed"),
    # seconds, None (no limit), or "auto": derived from the clean runs
    # (pipeline.incarnation.resumed_limit: 10x the slower clean incarnation, at least 3 s)
    Setting("timeout", float, "auto",
            "seconds an incarnation may run before it counts as hung (default: derived from "
            "the clean runs, 10x the slower clean incarnation and at least 3 s)",
            check=_timeout, expected="seconds > 0, None or \"auto\"",
            shown="derived from the clean runs", cli="--timeout", env="FAULTSIM_TIMEOUT",
            toml="timeout", option=True, marker="timeout"),
    Setting("categories", list, None, "only the kill points of these categories",
            shown="every category", marker="categories"),
    Setting("kill_points", bool, False, "one test item per kill point (faultsim.parametrize)",
            marker="kill_points"),
    Setting("workers", int, None,
            "crash runs at once (default: one per core; 0 = one after another in this "
            "process)",
            check=_workers, expected="an integer >= 0", shown="one per core",
            cli="--workers", env="FAULTSIM_WORKERS", toml="workers", option=True),
    Setting("mode", str, "auto",
            "in-process: the agent runs under faultsim's file-system model (fast; process "
            "and power crashes); subprocess: each incarnation is a real process on a real "
            "directory, killed by SIGKILL (SQLite, Redis, module-level state; process "
            "crashes). auto (default): subprocess for scenarios whose [store] is sqlite or "
            "redis",
            check=_one_of(MODES, none=False), expected=", ".join(MODES), cli="--mode",
            choices=MODES, env="FAULTSIM_MODE", toml="mode", option=True, marker="mode"),
    Setting("progress_seconds", float, 10.0,
            "seconds between progress lines when stderr is not a terminal (0: none)",
            check=_seconds(0), expected="seconds >= 0 (0: no progress lines)",
            env="FAULTSIM_PROGRESS_SECONDS", toml="progress_seconds"),
    Setting("coverage", str, "exhaustive",
            "exhaustive: every kill point; representative: each kill-point class (its "
            "category, event, tool, write size and cut, without the step) at its first and "
            "last occurrence and --per-class seeded others, and every kill point of the "
            "first and last step; the report says how many were not crashed (default: the "
            "scenario's fault profile, else exhaustive)",
            check=_one_of(COVERAGES), expected=COVERAGE_EXPECTED, profile=True,
            cli="--coverage", metavar="COVERAGE", choices=COVERAGES,
            env="FAULTSIM_COVERAGE", toml="coverage", option=True,
            pytest="--faultsim-coverage",
            pytest_help="whole-scenario tests: exhaustive (every kill point) or "
                        "representative (each kill-point class at its first, last and "
                        "--faultsim-per-class seeded occurrences, every kill point of the "
                        "first and last step; the rest not crashed, and said) (default: "
                        "the scenario's fault profile, else exhaustive)",
            ini="faultsim_coverage", ini_help=COVERAGE_EXPECTED),
    Setting("per_class", int, PER_CLASS,
            f"representative coverage: seeded kill points judged per class beside its "
            f"first and last (default: the scenario's fault profile, else {PER_CLASS})",
            check=_integer(0), expected=PER_CLASS_EXPECTED, profile=True,
            cli="--per-class", metavar="K", env="FAULTSIM_PER_CLASS", toml="per_class",
            option=True, pytest="--faultsim-per-class",
            pytest_help=f"representative coverage: seeded kill points judged per class "
                        f"beside its first and last (default: the scenario's, else "
                        f"{PER_CLASS})",
            ini="faultsim_per_class", ini_help="seeded kill points per class "
                                               "(representative)"),
    # wall seconds the single-crash sweep may be forecast to take (pipeline/forecast.py):
    # over it, the run stops before any crash run and says which coverage fits
    Setting("budget", float, None,
            "stop before any crash run when the single-crash sweep's forecast (printed on "
            "the plan line) is over SECONDS of wall time, and say which coverage fits "
            "(default: no limit)",
            check=_seconds(0, strict=True), expected="seconds > 0", shown="no limit",
            cli="--budget", metavar="SECONDS", env="FAULTSIM_BUDGET", toml="budget",
            option=True),
    # not `budget`: the seconds a whole pytest session may spend, not one sweep's forecast
    Setting("session_budget", float, None,
            "seconds this session (each xdist worker) may spend exploring: kill-point "
            "items past it are skipped and counted in the summary",
            check=_seconds(0, strict=True), expected="seconds > 0", shown="no limit",
            metavar="SECONDS", pytest="--faultsim-budget",
            pytest_help="seconds this session (each xdist worker) may spend exploring: "
                        "kill-point items past it are skipped and counted in the summary",
            ini="faultsim_budget", ini_help="seconds each session may spend exploring"),
    Setting("shard", str, None,
            "explore shard I of N, for CI matrices: every shard crashes at every kill point "
            "and resumes the distinct crash states a stable hash gives it (an agent run as "
            "a command or a Claude Agent SDK agent: every Nth kill point); the N shards "
            "partition them, `faultsim report merge` joins their --json reports; the "
            "search runs in shard 1",
            check=_shard, expected="(i, n) with 1 <= i <= n", shown="the whole run",
            cli="--shard", metavar="I/N", option=True, pytest="--faultsim-shard",
            pytest_help="run shard I of N, for CI matrices: kill-point items split by "
                        "position, whole-scenario tests by crash state (as faultsim run "
                        "--shard); the N shards partition them",
            ini="faultsim_shard", ini_help="I/N"),
    Setting("search", int, None,
            "hypothesis examples per crash model for schedules beyond the exhaustive sweep "
            "(default: 200 when --crashes > 2); with --crashes 2 it searches the pairs "
            "instead of enumerating them",
            check=_search, expected=SEARCH_EXPECTED, shown="200 when crashes > 2",
            cli="--search", metavar="EXAMPLES", option=True),
    Setting("search_seconds", float, None,
            "stop the search after S seconds (a failure found is still shrunk)",
            check=_search_seconds, expected="seconds >= 0", shown="no limit",
            cli="--search-seconds", metavar="S", option=True),
    # cut each resumed run past its `horizon`-th model request after recovery, at its first
    # request equal to one the clean run made, and take the rest from the clean run's
    # course (faultsim.inprocess.convergence, "The horizon"); None: every run to its end
    Setting("horizon", int, None,
            "cut each resumed run past its H-th model request after recovery, at its first "
            "request equal to one the clean run made, and take the rest of its course from "
            "the clean run's: what shows later is not seen "
            "(docs/explanation/guarantees.md; default: every resumed run to its end)",
            check=_integer(0), expected="an integer >= 0 (model requests)",
            shown="every resumed run to its end", cli="--horizon", metavar="H",
            option=True),
    Setting("ray", str, None,
            "run the shards on Ray (pip install 'faultsim[ray]'): one task per shard "
            "(--shard I/N in a fresh faultsim process), the reports merged into the whole "
            "run's; ADDRESS (HOST:PORT, ray://HOST:PORT or auto) names a running cluster, "
            "none starts a local one of --workers CPUs (default: one per core) for this "
            "run only; give it after the scenario files (docs/how-to/ray.md)",
            shown="no Ray", cli="--ray", metavar="ADDRESS", nargs="?", const="",
            pytest="--faultsim-ray",
            pytest_help="whole-scenario tests: run the sweep's shards as Ray tasks and merge "
                        "their reports (as faultsim run --ray); ADDRESS (HOST:PORT, "
                        "ray://HOST:PORT or auto) names a running cluster, none starts a "
                        "local one per test; the agent must be importable by name "
                        "(pip install 'faultsim[ray]')"),
    Setting("ray_shards", int, None,
            "with --ray: the number of shards (default: the cluster's CPUs)",
            check=_integer(1), expected="an integer >= 1", shown="the cluster's CPUs",
            cli="--ray-shards", metavar="N", pytest="--faultsim-ray-shards",
            pytest_help="with --faultsim-ray: the number of shards (default: the "
                        "cluster's CPUs)"),
    Setting("html", str, None,
            "write the report as one self-contained HTML page: the crash map, each "
            "counterexample, the run's facts",
            shown="none", cli="--html", metavar="FILE", pytest="--faultsim-html",
            pytest_help="write one HTML report for the session: every faultsim test's "
                        "crash map and counterexamples (as faultsim run --html)"),
    Setting("baseline", str, None,
            "compare this run with a saved --json report, crash state by crash state, and "
            "exit 1 only when this run adds failing crash states",
            shown="none", cli="--baseline", metavar="REPORT", pytest="--faultsim-baseline",
            pytest_help="a JSON report of an earlier run (faultsim run --json, e.g. the main "
                        "branch's): a faultsim test then fails only for crash states this "
                        "run adds failing, and names them (as faultsim run --baseline)"),
    Setting("record", bool, False,
            "re-record checkpoint-format corpora instead of checking them",
            pytest="--faultsim-record",
            pytest_help="re-record checkpoint-format corpora instead of checking them "
                        "(like a snapshot tool's update flag)"),
)

BY_NAME = {s.name: s for s in SETTINGS}


def setting(name: str) -> Setting:
    return BY_NAME[name]


# -- the docs' tables ------------------------------------------------------------------------
def project_table() -> str:
    """docs/reference/cli.md's table of the settings a project sets (FAULTSIM_*,
    [tool.faultsim]); tests/test_settings_table.py checks the page holds exactly this."""
    rows = ["| flag | environment | `[tool.faultsim]` | default |", "|---|---|---|---|"]
    for s in SETTINGS:
        if s.toml or s.env:
            flag = "—" if s.cli is None else f"`{s.cli}`" if s.cli.startswith("-") \
                else f"the {s.cli} named"
            rows.append(f"| {flag} | `{s.env}` | `{s.toml}` | {s.default_text()} |")
    return "\n".join(rows) + "\n"


def marker_table() -> str:
    """docs/reference/pytest-plugin.md's table of the marker's keys."""
    rows = ["| key | default |", "|---|---|"]
    rows += [f"| `{s.marker}` | {s.default_text()} |" for s in SETTINGS if s.marker]
    return "\n".join(rows) + "\n"
