"""A project's faultsim settings, so `faultsim run` needs no arguments in it.

Read, for each setting the command line leaves unset, in this order:

1. the environment: each setting's `FAULTSIM_*` variable (`FAULTSIM_AGENT`,
   `FAULTSIM_SCENARIOS`: paths separated by the OS path separator, ...);
2. `[tool.faultsim]` in the nearest `pyproject.toml` at or above the current directory:

       [tool.faultsim]
       agent = "my_agent:make_agent"
       scenarios = ["tests/scenarios"]     # relative to pyproject.toml
       crash_model = "all"
       crashes = 2

With neither an agent nor scenarios given anywhere (flags, environment, pyproject.toml) and
no `scenarios/` folder here, `faultsim run` and `faultsim list` run the bundled scenarios
(`faultsim/scenarios/` in the wheel) on the bundled reference agent
(`faultsim.reference_agent`), and say so in one line (`bundled`). Otherwise there is no
built-in agent: without `--agent`, `FAULTSIM_AGENT` or `agent =` the command stops with a
one-line error (faultsim's own repository names its reference agent in its pyproject.toml).
Errors name the file (or variable) and the key at fault. The keys, variables and their types
are the table's (faultsim.settings.table: the settings with a `toml` key).

Standard library, errors and the settings table only.
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .table import SETTINGS

# [tool.faultsim]'s keys and their types; each key's variable is its setting's `env`
_PROJECT = {s.toml: s for s in SETTINGS if s.toml}
KEYS = {key: s.type for key, s in _PROJECT.items()}


_EXPECTED = {str: "a string", list: "a list of paths", int: "an integer", float: "seconds"}


class ConfigError(UsageError):
    """A [tool.faultsim] key or FAULTSIM_* variable that cannot work."""


@dataclass(frozen=True)
class Project:
    """The settings found, each with where it came from (for messages)."""

    values: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)
    root: Path | None = None  # the folder of the pyproject.toml read, if any


def find_pyproject(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load(cwd: Path | None = None, environ: dict[str, str] | None = None) -> Project:
    """The project's settings (environment over pyproject.toml)."""
    cwd = Path.cwd() if cwd is None else cwd
    environ = dict(os.environ) if environ is None else environ
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    root = None
    path = find_pyproject(cwd)
    if path is not None:
        try:
            with open(path, "rb") as f:
                table = tomllib.load(f).get("tool", {}).get("faultsim")
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        if table is not None:
            root = path.parent
            if not isinstance(table, dict):
                raise ConfigError(f"{path}: [tool.faultsim] must be a table")
            for key, value in table.items():
                where = f"{_rel(path)}: [tool.faultsim] {key}"
                values[key] = _checked(key, value, where)
                origin[key] = where
            if "scenarios" in values:  # relative to the file that names them
                values["scenarios"] = [_rel(root / s) for s in values["scenarios"]]
    for key, row in _PROJECT.items():
        name = row.env
        if name and environ.get(name):
            raw = environ[name]
            value: Any = raw.split(os.pathsep) if key == "scenarios" else raw
            values[key] = _checked(key, value, name, from_text=True)
            origin[key] = name
    return Project(values, origin, root)


def bundled() -> tuple[Path, str] | None:
    """The bundled scenarios folder and reference agent spec, if this faultsim has them."""
    import importlib.util

    here = Path(__file__).resolve().parent.parent  # faultsim/
    # the wheel's faultsim/scenarios/, else a source checkout's scenarios/ beside faultsim/
    folder = next((f for f in (here / "scenarios", here.parent / "scenarios")
                   if f.is_dir()), None)
    if folder is None:
        return None
    try:  # installed (wheel or editable): faultsim's namespace, never a top-level name
        found = importlib.util.find_spec("faultsim.reference_agent") is not None
    except ImportError:
        found = False
    if found:
        return folder, "faultsim.reference_agent"
    if (here.parent / "reference_agent" / "__init__.py").is_file():  # on PYTHONPATH
        return folder, "reference_agent"
    return None


def _checked(key: str, value: Any, where: str, from_text: bool = False) -> Any:
    kind = KEYS.get(key)
    if kind is None:
        raise ConfigError(f"{where}: unknown setting; expected one of {', '.join(KEYS)}")
    if from_text and kind in (int, float):
        try:
            value = kind(value)
        except ValueError:
            raise ConfigError(f"{where}={value!r}: expected a number") from None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind is str and isinstance(value, int) and not isinstance(value, bool) \
            and key == "seed":
        value = str(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ConfigError(f"{where} = {value!r}: expected {_EXPECTED[kind]}")
    row = _PROJECT[key]
    if row.check is not None and not row.option:  # an exploration's: ExploreOptions checks
        try:
            row.check(value)
        except ValueError:
            raise ConfigError(f"{where} = {value!r}: expected {row.expected}") from None
    if kind is list and not all(isinstance(s, str) and s for s in value):
        raise ConfigError(f"{where} = {value!r}: expected a list of paths")
    return value


def _rel(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel
