"""Each setting is declared once, in faultsim/settings/table.py, and every place a user gives
it is made from that row: the `faultsim` parser's setting flags (every other flag is a verb
argument listed in parser.VERB_ARGS), FAULTSIM_* and [tool.faultsim] (config.KEYS), the
pytest options, ini keys and marker keys, ExploreOptions' defaults and checks. The docs'
tables of settings are checked against it: two generated (cli.md's project settings, the
marker's keys in pytest-plugin.md), one hand-written beside its prose (pytest-plugin.md's
options: each row's ini key and default). Each check is shown to catch what it exists for."""
from __future__ import annotations

import argparse
import dataclasses
import math
import re

import pytest

from conftest import ROOT
from faultsim.cli import build_parser
from faultsim.cli.parser import VERB_ARGS
from faultsim.settings import config
from faultsim.settings.options import ExploreOptions, OptionError
from faultsim.settings.table import BY_NAME, SETTINGS, marker_table, project_table

CLI_PAGE = (ROOT / "docs/reference/cli.md").read_text()
PLUGIN_PAGE = (ROOT / "docs/reference/pytest-plugin.md").read_text()


# -- the docs ------------------------------------------------------------------------------
def _generated(page: str, name: str) -> str:
    """The table under `<!-- generated: NAME -->`, up to the first line that is no row."""
    head = f"<!-- generated: {name} -->\n"
    assert page.count(head) == 1, f"{head.strip()} should be on the page once"
    lines = page.split(head)[1].splitlines(keepends=True)
    return "".join(line for line in _rows(lines))


def _rows(lines):
    for line in lines:
        if not line.startswith("|"):
            return
        yield line


def test_cli_reference_holds_the_project_settings_table():
    assert _generated(CLI_PAGE, "faultsim.settings.table.project_table()") == project_table()


def test_plugin_reference_holds_the_marker_table():
    assert _generated(PLUGIN_PAGE, "faultsim.settings.table.marker_table()") == marker_table()


def test_a_setting_changed_in_the_table_fails_the_generated_docs_check():
    changed = dataclasses.replace(BY_NAME["seed"], default="7")
    table = project_table().replace(BY_NAME["seed"].default_text(), changed.default_text())
    assert table != project_table()
    assert _generated(CLI_PAGE, "faultsim.settings.table.project_table()") != table


def _option_rows(page: str) -> dict[str, list[str]]:
    """pytest-plugin.md's options table: option -> [ini key, default, meaning], in order."""
    head = "| option | ini key | default | meaning |\n"
    assert page.count(head) == 1
    rows = {}
    for line in list(_rows(page.split(head)[1].splitlines(keepends=True)))[1:]:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        option = re.match(r"`(--faultsim-[a-z-]+)", cells[0]).group(1)
        rows[option] = cells[1:]
    return rows


def _option_problems(page: str) -> list[str]:
    rows = _option_rows(page)
    wanted = [s for s in SETTINGS if s.pytest]
    problems = [] if list(rows) == [s.pytest for s in wanted] else [
        f"options {list(rows)}, the table's {[s.pytest for s in wanted]}"]
    for s in wanted:
        ini, default, _ = rows.get(s.pytest, ["?", "?", ""])
        if ini != (f"`{s.ini}`" if s.ini else "—"):
            problems.append(f"{s.pytest}: ini key {ini}, the table's {s.ini}")
        if default != s.default_text():
            problems.append(f"{s.pytest}: default {default}, the table's {s.default_text()}")
    return problems


def test_plugin_reference_options_have_the_tables_ini_keys_and_defaults():
    assert not _option_problems(PLUGIN_PAGE)


