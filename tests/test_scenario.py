"""The scenario loader: the shipped scenario, malformed files, a property, build_world()."""
from __future__ import annotations

import datetime
import math
import re
import textwrap
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from faultsim.model import ApiFault, FakeClaude
from faultsim.model.script import FAULT_KINDS
from faultsim.scenario import (Scenario, ScenarioError, load_scenario, parse_duration,
                               parse_scenario)
from faultsim.world import RECEIVER_KINDS, World

SCENARIOS = Path(__file__).parent.parent / "scenarios"
TOOL_NAMES = {"write_file", "create_ticket", "charge_payment", "send_email", "update_record",
              "lookup_order"}

MINIMAL = """\
task = "Do the thing."
expected_final_answer = "Done."

[[turns]]
tool_calls = [{ name = "write_file", input = { path = "a.txt", content = "a" } }]

[[turns]]
final = "Done."
"""


def write(tmp_path: Path, text: str, name: str = "scenario.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def minimal(**top) -> dict:
    """A valid scenario as parsed TOML, with top-level keys overridden."""
    data = {"task": "Do the thing.", "expected_final_answer": "Done.",
            "turns": [{"tool_calls": [{"name": "write_file", "input": {"path": "a"}}]},
                      {"final": "Done."}]}
    data.update(top)
    return data


# -- the shipped scenario ------------------------------------------------------------------

@pytest.fixture(scope="module")
def tickets() -> Scenario:
    return load_scenario(SCENARIOS / "support_tickets.toml")


def test_support_tickets_has_thirteen_turns_ending_in_the_expected_answer(tickets):
    turns = tickets.script.turns
    assert len(turns) == 13
    assert tickets.script.tool_turns == 12
    assert [t.is_final for t in turns] == [False] * 12 + [True]
    assert tickets.expected_final_answer == turns[-1].final
    assert tickets.id == "support_tickets"
    assert tickets.script.task == tickets.task and tickets.script.tag == "s"
    assert tickets.start_time == "2026-10-01T09:00:00+00:00"
    assert tickets.path.endswith("support_tickets.toml")


def test_support_tickets_has_a_parallel_turn_and_uses_every_tool(tickets):
    turns = tickets.script.turns
    assert max(len(t.tool_calls) for t in turns) >= 2
    assert [c.name for c in turns[1].tool_calls] == ["lookup_order", "lookup_order",
                                                    "update_record"]
    used = {c.name for t in turns for c in t.tool_calls}
    assert used == TOOL_NAMES


def test_support_tickets_services(tickets):
    kinds = {s.name: s.kind for s in tickets.services}
    assert kinds == {"tickets": "keyed", "payments": "keyed", "email": "blind",
                     "records": "queryable", "orders": "readonly"}
    assert set(kinds.values()) == set(RECEIVER_KINDS)
    orders = next(s for s in tickets.services if s.name == "orders")
    assert orders.records["ORD-1002"]["customer"] == "CUST-17"
    assert all(s.key_retention_hours == 24.0 for s in tickets.services)


# -- malformed files -----------------------------------------------------------------------

def scenario_error(path: Path) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, ValueError)
    return info.value


AF = "fault_profile.api_faults[0]"


def api_faults(*entries: str) -> str:
    return "\n[fault_profile]\napi_faults = [" + ", ".join(entries) + "]\n"


