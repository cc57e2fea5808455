"""The exception tree: one base, three kinds, and the CLI and the plugin telling them apart
from one list (faultsim/errors.py)."""
from __future__ import annotations

import pytest

from faultsim import cli, errors
from faultsim.cli import parser
from faultsim.agent import FactoryError
from faultsim.settings.loading import AgentLoadError
from faultsim.pytest.fixture import known_errors
from faultsim.pytest.settings import FaultsimUsageError
from faultsim.settings.config import ConfigError
from faultsim.formats.corpus import CorpusError
from faultsim.settings.options import OptionError
from faultsim.real.explore import SubprocessModeError
from faultsim.real.pool import ServerFailed
from faultsim.scenario import ScenarioError
from faultsim.schedule import NoSuchKillPoint
from faultsim.token import TokenError
from faultsim.real.redis_server import RedisUnavailable

KINDS = {
    errors.UsageError: [cli.UsageError, FaultsimUsageError, ScenarioError, AgentLoadError,
                        TokenError, CorpusError, errors.StoreNeedsSubprocess,
                        SubprocessModeError, NoSuchKillPoint, OptionError, ConfigError,
                        errors.ScriptMismatch, errors.UnreachedService,
                        errors.NoDurableState, FactoryError],
    errors.AgentFinding: [errors.NonDeterminismError, errors.AgentFailedCleanly,
                          errors.KillDidNotLand, errors.UnroutedEffect,
                          errors.UncontainedProcess],
    errors.HarnessError: [errors.WorkerDied, ServerFailed, RedisUnavailable,
                          errors.StopNotPlaced],
}


def test_every_error_has_one_base_and_keeps_its_standard_base():
    for kind, classes in KINDS.items():
        assert issubclass(kind, errors.FaultsimError)
        for cls in classes:
            assert issubclass(cls, kind), cls
    # existing `except ValueError` / `except LookupError` clauses still catch these
    assert issubclass(ScenarioError, ValueError) and issubclass(NoSuchKillPoint, LookupError)
    assert issubclass(RedisUnavailable, RuntimeError)


def test_the_plugin_and_the_cli_share_the_known_errors():
    assert known_errors() == errors.KNOWN == (errors.UsageError, errors.AgentFinding)


class _Scenario:
    path = "s.toml"


@pytest.mark.parametrize("exc, code", [
    (errors.StoreNeedsSubprocess("needs subprocess mode"), cli.EXIT_USAGE),
    (NoSuchKillPoint("no k9"), cli.EXIT_USAGE),
    (errors.KillDidNotLand("k3 never came"), cli.EXIT_VIOLATION),
    (errors.AgentFailedCleanly(_Scenario(), "boom"), cli.EXIT_VIOLATION),
    (ServerFailed("server died"), cli.EXIT_ERROR),
    (errors.WorkerDied("worker died"), cli.EXIT_ERROR),
    (errors.StopNotPlaced("k3: the SIGSTOP came late"), cli.EXIT_ERROR),
])
def test_the_cli_exit_code_follows_the_kind(monkeypatch, capsys, exc, code):
    def raising(ns):
        raise exc

    monkeypatch.setattr(parser, "cmd_list", raising)  # what `list` runs
    assert cli.main(["list", "tests/data/tiny.toml"]) == code
    err = capsys.readouterr().err
    assert str(exc) in err and len(err.strip().splitlines()) == 1