def test_the_options_check_catches_a_wrong_default_a_wrong_ini_key_and_a_missing_row():
    row = "| `--faultsim-crashes N` | `faultsim_crashes` | the scenario's fault profile, else `2` |"
    assert row in PLUGIN_PAGE
    wrong = PLUGIN_PAGE.replace(row, row.replace("else `2`", "else `1`"))
    assert _option_problems(wrong) == ["--faultsim-crashes: default the scenario's fault "
                                       "profile, else `1`, the table's the scenario's fault "
                                       "profile, else `2`"]
    wrong = PLUGIN_PAGE.replace(row, row.replace("`faultsim_crashes`", "—"))
    assert _option_problems(wrong) == ["--faultsim-crashes: ini key —, the table's "
                                       "faultsim_crashes"]
    line = next(line for line in PLUGIN_PAGE.splitlines(keepends=True) if line.startswith(row))
    assert _option_problems(PLUGIN_PAGE.replace(line, ""))


# -- the parser ----------------------------------------------------------------------------
def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, path + (name,))


def _flag_problems(parser: argparse.ArgumentParser) -> list[str]:
    """Every flag either made from its setting's row (tagged by parser.flag) or a verb
    argument its command lists in VERB_ARGS; no VERB_ARGS entry stale."""
    problems, seen = [], set()
    for path, sub in _commands(parser):
        for action in sub._actions:
            name = getattr(action, "setting", None)
            if name is not None:
                s = BY_NAME[name]
                if s.cli not in action.option_strings and s.cli != action.dest:
                    problems.append(f"{path} {action.option_strings}: not {s.cli}")
                continue
            for option in action.option_strings:
                if option in ("-h", "--help"):
                    continue
                seen.add((path, option))
                if option not in VERB_ARGS.get(path, ()):
                    problems.append(f"faultsim {' '.join(path)} {option}: neither a setting "
                                    "of faultsim.settings.table nor in parser.VERB_ARGS")
    problems += [f"VERB_ARGS {path} {option}: no such flag" for path, options in
                 VERB_ARGS.items() for option in options if (path, option) not in seen]
    return problems


def test_every_flag_is_a_setting_of_the_table_or_a_verb_argument():
    assert not _flag_problems(build_parser())


def test_the_flag_check_catches_a_flag_added_by_hand():
    parser = build_parser()
    run = dict(_commands(parser))[("run",)]
    run.add_argument("--crash-limit", type=int)
    assert _flag_problems(parser) == ["faultsim run --crash-limit: neither a setting of "
                                      "faultsim.settings.table nor in parser.VERB_ARGS"]


def test_every_setting_with_a_flag_is_a_flag_of_run_built_from_its_row():
    run = dict(_commands(build_parser()))[("run",)]
    built = {a.setting: a for a in run._actions if getattr(a, "setting", None)}
    assert set(built) == {s.name for s in SETTINGS if s.cli}
    for name, action in built.items():
        s = BY_NAME[name]
        assert action.help == s.help, name  # run's help is the table's, word for word
        assert action.default is None  # unset: the project's settings fill it
        assert action.type is (s.type if s.type in (int, float) else None), name
        assert tuple(action.choices or ()) == (s.choices or ()), name


# -- the project's settings, the plugin, ExploreOptions -------------------------------------
def test_tool_faultsim_keys_and_variables_are_the_tables():
    project = [s for s in SETTINGS if s.toml]
    assert config.KEYS == {s.toml: s.type for s in project}
    assert [s.env for s in SETTINGS if s.env] == [f"FAULTSIM_{s.toml.upper()}" for s in project]


def test_a_variable_of_the_table_is_read(tmp_path):
    got = config.load(tmp_path, {"FAULTSIM_PER_CLASS": "5", "FAULTSIM_PROGRESS_SECONDS": "0"})
    assert got.values == {"per_class": 5, "progress_seconds": 0.0}
    with pytest.raises(config.ConfigError, match="FAULTSIM_PROGRESS_SECONDS = -1.0: expected "
                       "seconds >= 0"):
        config.load(tmp_path, {"FAULTSIM_PROGRESS_SECONDS": "-1"})


class _Recorder:
    """What pytest_addoption registers, without a pytest session."""

    def __init__(self):
        self.options, self.ini = {}, {}

    def getgroup(self, *args):
        return self

    def addoption(self, name, **kw):
        self.options[name] = kw

    def addini(self, name, help, default=None):
        self.ini[name] = help


