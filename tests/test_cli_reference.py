"""docs/reference/cli.md names every option of every subcommand (`faultsim run --help`
and the others), read from the parser itself: an option added without its docs fails
here. `--[no-]NAME` in the page covers both `--NAME` and `--no-NAME`."""
from __future__ import annotations

import argparse
import re

from conftest import ROOT
from faultsim.cli import build_parser

PAGE = (ROOT / "docs/reference/cli.md").read_text()


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield path + (name,), sub
                yield from _commands(sub, path + (name,))


def _documented(option: str) -> bool:
    bare = option.removeprefix("--no-").removeprefix("--")
    return bool(re.search(re.escape(option) + r"(?![\w-])", PAGE)) \
        or f"--[no-]{bare}" in PAGE


def test_every_option_of_every_subcommand_is_in_the_cli_reference():
    commands = dict(_commands(build_parser()))
    assert ("run",) in commands and ("formats", "check") in commands
    missing = [f"faultsim {' '.join(path)} {option}"
               for path, sub in commands.items() for action in sub._actions
               if action.help != argparse.SUPPRESS
               for option in action.option_strings
               if option not in ("-h", "--help") and not _documented(option)]
    assert not missing, "not in docs/reference/cli.md: " + ", ".join(missing)


def test_the_check_catches_an_undocumented_option():
    parser = build_parser()
    run = dict(_commands(parser))[("run",)]
    run.add_argument("--surely-undocumented-flag")
    assert not _documented("--surely-undocumented-flag")
    assert _documented("--timeout") and _documented("--no-annotations")
