"""`faultsim scenario schema`, `from-messages` and `record`: the scenario format."""
from __future__ import annotations

import argparse
import sys

from .exits import EXIT_OK


def cmd_scenario_schema(ns: argparse.Namespace) -> int:
    from ..scenario.schema import dumps

    sys.stdout.write(dumps())
    return EXIT_OK


def cmd_scenario_from_messages(ns: argparse.Namespace) -> int:
    from ..recorder.commands import from_messages

    return from_messages(ns)


def cmd_scenario_record(ns: argparse.Namespace) -> int:
    from ..recorder.commands import record

    return record(ns)