def test_the_plugins_options_and_ini_keys_are_the_tables():
    from faultsim.pytest import plugin

    got = _Recorder()
    plugin.pytest_addoption(got)
    assert list(got.options) == [s.pytest for s in SETTINGS if s.pytest]
    assert list(got.ini) == [s.ini for s in SETTINGS if s.ini]
    for s in SETTINGS:
        if s.pytest:
            assert got.options[s.pytest]["help"] == s.pytest_help
            assert got.options[s.pytest].get("type") in ((s.type,) if s.type in (int, float)
                                                         else (None,))
        if s.ini:
            assert got.ini[s.ini] == f"default for {s.pytest}: {s.ini_help}"


def test_the_markers_keys_and_defaults_are_the_tables():
    from faultsim.pytest import settings

    assert settings._MARKER_KEYS == tuple(s.marker for s in SETTINGS if s.marker)
    assert settings.DEFAULTS["crash_model"] == "process" and settings.DEFAULTS["crashes"] == 2
    assert settings.PROJECT_KEYS == {"faultsim_seed": "seed",
                                     "faultsim_crash_model": "crash_model",
                                     "faultsim_crashes": "crashes",
                                     "faultsim_coverage": "coverage",
                                     "faultsim_per_class": "per_class"}


def test_explore_options_fields_take_the_tables_defaults():
    fields = {f.name: f for f in dataclasses.fields(ExploreOptions)}
    options = {s.name: s for s in SETTINGS if s.option}
    assert set(fields) - set(options) == {"only", "database", "equivalences", "convergence"}
    for name, s in options.items():
        assert fields[name].default == (None if s.profile else s.default), name


def test_the_progress_lines_default_is_the_tables():
    from faultsim.cli.console import EVERY

    assert EVERY == BY_NAME["progress_seconds"].default


# each check: a value it keeps and one it refuses (with its own words)
GOOD_BAD = {"crash_model": ("all", "fire"), "crashes": (1, 0), "seed": (7, None),
            "timeout": (0.5, 0), "workers": (0, -1), "mode": ("subprocess", "fast"),
            "progress_seconds": (0, -1.0), "coverage": ("representative", "most"),
            "per_class": (0, True), "budget": (1.0, 0), "session_budget": (1.0, math.nan),
            "shard": ((2, 4), (5, 4)), "search": (10, 0), "search_seconds": (0, -1),
            "horizon": (0, -1), "ray_shards": (1, 0)}


def test_every_check_is_proven_both_ways():
    checked = {s.name for s in SETTINGS if s.check is not None}
    assert checked == set(GOOD_BAD)
    for name, (good, bad) in GOOD_BAD.items():
        s = BY_NAME[name]
        assert s.expected or name == "seed", name
        s.check(good)
        if name == "seed":  # any seed works: kept as text
            assert s.check(bad) == "None"
            continue
        with pytest.raises(ValueError):
            s.check(bad)


def test_explore_options_words_a_refusal_with_the_tables_expected():
    for name, (_, bad) in GOOD_BAD.items():
        s = BY_NAME[name]
        if not s.option or name == "seed":
            continue
        with pytest.raises(OptionError) as err:
            ExploreOptions(**{name: bad})
        assert str(err.value) == f"{name}={bad!r}: expected {s.expected}"


def test_explore_keywords_default_as_the_table_says():
    """faultsim.explore() takes the exploration settings as keywords: each defaults as its
    ExploreOptions field, so as the table (explore_subprocess keeps its own defaults: one
    worker, single crashes of the process model)."""
    import inspect

    from faultsim import explore

    fields = {f.name: f.default for f in dataclasses.fields(ExploreOptions)}
    keywords = {n: p.default for n, p in inspect.signature(explore).parameters.items()
                if n in fields}
    assert {"crash_model", "crashes", "seed", "timeout", "workers", "coverage"} <= set(keywords)
    assert keywords == {n: fields[n] for n in keywords}

