"""The `faultsim` command line: every subcommand, its flags and help, and the command
function each one runs (one module per command beside this one).

A flag that is a setting (one given in other places too: FAULTSIM_*, [tool.faultsim], a
pytest option, `explore()`) is made from its row of faultsim.settings.table by `flag()`,
its help and type included; every other flag is an argument of its verb alone, listed in
`VERB_ARGS` (tests/test_settings_table.py checks that each flag is one or the other)."""
from __future__ import annotations

import argparse

from .._version import __version__
from ..settings.options import FIXED_TIMEOUT
from ..settings.table import setting
from .compare import cmd_compare
from .formats import cmd_formats_check, cmd_formats_record
from .listing import cmd_list
from .replay import cmd_replay
from .report import cmd_report_html, cmd_report_merge
from .run import cmd_run
from .scenario import cmd_scenario_from_messages, cmd_scenario_record, cmd_scenario_schema
from .validate import cmd_validate


# the flags that are no setting: each verb's own arguments, by command
VERB_ARGS = {
    (): {"--debug", "--version"},
    ("run",): {"--transcript-writes", "--no-transcript-writes", "--durability", "--json",
               "--junit", "--summary-md", "--annotations", "--no-annotations",
               "--kill-point", "--examples", "--debug"},
    ("compare",): {"--json", "--limit", "--debug"},
    ("list",): {"--debug"},
    ("formats", "record"): {"--out", "--check-agent", "--debug"},
    ("formats", "check"): {"--examples", "--hostile", "--show", "--debug"},
    ("validate",): {"--debug"},
    ("scenario", "schema"): {"--debug"},
    ("scenario", "from-messages"): {"--out", "--model", "--service", "--services-from",
                                    "--debug"},
    ("scenario", "record"): {"--task", "--out", "--upstream", "--model", "--service",
                             "--services-from", "--debug"},
    ("replay",): {"--show", "--json", "--debug"},
    ("report", "html"): {"--out", "--debug"},
    ("report", "merge"): {"--json", "--html", "--junit", "--summary-md", "--debug"},
}


def flag(parser: argparse.ArgumentParser, name: str, **given) -> argparse.Action:
    """The flag of setting `name` (faultsim.settings.table): its help, type, choices and
    metavar, unset by default (the project's settings, then the built-in ones, fill it:
    cli.args.project_defaults); `given` overrides what this verb says otherwise."""
    s = setting(name)
    kw: dict = {"default": None, "help": s.help}
    if s.type in (int, float):
        kw["type"] = s.type
    if s.choices:  # shown as the choices, not a metavar
        kw["choices"] = s.choices
    elif s.metavar and s.cli.startswith("-"):
        kw["metavar"] = s.metavar
    if s.nargs is not None:
        kw["nargs"] = s.nargs
    if s.const is not None:
        kw["const"] = s.const
    kw.update(given)
    action = parser.add_argument(s.cli, **kw)
    action.setting = name  # what tests/test_settings_table.py reads
    return action


def services_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--service", action="append", metavar="NAME=KIND",
                        help="a service of the scenario and its kind (keyed, queryable, "
                             "blind, readonly); repeatable")
    parser.add_argument("--services-from", metavar="FILE", default=None,
                        help="a TOML file whose [services.NAME] tables (kind, records) are "
                             "taken; a scenario file works")


def scenarios_and_agent(parser: argparse.ArgumentParser, agent_help: str) -> None:
    flag(parser, "scenarios")
    flag(parser, "agent", help=agent_help)


class KillPoints(argparse.Action):
    """--kill-point ID ...: every id after the flag, and the flag repeatable (argparse's
    "extend"). nargs="+" takes every word up to the next option, so a scenario written
    after the ids would be read as one: refused by name instead (exit 2)."""

    def __call__(self, parser, namespace, values, option_string=None):
        import os

        for value in values:
            if value.endswith(".toml") or os.path.isdir(value):
                raise argparse.ArgumentError(self, f"{value!r} is a scenario, not a kill "
                                             "point id: give the scenarios before "
                                             "--kill-point (it takes every word up to "
                                             "the next option)")
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []),
                                       *values])