MALFORMED = {
    "syntax": ("(syntax)", 'task = "unterminated\n'),
    "missing task": ("task", MINIMAL.replace('task = "Do the thing."\n', "")),
    "both final and tool_calls": ("turns[1]", MINIMAL.replace(
        'final = "Done."', 'final = "Done."\ntool_calls = [{ name = "x" }]')),
    "neither final nor tool_calls": ("turns[1]", MINIMAL.replace(
        'final = "Done."', 'text = "hmm"')),
    "tool call without name": ("turns[0].tool_calls[0].name", MINIMAL.replace(
        'name = "write_file", ', "")),
    "last turn not final": ("turns", MINIMAL.replace(
        'final = "Done."', 'tool_calls = [{ name = "send_email" }]')),
    "final not last": ("turns[0].final", MINIMAL.replace(
        "[[turns]]\ntool_calls", '[[turns]]\nfinal = "early"\n\n[[turns]]\ntool_calls', 1)),
    "unknown service kind": ("services.inbox.kind", MINIMAL + '\n[services.inbox]\n'
                                                             'kind = "mailbox"\n'),
    "records on a blind service": ("services.email.records", MINIMAL + (
        '\n[services.email]\nkind = "blind"\nrecords.R = { a = 1 }\n')),
    "unknown top-level key": ("colour", 'colour = "blue"\n' + MINIMAL),
    "unknown fault kind": (f"{AF}.kind", MINIMAL + api_faults('{ at = 0, kind = "418" }')),
    "fault at out of range": (f"{AF}.at", MINIMAL + api_faults('{ at = 2, kind = "429" }')),
    "fault at negative": (f"{AF}.at", MINIMAL + api_faults('{ at = -1, kind = "429" }')),
    "fault times zero": (f"{AF}.times", MINIMAL + api_faults('{ at = 0, kind = "529", '
                                                             'times = 0 }')),
    "fault for an unknown sub-agent": (f"{AF}.script", MINIMAL + api_faults(
        '{ at = 0, kind = "529", script = "billing" }')),
    "old top-level faults": ("faults", MINIMAL + '\n[[faults]]\nat = 0\nkind = "529"\n'),
    "unknown profile key": ("fault_profile.retries", MINIMAL + '\n[fault_profile]\n'
                                                                'retries = 3\n'),
    "unknown crash model": ("fault_profile.crash_models[1]", MINIMAL + (
        '\n[fault_profile]\ncrash_models = ["process", "meteor"]\n')),
    "crash models not a list": ("fault_profile.crash_models", MINIMAL + (
        '\n[fault_profile]\ncrash_models = "power"\n')),
    "crash model twice": ("fault_profile.crash_models", MINIMAL + (
        '\n[fault_profile]\ncrash_models = ["power", "power"]\n')),
    "zero crashes": ("fault_profile.crashes", MINIMAL + '\n[fault_profile]\ncrashes = 0\n'),
    "downtime in words": ("fault_profile.downtime", MINIMAL + (
        '\n[fault_profile]\ndowntime = "a while"\n')),
    "negative downtime": ("fault_profile.downtime", MINIMAL + (
        '\n[fault_profile]\ndowntime = -5\n')),
    "downtime beyond any date": ("fault_profile.downtime", MINIMAL + (
        '\n[fault_profile]\ndowntime = "99999999999d"\n')),
    "subagent turn without name": ("subagents.triage.turns[0].tool_calls[0].name", MINIMAL + (
        '\n[subagents.triage]\ntask = "Sub."\n[[subagents.triage.turns]]\n'
        'tool_calls = [{ input = {} }]\n[[subagents.triage.turns]]\nfinal = "ok"\n')),
    "bad start_time": ("start_time", 'start_time = "next tuesday"\n' + MINIMAL),
    "non-positive retention": ("services.t.key_retention_hours", MINIMAL + (
        '\n[services.t]\nkind = "keyed"\nkey_retention_hours = 0\n')),
}


@pytest.mark.parametrize("key, text", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_file_names_path_and_key(tmp_path, key, text):
    exc = scenario_error(write(tmp_path, text))
    assert exc.key == key
    assert f": {key}: expected " in str(exc)


def test_minimal_file_loads(tmp_path):
    scenario = load_scenario(write(tmp_path, MINIMAL, "tiny.toml"))
    assert scenario.id == "tiny"  # defaults to the file stem
    assert scenario.services == () and scenario.subagents == ()
    assert scenario.script.turns[0].tool_calls[0].input == {"path": "a.txt", "content": "a"}


def test_missing_file_is_a_scenario_error(tmp_path):
    path = tmp_path / "nowhere.toml"
    exc = scenario_error(path)
    assert exc.key == "(file)"
    assert "no such file" in str(exc)


def test_fault_with_unknown_kind_reports_what_it_got(tmp_path):
    exc = scenario_error(write(tmp_path, MINIMAL + api_faults('{ at = 0, kind = "418" }')))
    assert "one of 429, 529, 500, timeout" in str(exc) and "'418'" in str(exc)


def test_faults_are_parsed(tmp_path):
    scenario = load_scenario(write(tmp_path, MINIMAL + api_faults(
        '{ at = 1, kind = "timeout", times = 2 }', '{ at = 0, kind = 529 }')))
    assert scenario.script.faults == (ApiFault(at=1, kind="timeout", times=2),
                                      ApiFault(at=0, kind="529", times=1))


def test_fault_profile_defaults_to_process_and_two_crashes(tmp_path):
    profile = load_scenario(write(tmp_path, MINIMAL)).profile
    assert (profile.crash_models, profile.crashes, profile.downtime) == (("process",), 2, 0.0)
    assert profile.crash_model == "process"


def test_fault_profile_is_parsed(tmp_path):
    scenario = load_scenario(write(tmp_path, MINIMAL + """
[fault_profile]
crash_models = ["power", "process"]
crashes = 1
downtime = "1h30m"
"""))
    assert scenario.profile.crash_models == ("power", "process")
    assert scenario.profile.crash_model == "all"
    assert (scenario.profile.crashes, scenario.profile.downtime) == (1, 5400.0)


@pytest.mark.parametrize("text, seconds", [
    ("90s", 90), ("45m", 2700), ("25h", 90000), ("2d", 172800), ("1h30m", 5400),
    ("1.5h", 5400), (" 2h 5s ", 7205), (0, 0), (12.5, 12.5)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "5", "5x", "5 minutes", "-5s", "1e9999d", True,
                                  [5], math.nan])
def test_bad_durations_say_what_was_expected(text):
    with pytest.raises(ValueError, match='expected a duration such as "90s"'):
        parse_duration(text)


def test_old_faults_list_points_to_the_fault_profile(tmp_path):
    exc = scenario_error(write(tmp_path, MINIMAL + '\n[[faults]]\nat = 0\nkind = "529"\n'))
    assert "api_faults = [{ at = TURN, kind = \"529\" }]" in str(exc)


def test_parse_scenario_reports_the_given_path():
    with pytest.raises(ScenarioError, match=r"^x\.toml: turns: expected .*missing"):
        parse_scenario({"task": "t"}, "x.toml")


# -- bugs at the edges of validation -------------------------------------------------------

@pytest.mark.parametrize("start_time", [
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00",
    datetime.datetime(1, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=1))),
])
def test_start_time_out_of_range_is_a_scenario_error(start_time):
    # An instant that cannot be expressed in UTC must be reported like any bad start_time.
    with pytest.raises(ScenarioError, match="start_time"):
        parse_scenario(minimal(start_time=start_time), "x.toml")


@pytest.mark.parametrize("hours", [math.nan, math.inf, 1e300])
def test_key_retention_that_cannot_become_a_duration_is_refused_at_load(hours):
    # "Loading validates everything up front": build_world() must never be the first to fail.
    data = minimal(services={"tickets": {"kind": "keyed", "key_retention_hours": hours}})
    try:
        scenario = parse_scenario(data, "x.toml")
    except ScenarioError as exc:
        assert exc.key == "services.tickets.key_retention_hours"
        return
    scenario.build_world()  # raises ValueError / OverflowError today


def test_subagent_tag_cannot_collide_with_the_main_script():
    # The main script's tag is "s"; a sub-agent named "s" shares its (tag, position) slots,
    # so its first answer would be logged as a repeat of the parent's first turn.
    data = minimal(subagents={"s": {"task": "Sub.", "turns": [{"final": "sub ok"}]}})
    try:
        scenario = parse_scenario(data, "x.toml")
    except ScenarioError as exc:
        assert exc.key.startswith("subagents")
        return
    world = scenario.build_world()
    client = world.model.client()
    client.messages.create(model="m", max_tokens=9, messages=[{"role": "user",
                                                               "content": "Do the thing."}])
    client.messages.create(model="m", max_tokens=9, messages=[{"role": "user",
                                                               "content": "Sub."}])
    assert [r.repeat for r in world.model.requests] == [0, 0]


# -- the property: ScenarioError or a Scenario, nothing else -------------------------------

REAL_KEYS = sorted({"id", "task", "model", "start_time", "expected_final_answer", "services",
                    "turns", "fault_profile", "subagents", "text", "tool_calls", "final", "name",
                    "input", "kind", "records", "key_retention_hours", "at", "times",
                    "crash_models", "crashes", "downtime", "api_faults", "script"})
keys = st.one_of(st.sampled_from(REAL_KEYS), st.text(max_size=8))
offsets = st.builds(datetime.timezone, st.timedeltas(
    min_value=-datetime.timedelta(hours=23, minutes=59),
    max_value=datetime.timedelta(hours=23, minutes=59)))