def debug_flag(parser: argparse.ArgumentParser) -> None:
    # `faultsim --debug run ...` is the documented spelling; after the verb works too
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="faultsim", description="Crash-safety testing for "
                                     "long-running AI agents.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"faultsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="crash an agent at every kill point of scenario files, "
                         "resume it, judge it")
    scenarios_and_agent(run, setting("agent").help)
    run.add_argument("--transcript-writes", action=argparse.BooleanOptionalAction,
                     default=None, help="for a claude-agent-sdk: agent, kill inside the CLI's "
                     "transcript writes too (default: where strace can trace)")
    flag(run, "crash_model")
    flag(run, "mode")
    run.add_argument("--durability", default=None, metavar="MODES",
                     help="LangGraph scenarios: the durability modes to explore, "
                          "comma-separated (default: sync,async,exit)")
    run.add_argument("--json", metavar="FILE", help="write the report as JSON")
    flag(run, "html")
    run.add_argument("--junit", metavar="FILE",
                     help="write a JUnit XML report: one test case per scenario, crash model "
                          "and invariant, failed with its first counterexample")
    run.add_argument("--summary-md", metavar="FILE",
                     help="append a Markdown summary (a row per scenario and crash model, "
                          "the first counterexample of each failing run and its replay "
                          "command) to FILE, e.g. \"$GITHUB_STEP_SUMMARY\"")
    run.add_argument("--annotations", action=argparse.BooleanOptionalAction, default=None,
                     help="print a GitHub ::error annotation per failing scenario, crash "
                          "model and invariant, pointing at the scenario file (default: on "
                          "when GITHUB_ACTIONS=true)")
    flag(run, "shard")
    flag(run, "ray")
    flag(run, "ray_shards")
    run.add_argument("--kill-point", action=KillPoints, nargs="+", metavar="ID",
                     help="explore only these kill points (ids a report printed): several "
                          "after one flag (--kill-point k3 k7), or the flag repeated; "
                          "replays a counterexample")
    flag(run, "workers")
    flag(run, "coverage")
    flag(run, "budget")
    flag(run, "per_class")
    flag(run, "horizon")
    flag(run, "timeout")
    run.add_argument("--examples", type=int, default=3,
                     help="counterexamples to print, the first of each kind (default: 3)")
    flag(run, "crashes")
    flag(run, "seed")
    flag(run, "search")
    flag(run, "search_seconds")
    flag(run, "baseline")
    debug_flag(run)
    # FAULTSIM_PROGRESS_SECONDS, [tool.faultsim] progress_seconds (faultsim.settings.config): no flag
    run.set_defaults(func=cmd_run, progress_seconds=None)
    cmp = sub.add_parser("compare", help="differential verdicts: which crash states B fixes "
                         "and breaks, from two JSON reports or a scenario on two agents")
    cmp.add_argument("items", nargs="+", metavar="REPORT_OR_SCENARIO",
                     help="two JSON reports (A.json B.json), or scenario files (with two "
                     "--agent)")
    flag(cmp, "agent", action="append", metavar="SPEC",
         help="an agent factory (MODULE[:ATTR] or FILE.py[:ATTR]); give it twice, A then B")
    flag(cmp, "crash_model", help="as for run (default: the scenario's fault profile)")
    flag(cmp, "crashes", help="as for run (default: the scenario's fault profile, else 2)")
    flag(cmp, "seed", help="as for run (default: 0)")
    flag(cmp, "workers", help="as for run")
    cmp.add_argument("--json", metavar="FILE", help="write the comparison as JSON")
    cmp.add_argument("--limit", type=int, default=20,
                     help="states listed per kind and run in the text (default: 20)")
    debug_flag(cmp)
    cmp.set_defaults(func=cmd_compare, timeout=None, shard=None, search=None,
                     search_seconds=None, mode=None, coverage=None, per_class=None, horizon=None,
                     budget=None)
    lst = sub.add_parser("list", help="the scenarios: turns, services, kill points and the "
                         "crash states each crash model leaves, fault profile")
    scenarios_and_agent(lst, "the agent whose clean run gives the kill points "
                         "(default: as for run)")
    flag(lst, "timeout", help="seconds a clean run may take, of the agent's own time "
         "(faultsim's own work in it not counted; default: 300 s, as for run's clean runs)")
    debug_flag(lst)
    lst.set_defaults(func=cmd_list, progress_seconds=None)
    fmt = sub.add_parser("formats", help="checkpoint-format regression: record a corpus of "
                         "durable states, check a later release against it")
    fsub = fmt.add_subparsers(dest="formats_command", required=True)
    rec = fsub.add_parser("record", help="record the agent's durable state (files and world) "
                          "at each kill point of a scenario into a corpus folder")
    rec.add_argument("scenario", help="the scenario file")
    rec.add_argument("--out", required=True, metavar="CORPUS", help="the corpus folder: "
                     "new, empty, or an earlier corpus (replaced whole); any other folder "
                     "is refused and kept")
    flag(rec, "agent", help="the agent factory that writes the states (default: "
         "reference_agent)")
    rec.add_argument("--check-agent", default=None, metavar="AGENT",
                     help="the factory later checks run by default (default: --agent); "
                          "record with an older release, check with the current one")
    flag(rec, "seed", default="0", help=argparse.SUPPRESS)
    flag(rec, "timeout", default=FIXED_TIMEOUT, help=argparse.SUPPRESS)
    debug_flag(rec)
    rec.set_defaults(func=cmd_formats_record)
    chk = fsub.add_parser("check", help="resume every recorded state with the agent's "
                          "current code and judge it")
    chk.add_argument("corpora", nargs="+", metavar="CORPUS", help="corpus folders")
    flag(chk, "agent", help="the agent factory (default: the corpus's)")
    chk.add_argument("--examples", type=int, default=3, help="failing entries to show")
    chk.add_argument("--hostile", type=int, default=100, metavar="N",
                     help="also hand the agent the hostile checkpoint files: the fixed "
                          "cases and N drawn ones (default 100; 0 = only the fixed cases)")
    chk.add_argument("--show", action="store_true",
                     help="print what each corpus would run (the agent its manifest names, "
                          "the scenario, the states) without importing or running anything")
    flag(chk, "timeout", default=FIXED_TIMEOUT, help=argparse.SUPPRESS)
    debug_flag(chk)
    chk.set_defaults(func=cmd_formats_check)
    val = sub.add_parser("validate", help="check scenario files against the scenario format "
                         "without running any agent; every problem, one line each "
                         "(FILE:LINE: key: message); exit 2 if any")
    flag(val, "scenarios", metavar="FILE|DIR",
         help="scenario files, or folders searched for *.toml at any depth "
                          "(default: [tool.faultsim] scenarios, else scenarios/)")
    debug_flag(val)
    val.set_defaults(func=cmd_validate)
    scn = sub.add_parser("scenario", help="the scenario format")
    ssub = scn.add_subparsers(dest="scenario_command", required=True)
    sch = ssub.add_parser("schema", help="print the JSON Schema of scenario files (for "
                          "editors: a '#:schema PATH' comment on a file's first line)")
    debug_flag(sch)
    sch.set_defaults(func=cmd_scenario_schema)
    frm = ssub.add_parser("from-messages", help="write a scenario from an Anthropic messages "
                          "list an agent keeps (a JSON list, or an object with 'messages')")
    frm.add_argument("file", metavar="FILE", help="the JSON file")
    frm.add_argument("--out", metavar="OUT", default=None,
                     help="the scenario file to write (default: print it)")
    frm.add_argument("--model", default=None, help="the scenario's model (default: the "
                     "file's 'model', else the format's default)")
    services_flags(frm)
    debug_flag(frm)
    frm.set_defaults(func=cmd_scenario_from_messages)
    rcd = ssub.add_parser("record", help="run an agent once against a real Messages "
                          "endpoint through a recording proxy on 127.0.0.1 and write what "
                          "happened as a scenario")
    flag(rcd, "agent", help="the agent factory: MODULE[:ATTR] or FILE.py[:ATTR] (default: "
         "[tool.faultsim] agent, FAULTSIM_AGENT)")
    rcd.add_argument("--task", required=True, help="the task given to the agent")
    rcd.add_argument("--out", metavar="FILE", default=None,
                     help="the scenario file to write (default: print it); its name is the "
                          "scenario id the agent is given")
    rcd.add_argument("--upstream", metavar="URL", default=None,
                     help="the Messages endpoint to forward to (default: "
                          "$ANTHROPIC_BASE_URL, else https://api.anthropic.com)")
    rcd.add_argument("--model", default=None, help="the model the agent is told to use, "
                     "written to the scenario (default: the format's default model)")
    services_flags(rcd)
    debug_flag(rcd)
    rcd.set_defaults(func=cmd_scenario_record)
    rep = sub.add_parser("replay", help="re-run exactly the schedule of a counterexample's "
                         "token and show the trace around each kill")
    rep.add_argument("token", help="the token a report printed (fs1_...)")
    flag(rep, "agent", help="replay on this agent factory instead of the token's (a fix)")
    rep.add_argument("--show", action="store_true",
                     help="print what the token would run (scenario, agent, crash model, "
                          "seed, each kill, the faultsim that made it) without importing or "
                          "running anything")
    rep.add_argument("--json", metavar="FILE", help="write the verdict as a JSON report")
    flag(rep, "timeout", help="seconds an incarnation may run (default: as faultsim run's, "
         "derived from the clean runs)")
    debug_flag(rep)
    rep.set_defaults(func=cmd_replay)
    rpt = sub.add_parser("report", help="turn a JSON report (--json) into another form")
    rsub = rpt.add_subparsers(dest="report_command", required=True)
    rht = rsub.add_parser("html", help="the HTML page of a JSON report (what --html writes)")
    rht.add_argument("report", metavar="REPORT.json", help="a report faultsim run --json wrote")
    rht.add_argument("--out", metavar="FILE", default=None,
                     help="the page to write (default: REPORT.html beside the report)")
    debug_flag(rht)
    rht.set_defaults(func=cmd_report_html)
    rmg = rsub.add_parser("merge", help="join shard reports (run --shard I/N --json) into "
                          "the whole run's report, timings aside")
    rmg.add_argument("reports", metavar="REPORT.json", nargs="+",
                     help="the reports of every shard of one run (any order)")
    rmg.add_argument("--json", metavar="FILE", help="write the merged report as JSON")
    rmg.add_argument("--html", metavar="FILE", help="write the merged report's HTML page")
    rmg.add_argument("--junit", metavar="FILE", help="write the merged report as JUnit XML "
                     "(as run --junit)")
    rmg.add_argument("--summary-md", metavar="FILE", help="append the merged report's "
                     "Markdown summary (as run --summary-md)")
    debug_flag(rmg)
    rmg.set_defaults(func=cmd_report_merge)
    return parser