scalars = st.one_of(
    st.text(max_size=12),
    st.integers(min_value=-2 ** 63, max_value=2 ** 63 - 1),
    st.floats(),
    st.booleans(),
    st.datetimes(), st.datetimes(timezones=offsets), st.dates(), st.times(),
    st.sampled_from(FAULT_KINDS + RECEIVER_KINDS + ("2026-10-01T09:00:00Z", " ")),
)
toml_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner,
                                                                         max_size=4),
    max_leaves=12)


def maybe(strategy, otherwise=toml_values):
    """Mostly the well-formed thing, sometimes (1 in 8) any TOML value in its place."""
    return st.sampled_from(range(8)).flatmap(lambda n: otherwise if n == 7 else strategy)


words = st.one_of(st.from_regex(r"[a-z][a-z .]{0,7}", fullmatch=True), st.text(max_size=8))

tool_call = st.fixed_dictionaries(
    {"name": maybe(st.sampled_from(sorted(TOOL_NAMES)))},
    optional={"input": maybe(st.dictionaries(st.text(max_size=5), scalars, max_size=3))})
tool_turn = st.fixed_dictionaries({"tool_calls": maybe(st.lists(maybe(tool_call), min_size=1,
                                                                 max_size=3))},
                                  optional={"text": maybe(words)})
final_turn = st.fixed_dictionaries({"final": maybe(words)})
turns = st.builds(lambda body, last: body + last,
                  st.lists(maybe(tool_turn), max_size=3),
                  maybe(maybe(final_turn).map(lambda t: [t]), otherwise=st.just([])))
fault = st.fixed_dictionaries(
    {"at": maybe(st.integers(-1, 4)), "kind": maybe(st.sampled_from(FAULT_KINDS))},
    optional={"times": maybe(st.integers(-1, 3)),
              "script": maybe(st.sampled_from(["s", "triage", "billing"]))})
durations = st.one_of(st.integers(-5, 10 ** 12), st.floats(), st.from_regex(
    r"([0-9]{1,3}(\.[0-9])?[dhmsx]){0,3}", fullmatch=True), words)
profile = st.fixed_dictionaries({}, optional={
    "crash_models": maybe(st.lists(maybe(st.sampled_from(["process", "power", "meteor"])),
                                   max_size=3)),
    "crashes": maybe(st.integers(-1, 4)),
    "downtime": maybe(durations),
    "api_faults": maybe(st.lists(maybe(fault), max_size=3)),
})
service = st.fixed_dictionaries(
    {"kind": maybe(st.sampled_from(RECEIVER_KINDS))},
    optional={"records": maybe(st.dictionaries(st.text(max_size=5), toml_values, max_size=2)),
              "key_retention_hours": maybe(st.one_of(st.integers(-2, 48), st.floats()))})
subagent = st.fixed_dictionaries({"task": maybe(words), "turns": maybe(turns)})
near_valid = st.fixed_dictionaries(
    {"task": maybe(words), "turns": maybe(turns), "expected_final_answer": maybe(words)},
    optional={
        "id": maybe(words), "model": maybe(words),
        "start_time": maybe(st.one_of(st.datetimes(), st.datetimes(timezones=offsets),
                                      st.datetimes(timezones=offsets).map(
                                          lambda d: d.isoformat()))),
        "services": maybe(st.dictionaries(words, maybe(service), max_size=3)),
        "fault_profile": maybe(profile),
        "subagents": maybe(st.dictionaries(st.one_of(st.sampled_from(["triage", "billing"]),
                                                     words), maybe(subagent), max_size=2)),
    })
any_dict = st.dictionaries(keys, toml_values, max_size=6)


@settings(max_examples=300, deadline=None, database=None)
@given(st.one_of(any_dict, near_valid))
@example(minimal())
@example(minimal(start_time="0001-01-01T00:00:00+01:00"))  # OverflowError today
def test_parse_scenario_returns_a_scenario_or_raises_scenario_error(data):
    try:
        scenario = parse_scenario(data, "x.toml")
    except ScenarioError as exc:
        assert str(exc).startswith("x.toml: ")
    else:
        assert isinstance(scenario, Scenario)
        assert scenario.script.turns[-1].is_final


# -- build_world ---------------------------------------------------------------------------

def test_build_world_creates_services_of_the_right_kinds(tickets):
    world = tickets.build_world()
    assert isinstance(world, World)
    assert {n: s.kind for n, s in world.services.items()} == {
        "tickets": "keyed", "payments": "keyed", "email": "blind", "records": "queryable",
        "orders": "readonly"}
    assert world.clock.now().isoformat() == "2026-10-01T09:00:00+00:00"
    assert world.service("orders").read("ORD-1001")["ticket"] == 501
    assert world.service("records").query("CUST-17")["name"] == "Dana Reyes"
    assert world.service("tickets").key_retention == datetime.timedelta(hours=24)
    assert isinstance(world.model, FakeClaude)
    assert list(world.model.scripts) == [tickets.task]


def test_build_world_gives_each_run_a_fresh_world(tickets):
    one, two = tickets.build_world(), tickets.build_world()
    one.service("records").apply("CUST-17", {"segment": "vip"})
    assert two.service("records").query("CUST-17")["segment"] == "standard"
    assert two.ledger.entries[-1].seq == 1


SUBAGENTS = MINIMAL + """
[services.tickets]
kind = "keyed"
key_retention_hours = 0.5

[fault_profile]
api_faults = [{ at = 0, kind = "429", script = "triage" }]

[subagents.triage]
task = "Tag the two new tickets."

[[subagents.triage.turns]]
tool_calls = [{ name = "create_ticket", input = { title = "Tag 601" } }]

[[subagents.triage.turns]]
final = "Tagged."
"""


def ask(client, task, messages=()):
    return client.messages.create(
        model="claude-sonnet-5-5", max_tokens=100,
        tools=[{"name": name, "input_schema": {"type": "object"}}  # the scripted tools
               for name in ("write_file", "create_ticket")],
        messages=[{"role": "user", "content": task}, *messages])


def test_build_world_serves_the_main_script_and_subagents(tmp_path):
    scenario = load_scenario(write(tmp_path, SUBAGENTS))
    (triage,) = scenario.subagents
    assert scenario.subagent("triage") is triage
    assert (triage.tag, triage.task, len(triage.turns)) == ("triage",
                                                            "Tag the two new tickets.", 2)
    assert triage.faults == (ApiFault(at=0, kind="429"),)
    with pytest.raises(KeyError, match="billing"):
        scenario.subagent("billing")

    world = scenario.build_world()
    assert world.service("tickets").key_retention == datetime.timedelta(minutes=30)
    assert set(world.model.scripts) == {"Do the thing.", "Tag the two new tickets."}
    client = world.model.client()
    main = ask(client, "Do the thing.")
    sub = ask(client, "Tag the two new tickets.")
    assert [(b.id, b.name) for b in main.content] == [("toolu_s_01_1", "write_file")]
    assert [(b.id, b.name) for b in sub.content] == [("toolu_triage_01_1", "create_ticket")]
    done = ask(client, "Tag the two new tickets.", [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                          for b in sub.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": sub.content[0].id,
                                      "content": "ok"}]}])
    assert done.content[0].text == "Tagged."
    assert [(r.script, r.status) for r in world.model.requests] == [
        ("s", 200), ("triage", 429), ("triage", 200), ("triage", 200)]


def test_subagent_tasks_must_be_distinct(tmp_path):
    text = SUBAGENTS.replace('task = "Tag the two new tickets."', 'task = "Do the thing."')
    exc = scenario_error(write(tmp_path, text))
    assert exc.key == "subagents"


# -- the file as text: anything at all gives a Scenario or one ScenarioError -----------------

@settings(max_examples=300, deadline=None, database=None)
@given(st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(str.encode),
    # a real scenario file, cut short or with a stretch replaced (syntax, types, encoding)
    st.tuples(st.integers(0, 4000), st.integers(0, 40), st.binary(max_size=12)).map(
        lambda t: _TICKETS[:t[0]] + t[2] + _TICKETS[t[0] + t[1]:]),
))
def test_load_scenario_never_raises_anything_but_a_scenario_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "x.toml"
    path.write_bytes(data)
    try:
        load_scenario(path)
    except ScenarioError as exc:
        # the file, and for a TOML syntax error the line it is on (`x.toml:3: (syntax)`)
        assert re.match(re.escape(str(path)) + r"(:\d+)?: ", str(exc)), str(exc)
        assert "\n" not in str(exc)  # one line


_TICKETS = (SCENARIOS / "support_tickets.toml").read_bytes()
